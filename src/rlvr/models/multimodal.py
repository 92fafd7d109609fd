"""Vision-language models: their processors, images as files or bytes, image inputs and model-owned positions.

A VLM folder (a ``config.json`` with a ``vision_config``) loads with ``AutoModelForImageTextToText`` and its
processor; the tokenizer rlvr passes around is ``processor.tokenizer`` with the processor attached
(``attach_processor`` / ``processor_of``), so every place that encodes prompts finds it without a new argument.

Image inputs are the processor's tensors other than the token ids (``pixel_values``, and what the family adds, e.g.
Qwen2-VL's ``image_grid_thw``): one dict per prompt, stacked along their first dimension for a batch of rows
(``merge_image_inputs``), since every supported family concatenates its images in the order their tokens appear.
"""

from __future__ import annotations

import importlib
import io
import os
import stat
from pathlib import Path
from typing import Any

import torch

from rlvr.errors import UserError

_PROCESSOR_ATTR = "_rlvr_processor"


# model_type -> "module:class" of the processor used when AutoProcessor cannot build the folder's processor here
IMAGE_ONLY_PROCESSORS: dict[str, str] = {"qwen2_vl": "rlvr.models.qwen2_vl_processor:Qwen2VLImageTextProcessor"}


def is_vlm_config(config: Any) -> bool:
    """Whether a model config (object or config.json dict) describes a vision-language model."""
    value = config.get("vision_config") if isinstance(config, dict) else getattr(config, "vision_config", None)
    return value is not None


def base_model(model):
    """The model under a PEFT wrapper (or the model itself)."""
    if hasattr(model, "peft_config") and hasattr(model, "get_base_model"):
        return model.get_base_model()
    return model


def is_vlm(model) -> bool:
    return is_vlm_config(getattr(base_model(model), "config", None))


def attach_processor(tokenizer, processor) -> None:
    """Remember ``processor`` on its tokenizer, where prompt encoding looks for it (``processor_of``)."""
    setattr(tokenizer, _PROCESSOR_ATTR, processor)


def processor_of(tokenizer):
    """The processor attached to ``tokenizer`` (a VLM's), or None for a text model's tokenizer."""
    return getattr(tokenizer, _PROCESSOR_ATTR, None) if tokenizer is not None else None


def load_processor(folder: str | Path, model_type: str):
    """The processor saved in a VLM folder: ``AutoProcessor``'s, or where it cannot be built here (a family whose
    processor wants torchvision) the family's image-only processor (``IMAGE_ONLY_PROCESSORS``)."""
    from transformers import AutoProcessor

    try:
        processor = AutoProcessor.from_pretrained(folder)
        problem = None if getattr(processor, "image_processor", None) is not None else \
            f"AutoProcessor gave a {type(processor).__name__}, not a processor with an image processor"
    except Exception as error:  # noqa: BLE001 - transformers raises many kinds here; a fallback or a clear error
        problem = f"{type(error).__name__}: {error}"
    if problem is None:
        return processor
    fallback = IMAGE_ONLY_PROCESSORS.get(model_type)
    if fallback is not None:
        module, _, name = fallback.partition(":")
        fallback = getattr(importlib.import_module(module), name)
    if fallback is None:
        raise UserError(f"model.path: {folder}: cannot load the processor of this {model_type} model ({problem}); "
                        "save it beside the model with processor.save_pretrained(folder)")
    return fallback.from_pretrained(folder)


# Limits of one image, checked before it is decoded: a small file can decode to gigabytes (a decompression bomb), and
# its header states the size it decodes to. 8K UHD (7680 x 4320, about 100 MB as RGB) is the largest accepted.
MAX_IMAGE_PIXELS = 7680 * 4320
MAX_IMAGE_BYTES = 64 * 1024 * 1024  # of an encoded image file or bytes

_NOT_REGULAR = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"),
                (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))


class ImageRefused(ValueError):
    """An image refused before decoding: not a regular file, or over a size limit."""


def _not_regular(mode: int) -> str:
    return next((what for test, what in _NOT_REGULAR if test(mode)), "not a regular file")


