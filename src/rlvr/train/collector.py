"""Where each step's samples come from on the main learner: collected when the step starts, or, with
``cluster.async_rollouts=1``, sampled in the background during the previous step's update.

Asynchronous collection keeps the engine busy while the learners update: the batch a step trains on was sampled
with the weights from before the previous update, one step off-policy (the engine's weights are replaced only
after its sampling finishes, since a rollout worker runs its calls in order). The trainer then computes its own
old log-probs, and truncated importance sampling (``algo.tis_cap``; Yao et al., 2025) corrects for the policy that
sampled. It needs an engine with its own copy of the weights (the Ray backend's rollout workers).

The batch under way at a checkpoint is finished and saved with it, so a resumed run trains on the same batches.

With ``cluster.partial_rollouts=true`` the samples stream instead (rlvr.train.streaming): groups under way across
steps, responses continued across weight updates, no token staler than ``cluster.max_staleness`` updates.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from rlvr.algos import advantages
from rlvr.envs.tools import take_raised
from rlvr.rollout.stages import StageContext, run_stages
from rlvr.train.rollouts import collect_rollouts, greedy_baseline
from rlvr.train.streaming import StreamingRollouts


def collect_step(run, step: int) -> tuple[Any, dict[str, Any], Any]:
    """(samples, collection metrics, greedy baselines or None) of ``step``: the engine samples group_size responses
    per prompt and every response is scored; the collection stages add or replace rows (rlvr.rollout.stages);
    ReMax's greedy baselines where the estimator needs them."""
    cfg = run.cfg
    params = run.params_at(step)
    samples, collected = collect_rollouts(
        run.engine, run.tokenizer, run.sampler, params, run.scoring, prompts=cfg.data.prompts_per_step,
        dynamic_sampling=cfg.algo.dynamic_sampling, max_rounds=cfg.algo.dynamic_sampling_max_batches, step=step,
        prompt_policy=run.prompt_policy, metric=getattr(cfg.algo, "dynamic_sampling_metric", "score"),
    )
    samples, staged = run_stages(run.stages, samples, StageContext(run.engine, run.tokenizer, params, run.scoring,
                                                                   run.prompt_policy, cfg), step)
    collected.update(staged)
    run.reward_errors.observe(step, samples.tasks, samples.verdicts)
    run.reward_errors.observe_tools(step, take_raised())
    collected.update(run.reward_errors.metrics())
    baseline = None
    if "baseline_rewards" in advantages.needs(cfg.algo.advantage):
        baseline = greedy_baseline(run.engine, run.tokenizer, samples, params, run.scoring, step, run.prompt_policy)
    return samples, collected, baseline


class Collector:
    """``take(step)`` gives the step's samples; with ``asynchronous`` it then starts sampling the next step's. With
    ``cluster.partial_rollouts`` the main learner's collector streams (rlvr.train.streaming)."""

    def __init__(self, run, *, asynchronous: bool):
        self.run, self.asynchronous = run, asynchronous
        self.pending: tuple[int, Future | tuple] | None = None
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="rlvr-collect") if asynchronous else None
        streams = run.cfg.cluster.partial_rollouts and run.engine is not None  # the main learner holds the engine
        self.streaming = StreamingRollouts(run) if streams else None

    def take(self, step: int) -> tuple[Any, dict[str, Any], Any]:
        if self.streaming is not None:
            return self.streaming.take(step)
        settled = self.settle()
        result = settled[1] if settled is not None and settled[0] == step else collect_step(self.run, step)
        self.pending = None
        if self.asynchronous and step < self.run.cfg.train.steps:
            self.pending = (step + 1, self.pool.submit(collect_step, self.run, step + 1))
        return result

    def settle(self) -> tuple[int, tuple] | None:
        """Wait for the batch under way (before anything else uses the engine, the sampler or the RNG)."""
        if self.streaming is not None:
            self.streaming.settle()
            return None
        if self.pending is not None and isinstance(self.pending[1], Future):
            self.pending = (self.pending[0], self.pending[1].result())
        return self.pending

    def state_dict(self) -> dict[str, Any]:
        if self.streaming is not None:
            return {"streaming": self.streaming.state_dict()}
        settled = self.settle()
        return {"pending": settled} if settled is not None else {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if self.streaming is not None:
            self.streaming.load_state_dict(state.get("streaming", {}))
            return
        self.pending = state.get("pending")

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)
