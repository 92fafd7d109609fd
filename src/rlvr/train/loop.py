"""The RL loop: sample prompts -> generate -> verify -> advantages -> clipped policy-gradient update.

Read top to bottom, ``train`` is the whole algorithm. What varies between recipes (advantage estimator,
policy loss, aggregation, KL, entropy terms, filters) is looked up by name in rlvr.algos or switched by an
``algo.*`` key; a new estimator or loss is registered there, never wired in here.
"""

from __future__ import annotations

import copy
import math
import random
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from rlvr.algos import advantages, entropy, filters, kl, losses, offpolicy
from rlvr.config import Config, save_config
from rlvr.models import load_model
from rlvr.rollout import RolloutBatch, SamplingParams, make_engine
from rlvr.tasks import PromptSampler, Task, load_tasks
from rlvr.train.checkpoint import (
    latest_checkpoint, load_trainer_state, prune_checkpoints, remove_partial_checkpoints, save_checkpoint,
    set_rng_state,
)
from rlvr.train.manifest import write_manifest
from rlvr.train.metrics import MetricsLog
from rlvr.train.policy import ValueHead, policy_forward
from rlvr.train.progress import progress_bar
from rlvr.train.rollouts import collect_rollouts, greedy_baseline
from rlvr.verifiers import Verdict, default_runner
from rlvr.verifiers.compose import parse_spec
from rlvr.verifiers.registry import get_verifier


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def check_verifiers(tasks: list[Task], default: str) -> None:
    """Fail before any work when a task (or the default) names a verifier nobody registered."""
    for name in sorted({task.verifier or default for task in tasks}):
        get_verifier(name)


def policy_update(
    model, ref_model, value_head, optimizer, batch: RolloutBatch, adv: torch.Tensor, loss_mask: torch.Tensor,
    cfg: Config, *, old_values: torch.Tensor | None = None, returns: torch.Tensor | None = None,
) -> dict[str, float]:
    """One optimizer step on a rollout batch; micro-batches are weighted so the loss equals the full-batch loss
    (with an entropy mask, the top-rho selection is made within each micro-batch)."""
    algo = cfg.algo
    agg = algo.agg or losses.default_agg(algo.loss)
    width = loss_mask.shape[1]
    total_units = max(losses.aggregation_units(loss_mask, agg), 1)
    micro = cfg.train.micro_batch_size or batch.size
    # entropy enters the loss only through entropy_coef or the forking-token mask; otherwise the value logged
    # is the sampling distribution's, which the engine already computed
    entropy_in_loss = algo.entropy_coef != 0 or algo.entropy_mask_rho is not None or batch.entropy is None
    needed = rows_needing_gradients(adv, loss_mask, cfg, value_head, entropy_in_loss)
    sums: dict[str, float] = {}
    for start in range(0, len(needed), micro):
        rows = needed[start:start + micro]
        m = loss_mask[rows]
        out = policy_forward(
            model, batch.prompt_ids[rows], batch.prompt_mask[rows], batch.response_ids[rows], batch.response_mask[rows],
            temperature=cfg.rollout.temperature, with_entropy=entropy_in_loss, entropy_grad=algo.entropy_coef != 0,
            value_head=value_head,
        )
        # The weights are unchanged since sampling, so this forward's log-probs are the trainer's "old" log-probs.
        parts = offpolicy.mismatch_metrics(out.logp.detach(), batch.logprobs[rows], batch.response_mask[rows])
        weights = None
        if algo.tis_cap is not None:
            weights, tis_parts = offpolicy.tis_weights(out.logp.detach(), batch.logprobs[rows], batch.response_mask[rows], cap=algo.tis_cap)
            parts.update(tis_parts)
        pg_mask = m
        if algo.entropy_mask_rho is not None:
            pg_mask = entropy.forking_token_mask(out.entropy, m, algo.entropy_mask_rho)
        loss, loss_parts = losses.compute(
            algo.loss, out.logp, batch.logprobs[rows], adv[rows], pg_mask,
            clip_low=algo.clip_low, clip_high=algo.clip_high, dual_clip=algo.dual_clip, agg=agg, norm_length=width,
            token_weights=weights,
        )
        parts.update(loss_parts)
        parts["pg_loss"] = loss.item()
        if algo.kl_coef > 0 and algo.kl_placement == "loss":
            with torch.no_grad():
                ref_logp = policy_forward(ref_model, batch.prompt_ids[rows], batch.prompt_mask[rows], batch.response_ids[rows],
                                          batch.response_mask[rows], temperature=cfg.rollout.temperature).logp
            kl_term = losses.aggregate(kl.estimate(out.logp, ref_logp, algo.kl_kind), m, agg, norm_length=width)
            loss = loss + algo.kl_coef * kl_term
            parts["kl"] = kl_term.item()
        if entropy_in_loss:
            entropy_term = losses.aggregate(out.entropy, m, agg, norm_length=width)
            if algo.entropy_coef:
                loss = loss - algo.entropy_coef * entropy_term
            parts["entropy"] = entropy_term.item()
        if value_head is not None:
            vf_loss, vf_parts = losses.value_loss(out.values, old_values[rows], returns[rows], m, clip=algo.value_clip)
            loss = loss + algo.value_coef * vf_loss
            parts.update(vf_parts, vf_loss=vf_loss.item())
        weight = losses.aggregation_units(m, agg) / total_units
        (loss * weight).backward()
        parts["loss"] = loss.item()
        for key, value in parts.items():
            sums[key] = sums.get(key, 0.0) + value * weight
    params = [p for group in optimizer.param_groups for p in group["params"]]
    if not len(needed):  # every advantage is zero: the gradient is exactly zero, and Adam still takes its step
        for p in params:
            p.grad = torch.zeros_like(p)
    if not entropy_in_loss:
        sums["entropy"] = float(losses.aggregate(batch.entropy, loss_mask, agg, norm_length=width))
    sums.setdefault("loss", 0.0)
    sums["rows_backpropagated"] = float(len(needed))
    grad_norm = torch.nn.utils.clip_grad_norm_(params, cfg.train.max_grad_norm)
    finite = math.isfinite(sums.get("loss", 0.0)) and bool(torch.isfinite(grad_norm))
    if finite:
        optimizer.step()
    optimizer.zero_grad(set_to_none=True)  # a non-finite step is skipped: the weights stay as they were
    return {**sums, "grad_norm": float(grad_norm), "bad_step": 0 if finite else 1}


