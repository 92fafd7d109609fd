"""Models and tokenizers: loading HF models/tokenizers (and VLM processors), LoRA adapters (PEFT), prompt encoding,
the tiny-model builders."""

from rlvr.models.loading import load_model, resolve_device
from rlvr.models.multimodal import attach_processor, open_image, processor_of
from rlvr.models.prompts import DataText, encode_multimodal, encode_prompt, encode_text
from rlvr.models.tiny import (TinySpec, TinyVLMSpec, build_tiny_model, build_tiny_vlm, char_tokenizer, save_tiny_model,
                              tiny_vlm)

__all__ = ["DataText", "TinySpec", "TinyVLMSpec", "attach_processor", "build_tiny_model", "build_tiny_vlm",
           "char_tokenizer", "encode_multimodal", "encode_prompt", "encode_text", "load_model", "open_image",
           "processor_of", "resolve_device", "save_tiny_model", "tiny_vlm"]
