"""The RL loop: sample prompts -> generate -> verify -> advantages -> clipped policy-gradient update.

Read top to bottom, ``train`` is the whole algorithm; what varies between recipes (advantage estimator,
policy loss, aggregation, KL, entropy bonus) is looked up by name in the rlvr.algos registries.
"""

from __future__ import annotations

import copy
import random
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from rlvr.algos import advantages, kl, losses
from rlvr.config import Config, save_config
from rlvr.models import encode_prompt, load_model
from rlvr.rollout import RolloutBatch, SamplingParams, make_engine
from rlvr.tasks import PromptSampler, Task, load_tasks
from rlvr.train.checkpoint import latest_checkpoint, load_trainer_state, save_checkpoint, set_rng_state
from rlvr.train.metrics import MetricsLog
from rlvr.train.policy import response_logprobs
from rlvr.train.progress import progress_bar
from rlvr.verifiers import ScoreRequest, Verdict, score_batch
from rlvr.verifiers.registry import get_verifier


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def check_verifiers(tasks: list[Task], default: str) -> None:
    """Fail before any work when a task (or the default) names a verifier nobody registered."""
    for name in sorted({task.verifier or default for task in tasks}):
        get_verifier(name)


def score(tasks: list[Task], responses: list[str], group_size: int, cfg: Config) -> list[Verdict]:
    """Verdicts for responses; response i answers task i // group_size. The one place the trainer scores."""
    requests = []
    for i, response in enumerate(responses):
        task = tasks[i // group_size]
        options = {**cfg.data.verifier_options, **task.verifier_options}
        requests.append(ScoreRequest(task.verifier or cfg.data.verifier, response, task.reference, options))
    return score_batch(requests)


def policy_update(model, ref_model, optimizer, batch: RolloutBatch, adv: torch.Tensor, cfg: Config) -> dict[str, float]:
    """One optimizer step on a rollout batch; micro-batches are weighted so the loss equals the full-batch loss."""
    algo = cfg.algo
    agg = algo.agg or losses.default_agg(algo.loss)
    mask = batch.response_mask
    width = mask.shape[1]
    total_units = max(losses.aggregation_units(mask, agg), 1)
    micro = cfg.train.micro_batch_size or batch.size
    sums: dict[str, float] = {}
    for start in range(0, batch.size, micro):
        rows = slice(start, start + micro)
        m = mask[rows]
        logp, entropy = response_logprobs(
            model, batch.prompt_ids[rows], batch.prompt_mask[rows], batch.response_ids[rows], m,
            temperature=cfg.rollout.temperature, with_entropy=True, entropy_grad=algo.entropy_coef != 0,
        )
        loss, parts = losses.compute(
            algo.loss, logp, batch.logprobs[rows], adv[rows], m,
            clip_low=algo.clip_low, clip_high=algo.clip_high, dual_clip=algo.dual_clip, agg=agg, norm_length=width,
        )
        parts["pg_loss"] = loss.item()
        if algo.kl_coef > 0:
            with torch.no_grad():
                ref_logp, _ = response_logprobs(
                    ref_model, batch.prompt_ids[rows], batch.prompt_mask[rows], batch.response_ids[rows], m,
                    temperature=cfg.rollout.temperature,
                )
            kl_term = losses.aggregate(kl.estimate(logp, ref_logp, algo.kl_kind), m, agg, norm_length=width)
            loss = loss + algo.kl_coef * kl_term
            parts["kl"] = kl_term.item()
        entropy_term = losses.aggregate(entropy, m, agg, norm_length=width)
        if algo.entropy_coef:
            loss = loss - algo.entropy_coef * entropy_term
        parts["entropy"] = entropy_term.item()
        weight = losses.aggregation_units(m, agg) / total_units
        (loss * weight).backward()
        parts["loss"] = loss.item()
        for key, value in parts.items():
            sums[key] = sums.get(key, 0.0) + value * weight
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.train.max_grad_norm)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return {**sums, "grad_norm": float(grad_norm)}


