"""Turn a task's prompt (plain text or chat messages, docs/api.md, "Data rows") into token ids.

Text that came from data, tools or the model is tokenized as plain text: a prompt, a tool result or a model's reply
that spells a special token (``<|im_end|>``, ``</s>``, ``<image>``) gets the ids of those characters, never the
special token's id, while the markers a chat template adds stay special. ``encode_text`` does it for plain text,
``DataText`` for a template's rendering of messages: ``DataText.messages`` swaps the special-token spellings in the
messages' text for placeholders before rendering, ``DataText.encode`` tokenizes the rendering with the template's
own special tokens as such and the placeholders as the plain text they stand for.
"""

from __future__ import annotations

import re
import secrets
from typing import Any, Mapping

import torch

from rlvr.errors import UserError

Prompt = str | list[dict[str, Any]]  # a task's prompt (rlvr.tasks.Prompt): plain text or chat messages


def special_texts(tokenizer) -> list[str]:
    """The spellings of the tokenizer's special tokens (those it would match in text as one special id), longest
    first. Added tokens that are not special (``<think>``, ``<tool_call>``) are the model's words and not listed."""
    found = {str(t) for t in (getattr(tokenizer, "all_special_tokens", None) or [])}
    for token in (getattr(tokenizer, "added_tokens_decoder", None) or {}).values():
        if getattr(token, "special", False):
            found.add(str(token.content))
    return sorted((t for t in found if t), key=len, reverse=True)


def encode_text(tokenizer, text: str, add_special_tokens: bool = False) -> list[int]:
    """Ids of text from data, a tool or the model: every character as plain text (``add_special_tokens``: with the
    tokenizer's own BOS/EOS around it, as it adds them)."""
    return list(tokenizer(text, add_special_tokens=add_special_tokens, split_special_tokens=True)["input_ids"])


class DataText:
    """Messages whose text is data, rendered by a chat template and tokenized with that text as plain text::

        plain = DataText(tokenizer)
        text = tokenizer.apply_chat_template(plain.messages(messages), tokenize=False, ...)
        ids = plain.encode(text)

    A message's ``content`` (a string or text parts), ``reasoning_content`` and tool-call arguments are data."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        specials = special_texts(tokenizer)
        self.pattern = re.compile("|".join(map(re.escape, specials))) if specials else None
        self.saved: list[str] = []
        self._tag = secrets.token_hex(4)  # data cannot spell a placeholder of this instance by chance
        self._placeholder = re.compile("\ue000" + self._tag + r":(\d+)\ue001")

    def text(self, value: Any) -> Any:
        """``value`` with each special-token spelling swapped for a placeholder (non-strings as they are)."""
        if self.pattern is None or not isinstance(value, str):
            return value

        def swap(match: re.Match) -> str:
            self.saved.append(match.group(0))
            return f"\ue000{self._tag}:{len(self.saved) - 1}\ue001"

        return self.pattern.sub(swap, value)

    def messages(self, messages: list) -> list:
        out = []
        for message in messages:
            message = dict(message)
            content = message.get("content")
            if isinstance(content, list):
                message["content"] = [{**part, "text": self.text(part["text"])} if isinstance(part, Mapping)
                                      and isinstance(part.get("text"), str) else part for part in content]
            else:
                message["content"] = self.text(content)
            if "reasoning_content" in message:
                message["reasoning_content"] = self.text(message["reasoning_content"])
            if isinstance(message.get("tool_calls"), list):
                message["tool_calls"] = [self._call(c) for c in message["tool_calls"]]
            out.append(message)
        return out

    def _call(self, call: Any) -> Any:
        if not isinstance(call, Mapping) or not isinstance(call.get("function"), Mapping):
            return call
        function = dict(call["function"])
        arguments = function.get("arguments")
        if isinstance(arguments, str):
            function["arguments"] = self.text(arguments)
        elif isinstance(arguments, Mapping):
            function["arguments"] = {k: self.text(v) for k, v in arguments.items()}
        return {**call, "function": function}

    def restore(self, text: str) -> str:
        """The rendering with each placeholder back as the text it stands for."""
        return self._placeholder.sub(lambda m: self.saved[int(m.group(1))], text) if self.saved else text

    def encode(self, rendered: str) -> list[int]:
        """Ids of a rendering of ``messages(...)``: the template's special tokens as such, the data as plain text.
        Without any special-token spelling in the data this is the tokenizer's own tokenization of the text."""
        tok = self.tokenizer
        if not self.saved or self.pattern is None:
            return list(tok(rendered, add_special_tokens=False)["input_ids"])
        # the tokenizer splits text at special tokens and tokenizes the runs between them on their own; so does this
        ids, at = [], 0
        for match in self.pattern.finditer(rendered):  # only the template's markers are left to match
            ids += encode_text(tok, self.restore(rendered[at:match.start()])) if match.start() > at else []
            ids.append(int(tok.convert_tokens_to_ids(match.group(0))))
            at = match.end()
        ids += encode_text(tok, self.restore(rendered[at:])) if at < len(rendered) else []
        return ids


