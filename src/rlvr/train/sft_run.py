"""``rlvr sft CONFIG``: the supervised warm start as a run, with the RL run's checkpoints, resume and metrics.

    rlvr sft examples/sft.yaml model.path=MODEL data.train=data/sft.parquet train.steps=200 train.out=runs/sft

Each task's prompt (text, or chat messages rendered with the tokenizer's chat template) is followed by its
target response, the row field ``data.completion_field``; the loss is the token-mean cross-entropy over the
response tokens and the EOS only. Rows in TRL's conversational format (a ``messages`` field holding a whole
conversation) train on their assistant turns only, as the chat template renders them (rlvr.train.sft.
conversation_tokens; ``rollout.chat_template_kwargs`` reach the template). Batches hold ``data.prompts_per_step`` rows drawn in seeded epoch order
(the data sampler), split into ``train.micro_batch_size`` rows per backward pass. The run directory holds
config.yaml, manifest.json, metrics.jsonl (step, loss, tokens, lr, grad_norm, time_s) and checkpoint-STEP/
folders that load with from_pretrained and resume exactly with ``--resume``.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable

import torch

from rlvr.config import Config, save_config
from rlvr.models import load_model
from rlvr.progress import progress_bar
from rlvr.tasks import DataError, PromptSampler, Task, load_data
from rlvr.tasks.conversations import is_conversational, load_conversations
from rlvr.train.allocator import set_up_host_memory
from rlvr.train.determinism import set_up_numerics
from rlvr.train.checkpoint import (
    latest_checkpoint, load_trainer_state, prune_checkpoints, remove_partial_checkpoints, save_checkpoint,
    set_rng_state,
)
from rlvr.train.loss_scale import LossScale, backward_with_retries, unscale_gradients
from rlvr.train.manifest import write_manifest
from rlvr.train.metrics import MetricsLog
from rlvr.train.run import TrainingDiverged, diverged_message, lr_factor, make_optimizer, seed_everything
from rlvr.train.sft import conversation_batch, sft_batch
from rlvr.errors import UserError


def completion_of(task: Task, field: str) -> str:
    """The response SFT trains on: the row's ``field`` (``reference`` itself when field is "reference")."""
    value = task.reference if field == "reference" else task.meta.get(field)
    if value is None:
        raise DataError(f"task {task.id!r}: field '{field}': missing (data.completion_field, the response to train on)")
    if not isinstance(value, (str, int, float)) or isinstance(value, bool):
        raise DataError(f"task {task.id!r}: field '{field}': expected a string, got {type(value).__name__}")
    return str(value)


def completion_loss(model, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, int]:
    """(sum of the next-token cross-entropy over labelled tokens, their count) for one micro-batch."""
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits[:, :-1]
    labels = batch["labels"][:, 1:]
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), labels.reshape(-1),
                                             ignore_index=-100, reduction="sum")
    return loss, int((labels != -100).sum())


