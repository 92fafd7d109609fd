"""Everything a training run holds between steps, set up from config: model, engine, optimizer and schedule,
the step's parts, data sampler, reward scoring, metrics log; and what is saved and restored with a checkpoint.
The loop itself (rlvr.train.loop) only calls into this."""

from __future__ import annotations

import copy
import dataclasses
import functools
import math
import random
import shutil
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from rlvr.config import Config, save_config
from rlvr.models import load_model, resolve_device
from rlvr.models.loading import load_tokenizer
from rlvr.models.lora import AdapterDisabled, apply_lora, load_adapter, require_peft
from rlvr.rollout import SamplingParams, build_engine, logprobs_serve_as_old_policy
from rlvr.rollout.agent import check_template
from rlvr.rollout.episodes import PromptPolicy, Scoring
from rlvr.rollout.stages import build_stages
from rlvr.rollout.temperature import TemperatureSchedule
from rlvr.tasks import Task, load_data, make_sampler
from rlvr.train.allocator import set_up_host_memory
from rlvr.train.determinism import set_up_numerics
from rlvr.train.reward_errors import RewardErrorLog
from rlvr.train.samples import SamplesLog
from rlvr.train.checkpoint import (
    latest_checkpoint, load_trainer_state, prune_checkpoints, remove_partial_checkpoints, save_checkpoint,
    set_rng_state,
)
from rlvr.train.collector import Collector
from rlvr.train.group import SINGLE, LearnerGroup
from rlvr.train.loss_scale import LossScale
from rlvr.train.manifest import write_manifest
from rlvr.train.master_weights import adamw
from rlvr.train.metrics import LoggerUnavailable, MetricsLog, NullLog, check_loggers
from rlvr.train.parts import PartContext, build_parts
from rlvr.verifiers import default_runner
from rlvr.verifiers.compose import parse_spec
from rlvr.verifiers.registry import UnknownVerifierError, get_verifier
from rlvr.errors import UserError


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def check_verifiers(tasks: list[Task], default: str, source: str | None = None) -> None:
    """Fail before any work when a task (or the default) names a verifier nobody registered; the message names the
    data source and the first task (for JSONL rows without an id, its file:line) that names it."""
    get_verifier(default)
    for task in tasks:
        if task.verifier:
            try:
                get_verifier(task.verifier)
            except UnknownVerifierError as exc:
                raise UserError(f"{source or 'data'}: task {task.id}: field 'verifier': {exc}") from None


def reward_spec(cfg: Config):
    """The composed reward: reward.terms, with algo.overlong_buffer_frac as one more term (the one overlong
    penalty, rlvr.verifiers.compose.soft_overlong_penalty); None when the task verifier alone is the reward."""
    terms = list(cfg.reward.terms)
    if cfg.algo.overlong_buffer_frac:
        terms = terms or [{"name": "correct", "verifier": "task"}]
        terms.append({"name": "overlong", "kind": "overlong", "buffer_frac": cfg.algo.overlong_buffer_frac,
                      "penalty_factor": cfg.algo.overlong_penalty_factor})
    return parse_spec(terms) if terms else None


def make_optimizer(params: list[torch.nn.Parameter], cfg: Config) -> torch.optim.Optimizer:
    """The policy's AdamW (rlvr.train.master_weights.adamw: float32 master weights for low-precision parameters,
    without which most small updates would round away)."""
    return adamw(params, lr=cfg.train.lr, weight_decay=cfg.train.weight_decay)


def lr_factor(step: int, cfg: Config) -> float:
    """Learning-rate multiplier after ``step`` scheduler steps of a run: ``schedule_factor`` with train.steps,
    train.warmup_steps, train.lr_schedule and train.lr_min_ratio."""
    return schedule_factor(step, cfg.train.steps, warmup=cfg.train.warmup_steps, schedule=cfg.train.lr_schedule,
                           min_ratio=cfg.train.lr_min_ratio)


