"""Stage ``dars``: hard prompts get extra rollouts that join their group (DARS, difficulty-adaptive rollout sampling).

DARS (Yang et al., 2025, "Depth-Breadth Synergy in RLVR: Unlocking LLM Reasoning Gains with Adaptive Exploration",
arXiv 2508.13755, Sec. 3; released code yangzhch6/DARS ``verl/verl/trainer/ppo/ray_dars_trainer.py``): after the
first generation, a prompt whose accuracy a is below 0.5 is sampled again, ``dars_extra(a, n, max_extra, schedule)``
more times (rlvr.algos.collection: equal treatment or hardness weighted), and the new rollouts join the prompt's group,
so the advantages are computed on the enlarged group. A prompt no rollout solved (a = 0) is topped up too, as if
a = 0.5 / n, as the released ``schedule_ET`` / ``schedule_HW`` do; the released trainer then drops the groups that
are still all wrong or all right, which ``algo.dynamic_sampling`` does here when wanted.

``algo.dars_use_std`` picks the spread the schedule assumes: true (the default), the paper's, for GRPO's
std-normalised advantage; false, the released scripts' (``+algorithm.grpo_use_std=False`` in yangzhch6/DARS
``experiments/*.sh``, commit 9b21b71; ``schedule_ET(acc, N, N_max, std=False)``), which gives more extra rollouts
for the same accuracy: n = 8, a prompt nothing solved gets 9 more with the std and ceil(26.1) = 27, capped at 24,
without. ``algo.recipe=dars`` sets false, matching its advantage (r - group mean, no std).

Accuracy is the mean verifier score of the group (scores clipped to [0, 1]); ``n`` is the group's size as this stage
finds it. Config: ``algo.dars_max_extra`` (the cap on extra rollouts per prompt; 0 = off; the released scripts use
n_max - n = 24), ``algo.dars_schedule`` (equal | hardness), ``algo.dars_use_std``. Metrics: ``dars/extra_rollouts`` (rows added),
``dars/hard_prompts`` (prompts topped up), ``dars/hard_prompt_positives_mean`` (correct rollouts per topped-up
prompt, after the top-up), ``dars/rescued_prompts`` (prompts at a = 0 that the extra rollouts solved at least once).
"""

from __future__ import annotations

from rlvr.algos.collection import dars_extra
from rlvr.rollout import stage_experts  # noqa: F401  (registered first: stages run in registration order)
from rlvr.rollout.episodes import ScoredSamples
from rlvr.rollout.stage_rows import into_groups, regroup
from rlvr.rollout.stages import CollectionStage, StageContext, group_rows, register_stage


def accuracy(samples: ScoredSamples, rows: list[int]) -> float:
    """The group's mean verifier score, each score clipped to [0, 1]."""
    return sum(min(max(samples.verdicts[r].score, 0.0), 1.0) for r in rows) / len(rows)


class ExtraRollouts(CollectionStage):
    def __init__(self, max_extra: int, schedule: str = "equal", use_std: bool = True):
        self.max_extra, self.schedule, self.use_std = max_extra, schedule, use_std

    def run(self, samples: ScoredSamples, ctx: StageContext, step: int) -> tuple[ScoredSamples, dict[str, float]]:
        groups = group_rows(samples)
        extra = {g: dars_extra(accuracy(samples, rows), len(rows), self.max_extra, self.schedule,
                               use_std=self.use_std) for g, rows in groups.items()}
        hard = [g for g in groups if extra[g] > 0]
        metrics = {"dars/extra_rollouts": float(sum(extra[g] for g in hard)), "dars/hard_prompts": float(len(hard)),
                   "dars/hard_prompt_positives_mean": 0.0, "dars/rescued_prompts": 0.0}
        if not hard:
            return samples, metrics
        parts = []
        for n in sorted({extra[g] for g in hard}, reverse=True):  # one generation per top-up size
            these = [g for g in hard if extra[g] == n]
            again = ctx.generate([samples.tasks[groups[g][0]] for g in these], step, n=n)
            parts.append(into_groups(again, these))
        joined = regroup(samples, parts, ctx.pad_id, order=list(groups))
        enlarged = group_rows(joined)
        positives = {g: sum(joined.verdicts[r].score >= 1.0 for r in enlarged[g]) for g in hard}
        metrics["dars/hard_prompt_positives_mean"] = sum(positives.values()) / len(hard)
        metrics["dars/rescued_prompts"] = float(sum(accuracy(samples, groups[g]) == 0.0 and positives[g] > 0
                                                    for g in hard))
        return joined, metrics


@register_stage("dars")
def _dars(cfg) -> ExtraRollouts | None:
    if not cfg.algo.dars_max_extra:
        return None
    return ExtraRollouts(cfg.algo.dars_max_extra, cfg.algo.dars_schedule, cfg.algo.dars_use_std)
