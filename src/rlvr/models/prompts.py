"""Turn a task's prompt (plain text or chat messages, docs/api.md, "Data rows") into token ids."""

from __future__ import annotations

from typing import Any, Mapping

from rlvr.tasks.base import Prompt
from rlvr.errors import UserError


def encode_prompt(tokenizer, prompt: Prompt, template_kwargs: Mapping[str, Any] | None = None) -> list[int]:
    """Plain text is tokenized as is (with the tokenizer's own special tokens, e.g. BOS); a list of chat
    messages is rendered with the tokenizer's chat template and a generation prompt. ``template_kwargs``
    (``rollout.chat_template_kwargs``, e.g. ``{"enable_thinking": False}``) are passed to the template."""
    if isinstance(prompt, str):
        return list(tokenizer(prompt)["input_ids"])
    if getattr(tokenizer, "chat_template", None) is None:
        raise UserError(
            "this prompt is a list of chat messages but the tokenizer has no chat template; "
            "use plain-text prompts or a tokenizer with a chat_template"
        )
    text = tokenizer.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True,
                                         **dict(template_kwargs or {}))
    # The template already holds any BOS it wants.
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])