def image_file_bytes(path: str | Path) -> bytes:
    """The bytes of an image file; an ImageRefused error when it is not a regular file (a FIFO would block the reader
    forever, a device never ends) or is larger than ``MAX_IMAGE_BYTES``. Checked with stat before opening, and
    opened without blocking, so a file swapped for a FIFO in between cannot hang the caller either."""
    mode = os.stat(path).st_mode
    if not stat.S_ISREG(mode):
        raise ImageRefused(f"is {_not_regular(mode)}, expected a regular image file")
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ImageRefused(f"is {_not_regular(info.st_mode)}, expected a regular image file")
        if info.st_size > MAX_IMAGE_BYTES:
            raise ImageRefused(f"is {info.st_size} bytes, over the {MAX_IMAGE_BYTES}-byte limit of an image file")
        with os.fdopen(fd, "rb", closefd=True) as fh:
            fd = -1
            return fh.read(MAX_IMAGE_BYTES + 1)
    finally:
        if fd >= 0:
            os.close(fd)


def decode_image(data: bytes):
    """A PIL RGB image of encoded bytes, decoded in full (a truncated or corrupt body fails here, not in a later
    forward); an image whose header states more than ``MAX_IMAGE_PIXELS`` pixels is refused before decoding."""
    from PIL import Image

    if len(data) > MAX_IMAGE_BYTES:
        raise ImageRefused(f"is {len(data)} bytes, over the {MAX_IMAGE_BYTES}-byte limit of an image")
    try:
        opened = Image.open(io.BytesIO(data))
    except Image.DecompressionBombError as error:  # PIL's own, far larger, limit: the header said even more
        raise ImageRefused(f"decodes to more pixels than the limit of {MAX_IMAGE_PIXELS} ({error})") from None
    with opened:
        width, height = opened.size
        if width * height > MAX_IMAGE_PIXELS:
            raise ImageRefused(f"decodes to {width}x{height} pixels, over the limit of {MAX_IMAGE_PIXELS} "
                             "(rlvr.models.multimodal.MAX_IMAGE_PIXELS)")
        opened.load()
        return opened.convert("RGB")


def image_problem(image) -> str | None:
    """Why an image (a file path or encoded bytes) cannot be used, or None: missing, not a regular file, too large
    (file or decoded pixels), or not decodable in full."""
    try:
        _decoded(image)
    except Exception as error:  # noqa: BLE001 - PIL raises many kinds for a broken image; all mean unusable
        return _why(image, error)
    return None


def _decoded(image):
    return decode_image(bytes(image) if isinstance(image, (bytes, bytearray)) else image_file_bytes(image))


def _why(image, error: Exception) -> str:
    label = f"{len(image)} bytes" if isinstance(image, (bytes, bytearray)) else str(image)
    if isinstance(error, FileNotFoundError):
        return f"{label} does not exist"
    if isinstance(error, ImageRefused):
        return f"{label} {error}"
    return f"{label} is not a readable image ({type(error).__name__}: {error})"


def open_image(image, *, where: str = ""):
    """A PIL RGB image from a file path or encoded bytes (or a PIL image as is), with the limits of
    ``decode_image``; an unusable one is a one-line UserError naming ``where`` (e.g. ``data.jsonl:3``) and why."""
    from PIL import Image

    if isinstance(image, Image.Image):
        return image.convert("RGB")
    prefix = f"{where}: " if where else ""
    try:
        return _decoded(image)
    except Exception as error:  # noqa: BLE001 - PIL raises many kinds for a broken image; all mean unusable
        raise UserError(f"{prefix}image {_why(image, error)}") from None