_JOINER = "\u2060"  # WORD JOINER: invisible, and no special token's spelling survives one inside it


def escape_specials(tokenizer, text: str, keep: tuple[str, ...] = ()) -> str:
    """``text`` with a word joiner after the first character of every special-token spelling but those in ``keep``:
    for tokenizers rlvr does not call itself (a processor's), where text cannot be marked as plain otherwise."""
    for special in special_texts(tokenizer):
        if special not in keep and len(special) > 1:
            text = text.replace(special, special[0] + _JOINER + special[1:])
    return text


def encode_prompt(tokenizer, prompt: Prompt, template_kwargs: Mapping[str, Any] | None = None) -> list[int]:
    """Plain text is tokenized as plain text (with the tokenizer's own special tokens around it, e.g. BOS); a list
    of chat messages is rendered with the tokenizer's chat template (a vision-language model's: its processor's)
    and a generation prompt, the messages' text tokenized as plain text (module docstring). ``template_kwargs``
    (``rollout.chat_template_kwargs``, e.g. ``{"enable_thinking": False}``) are passed to the template."""
    if isinstance(prompt, str):
        return encode_text(tokenizer, prompt, add_special_tokens=True)
    from rlvr.models.multimodal import processor_of

    # a vision-language model's chat template is its processor's (the tokenizer may have none)
    processor = processor_of(tokenizer)
    renderer = processor if getattr(processor, "chat_template", None) is not None else tokenizer
    if getattr(renderer, "chat_template", None) is None:
        raise UserError(
            "this prompt is a list of chat messages but the tokenizer has no chat template; "
            "use plain-text prompts or a tokenizer with a chat_template"
        )
    plain = DataText(tokenizer)
    text = renderer.apply_chat_template(plain.messages(prompt), tokenize=False, add_generation_prompt=True,
                                        **dict(template_kwargs or {}))
    # The template already holds any BOS it wants.
    return plain.encode(text)


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
    plain text places them with the processor's image token. The processor tokenizes the text itself, so the
    special-token spellings in the messages' text (and in plain text all but the image token) are escaped
    (``escape_specials``) rather than marked. A prompt that places none gets all of them before
    its text (chat: at the start of the first user message); a prompt that places some but not all is an error."""
    from rlvr.models.multimodal import open_image

    opened = [open_image(image) for image in images]
    token = processor.image_token
    tokenizer = getattr(processor, "tokenizer", processor)
    if isinstance(prompt, str):
        prompt = escape_specials(tokenizer, prompt, keep=(token,))  # the image token places the images here
        shown = prompt.count(token)
        if shown == 0:
            prompt, shown = token * len(opened) + prompt, len(opened)
        text, special = prompt, True
    else:
        prompt = [{**m, "content": [{**part, "text": escape_specials(tokenizer, part["text"])}
                                    if isinstance(part, Mapping) and isinstance(part.get("text"), str) else part
                                    for part in m["content"]] if isinstance(m.get("content"), list)
                   else escape_specials(tokenizer, m["content"]) if isinstance(m.get("content"), str)
                   else m.get("content")} for m in prompt]
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