def train(cfg: Config, *, resume: bool = False, on_step: Callable[[dict[str, Any]], None] | None = None) -> Path:
    """Run RL training as configured; returns the run directory. ``resume`` continues from its newest checkpoint."""
    algo = cfg.algo
    run_dir = Path(cfg.train.out)
    if cfg.train.threads:
        torch.set_num_threads(cfg.train.threads)
    seed_everything(cfg.train.seed)

    tasks = load_tasks(cfg.data.train, prompt_field=cfg.data.prompt_field, reference_field=cfg.data.reference_field)
    check_verifiers(tasks, cfg.data.verifier)
    spec = parse_spec(cfg.reward.terms) if cfg.reward.terms else None
    for term in spec.verifier_terms() if spec else []:
        if not term.uses_task_verifier:
            get_verifier(term.verifier)
    checkpoint = latest_checkpoint(run_dir) if resume else None
    model, tokenizer = load_model(checkpoint or cfg.model.path, dtype=cfg.model.dtype, device=cfg.model.device)
    ref_model = None
    if algo.kl_coef > 0:  # with kl_coef 0 no reference model is loaded and no reference forward pass runs
        ref_model = load_model(cfg.model.path, dtype=cfg.model.dtype, device=cfg.model.device)[0] if checkpoint else copy.deepcopy(model)
        ref_model.eval().requires_grad_(False)
    needs = advantages.needs(algo.advantage)
    value_head = ValueHead(model.config.hidden_size).to(model.device) if "values" in needs else None
    model.train()
    engine = make_engine(cfg.rollout.engine, model, tokenizer, batch_size=cfg.rollout.batch_size)
    sampler = PromptSampler(tasks, seed=cfg.train.seed, shuffle=cfg.data.shuffle)
    trainable = list(model.parameters()) + (list(value_head.parameters()) if value_head is not None else [])
    optimizer = make_optimizer(trainable, cfg)
    warmup = cfg.train.warmup_steps
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / warmup) if warmup else 1.0)
    params = SamplingParams(
        n=cfg.rollout.group_size, max_new_tokens=cfg.rollout.max_new_tokens,
        temperature=cfg.rollout.temperature, top_p=cfg.rollout.top_p, top_k=cfg.rollout.top_k,
    )
    overlong_buffer = int(algo.overlong_buffer_frac * cfg.rollout.max_new_tokens)

    run_dir.mkdir(parents=True, exist_ok=True)
    remove_partial_checkpoints(run_dir)  # what a kill during a save left behind
    save_config(cfg, run_dir / "config.yaml")
    write_manifest(run_dir, cfg, resumed_from=checkpoint)
    log = MetricsLog(run_dir, tensorboard=cfg.train.tensorboard)
    first_step = 1
    if checkpoint is not None:
        state = load_trainer_state(checkpoint)
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        sampler.load_state_dict(state["sampler"])
        if value_head is not None:
            value_head.load_state_dict(state["value_head"])
        set_rng_state(state["rng"])
        first_step = state["step"] + 1
        log.truncate_after(state["step"])
    elif resume:
        log.truncate_after(0)

    def trainer_state() -> dict[str, Any]:
        state = {"optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(), "sampler": sampler.state_dict(),
                 "runner_counts": runner_counts(reward_runner.stats(), carried["runner"]),
                 "bad_in_a_row": carried["bad_in_a_row"]}
        if value_head is not None:
            state["value_head"] = value_head.state_dict()
        return state

    eval_tasks = None
    if cfg.train.eval_every:
        eval_tasks = load_tasks(cfg.data.eval, prompt_field=cfg.data.prompt_field,
                                reference_field=cfg.data.reference_field)[: cfg.data.eval_size or None]
        check_verifiers(eval_tasks, cfg.data.verifier)
    reward_runner = default_runner()
    reward_runner.reset_stats()
    # counters that continue across a resume: reward-runner failures so far, non-finite steps in a row
    carried = {"runner": dict(state.get("runner_counts", {})) if checkpoint is not None else {},
               "bad_in_a_row": state.get("bad_in_a_row", 0) if checkpoint is not None else 0}
    with progress_bar(cfg.train.steps, "train", enabled=cfg.train.progress, completed=first_step - 1) as bar:
        for step in range(first_step, cfg.train.steps + 1):
            started = time.perf_counter()
            rollouts = collect_rollouts(engine, tokenizer, sampler, params, cfg, spec, step)
            batch, mask = rollouts.batch, rollouts.batch.response_mask
            lengths = mask.sum(-1).float()
            verifier_scores = torch.tensor([v.score for v in rollouts.verdicts], dtype=torch.float32, device=mask.device)
            rewards = torch.tensor(rollouts.rewards, dtype=torch.float32, device=mask.device)
            if overlong_buffer:
                rewards = rewards + filters.soft_overlong_penalty(
                    lengths, cfg.rollout.max_new_tokens, overlong_buffer, algo.overlong_penalty_factor
                ).to(rewards.dtype)

            # Extra inputs some estimators declare they need (advantages.register(..., needs=...)).
            adv_inputs: dict[str, Any] = {"epsilon": algo.epsilon, **algo.advantage_options}
            token_rewards = torch.zeros(mask.shape, device=mask.device)
            kl_penalty_mean = 0.0
            if algo.kl_coef > 0 and algo.kl_placement == "reward":
                with torch.no_grad():
                    ref_logp = policy_forward(ref_model, batch.prompt_ids, batch.prompt_mask, batch.response_ids, mask,
                                              temperature=cfg.rollout.temperature).logp
                token_kl = kl.estimate(batch.logprobs, ref_logp, algo.kl_kind) * mask
                token_rewards = -algo.kl_coef * token_kl
                kl_penalty_mean = float(token_kl.sum() / mask.sum().clamp(min=1))
            if "token_rewards" in needs:
                adv_inputs["token_rewards"] = token_rewards
                adv_rewards = rewards
            else:  # outcome estimators see the per-token penalties summed into the sequence reward
                adv_rewards = rewards + token_rewards.sum(-1)
            old_values = returns = None
            if value_head is not None:
                with torch.no_grad():
                    old_values = policy_forward(model, batch.prompt_ids, batch.prompt_mask, batch.response_ids, mask,
                                                temperature=cfg.rollout.temperature, value_head=value_head).values
                adv_inputs["values"] = old_values
                _, returns = advantages.gae_advantages_and_returns(
                    advantages.outcome_token_rewards(rewards, mask) + token_rewards, old_values, mask,
                    adv_inputs.get("gamma", 1.0), adv_inputs.get("lam", 1.0),
                )
            if "baseline_rewards" in needs:
                adv_inputs["baseline_rewards"] = greedy_baseline(engine, tokenizer, rollouts, params, cfg, spec, step)
            adv = advantages.compute(algo.advantage, adv_rewards, batch.group_index, mask, **adv_inputs)

            loss_mask = filters.overlong_filter(mask, batch.truncated) if algo.overlong_filter else mask
            update = policy_update(model, ref_model, value_head, optimizer, batch, adv, loss_mask, cfg,
                                   old_values=old_values, returns=returns)
            scheduler.step()
            elapsed = time.perf_counter() - started
            row = {
                "step": step,
                "reward_mean": float(rewards.mean()),
                "reward_std": float(rewards.std()) if rewards.numel() > 1 else 0.0,
                "verifier_score_mean": float(verifier_scores.mean()),
                **{f"reward/{name}": sum(v) / len(v) for name, v in rollouts.components.items()},
                "response_len_mean": float(lengths.mean()),
                "truncated_frac": float(batch.truncated.float().mean()),
                "entropy": update.pop("entropy"),
                "kl": update.pop("kl", kl_penalty_mean),
                "clip_frac": update.pop("clip_frac", 0.0),
                **update,
                "adv_mean": float((adv * mask).sum() / mask.sum().clamp(min=1)),
                "groups": int(torch.unique(batch.group_index).numel()),
                "sampling_rounds": rollouts.rounds,
                "lr": scheduler.get_last_lr()[0],
                **reward_runner_metrics(reward_runner.stats(), carried["runner"]),
                **{f"verdict_{s}": n / len(rollouts.verdicts) for s, n in _status_counts(rollouts.verdicts).items()},
                "time_s": elapsed,
                "tokens_per_s": float(lengths.sum()) / elapsed,
            }
            carried["bad_in_a_row"] = carried["bad_in_a_row"] + 1 if row["bad_step"] else 0
            if carried["bad_in_a_row"] >= cfg.train.max_bad_steps:
                log.write(row)
                log.close()
                raise TrainingDiverged(diverged_message(step, carried["bad_in_a_row"], cfg))
            if eval_tasks and (step % cfg.train.eval_every == 0 or step == cfg.train.steps):
                row.update(evaluate_during_training(model, tokenizer, eval_tasks, cfg, step, run_dir))
            log.write(row)
            if on_step is not None:
                on_step(row)
            bar.advance(f"reward {row['reward_mean']:.3f}")
            if step == cfg.train.steps or (cfg.train.save_every and step % cfg.train.save_every == 0):
                save_checkpoint(run_dir, step, model, tokenizer, trainer_state())
                prune_checkpoints(run_dir, cfg.train.keep_last)
    log.close()
    return run_dir