def schedule_factor(step: int, total: int, *, warmup: int = 0, schedule: str = "constant",
                    min_ratio: float = 0.0) -> float:
    """Learning-rate multiplier after ``step`` of ``total`` steps: linear warm-up over ``warmup`` steps, then
    constant, linear decay to 0 at ``total``, or a cosine from 1 to ``min_ratio`` (Loshchilov & Hutter, 2017, SGDR,
    Eq. 5 without restarts)."""
    if warmup and step < warmup:
        return (step + 1) / warmup
    if schedule == "constant":
        return 1.0
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    if schedule == "linear":
        return 1.0 - progress
    return min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))


def load_lora_policy(cfg: Config, checkpoint: Path | None):
    """(model, tokenizer) of a run with model.lora: the base model at model.path with a fresh adapter, or with the
    checkpoint's adapter (trainable) when resuming."""
    model, tokenizer = load_model(cfg.model.path, dtype=cfg.model.dtype, device=cfg.model.device)
    if checkpoint is not None:
        return load_adapter(model, checkpoint, trainable=True, sampling=cfg.model.lora.get("sampling")), tokenizer
    return apply_lora(model, cfg.model.lora, cfg.model.path), tokenizer


class RunSetupError(UserError):
    """The run cannot start or continue as configured (its directory, device, disk or an optional package); the
    message is one line naming the key or path."""


# What a run writes into train.out; a directory holding any of these holds an earlier run.
RUN_FILES = ("metrics.jsonl", "config.yaml", "manifest.json", "checkpoint-*", ".tmp-checkpoint-*", "eval", "report",
             "reward_errors.log", "samples.jsonl", "tensorboard", "rollout_versions.jsonl")


def prepare_run_dir(cfg: Config, resume: bool) -> None:
    """Refuse to mix two runs in one directory; check it is writable before the model loads."""
    run_dir = Path(cfg.train.out)
    earlier = sorted({p.name for pattern in RUN_FILES for p in run_dir.glob(pattern)}) if run_dir.is_dir() else []
    if earlier and not resume:
        if not cfg.train.overwrite and started(run_dir):
            raise RunSetupError(
                f"train.out={run_dir} already holds a run ({', '.join(earlier[:4])}{', ...' if len(earlier) > 4 else ''}): "
                "add --resume to continue it, train.overwrite=true to replace it, or choose another train.out")
        for name in earlier:
            path = run_dir / name
            shutil.rmtree(path) if path.is_dir() else path.unlink()
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        probe = run_dir / ".rlvr-write-check"
        probe.write_text("ok")
        probe.unlink()
    except OSError as exc:
        raise RunSetupError(f"train.out={run_dir}: cannot write there ({exc.strerror or exc})") from None
    try:
        check_loggers(loggers_of(cfg))
    except LoggerUnavailable as exc:
        raise RunSetupError(str(exc)) from None


def started(run_dir: Path) -> bool:
    """Whether a run in ``run_dir`` got as far as a step: a checkpoint, or a logged step. A start that failed before
    (a bad key, a missing package, an unreadable model) left only its config and manifest, and may simply be retried."""
    metrics = run_dir / "metrics.jsonl"
    return any(run_dir.glob("checkpoint-*")) or (metrics.is_file() and metrics.stat().st_size > 0)


def loggers_of(cfg: Config) -> list[str]:
    return list(dict.fromkeys([*cfg.train.loggers, *(["tensorboard"] if cfg.train.tensorboard else [])]))


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