def merge_image_inputs(parts: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """One batch's image inputs from per-row dicts (in row order; rows without images give {})."""
    parts = [p for p in parts if p]
    if not parts:
        return {}
    return {key: torch.cat([p[key] for p in parts]) for key in parts[0]}


def token_types(model, input_ids: torch.Tensor) -> torch.Tensor:
    """Each token's modality, as M-RoPE models want it: 0 text, 1 image, 2 video (from the config's token ids)."""
    config = base_model(model).config
    types = torch.zeros_like(input_ids, dtype=torch.int)
    for code, key in ((1, "image_token_id"), (2, "video_token_id")):
        token = getattr(config, key, None)
        if token is not None:
            types = types.masked_fill(input_ids == token, code)
    return types


def rope_index(model):
    """The model's own position function (Qwen2-VL family's 3-D M-RoPE ``get_rope_index``), or None."""
    inner = getattr(base_model(model), "model", None)
    return getattr(inner, "get_rope_index", None)


def model_positions(model, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                    image_inputs: dict[str, torch.Tensor] | None = None) -> torch.Tensor:
    """Position ids of left-padded sequences: the model's own 3-D positions [3, B, L] for M-RoPE families (text
    and image tokens placed as the model places them), else ``cumsum(mask) - 1`` [B, L]."""
    index = rope_index(model)
    if index is None:
        return (attention_mask.cumsum(-1) - 1).clamp(min=0)
    image_inputs = image_inputs or {}
    positions, _ = index(input_ids, token_types(model, input_ids), image_grid_thw=image_inputs.get("image_grid_thw"),
                         video_grid_thw=image_inputs.get("video_grid_thw"), attention_mask=attention_mask)
    return positions


def next_positions(positions: torch.Tensor) -> torch.Tensor:
    """[B] the position of the token after each left-padded row's last one, for 2-D or 3-D (M-RoPE) positions."""
    flat = positions.reshape(-1, positions.shape[-2], positions.shape[-1])
    return flat[..., -1].amax(0) + 1


def decode_positions(model, next_pos: torch.Tensor) -> torch.Tensor:
    """Position ids of one new token per row: [B, 1], or [3, B, 1] for M-RoPE (a text token's three are equal)."""
    ids = next_pos.unsqueeze(-1)
    return ids.unsqueeze(0).expand(3, -1, -1) if rope_index(model) is not None else ids


def check_image_inputs(model, input_ids: torch.Tensor, image_inputs: dict[str, torch.Tensor] | None) -> None:
    """A RuntimeError when the sequences hold image tokens but no image inputs came with them: the model would read
    the placeholders' embeddings instead of the images (silently wrong log-probs), so no forward may drop them."""
    config = getattr(base_model(model), "config", None)
    token = getattr(config, "image_token_id", None) if is_vlm_config(config) else None
    if token is not None and not image_inputs and bool((input_ids == token).any()):
        raise RuntimeError("a forward pass over sequences with image tokens got no image inputs (pass the batch's "
                           "image_inputs(rows) to it)")


def placeholder_ids(model) -> list[int]:
    """The token ids that stand for images or videos in a VLM's input (empty for a text model). The policy never
    samples them: a response holding one would not match its image inputs (the model's forward refuses a count
    of image tokens other than its images'), so engines and trainer alike give them probability 0."""
    config = getattr(base_model(model), "config", None)
    if not is_vlm_config(config):
        return []
    return [t for t in (getattr(config, k, None) for k in ("image_token_id", "video_token_id")) if isinstance(t, int)]


# The logit a placeholder token gets: its softmax probability is exactly 0 in float32 (and bfloat16) next to any
# real logit at any sampling temperature up to 10, while p * z stays 0 (with -inf, an entropy's sum of p * z is NaN).
SUPPRESSED_LOGIT = -1e4


def suppress_placeholders(logits: torch.Tensor, ids: list[int]) -> torch.Tensor:
    """``logits`` with the placeholder tokens ``ids`` set to ``SUPPRESSED_LOGIT`` (a copy; unchanged when ``ids`` is
    empty)."""
    if not ids:
        return logits
    suppressed = logits.clone()
    suppressed[..., ids] = SUPPRESSED_LOGIT
    return suppressed


class PlaceholderFreeHead(torch.nn.Module):
    """An LM head whose logits suppress the placeholder tokens (for the chunked log-prob path)."""

    def __init__(self, head: torch.nn.Module, ids: list[int]):
        super().__init__()
        self.head, self.ids = head, ids

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return suppress_placeholders(self.head(hidden), self.ids)