def evaluate_during_training(model, tokenizer, tasks: list, cfg: Config, step: int, run_dir: Path) -> dict[str, float]:
    """Evaluate on the held-out tasks (train.eval_every): the summary goes to RUN_DIR/eval/step-N.json with
    per-task rows beside it, and its values into this step's metrics as "eval/<metric>". The sampling uses its
    own seeded RNG stream, so evaluating does not change what training samples next."""
    from rlvr.eval.report import evaluate_results, write_summary
    from rlvr.eval.runner import sample_and_score

    samples = cfg.train.eval_samples
    ks = sorted({1, samples})
    was_training = model.training
    model.eval()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(cfg.train.seed * 1_000_003 + step)
        results = sample_and_score(
            model, tokenizer, tasks, verifier=cfg.data.verifier, samples=samples,
            temperature=0.0 if samples == 1 else cfg.rollout.temperature,
            max_new_tokens=cfg.rollout.max_new_tokens, verifier_options=cfg.data.verifier_options,
        )
    model.train(was_training)
    summary, rows = evaluate_results(results, ks, verifier=cfg.data.verifier, seed=cfg.train.seed,
                                     verifier_options=cfg.data.verifier_options)
    summary.update({"step": step, "data": cfg.data.eval, "temperature": 0.0 if samples == 1 else cfg.rollout.temperature})
    write_summary(run_dir / "eval" / f"step-{step}.json", summary, rows)
    return {f"eval/{key}": value["value"] for key, value in summary.items() if isinstance(value, dict)}


