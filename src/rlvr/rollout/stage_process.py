"""The collection stage that puts step rewards on every row (``reward.process``): after the stages that add rows
and before the filters that read them, each response's steps are scored by a registered process-reward source
(rlvr.rewards.process: ``arith_steps`` checks each line, ``prm`` asks a process reward model) and the rewards are
placed on each step's last token of the batch (``RolloutBatch.step_rewards`` / ``step_end``). Estimators that need
"process_rewards" (``pure``, ``process_sum``) read them there; a part may replace them (PRIME's implicit PRM)."""

from __future__ import annotations

from rlvr.rewards.process import compute_process, step_metrics
from rlvr.rollout.stages import CollectionStage, register_stage


@register_stage("process")
def _process(cfg):
    spec = cfg.reward.process
    return StepRewards(spec["source"], dict(spec.get("options") or {})) if spec else None


class StepRewards(CollectionStage):
    def __init__(self, source: str, options: dict):
        self.source, self.options = source, options

    def run(self, samples, ctx, step):
        batch = samples.batch
        scored = compute_process(self.source, batch, samples.responses, samples.tasks, ctx.tokenizer, **self.options)
        batch.step_rewards = scored.values.to(batch.response_ids.device)
        batch.step_end = scored.step_end.to(batch.response_ids.device)
        return samples, step_metrics(scored, batch.loss_mask)
