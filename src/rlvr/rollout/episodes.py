"""The one path from tasks to scored samples, shared by training and evaluation.

    scoring = Scoring(verifier="math", verifier_options={}, spec=None)
    samples = generate_and_score(engine, tokenizer, tasks, SamplingParams(n=8), scoring, step=3)
    samples.rewards, samples.verdicts, samples.components

A task is scored by its own verifier (a data row may name one) or ``Scoring.verifier``, with the options of both;
with a composed reward (``reward.terms``) every verifier term is scored and the terms are combined by
rlvr.verifiers.compose. Every request carries the task's prompt and ``meta`` for rewards that need them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from rlvr.models import encode_prompt
from rlvr.rollout.base import RolloutBatch, RolloutEngine, SamplingParams
from rlvr.tasks import Task
from rlvr.verifiers import ScoreRequest, Verdict, score_batch
from rlvr.verifiers.compose import RewardSpec, Term, compose


@dataclass(frozen=True)
class Scoring:
    """How samples are scored: the default verifier and options for tasks that name none, and an optional
    composed reward."""

    verifier: str = "exact"
    verifier_options: dict[str, Any] = field(default_factory=dict)
    spec: RewardSpec | None = None


@dataclass
class ScoredSamples:
    """Samples of one generation call; row i answers tasks[i] (a task repeats once per sample)."""

    batch: RolloutBatch
    tasks: list[Task]
    responses: list[str]
    verdicts: list[Verdict]  # the task verifier's verdicts (with reward.terms: its term's, else the first term's)
    rewards: list[float]  # the composed reward (the task verifier's score without reward.terms)
    components: dict[str, list[float]] = field(default_factory=dict)  # each composed term's (gated) score

    def select(self, rows: list[int], batch: RolloutBatch) -> ScoredSamples:
        return ScoredSamples(batch, [self.tasks[i] for i in rows], [self.responses[i] for i in rows],
                             [self.verdicts[i] for i in rows], [self.rewards[i] for i in rows],
                             {k: [v[i] for i in rows] for k, v in self.components.items()})


def score_requests(tasks: list[Task], responses: list[str], scoring: Scoring, term: Term | None = None) -> list[ScoreRequest]:
    """The request for each (task, response): the verifier and options a task or reward term names, else the
    defaults; the options of the term, then of the task, override the defaults."""
    requests = []
    for task, response in zip(tasks, responses):
        if term is None or term.uses_task_verifier:
            name, options = task.verifier or scoring.verifier, {**scoring.verifier_options, **task.verifier_options}
        else:
            name, options = term.verifier, {}
        reference = task.reference if term is None or term.reference is None else term.reference
        requests.append(ScoreRequest(name, response, reference, {**options, **(term.options if term else {})},
                                     prompt=task.prompt, meta=task.meta or None))
    return requests


def score(tasks: list[Task], responses: list[str], scoring: Scoring, term: Term | None = None) -> list[Verdict]:
    return score_batch(score_requests(tasks, responses, scoring, term))


def generate_and_score(engine: RolloutEngine, tokenizer, tasks: list[Task], params: SamplingParams, scoring: Scoring,
                       *, step: int = 0) -> ScoredSamples:
    """``params.n`` samples per task from the engine, decoded and scored."""
    with torch.inference_mode():
        batch = engine.generate([encode_prompt(tokenizer, t.prompt) for t in tasks], params)
    responses = tokenizer.batch_decode(batch.response_ids, skip_special_tokens=True)
    row_tasks = [t for t in tasks for _ in range(params.n)]
    spec = scoring.spec
    if spec is None:
        verdicts = score(row_tasks, responses, scoring)
        return ScoredSamples(batch, row_tasks, responses, verdicts, [v.score for v in verdicts])
    by_term = {term.name: score(row_tasks, responses, scoring, term) for term in spec.verifier_terms()}
    task_term = next((t.name for t in spec.verifier_terms() if t.uses_task_verifier), next(iter(by_term), None))
    verdicts = by_term[task_term] if task_term else score(row_tasks, responses, scoring)
    composed = compose(
        spec, {name: [v.score for v in vs] for name, vs in by_term.items()},
        lengths=batch.response_mask.sum(-1).tolist(), max_len=params.max_new_tokens,
        groups=batch.group_index.tolist(), step=step,
    )
    return ScoredSamples(batch, row_tasks, responses, verdicts, composed.total, composed.components)