def make_optimizer(params: list[torch.nn.Parameter], cfg: Config) -> torch.optim.Optimizer:
    """AdamW; its fused kernel (one pass over all parameters instead of a dozen ops per tensor) where torch
    has one for the parameters' device."""
    kwargs = dict(lr=cfg.train.lr, weight_decay=cfg.train.weight_decay)
    try:
        return torch.optim.AdamW(params, fused=True, **kwargs)
    except (RuntimeError, ValueError, TypeError):
        return torch.optim.AdamW(params, **kwargs)


def rows_needing_gradients(adv: torch.Tensor, loss_mask: torch.Tensor, cfg: Config, value_head,
                           entropy_in_loss: bool) -> torch.Tensor:
    """Indices of the rows whose loss can have a non-zero gradient. With a policy-gradient loss alone that
    declares it (losses.register(..., zero_at_zero_advantage=True): ppo, gspo, cispo), a row
    whose advantages are all zero (e.g. every group member got the same reward under GRPO) contributes
    exactly zero loss and gradient, so its forward and backward passes are skipped; its tokens still count
    in the normaliser (rlvr.algos.losses.aggregation_units over the whole batch), so the loss and gradient
    equal the full-batch computation. Any other term (KL in the loss, entropy, a value head) keeps every row."""
    every = torch.arange(adv.shape[0], device=adv.device)
    if value_head is not None or entropy_in_loss or (cfg.algo.kl_coef > 0 and cfg.algo.kl_placement == "loss") \
            or not losses.zero_at_zero_advantage(cfg.algo.loss):
        return every
    return every[((adv != 0) & (loss_mask > 0)).any(dim=1)]