def run_sft(cfg: Config, *, resume: bool = False, on_step: Callable[[dict[str, Any]], None] | None = None) -> Path:
    """Supervised fine-tuning as configured; returns the run directory."""
    if cfg.model.path is None:
        raise UserError("model.path is not set: give it in the config or as an override, e.g. model.path=path/to/model")
    if cfg.data.train is None:
        raise UserError("data.train is not set: give a data file or preset, e.g. data.train=data/sft.jsonl")
    run_dir = Path(cfg.train.out)
    set_up_numerics(cfg.train.threads, cfg.train.deterministic)  # first: kernels pin before the first op
    set_up_host_memory()  # host memory follows the live tensors (rlvr.train.allocator)
    seed_everything(cfg.train.seed)
    conversational = is_conversational(cfg.data.train)  # rows of whole conversations (TRL's "messages" format)
    tasks = load_conversations(cfg.data.train) if conversational else load_data(cfg.data, "train")
    completions = {} if conversational else {task.id: completion_of(task, cfg.data.completion_field) for task in tasks}
    checkpoint = latest_checkpoint(run_dir) if resume else None
    resumed = load_trainer_state(checkpoint) if checkpoint is not None else None  # a bad one fails before loading
    model, tokenizer = load_model(checkpoint or cfg.model.path, dtype=cfg.model.dtype, device=cfg.model.device)
    model.train()
    device = next(model.parameters()).device
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = make_optimizer(params, cfg)
    loss_scale = LossScale.for_dtype(cfg.model.dtype)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: lr_factor(s, cfg))
    sampler = PromptSampler(tasks, seed=cfg.train.seed, shuffle=cfg.data.shuffle)

    run_dir.mkdir(parents=True, exist_ok=True)
    remove_partial_checkpoints(run_dir)
    save_config(cfg, run_dir / "config.yaml")
    write_manifest(run_dir, cfg, resumed_from=checkpoint)
    log = MetricsLog(run_dir, tensorboard=cfg.train.tensorboard)
    first, bad_in_a_row = 1, 0
    if checkpoint is not None:
        state = resumed
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        sampler.load_state_dict(state["sampler"])
        set_rng_state(state["rng"])
        bad_in_a_row = state.get("bad_in_a_row", 0)
        loss_scale.load_state_dict(state.get("loss_scale", {}))
        first = state["step"] + 1
        log.truncate_after(state["step"])
    elif resume:
        log.truncate_after(0)

    micro = cfg.train.micro_batch_size or cfg.data.prompts_per_step
    template_kwargs = dict(cfg.rollout.chat_template_kwargs)

    def encode(rows: list[Task]) -> dict[str, torch.Tensor]:
        """One micro-batch: a conversation's assistant turns, or a prompt's completion, carry the loss."""
        if conversational:
            return conversation_batch(tokenizer, [t.prompt for t in rows], device, **template_kwargs)
        return sft_batch(tokenizer, [(t.prompt, completions[t.id]) for t in rows], device, **template_kwargs)

    with progress_bar(cfg.train.steps, "sft", enabled=cfg.train.progress, completed=first - 1) as bar:
        for step in range(first, cfg.train.steps + 1):
            started = time.perf_counter()
            batch = sampler.next(cfg.data.prompts_per_step)
            encoded = [encode(batch[i : i + micro]) for i in range(0, len(batch), micro)]
            total = sum(int((b["labels"][:, 1:] != -100).sum()) for b in encoded)

            def run_backward(scale: float) -> float:
                loss_sum = 0.0
                for part in encoded:
                    loss, _ = completion_loss(model, part)
                    (loss * (scale / total)).backward()  # token-mean over the whole batch, whatever the micro-batching
                    loss_sum += float(loss.detach())
                return loss_sum

            done = backward_with_retries(run_backward, params, cfg.train.max_grad_norm, loss_scale,
                                         lambda: optimizer.zero_grad(set_to_none=True))
            loss_sum, grad_norm, bad = done.loss, done.grad_norm, not done.finite
            if not bad:
                unscale_gradients(optimizer, params, done.scale)
                optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            scheduler.step()
            bad_in_a_row = bad_in_a_row + 1 if bad else 0
            row = {"step": step, "loss": loss_sum / total, "tokens": total, "lr": scheduler.get_last_lr()[0],
                   "grad_norm": grad_norm, "bad_step": bad, "time_s": time.perf_counter() - started,
                   **loss_scale.metrics(done)}
            if bad:  # a skipped step logs no loss or gradient norm: a NaN would poison every average of the column
                del row["loss"], row["grad_norm"]
            log.write(row)
            if bad_in_a_row >= cfg.train.max_bad_steps:
                log.close()
                raise TrainingDiverged(diverged_message(step, bad_in_a_row, cfg))
            if on_step is not None:
                on_step(row)
            bar.advance(f"loss {row['loss']:.3f}" if "loss" in row else "skipped")
            if step == cfg.train.steps or (cfg.train.save_every and step % cfg.train.save_every == 0):
                state = {"optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(),
                         "sampler": sampler.state_dict(), "bad_in_a_row": bad_in_a_row,
                         "loss_scale": loss_scale.state_dict()}
                save_checkpoint(run_dir, step, model, tokenizer, state)
                prune_checkpoints(run_dir, cfg.train.keep_last)
    log.close()
    return run_dir
