"""Models and tokenizers: loading HF folders, LoRA adapters (PEFT), prompt encoding, the tiny-model builder."""

from rlvr.models.loading import load_model, resolve_device
from rlvr.models.prompts import encode_prompt
from rlvr.models.tiny import TinySpec, build_tiny_model, char_tokenizer, save_tiny_model

__all__ = ["TinySpec", "build_tiny_model", "char_tokenizer", "encode_prompt", "load_model", "resolve_device", "save_tiny_model"]
