"""Supervised warm start: next-token cross-entropy on (prompt, completion) pairs, loss on completion tokens only."""

from __future__ import annotations

from typing import Callable

import torch

from rlvr.models import encode_prompt
from rlvr.tasks.base import Prompt
from rlvr.progress import progress_bar


def sft_batch(tokenizer, pairs: list[tuple[Prompt, str]], device) -> dict[str, torch.Tensor]:
    """Right-padded inputs with labels -100 everywhere except the completion and its EOS."""
    rows = []
    for prompt, completion in pairs:
        prompt_ids = encode_prompt(tokenizer, prompt)
        completion_ids = list(tokenizer(completion, add_special_tokens=False)["input_ids"]) + [tokenizer.eos_token_id]
        rows.append((prompt_ids + completion_ids, [-100] * len(prompt_ids) + completion_ids))
    width = max(len(ids) for ids, _ in rows)
    input_ids = torch.full((len(rows), width), tokenizer.pad_token_id, dtype=torch.long)
    labels = torch.full((len(rows), width), -100, dtype=torch.long)
    attention_mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, (ids, lab) in enumerate(rows):
        input_ids[i, : len(ids)] = torch.tensor(ids)
        labels[i, : len(lab)] = torch.tensor(lab)
        attention_mask[i, : len(ids)] = 1
    return {"input_ids": input_ids.to(device), "labels": labels.to(device), "attention_mask": attention_mask.to(device)}


def sft(
    model,
    tokenizer,
    pairs: list[tuple[Prompt, str]],
    *,
    steps: int,
    batch_size: int = 64,
    lr: float = 1e-3,
    seed: int = 0,
    progress: bool = True,
    make_batch: Callable[[list, torch.device], dict[str, torch.Tensor]] | None = None,
) -> list[float]:
    """Train ``model`` in place for ``steps`` AdamW steps on random batches of ``pairs``; returns the losses.
    ``make_batch(items, device)`` turns picked items into model inputs with labels (default: ``sft_batch`` on
    (prompt, completion) pairs)."""
    device = next(model.parameters()).device
    make_batch = make_batch or (lambda items, dev: sft_batch(tokenizer, items, dev))
    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    model.train()
    history = []
    with progress_bar(steps, "sft", enabled=progress) as bar:
        for _ in range(steps):
            picks = torch.randint(len(pairs), (batch_size,), generator=generator).tolist()
            loss = model(**make_batch([pairs[i] for i in picks], device)).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            history.append(loss.item())
            bar.advance(f"loss {history[-1]:.3f}")
    return history