class TrainingRun:
    """The state of one run. ``TrainingRun(cfg, resume=...)`` loads or resumes everything before the first step.

    With a learner ``group`` of several ranks (rlvr.train.group) every rank holds the model, the optimizer and the
    parts; the main rank alone holds the rollout engine and writes the run directory (metrics, manifest,
    checkpoints). ``engine_factory(model, tokenizer)`` builds the engine in place of ``rollout.engine``'s (the Ray
    backend's pool of rollout workers)."""

    def __init__(self, cfg: Config, *, resume: bool = False, group: LearnerGroup = SINGLE,
                 engine_factory: Callable[[Any, Any], Any] | None = None):
        self.cfg = cfg
        self.group = group
        self.dir = Path(cfg.train.out)
        set_up_numerics(cfg.train.threads, cfg.train.deterministic)  # first: kernels pin before the first op
        set_up_host_memory()  # host memory follows the live tensors (rlvr.train.allocator)
        seed_everything(cfg.train.seed)
        self.tasks = load_data(cfg.data, "train")
        check_verifiers(self.tasks, cfg.data.verifier, cfg.data.train)
        spec = reward_spec(cfg)
        for term in spec.verifier_terms() if spec else []:
            if not term.uses_task_verifier:
                get_verifier(term.verifier)
        self.scoring = Scoring(cfg.data.verifier, dict(cfg.data.verifier_options), spec, cfg.data.answer_after,
                               cfg.data.require_answer_after)
        self.prompt_policy = PromptPolicy(cfg.rollout.max_prompt_tokens, cfg.rollout.prompt_overflow, tuple(cfg.rollout.stop),
                                          dict(cfg.rollout.chat_template_kwargs), cfg.rollout.agent_command)
        self.eval_tasks = None
        if cfg.train.eval_every:
            self.eval_tasks = load_data(cfg.data, "eval")[: cfg.data.eval_size or None]
            check_verifiers(self.eval_tasks, cfg.data.verifier, cfg.data.eval)

        if group.is_main:
            prepare_run_dir(cfg, resume)
        group.barrier()
        resolve_device(cfg.model.device)
        if cfg.model.lora is not None:
            require_peft()  # before the model loads: a missing extra is a one-line error naming it
        checkpoint = group.broadcast(latest_checkpoint(self.dir) if resume else None)
        resumed = load_trainer_state(checkpoint) if checkpoint is not None else None  # a bad one fails before loading
        # a chat template these tasks cannot use is one error naming the fix, before the model loads
        check_template(load_tokenizer(checkpoint or cfg.model.path), self.tasks + (self.eval_tasks or []),
                       cfg.rollout.chat_template_kwargs)
        if cfg.model.lora is not None:
            self.model, self.tokenizer = load_lora_policy(cfg, checkpoint)
        else:
            self.model, self.tokenizer = load_model(checkpoint or cfg.model.path, dtype=cfg.model.dtype,
                                                    device=cfg.model.device)
        if cfg.train.gradient_checkpointing:
            # non-reentrant checkpointing: gradients reach the adapter even though the embeddings are frozen
            self.model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        self.model.train()

        @functools.cache  # parts that need the reference share one
        def load_reference():
            # the reference is the initial policy: with LoRA the base weights with the adapter disabled (no copy);
            # otherwise the model folder when resuming, else a copy before any update
            if cfg.model.lora is not None:
                return AdapterDisabled(self.model)
            if checkpoint:
                reference = load_model(cfg.model.path, dtype=cfg.model.dtype, device=cfg.model.device)[0]
            else:
                reference = copy.deepcopy(self.model)
            return reference.eval().requires_grad_(False)

        # only what requires gradients is trained (with LoRA, the adapter): no optimizer state for frozen weights
        policy_params = [p for p in self.model.parameters() if p.requires_grad]
        ctx = PartContext(self.model, load_reference, trainable=list(policy_params), group=group)
        self.parts = build_parts(cfg, ctx)
        self.reference = next((r for p in self.parts.values() if (r := getattr(p, "reference", None)) is not None), None)
        # the engine's model on the main rank (the policy itself, or a full copy where the strategy shards it), then
        # the policy as the strategy holds it; the parameters the parts added stay as they are
        self.engine_model = group.engine_model(self.model)
        self.model = group.prepare(self.model)
        trainable = [p for p in self.model.parameters() if p.requires_grad] + ctx.trainable[len(policy_params):]
        self.engine = None
        if group.is_main:
            options = dict(cfg.rollout.engine_options)
            if cfg.rollout.batch_size:
                options.setdefault("batch_size", cfg.rollout.batch_size)
            build = engine_factory or (lambda model, tokenizer: build_engine(cfg.rollout.engine, model, tokenizer, **options))
            self.engine = build(self.engine_model, self.tokenizer)
        # sampled one step off-policy (cluster.async_rollouts), the engine's log-probs never serve as the old policy's
        # nor when the engine samples at an annealed temperature (EAD): its log-probs are then the behaviour policy's
        self.temperature_schedule = TemperatureSchedule.from_config(cfg.rollout.temperature_schedule)
        self.engine_logprobs_serve = group.broadcast(logprobs_serve_as_old_policy(self.engine) if group.is_main else None) \
            and not cfg.cluster.async_rollouts and self.temperature_schedule is None
        self.stages = build_stages(cfg)  # collection stages (rlvr.rollout.stages), run by the collector
        self.collector = Collector(self, asynchronous=bool(cfg.cluster.async_rollouts) and group.is_main)
        self.sampler = make_sampler(self.tasks, cfg.data, seed=cfg.train.seed)
        self.optimizer = make_optimizer(trainable, cfg)
        self.loss_scale = LossScale.for_dtype(cfg.model.dtype)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, lambda s: lr_factor(s, cfg))
        self.params = SamplingParams(
            n=cfg.rollout.group_size, max_new_tokens=cfg.rollout.max_new_tokens,
            temperature=cfg.rollout.temperature, top_p=cfg.rollout.top_p, top_k=cfg.rollout.top_k,
        )

        self.log = self.samples_log = NullLog()
        if group.is_main:
            self.dir.mkdir(parents=True, exist_ok=True)
            remove_partial_checkpoints(self.dir)  # what a kill during a save left behind
            save_config(cfg, self.dir / "config.yaml")
            write_manifest(self.dir, cfg, resumed_from=checkpoint)
            self.log = MetricsLog(self.dir, loggers=loggers_of(cfg), config=cfg.to_dict())
            self.samples_log = SamplesLog(self.dir, cfg.train.log_samples, loggers=self.log.loggers)
        self.reward_errors = RewardErrorLog(self.dir if group.is_main else None, cfg.data.verifier)
        self.reward_runner = default_runner()
        self.reward_runner.reset_stats()
        # counters that continue across a resume: reward-runner failures so far, non-finite steps in a row
        self.runner_before: dict[str, int] = {}
        self.bad_in_a_row = 0
        self.first_step = 1
        if resumed is not None:
            self._restore(resumed)
        elif resume:
            self.log.truncate_after(0)
            self.samples_log.truncate_after(0)

    def _restore(self, state: dict[str, Any]) -> None:
        self.group.load_optimizer_state(self.model, self.optimizer, state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.sampler.load_state_dict(state["sampler"])
        for name, part in self.parts.items():
            part.load_state_dict(state.get("parts", {}).get(name, {}))
        for name, stage in self.stages.items():
            stage.load_state_dict(state.get("stages", {}).get(name, {}))
        if "value_head" in state and "value_head" in self.parts:  # checkpoints written before parts had state
            self.parts["value_head"].load_state_dict({"value_head": state["value_head"]})
        set_rng_state(state["rng"])
        self.runner_before = dict(state.get("runner_counts", {}))
        self.bad_in_a_row = state.get("bad_in_a_row", 0)
        self.collector.load_state_dict(state.get("collector", {}))
        self.loss_scale.load_state_dict(state.get("loss_scale", {}))
        self.first_step = state["step"] + 1
        self.log.truncate_after(state["step"])
        self.samples_log.truncate_after(state["step"])

    def state(self) -> dict[str, Any]:
        return {"optimizer": self.group.optimizer_state(self.model, self.optimizer), "scheduler": self.scheduler.state_dict(),
                "sampler": self.sampler.state_dict(), "parts": {n: p.state_dict() for n, p in self.parts.items()},
                "runner_counts": runner_counts(self.reward_runner.stats(), self.runner_before),
                "stages": {n: s.state_dict() for n, s in self.stages.items()},
                "bad_in_a_row": self.bad_in_a_row, "collector": self.collector.state_dict(),
                "loss_scale": self.loss_scale.state_dict()}

    def params_at(self, step: int) -> SamplingParams:
        """The step's sampling parameters: with EAD's temperature schedule, the schedule of this training step."""
        if self.temperature_schedule is None:
            return self.params
        return dataclasses.replace(self.params, temperature_schedule=self.temperature_schedule.at_step(step))

    def shuffle_generator(self, step: int) -> torch.Generator:
        """Mini-batch shuffling of one step, seeded by run seed and step (so a resumed run shuffles the same way)."""
        return torch.Generator().manual_seed(self.cfg.train.seed * 1_000_003 + step)

    def sync_engine(self) -> None:
        """After the updates of a step: the engine samples from the new weights."""
        self.engine_model = self.group.sync_engine_model(self.engine_model, self.model)
        if self.engine is not None:
            self.engine.sync_weights(self.engine_model)

    def after_step(self, step: int, update: dict[str, float]) -> dict[str, float]:
        self.scheduler.step()
        metrics: dict[str, float] = {"lr": self.scheduler.get_last_lr()[0]}
        for part in self.parts.values():
            metrics.update(part.after_step(step, update))
        return metrics

    def runner_metrics(self) -> dict[str, float]:
        return reward_runner_metrics(self.reward_runner.stats(), self.runner_before)

    def check_divergence(self, step: int, row: dict[str, Any]) -> None:
        self.bad_in_a_row = self.bad_in_a_row + 1 if row["bad_step"] else 0
        if self.bad_in_a_row >= self.cfg.train.max_bad_steps:
            self.log.write(row)
            self.log.close()
            raise TrainingDiverged(diverged_message(step, self.bad_in_a_row, self.cfg))

    def evaluates_at(self, step: int) -> bool:
        return bool(self.eval_tasks) and (step % self.cfg.train.eval_every == 0 or step == self.cfg.train.steps)

    def evaluate(self, step: int) -> dict[str, float]:
        """Evaluate on the held-out tasks (train.eval_every) with the run's engine: the summary goes to
        RUN_DIR/eval/step-N.json with per-task rows beside it, and its values into this step's metrics as
        "eval/<metric>". Sampling uses its own seeded RNG stream, so evaluating does not change what training
        samples next."""
        from rlvr.eval import evaluate_tasks

        self.collector.settle()  # the engine and the RNG are this method's alone
        cfg, samples = self.cfg, self.cfg.train.eval_samples
        temperature = 0.0 if samples == 1 else cfg.rollout.temperature
        was_training = self.model.training
        self.model.eval()
        counted_before = self.reward_runner.stats()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(cfg.train.seed * 1_000_003 + step)
            summary = evaluate_tasks(
                self.engine, self.tokenizer, self.eval_tasks, dataclasses.replace(self.scoring, spec=None),
                samples=samples, ks=sorted({1, samples}), temperature=temperature,
                max_new_tokens=cfg.rollout.max_new_tokens, seed=cfg.train.seed,
                out=self.dir / "eval" / f"step-{step}.json", prompts=self.prompt_policy,
                extra={"step": step, "data": cfg.data.eval, "temperature": temperature},
            )
        self.model.train(was_training)
        # the reward-runner counters are the training rewards' health: what evaluation scored is not counted there
        counted_after = self.reward_runner.stats()
        for key in ("timeouts", "errors", "worker_restarts"):
            self.runner_before[key] = self.runner_before.get(key, 0) - (int(counted_after[key]) - int(counted_before[key]))
        return {f"eval/{key}": value["value"] for key, value in summary.items() if isinstance(value, dict)}

    def saves_at(self, step: int) -> bool:
        every = self.cfg.train.save_every
        return step == self.cfg.train.steps or bool(every and step % every == 0)

    def save(self, step: int) -> None:
        """checkpoint-STEP from the main rank (the full weights the engine holds); every rank takes part, since
        gathering sharded optimizer state is a collective."""
        state = self.state()
        if self.group.is_main:
            self._save(step, state)
        self.group.barrier()

    def _save(self, step: int, state: dict[str, Any]) -> None:
        try:
            folders = {name: model for part in self.parts.values() for name, model in part.checkpoint_folders().items()}
            save_checkpoint(self.dir, step, self.engine_model, self.tokenizer, state, folders=folders)
        except OSError as exc:
            remove_partial_checkpoints(self.dir)
            previous = latest_checkpoint(self.dir)
            kept = f"the previous checkpoint {previous.name} is intact" if previous else "no earlier checkpoint exists"
            self.log.close()
            raise RunSetupError(f"step {step}: checkpoint-{step} could not be saved in {self.dir} "
                                f"({exc.strerror or exc}); {kept}") from None
        prune_checkpoints(self.dir, self.cfg.train.keep_last)

    def close(self) -> None:
        self.collector.close()
        self.log.close()
        self.samples_log.close()
