"""The RL loop: collect -> shape rewards -> advantages -> learner updates -> log and checkpoint.

Read top to bottom, ``train`` is the whole algorithm. What varies between recipes is looked up by name in
rlvr.algos (estimators, losses) or plugged in as a step part (rlvr.train.parts: KL, value head, TIS, entropy
terms, overlong filtering); the loop never branches on a part's name.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable

import torch

from rlvr.algos import trust_region
from rlvr.config import Config
from rlvr.rollout import provenance
from rlvr.train.group import SINGLE, LearnerGroup
from rlvr.train.learner import learn, prepare_experience
from rlvr.progress import progress_bar
from rlvr.train.rollouts import add_policy_rewards
from rlvr.train.run import TrainingDiverged, TrainingRun, seed_everything  # noqa: F401  (public names)
from rlvr.verifiers import Verdict


def train(cfg: Config, *, resume: bool = False, on_step: Callable[[dict[str, Any]], None] | None = None,
          group: LearnerGroup = SINGLE, engine_factory: Callable[[Any, Any], Any] | None = None) -> Path:
    """Run RL training as configured; returns the run directory. ``resume`` continues from its newest checkpoint.
    With a learner ``group`` of several ranks (rlvr.cluster launches them) every rank runs this loop: the main rank
    samples and writes, all ranks share the updates; ``engine_factory`` replaces rollout.engine's engine."""
    run = TrainingRun(cfg, resume=resume, group=group, engine_factory=engine_factory)
    with progress_bar(cfg.train.steps, "train", enabled=cfg.train.progress and group.is_main,
                      completed=run.first_step - 1) as bar:
        for step in range(run.first_step, cfg.train.steps + 1):
            started = time.perf_counter()
            # 1. collect (main rank): the engine samples group_size responses per prompt; every response is scored
            samples, collected, baseline = group.broadcast(run.collector.take(step) if group.is_main else None)
            if cfg.reward.policy:  # rewards from the policy itself (rlvr.rewards), added to the verifiers'
                collected.update(add_policy_rewards(samples, cfg.reward.policy, run.model, run.tokenizer))
            rewards = torch.tensor(samples.rewards, dtype=torch.float32, device=samples.batch.response_ids.device)
            # 2-3. once per batch: old / reference log-probs and values, reward shaping by the parts, advantages
            exp = prepare_experience(run.model, samples.batch, rewards, run.parts, cfg, reference=run.reference,
                                     engine_logprobs_serve=run.engine_logprobs_serve, baseline_rewards=baseline,
                                     group=group, task_ids=[t.id for t in samples.tasks])
            # 4. learner: ppo_epochs x mini_batches optimizer steps; then the engine samples from the new weights
            update = learn(run.model, run.optimizer, exp, run.parts, cfg, generator=run.shuffle_generator(step),
                           group=group, loss_scale=run.loss_scale)
            run.sync_engine()
            update.update(run.after_step(step, update))
            # 5. log, evaluate, checkpoint (the main rank writes)
            row = step_metrics(step, samples, exp, update, collected, time.perf_counter() - started)
            row.update(run.runner_metrics())
            row.update(run.sampler.metrics())  # per-source, per-difficulty and curriculum metrics
            run.check_divergence(step, row)
            if group.is_main and run.evaluates_at(step):
                row.update(run.evaluate(step))
            run.log.write(row)
            run.samples_log.write_step(step, samples, exp.rewards.tolist())
            if on_step is not None and group.is_main:
                on_step(row)
            bar.advance(f"reward {row['reward_mean']:.3f}")
            if run.saves_at(step):
                run.save(step)
    run.close()
    return run.dir


def step_metrics(step: int, samples, exp, update: dict[str, Any], collected: dict[str, Any], elapsed: float) -> dict[str, Any]:
    """One metrics.jsonl row: rewards and their components, lengths, learner metrics, verdict fractions, timing."""
    mask = exp.batch.response_mask
    lengths = mask.sum(-1).float()
    rewards = exp.rewards
    verdicts = samples.verdicts
    return {
        "step": step,
        "reward_mean": float(rewards.mean()),
        "reward_std": float(rewards.std()) if rewards.numel() > 1 else 0.0,
        "verifier_score_mean": sum(v.score for v in verdicts) / len(verdicts),
        **{f"reward/{name}": sum(v) / len(v) for name, v in samples.components.items()},
        "response_len_mean": float(lengths.mean()),
        "truncated_frac": float(exp.batch.truncated.float().mean()),
        "clip_frac": update.pop("clip_frac", 0.0),
        "kl": update.pop("kl", 0.0),
        **update,
        "adv_mean": float((exp.advantages * mask).sum() / mask.sum().clamp(min=1)),
        "nonzero_adv_frac": trust_region.nonzero_advantage_fraction(exp.advantages, exp.loss_mask),
        "groups": int(torch.unique(exp.batch.group_index).numel()),
        **provenance.kind_metrics(exp.batch.row_kind, rewards),
        **collected,
        **{f"verdict_{s}": n / len(verdicts) for s, n in _status_counts(verdicts).items()},
        "time_s": elapsed,
        "tokens_per_s": float(lengths.sum()) / elapsed,
    }


def _status_counts(verdicts: list[Verdict]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for v in verdicts:
        counts[v.status.value] = counts.get(v.status.value, 0) + 1
    return dict(sorted(counts.items()))
