"""Qwen2-VL's processor for images and text, buildable without torchvision (rlvr.models.multimodal)."""

from __future__ import annotations

from transformers import Qwen2VLProcessor
from transformers.processing_utils import ProcessorMixin


class Qwen2VLImageTextProcessor(Qwen2VLProcessor):
    """Qwen2-VL's processor for images and text only. The library's own also needs a video processor, which cannot
    be built without torchvision; images are processed exactly the same way (same class, same ``__call__``)."""

    def __init__(self, image_processor=None, tokenizer=None, chat_template=None, **kwargs):
        self.image_token = getattr(tokenizer, "image_token", None) or "<|image_pad|>"
        self.video_token = getattr(tokenizer, "video_token", None) or "<|video_pad|>"
        self.image_token_id = tokenizer.convert_tokens_to_ids(self.image_token)
        self.video_token_id = tokenizer.convert_tokens_to_ids(self.video_token)
        ProcessorMixin.__init__(self, image_processor, tokenizer, chat_template=chat_template)
