"""Stage ``prof``: rollouts whose step rewards disagree with their outcome leave their group (PROF).

PROF (Ye et al., 2025, "Beyond Correctness: Harmonizing Process and Outcome Rewards through RL Training", arXiv
2509.03403, Algorithm 1; rule pinned in rlvr.algos.collection.prof_keep from the released code): within each group,
the correct rollouts with the lowest mean step reward and the incorrect ones with the highest leave, half the group in
all, the numbers chosen to balance correct and incorrect; the step's advantages are computed on the rollouts kept.
The step rewards are read from the rows (``step_rewards`` / ``step_end``, set by the ``process`` stage from
``reward.process``, which runs before this one); a rollout is correct when its verifier score is 1, and a rollout
with fewer than 2 or more than 30 steps ranks below the others of its kind (the released penalty).

Config: ``algo.prof_filter`` (needs ``reward.process``). Metrics: ``prof/dropped_frac`` (share of the step's rows
dropped), ``prof/correct_with_false_step_frac`` (share of the correct rollouts, before filtering, holding a step
with a reward below 0: the paper's measure of right answers reached by wrong steps) and
``prof/kept_correct_with_false_step_frac`` (the same over the rollouts kept).
"""

from __future__ import annotations

import torch

from rlvr.algos.collection import prof_keep
from rlvr.errors import UserError
# registered first, so this filter runs after the rows are added and their steps scored (stages run in that order)
from rlvr.rollout import stage_dars, stage_process  # noqa: F401
from rlvr.rollout.episodes import ScoredSamples
from rlvr.rollout.stages import CollectionStage, StageContext, group_rows, register_stage

NEEDS_PROCESS = ("the prof stage (algo.prof_filter) filters by step rewards: set reward.process "
                 "(e.g. reward.process={source: arith_steps})")


def step_summary(step_rewards: torch.Tensor, step_end: torch.Tensor) -> tuple[list[float], list[int], list[bool]]:
    """Per row: (mean step reward (0 without steps), number of steps, whether a step's reward is below 0)."""
    ends = step_end.to(torch.bool)
    values = step_rewards.double().masked_fill(~ends, 0.0)
    counts = ends.sum(-1)
    means = values.sum(-1) / counts.clamp(min=1)
    false_step = ((values < 0) & ends).any(-1)
    return means.tolist(), [int(c) for c in counts.tolist()], [bool(f) for f in false_step.tolist()]


def false_step_frac(correct: list[bool], false_step: list[bool], rows: list[int]) -> float:
    right = [r for r in rows if correct[r]]
    return sum(false_step[r] for r in right) / len(right) if right else 0.0


class ProcessConsistencyFilter(CollectionStage):
    def run(self, samples: ScoredSamples, ctx: StageContext, step: int) -> tuple[ScoredSamples, dict[str, float]]:
        batch = samples.batch
        if batch.step_rewards is None or batch.step_end is None:
            raise UserError(f"{NEEDS_PROCESS}; the rows reached it without step rewards")
        means, counts, false_step = step_summary(batch.step_rewards, batch.step_end)
        correct = [v.score >= 1.0 for v in samples.verdicts]
        kept: list[int] = []
        for rows in group_rows(samples).values():
            keep = prof_keep([correct[r] for r in rows], [means[r] for r in rows],
                             step_counts=[counts[r] for r in rows])
            kept.extend(rows[i] for i in keep)
        every = list(range(batch.size))
        metrics = {"prof/dropped_frac": 1.0 - len(kept) / max(batch.size, 1),
                   "prof/correct_with_false_step_frac": false_step_frac(correct, false_step, every),
                   "prof/kept_correct_with_false_step_frac": false_step_frac(correct, false_step, kept)}
        if len(kept) == batch.size:
            return samples, metrics
        filtered = samples.select(kept)
        filtered.metrics = dict(samples.metrics)
        return filtered, metrics


@register_stage("prof")
def _prof(cfg) -> ProcessConsistencyFilter | None:
    if not cfg.algo.prof_filter:
        return None
    if not cfg.reward.process:
        raise UserError(NEEDS_PROCESS)
    return ProcessConsistencyFilter()
