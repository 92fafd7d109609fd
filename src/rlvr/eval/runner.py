"""Score a model on tasks with the same verifiers and engine the trainer uses."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from rlvr.eval.passk import pass_at_k
from rlvr.models import encode_prompt
from rlvr.rollout import SamplingParams, make_engine
from rlvr.tasks.base import Task
from rlvr.verifiers import ScoreRequest, Verdict, score_batch


@dataclass
class TaskResult:
    task_id: str
    responses: list[str]
    verdicts: list[Verdict]
    lengths: list[int] = field(default_factory=list)  # response tokens, EOS included
    task: Task | None = None

    @property
    def n_correct(self) -> int:
        return sum(v.score >= 1.0 for v in self.verdicts)


def sample_and_score(
    model,
    tokenizer,
    tasks: list[Task],
    *,
    verifier: str,
    samples: int = 1,
    max_new_tokens: int = 32,
    temperature: float = 0.0,
    batch_prompts: int = 64,
    verifier_options: dict | None = None,
    on_chunk: Callable[[int], None] | None = None,
) -> list[TaskResult]:
    """``samples`` responses per task (greedy when temperature is 0), each with its verdict. ``on_chunk(n)``
    is called after every batch of n tasks (a progress bar)."""
    engine = make_engine("hf", model, tokenizer)
    params = SamplingParams(n=samples, max_new_tokens=max_new_tokens, temperature=temperature)
    results = []
    for start in range(0, len(tasks), batch_prompts):
        chunk = tasks[start:start + batch_prompts]
        with torch.inference_mode():
            batch = engine.generate([encode_prompt(tokenizer, t.prompt) for t in chunk], params)
        texts = tokenizer.batch_decode(batch.response_ids, skip_special_tokens=True)
        lengths = batch.response_mask.sum(dim=1).tolist()
        requests = [
            ScoreRequest(t.verifier or verifier, texts[i * samples + j], t.reference, {**(verifier_options or {}), **t.verifier_options})
            for i, t in enumerate(chunk) for j in range(samples)
        ]
        verdicts = score_batch(requests)
        for i, t in enumerate(chunk):
            rows = slice(i * samples, (i + 1) * samples)
            results.append(TaskResult(t.id, texts[rows], verdicts[rows], [int(n) for n in lengths[rows]], t))
        if on_chunk is not None:
            on_chunk(len(chunk))
    return results


def mean_pass_at_k(results: list[TaskResult], k: int) -> float:
    return sum(pass_at_k(len(r.verdicts), r.n_correct, k) for r in results) / len(results)
