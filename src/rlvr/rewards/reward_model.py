"""The "reward_model" verifier: a learned reward model scores each response.

    data.verifier: reward_model
    data.verifier_options: {path: models/my-rm, threshold: 0.5}

``path`` is a local Hugging Face folder holding a sequence-classification model (``AutoModelForSequenceClassification``
with its tokenizer: the kind TRL's RewardTrainer and OpenRLHF's reward-model training save). The text it reads is
the task's prompt and the response, rendered with the tokenizer's chat template when the prompt is a list of chat
messages (the response as the assistant's turn), else the prompt text followed by the response, the prompt's and
response's text tokenized as plain text (a response spelling ``</s>`` is not read as the end of the sequence); it is
cut from the left to the model's context. The score is the probability the model gives the response being good: the sigmoid of
its logit for a one-output head, the softmax probability of the last label for a head with several outputs
(``label`` picks another). The verdict is "correct" when the score reaches ``threshold`` and "incorrect" below it;
the raw logits are in ``details``.

The model is loaded once per process and folder, on the CPU unless ``device`` says otherwise, and runs without
gradients in the caller's process (isolation "inline": its work is bounded by the model's context length).
"""

from __future__ import annotations

import threading
from functools import lru_cache
from pathlib import Path
from typing import Any

import torch

from rlvr.errors import UserError
from rlvr.models import DataText, encode_text
from rlvr.verifiers import Status, Verdict, register_verifier

_LOCK = threading.Lock()


@lru_cache(maxsize=4)
def load_reward_model(path: str, device: str = "cpu"):
    """(model, tokenizer) of a sequence-classification folder, in eval mode; a folder that is not one is a UserError."""
    from transformers import AutoConfig, AutoModelForSequenceClassification, AutoTokenizer

    folder = Path(path)
    if not (folder / "config.json").is_file():
        raise UserError(f"data.verifier_options.path: {folder} is not a Hugging Face model folder (no config.json)")
    config = AutoConfig.from_pretrained(folder)
    if not any(a.endswith("ForSequenceClassification") for a in (config.architectures or [])):
        raise UserError(f"data.verifier_options.path: {folder} holds {', '.join(config.architectures or ['?'])}, "
                        "not a sequence-classification reward model (AutoModelForSequenceClassification)")
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForSequenceClassification.from_pretrained(folder).to(device).eval()
    if model.config.pad_token_id is None:
        model.config.pad_token_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    return model, tokenizer


def rendered(tokenizer, prompt: Any, response: str) -> str:
    """The text the reward model reads: a chat prompt with the response as the assistant's turn, else prompt + response."""
    if isinstance(prompt, list) and getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template([*prompt, {"role": "assistant", "content": response}], tokenize=False)
    if isinstance(prompt, list):
        prompt = "\n".join(str(m.get("content", "")) for m in prompt)
    return f"{prompt or ''}{response}"


def input_ids(tokenizer, prompt: Any, response: str) -> list[int]:
    """The ids the reward model reads (``rendered``): the prompt's and the response's text as plain text, so a
    response that spells ``</s>`` or a template marker reads as those characters; the template's markers stay
    special."""
    if isinstance(prompt, list) and getattr(tokenizer, "chat_template", None):
        plain = DataText(tokenizer)
        messages = plain.messages([*prompt, {"role": "assistant", "content": response}])
        return plain.encode(tokenizer.apply_chat_template(messages, tokenize=False))
    return encode_text(tokenizer, rendered(tokenizer, prompt, response))


def score_of(logits: torch.Tensor, label: int | None) -> float:
    """The probability of "good": sigmoid of a single logit, else the softmax probability of ``label`` (default: last)."""
    if logits.numel() == 1:
        return float(torch.sigmoid(logits.float()).item())
    return float(torch.softmax(logits.float(), dim=-1)[-1 if label is None else label].item())


@register_verifier("reward_model", isolation="inline")
def reward_model(response: str, reference: Any = None, *, path: str | None = None, threshold: float = 0.5,
                 label: int | None = None, device: str = "cpu", prompt: Any = None, **_: Any) -> Verdict:
    if not path:
        raise UserError("the reward_model verifier needs data.verifier_options.path (a sequence-classification "
                        "model folder)")
    model, tokenizer = load_reward_model(str(path), device)
    limit = getattr(model.config, "max_position_embeddings", None) or tokenizer.model_max_length
    ids = input_ids(tokenizer, prompt, response)
    ids = ids[-int(limit):] if limit and limit < 10**7 else ids
    with _LOCK, torch.no_grad():  # one forward at a time per process: the model is shared
        logits = model(input_ids=torch.tensor([ids], device=device)).logits[0]
    score = score_of(logits, label)
    status = Status.CORRECT if score >= threshold else Status.INCORRECT
    return Verdict(score, status, "reward_model", None, {"logits": [float(x) for x in logits], "tokens": len(ids)})
