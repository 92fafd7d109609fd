"""Samples for evaluation, through the same engines and generate-and-score path as training
(rlvr.rollout.episodes), grouped per task."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from rlvr.eval.calibration import verdict_correct
from rlvr.eval.passk import pass_at_k
from rlvr.rollout import RolloutEngine, SamplingParams, build_engine
from rlvr.rollout.episodes import PromptPolicy, Scoring, generate_and_score
from rlvr.tasks.base import Task
from rlvr.verifiers import Verdict


@dataclass
class TaskResult:
    task_id: str
    responses: list[str]
    verdicts: list[Verdict]
    lengths: list[int] = field(default_factory=list)  # response tokens, EOS included
    task: Task | None = None
    episodes: list[dict[str, int]] | None = None  # per sample of an environment's episodes: turns, tool_calls, ...
    transcripts: list[list[dict]] | None = None  # per sample of an environment's episodes: the conversation

    @property
    def n_correct(self) -> int:
        return sum(verdict_correct(v) for v in self.verdicts)


def sample_tasks(
    engine: RolloutEngine,
    tokenizer,
    tasks: list[Task],
    scoring: Scoring,
    *,
    samples: int = 1,
    max_new_tokens: int = 32,
    temperature: float = 0.0,
    batch_prompts: int = 64,
    on_chunk: Callable[[int], None] | None = None,
    prompts: PromptPolicy | None = None,
) -> list[TaskResult]:
    """``samples`` responses per task from ``engine`` (greedy when temperature is 0), each with its verdict.
    ``on_chunk(n)`` is called after every batch of n tasks (a progress bar)."""
    params = SamplingParams(n=samples, max_new_tokens=max_new_tokens, temperature=temperature)
    results = []
    for start in range(0, len(tasks), batch_prompts):
        chunk = tasks[start:start + batch_prompts]
        scored = generate_and_score(engine, tokenizer, chunk, params, scoring, prompts=prompts)
        lengths = scored.batch.response_mask.sum(dim=1).tolist()
        for i, t in enumerate(chunk):
            rows = slice(i * samples, (i + 1) * samples)
            results.append(TaskResult(t.id, scored.responses[rows], scored.verdicts[rows],
                                      [int(n) for n in lengths[rows]], t,
                                      scored.episodes[rows] if scored.episodes is not None else None,
                                      scored.transcripts[rows] if scored.transcripts is not None else None))
        if on_chunk is not None:
            on_chunk(len(chunk))
    return results


def sample_and_score(model, tokenizer, tasks: list[Task], *, verifier: str, samples: int = 1, max_new_tokens: int = 32,
                     temperature: float = 0.0, batch_prompts: int = 64, verifier_options: dict | None = None,
                     engine: str = "hf", engine_options: dict | None = None,
                     on_chunk: Callable[[int], None] | None = None) -> list[TaskResult]:
    """``sample_tasks`` with an engine built from the registry (``rollout.engine``) for ``model``."""
    built = build_engine(engine, model, tokenizer, **(engine_options or {}))
    return sample_tasks(built, tokenizer, tasks, Scoring(verifier, dict(verifier_options or {})), samples=samples,
                        max_new_tokens=max_new_tokens, temperature=temperature, batch_prompts=batch_prompts,
                        on_chunk=on_chunk)


def mean_pass_at_k(results: list[TaskResult], k: int) -> float:
    return sum(pass_at_k(len(r.verdicts), r.n_correct, k) for r in results) / len(results)
