"""Load any Hugging Face causal LM folder with its tokenizer, or vision-language model folder with its processor."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from transformers.utils import logging as hf_logging

from rlvr.errors import UserError
from rlvr.models.gguf import converted_folder, gguf_file

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


def model_folder(path: str | Path) -> Path:
    """The Hugging Face folder model.path stands for: itself, or for a GGUF file (or a folder holding one) its
    converted folder (rlvr.models.gguf.converted_folder)."""
    found = gguf_file(path)
    return converted_folder(found) if found is not None else Path(path)


def load_tokenizer(path: str | Path):
    """The tokenizer of a model folder (or of a LoRA checkpoint: its own if it saved one, else its base model's;
    or of a GGUF file), without loading any weights; a folder without tokenizer files is a clear error."""
    folder = model_folder(path)
    if not folder.is_dir():
        raise FileNotFoundError(f"model.path: {folder} is not a directory (expected a Hugging Face model folder or a .gguf file)")
    from rlvr.models.lora import adapter_base_path, is_adapter_folder

    if is_adapter_folder(folder) and not (folder / "config.json").is_file() \
            and not (folder / "tokenizer_config.json").is_file():
        return load_tokenizer(adapter_base_path(folder))
    if not any((folder / name).is_file() for name in TOKENIZER_FILES):
        raise UserError(f"model.path: {folder} has no tokenizer files (expected one of {', '.join(TOKENIZER_FILES)}); "
                        "save the tokenizer beside the model (tokenizer.save_pretrained(folder))")
    hf_logging.disable_progress_bar()
    vlm = _vlm_model_type(folder)
    if vlm is not None:
        from rlvr.models.multimodal import attach_processor, load_processor

        processor = load_processor(folder, vlm)  # a LoRA checkpoint saves its processor beside the adapter
        tokenizer = processor.tokenizer
        attach_processor(tokenizer, processor)
    else:
        tokenizer = AutoTokenizer.from_pretrained(folder)
    if len(tokenizer) == 0:
        raise UserError(f"model.path: {folder}: the tokenizer loaded with an empty vocabulary")
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def _vlm_model_type(folder: Path) -> str | None:
    """The model_type of a vision-language model folder (config.json with a vision_config), else None."""
    from rlvr.models.multimodal import is_vlm_config

    from rlvr.models.lora import adapter_base_path, is_adapter_folder

    if not (folder / "config.json").is_file() and is_adapter_folder(folder):
        try:
            return _vlm_model_type(Path(adapter_base_path(folder)))
        except Exception:  # noqa: BLE001 - an adapter whose base cannot be found is reported where it is loaded
            return None
    try:
        config = json.loads((folder / "config.json").read_text())
    except (OSError, ValueError):
        return None
    return str(config.get("model_type", "")) if isinstance(config, dict) and is_vlm_config(config) else None


def load_model(path: str | Path, *, dtype: str = "float32", device: str = "auto"):
    """(model, tokenizer) from a local folder; a missing folder or one without a config is a clear error. A LoRA
    checkpoint (a folder with adapter_config.json) loads as its base model with the adapter applied. A
    vision-language model (config.json with a vision_config) loads with AutoModelForImageTextToText; its tokenizer
    is its processor's, with the processor attached (rlvr.models.multimodal.processor_of). A GGUF file (or a
    folder holding exactly one) loads as the plain model of its architecture, dequantized (rlvr.models.gguf)."""
    folder = model_folder(path)
    if not folder.is_dir():
        raise FileNotFoundError(f"model.path: {folder} is not a directory (expected a Hugging Face model folder or a .gguf file)")
    from rlvr.models.lora import adapter_base_path, is_adapter_folder, load_adapter

    if is_adapter_folder(folder) and not (folder / "config.json").is_file():
        model, _ = load_model(adapter_base_path(folder), dtype=dtype, device=device)
        return load_adapter(model, folder, trainable=False), load_tokenizer(folder)
    if not (folder / "config.json").is_file():
        raise FileNotFoundError(f"model.path: {folder} has no config.json (expected a Hugging Face model folder)")
    tokenizer = load_tokenizer(folder)
    if _vlm_model_type(folder) is not None:
        from transformers import AutoModelForImageTextToText

        model = AutoModelForImageTextToText.from_pretrained(folder, dtype=DTYPES[dtype])
    else:
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=DTYPES[dtype])
    model.to(resolve_device(device))
    return model, tokenizer


def model_from_config(config, *, dtype: torch.dtype = torch.float32):
    """A freshly initialised model of ``config``: ``AutoModelForImageTextToText`` for a vision-language config,
    else ``AutoModelForCausalLM`` (e.g. an engine replica that then loads the trainer's state dict)."""
    from transformers import AutoModelForImageTextToText

    from rlvr.models.multimodal import is_vlm_config

    auto = AutoModelForImageTextToText if is_vlm_config(config) else AutoModelForCausalLM
    return auto.from_config(config, dtype=dtype)


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
