"""Load any Hugging Face causal LM folder with its tokenizer."""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from transformers.utils import logging as hf_logging

from rlvr.errors import UserError

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def resolve_device(name: str) -> torch.device:
    """The torch device for model.device; a device this torch build or machine lacks is a one-line error."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        build = "a CPU-only torch build" if torch.version.cuda is None else "no CUDA device visible"
        raise UserError(f"model.device={name}: {build} (torch {torch.__version__}); use model.device=cpu or auto")
    if name.startswith("cuda") and ":" in name and int(name.split(":")[1]) >= torch.cuda.device_count():
        raise UserError(f"model.device={name}: only {torch.cuda.device_count()} CUDA device(s) are visible")
    if name == "mps" and not torch.backends.mps.is_available():
        raise UserError("model.device=mps: the MPS backend is not available here; use model.device=cpu or auto")
    return torch.device(name)


TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "vocab.txt", "spiece.model",
                   "sentencepiece.bpe.model", "tokenizer_config.json")


def load_tokenizer(path: str | Path):
    """The tokenizer of a model folder (or of a LoRA checkpoint: its own if it saved one, else its base model's),
    without loading any weights; a folder without tokenizer files is a clear error."""
    folder = Path(path)
    if not folder.is_dir():
        raise FileNotFoundError(f"model.path: {folder} is not a directory (expected a Hugging Face model folder)")
    from rlvr.models.lora import adapter_base_path, is_adapter_folder

    if is_adapter_folder(folder) and not (folder / "config.json").is_file() \
            and not (folder / "tokenizer_config.json").is_file():
        return load_tokenizer(adapter_base_path(folder))
    if not any((folder / name).is_file() for name in TOKENIZER_FILES):
        raise UserError(f"model.path: {folder} has no tokenizer files (expected one of {', '.join(TOKENIZER_FILES)}); "
                        "save the tokenizer beside the model (tokenizer.save_pretrained(folder))")
    hf_logging.disable_progress_bar()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    if len(tokenizer) == 0:
        raise UserError(f"model.path: {folder}: the tokenizer loaded with an empty vocabulary")
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_model(path: str | Path, *, dtype: str = "float32", device: str = "auto"):
    """(model, tokenizer) from a local folder; a missing folder or one without a config is a clear error. A LoRA
    checkpoint (a folder with adapter_config.json) loads as its base model with the adapter applied."""
    folder = Path(path)
    if not folder.is_dir():
        raise FileNotFoundError(f"model.path: {folder} is not a directory (expected a Hugging Face model folder)")
    from rlvr.models.lora import adapter_base_path, is_adapter_folder, load_adapter

    if is_adapter_folder(folder) and not (folder / "config.json").is_file():
        model, _ = load_model(adapter_base_path(folder), dtype=dtype, device=device)
        return load_adapter(model, folder, trainable=False), load_tokenizer(folder)
    if not (folder / "config.json").is_file():
        raise FileNotFoundError(f"model.path: {folder} has no config.json (expected a Hugging Face model folder)")
    tokenizer = load_tokenizer(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=DTYPES[dtype])
    model.to(resolve_device(device))
    return model, tokenizer


CONTEXT_KEYS = ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length", "n_ctx")


def context_length(model) -> tuple[int, str] | None:
    """The longest sequence (prompt + response) the model's config says it handles, and the config key that says
    so, or None if it names none: a rotary model sampled past it degrades silently, a learned-position model fails
    with an index error."""
    config = getattr(model, "config", None)
    config = getattr(config, "get_text_config", lambda: config)() if config is not None else None
    for key in CONTEXT_KEYS:
        value = getattr(config, key, None)
        if isinstance(value, int) and value > 0:
            return value, key
    return None


def check_context(model, prompt_tokens: int, max_new_tokens: int) -> None:
    """A UserError, before any sampling, when the longest prompt plus the response limit exceeds the model's context."""
    found = context_length(model)
    if found is not None and prompt_tokens + max_new_tokens > found[0]:
        raise UserError(f"a prompt of {prompt_tokens} tokens plus rollout.max_new_tokens={max_new_tokens} exceeds the "
                        f"model's context of {found[0]} tokens (its config's {found[1]}): lower "
                        "rollout.max_new_tokens, or set rollout.max_prompt_tokens with rollout.prompt_overflow=truncate_left")