def train(cfg: Config, *, resume: bool = False, on_step: Callable[[dict[str, Any]], None] | None = None) -> Path:
    """Run RL training as configured; returns the run directory. ``resume`` continues from its newest checkpoint."""
    run_dir = Path(cfg.train.out)
    if cfg.train.threads:
        torch.set_num_threads(cfg.train.threads)
    seed_everything(cfg.train.seed)

    tasks = load_tasks(cfg.data.train, prompt_field=cfg.data.prompt_field, reference_field=cfg.data.reference_field)
    check_verifiers(tasks, cfg.data.verifier)
    checkpoint = latest_checkpoint(run_dir) if resume else None
    model, tokenizer = load_model(checkpoint or cfg.model.path, dtype=cfg.model.dtype, device=cfg.model.device)
    ref_model = None
    if cfg.algo.kl_coef > 0:  # with kl_coef 0 no reference model is loaded and no reference forward pass runs
        ref_model = load_model(cfg.model.path, dtype=cfg.model.dtype, device=cfg.model.device)[0] if checkpoint else copy.deepcopy(model)
        ref_model.eval().requires_grad_(False)
    model.train()
    engine = make_engine(cfg.rollout.engine, model, tokenizer, batch_size=cfg.rollout.batch_size)
    sampler = PromptSampler(tasks, seed=cfg.train.seed, shuffle=cfg.data.shuffle)
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.train.lr, weight_decay=cfg.train.weight_decay)
    warmup = cfg.train.warmup_steps
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / warmup) if warmup else 1.0)
    params = SamplingParams(
        n=cfg.rollout.group_size, max_new_tokens=cfg.rollout.max_new_tokens,
        temperature=cfg.rollout.temperature, top_p=cfg.rollout.top_p, top_k=cfg.rollout.top_k,
    )

    run_dir.mkdir(parents=True, exist_ok=True)
    save_config(cfg, run_dir / "config.yaml")
    log = MetricsLog(run_dir, tensorboard=cfg.train.tensorboard)
    first_step = 1
    if checkpoint is not None:
        state = load_trainer_state(checkpoint)
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        sampler.load_state_dict(state["sampler"])
        set_rng_state(state["rng"])
        first_step = state["step"] + 1
        log.truncate_after(state["step"])
    elif resume:
        log.truncate_after(0)

    def trainer_state() -> dict[str, Any]:
        return {"optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(), "sampler": sampler.state_dict()}

    with progress_bar(cfg.train.steps, "train", enabled=cfg.train.progress, completed=first_step - 1) as bar:
        for step in range(first_step, cfg.train.steps + 1):
            started = time.perf_counter()
            step_tasks = sampler.next(cfg.data.prompts_per_step)
            batch = engine.generate([encode_prompt(tokenizer, t.prompt) for t in step_tasks], params)
            responses = tokenizer.batch_decode(batch.response_ids, skip_special_tokens=True)
            verdicts = score(step_tasks, responses, params.n, cfg)
            rewards = torch.tensor([v.score for v in verdicts], dtype=torch.float32, device=batch.logprobs.device)
            adv = advantages.compute(
                cfg.algo.advantage, rewards, batch.group_index, batch.response_mask, epsilon=cfg.algo.epsilon
            )
            update = policy_update(model, ref_model, optimizer, batch, adv, cfg)
            scheduler.step()
            elapsed = time.perf_counter() - started
            lengths = batch.response_mask.sum(-1).float()
            row = {
                "step": step,
                "reward_mean": float(rewards.mean()),
                "reward_std": float(rewards.std()) if rewards.numel() > 1 else 0.0,
                "response_len_mean": float(lengths.mean()),
                "truncated_frac": float(batch.truncated.float().mean()),
                "entropy": update.pop("entropy"),
                "kl": update.pop("kl", 0.0),
                "clip_frac": update.pop("clip_frac", 0.0),
                **update,
                "lr": scheduler.get_last_lr()[0],
                **{f"verdict_{s}": sum(v.status.value == s for v in verdicts) / len(verdicts) for s in _statuses(verdicts)},
                "time_s": elapsed,
                "tokens_per_s": float(lengths.sum()) / elapsed,
            }
            log.write(row)
            if on_step is not None:
                on_step(row)
            bar.advance(f"reward {row['reward_mean']:.3f}")
            if step == cfg.train.steps or (cfg.train.save_every and step % cfg.train.save_every == 0):
                save_checkpoint(run_dir, step, model, tokenizer, trainer_state())
    log.close()
    return run_dir


def _statuses(verdicts: list[Verdict]) -> list[str]:
    return sorted({v.status.value for v in verdicts})
