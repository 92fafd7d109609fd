"""Supervised warm start: next-token cross-entropy on (prompt, completion) pairs, loss on completion tokens only."""

from __future__ import annotations

from typing import Callable

import torch

from rlvr.errors import UserError
from rlvr.models import encode_prompt
from rlvr.tasks.base import Prompt
from rlvr.progress import progress_bar


def sft_batch(tokenizer, pairs: list[tuple[Prompt, str]], device, **template_kwargs) -> dict[str, torch.Tensor]:
    """Right-padded inputs with labels -100 everywhere except the completion and its EOS."""
    rows = []
    for prompt, completion in pairs:
        prompt_ids = encode_prompt(tokenizer, prompt, template_kwargs)
        completion_ids = list(tokenizer(completion, add_special_tokens=False)["input_ids"]) + [tokenizer.eos_token_id]
        rows.append((prompt_ids + completion_ids, [-100] * len(prompt_ids) + completion_ids))
    return padded(rows, tokenizer.pad_token_id, device)


def padded(rows: list[tuple[list[int], list[int]]], pad_id: int, device) -> dict[str, torch.Tensor]:
    """Right-padded input ids, labels (-100 on padding) and attention mask of (ids, labels) rows."""
    width = max(len(ids) for ids, _ in rows)
    input_ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    labels = torch.full((len(rows), width), -100, dtype=torch.long)
    attention_mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, (ids, lab) in enumerate(rows):
        input_ids[i, : len(ids)] = torch.tensor(ids)
        labels[i, : len(lab)] = torch.tensor(lab)
        attention_mask[i, : len(ids)] = 1
    return {"input_ids": input_ids.to(device), "labels": labels.to(device), "attention_mask": attention_mask.to(device)}


def render(tokenizer, messages: list[dict[str, str]], *, generation_prompt: bool, **template_kwargs) -> str:
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation_prompt,
                                         **template_kwargs)


def conversation_tokens(tokenizer, messages: list[dict[str, str]], **template_kwargs) -> tuple[list[int], list[int]]:
    """(input ids, labels) of one conversation: labels are the tokens of each assistant turn as the chat template
    renders it (its end-of-turn tokens included), -100 elsewhere. Each stretch is tokenized on its own, as at
    sampling time, where the prompt (earlier turns plus the generation prompt) is tokenized and the turn sampled.
    A template that renders earlier turns differently once later ones follow is refused, showing where."""
    full = render(tokenizer, messages, generation_prompt=False, **template_kwargs)
    pieces: list[tuple[str, bool]] = []
    done = 0
    for i, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        before = render(tokenizer, messages[:i], generation_prompt=True, **template_kwargs) if i else ""
        through = render(tokenizer, messages[: i + 1], generation_prompt=False, **template_kwargs)
        if not (through.startswith(before) and full.startswith(through) and len(before) >= done):
            at = next((k for k, (a, b) in enumerate(zip(through, full)) if a != b), min(len(through), len(full)))
            raise UserError(f"the chat template renders assistant turn {i} differently once later messages follow "
                            f"(at character {at}: {through[at:at + 60]!r} vs {full[at:at + 60]!r}), so the tokens "
                            "trained would not be the tokens sampled; use a template that keeps earlier turns as "
                            "rendered, or rollout.chat_template_kwargs to choose such a rendering")
        pieces += [(full[done:len(before)], False), (full[len(before):len(through)], True)]
        done = len(through)
    pieces.append((full[done:], False))
    ids: list[int] = []
    labels: list[int] = []
    for text, trained in pieces:
        if text:
            part = list(tokenizer(text, add_special_tokens=False)["input_ids"])
            ids += part
            labels += part if trained else [-100] * len(part)
    return ids, labels


def conversation_batch(tokenizer, conversations: list[list[dict[str, str]]], device,
                       **template_kwargs) -> dict[str, torch.Tensor]:
    """``sft_batch`` for whole conversations: the loss on the assistant turns only (TRL's assistant-only loss)."""
    rows = [conversation_tokens(tokenizer, messages, **template_kwargs) for messages in conversations]
    return padded(rows, tokenizer.pad_token_id, device)


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
