"""Turn a task's prompt (plain text or chat messages, docs/api.md, "Data rows") into token ids."""

from __future__ import annotations

from typing import Any, Mapping

import torch

from rlvr.tasks.base import Prompt
from rlvr.errors import UserError


def encode_prompt(tokenizer, prompt: Prompt, template_kwargs: Mapping[str, Any] | None = None) -> list[int]:
    """Plain text is tokenized as is (with the tokenizer's own special tokens, e.g. BOS); a list of chat
    messages is rendered with the tokenizer's chat template (a vision-language model's: its processor's) and a
    generation prompt. ``template_kwargs``
    (``rollout.chat_template_kwargs``, e.g. ``{"enable_thinking": False}``) are passed to the template."""
    if isinstance(prompt, str):
        return list(tokenizer(prompt)["input_ids"])
    from rlvr.models.multimodal import processor_of

    # a vision-language model's chat template is its processor's (the tokenizer may have none)
    processor = processor_of(tokenizer)
    renderer = processor if getattr(processor, "chat_template", None) is not None else tokenizer
    if getattr(renderer, "chat_template", None) is None:
        raise UserError(
            "this prompt is a list of chat messages but the tokenizer has no chat template; "
            "use plain-text prompts or a tokenizer with a chat_template"
        )
    text = renderer.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True,
                                        **dict(template_kwargs or {}))
    # The template already holds any BOS it wants.
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def _image_parts(prompt: Prompt) -> int:
    return sum(1 for m in prompt for part in (m.get("content") if isinstance(m.get("content"), list) else [])
               if isinstance(part, Mapping) and part.get("type") == "image")


def _with_image_parts(messages: list, count: int) -> list:
    """Chat messages whose first user message starts with ``count`` image parts (for prompts that do not place
    their images themselves)."""
    out, placed = [], False
    for message in messages:
        if not placed and message.get("role") == "user":
            content = message.get("content")
            parts = list(content) if isinstance(content, list) else [{"type": "text", "text": str(content or "")}]
            message = {**message, "content": [{"type": "image"} for _ in range(count)] + parts}
            placed = True
        out.append(message)
    if not placed:
        raise UserError("a prompt with images has no user message to show them in")
    return out


def encode_multimodal(processor, prompt: Prompt, images, template_kwargs: Mapping[str, Any] | None = None
                      ) -> tuple[list[int], dict[str, Any]]:
    """(token ids with each image's placeholder expanded into its image tokens, image inputs) of a prompt with
    images, e.g. ``{"pixel_values": [1, 3, 32, 32]}`` for LLaVA or ``pixel_values`` + ``image_grid_thw`` for
    Qwen2-VL. ``images`` are file paths, encoded bytes or PIL images, in the order the prompt shows them.

    Chat messages place images with ``{"type": "image"}`` content parts, rendered by the processor's chat template;
    plain text places them with the processor's image token. A prompt that places none gets all of them before
    its text (chat: at the start of the first user message); a prompt that places some but not all is an error."""
    from rlvr.models.multimodal import open_image

    opened = [open_image(image) for image in images]
    token = processor.image_token
    if isinstance(prompt, str):
        shown = prompt.count(token)
        if shown == 0:
            prompt, shown = token * len(opened) + prompt, len(opened)
        text, special = prompt, True
    else:
        shown = _image_parts(prompt)
        if shown == 0 and opened:
            prompt, shown = _with_image_parts(list(prompt), len(opened)), len(opened)
        if getattr(processor, "chat_template", None) is None:
            raise UserError("this prompt is a list of chat messages but the model's processor has no chat template")
        text = processor.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True,
                                             **dict(template_kwargs or {}))
        special = False  # the template already holds any BOS it wants
    if shown != len(opened):
        raise UserError(f"the prompt shows {shown} image(s) but the task has {len(opened)}")
    encoded = processor(text=[text], images=opened or None, return_tensors="pt", add_special_tokens=special)
    ids = encoded["input_ids"][0].tolist()
    skip = {"input_ids", "attention_mask", "mm_token_type_ids", "token_type_ids"}
    return ids, {k: v for k, v in encoded.items() if k not in skip and isinstance(v, torch.Tensor)}