class TrainingDiverged(RuntimeError):
    """train.max_bad_steps steps in a row had a non-finite loss or gradient."""


def diverged_message(step: int, in_a_row: int, cfg: Config) -> str:
    return (
        f"step {step}: the loss or gradient was NaN/Inf for {in_a_row} steps in a row (steps {step - in_a_row + 1}-"
        f"{step}; train.max_bad_steps={cfg.train.max_bad_steps}), so the run stopped; those steps were skipped and "
        f"the last checkpoint is intact. Likely causes: a learning rate too high (train.lr={cfg.train.lr:g}), "
        f"rewards or advantages that are not finite, or overflow in low precision (model.dtype={cfg.model.dtype})"
    )


def runner_counts(stats: dict[str, Any], before: dict[str, int]) -> dict[str, int]:
    """Reward-runner failures since the run started, including those before a resume."""
    return {key: int(stats[key]) + int(before.get(key, 0)) for key in ("timeouts", "errors", "worker_restarts")}


def reward_runner_metrics(stats: dict[str, Any], before: dict[str, int] | None = None) -> dict[str, float]:
    """The reward runner's health since the run started: timeouts, errors, restarts and latency."""
    counts = runner_counts(stats, before or {})
    return {
        "reward_timeouts": counts["timeouts"], "reward_errors": counts["errors"],
        "reward_worker_restarts": counts["worker_restarts"],
        "reward_latency_p50_ms": stats["latency_p50_ms"], "reward_latency_p99_ms": stats["latency_p99_ms"],
    }


def _status_counts(verdicts: list[Verdict]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for v in verdicts:
        counts[v.status.value] = counts.get(v.status.value, 0) + 1
    return dict(sorted(counts.items()))
