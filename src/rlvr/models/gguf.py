"""GGUF files (llama.cpp's format) as rlvr models: a ``.gguf`` file, or a folder holding exactly one, is turned
into a plain Hugging Face folder (weights dequantized to float32, the tokenizer with its chat template, the
generation config) that everything else in rlvr loads, trains, saves and resumes like any other model folder.

transformers reads GGUF through the ``gguf`` package, but a model it loads from one carries a quantization
marker that refuses ``save_pretrained`` (and so every checkpoint); the conversion here drops the marker.
``model.path=FILE.gguf`` converts once into a cache folder (``RLVR_CACHE_DIR``, else ``$XDG_CACHE_HOME/rlvr``,
else ``~/.cache/rlvr``), keyed by the file's path, size and modification time; ``rlvr convert gguf FILE OUT``
writes the same folder where you ask.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path

import torch

from rlvr.errors import MissingDependency, UserError

SUFFIX = ".gguf"
INSTALL = "pip install 'rlvr[gguf]'"
FORMAT = 1  # bump when the converted folder's layout changes, so old cache entries are not reused


def gguf_file(path: str | Path) -> Path | None:
    """The GGUF file ``path`` names: the file itself, or the one ``.gguf`` file of a folder that has no config.json
    (a Hugging Face folder keeps its own weights); None when ``path`` is no GGUF model. A folder holding several is
    a UserError listing them."""
    path = Path(path)
    if path.is_file():
        return path if path.suffix.lower() == SUFFIX else None
    if not path.is_dir() or (path / "config.json").is_file():
        return None
    found = sorted(p for p in path.iterdir() if p.is_file() and p.suffix.lower() == SUFFIX)
    if len(found) > 1:
        raise UserError(f"model.path: {path} holds {len(found)} GGUF files ({', '.join(p.name for p in found)}); "
                        "name one of them as model.path")
    return found[0] if found else None


def _require_gguf(file: Path) -> None:
    try:
        import gguf  # noqa: F401 - deferred: an optional extra, needed only for GGUF files
    except ImportError as err:
        raise MissingDependency(f"model.path: {file} is a GGUF file; reading it needs the gguf package: {INSTALL}") \
            from err


def _read_header(file: Path) -> str:
    """The file's architecture; a file the gguf package cannot parse is a one-line UserError naming it."""
    from gguf import GGUFReader

    try:
        field = GGUFReader(file, "r").get_field("general.architecture")
        architecture = field.contents() if field is not None else None
    except Exception as err:  # noqa: BLE001 - any parse failure of a user's file is reported as one line
        reason = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise UserError(f"model.path: {file} is not a readable GGUF file ({reason[:200]})") from None
    if not isinstance(architecture, str) or not architecture:
        raise UserError(f"model.path: {file} is not a readable GGUF file (no general.architecture in its header)")
    return architecture


def _plain(model, dtype: torch.dtype):
    """``model`` without transformers' quantization marker: a fresh model of the same config given the loaded
    (already dequantized) weights, so that save_pretrained, training and PEFT treat it as any other model."""
    from transformers import AutoModelForCausalLM

    config = model.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    if not getattr(model, "is_quantized", False) and getattr(model, "hf_quantizer", None) is None:
        return model
    with torch.device("meta"):
        plain = AutoModelForCausalLM.from_config(config, dtype=dtype)
    plain.load_state_dict({name: tensor.to(dtype) for name, tensor in model.state_dict().items()}, assign=True)
    plain.tie_weights()
    plain.generation_config = model.generation_config
    return plain.eval()


@contextmanager
def _quiet():
    """transformers' logging at error level and its GGUF reader's progress bar off: the load report would list
    what rlvr reports itself as one line (missing weights), and the bar is a plain tqdm no setting turns off."""
    from transformers.utils import logging as hf_logging

    try:
        from transformers import modeling_gguf_pytorch_utils as reader
    except ImportError:
        reader = None
    bar = getattr(reader, "tqdm", None)
    verbosity, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    if bar is not None:
        reader.tqdm = lambda iterable, *args, **kwargs: iterable
    try:
        yield
    finally:
        hf_logging.set_verbosity(verbosity)
        if bars:
            hf_logging.enable_progress_bar()
        if bar is not None:
            reader.tqdm = bar


def load_gguf(file: str | Path, *, dtype: str = "float32"):
    """(model, tokenizer) of a GGUF file: a plain transformers model of its architecture, every weight
    dequantized to ``dtype``, and the tokenizer (with its chat template) the file carries."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rlvr.models.loading import DTYPES

    file = Path(file)
    _require_gguf(file)
    architecture = _read_header(file)
    options = {}
    try:
        from transformers import GgufConfig

        options["quantization_config"] = GgufConfig(dequantize=True)
    except (ImportError, TypeError):  # older transformers dequantize GGUF weights anyway
        pass
    try:
        with _quiet():
            tokenizer = AutoTokenizer.from_pretrained(file.parent, gguf_file=file.name)
            model, info = AutoModelForCausalLM.from_pretrained(file.parent, gguf_file=file.name, dtype=DTYPES[dtype],
                                                               output_loading_info=True, **options)
    except (ValueError, KeyError, NotImplementedError, RuntimeError) as err:
        reason = str(err).splitlines()[0] if str(err) else type(err).__name__
        if "ignore_mismatched_sizes" in reason:
            reason = "a tensor's shape differs from the one its header's dimensions give"
        raise UserError(f"model.path: {file} (GGUF architecture {architecture!r}) cannot be loaded by transformers: "
                        f"{reason[:300]}") from None
    # a weight the file lacks would be left at its random initialisation: never train such a model unnoticed
    missing = sorted(set(info.get("missing_keys") or ()))
    if missing:
        raise UserError(f"model.path: {file} lacks {len(missing)} weight(s) of its {architecture} model "
                        f"({', '.join(missing[:3])}{', ...' if len(missing) > 3 else ''})")
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return _plain(model, DTYPES[dtype]), tokenizer


def convert_gguf(file: str | Path, out: str | Path) -> Path:
    """Write the GGUF model ``file`` (or the folder holding it) as a Hugging Face folder ``out``: float32
    safetensors, config, generation config and tokenizer. ``out`` must not exist or be empty."""
    found = gguf_file(file)
    if found is None:
        raise UserError(f"convert gguf: {file} is not a .gguf file (nor a folder holding one)")
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UserError(f"convert gguf: {out} already exists and is not an empty folder; name a new one")
    model, tokenizer = load_gguf(found)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def cache_root() -> Path:
    """Where converted GGUF models are kept (``RLVR_CACHE_DIR``, else ``$XDG_CACHE_HOME/rlvr``, else ~/.cache/rlvr)."""
    if os.environ.get("RLVR_CACHE_DIR"):
        return Path(os.environ["RLVR_CACHE_DIR"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "rlvr"


def converted_folder(file: str | Path) -> Path:
    """The Hugging Face folder of a GGUF file, converted on first use and reused while the file is unchanged.
    Converted in a temporary folder renamed into place, so concurrent processes never see a half-written one."""
    file = Path(file).resolve()
    stat = file.stat()
    key = hashlib.sha256(f"{FORMAT}\0{file}\0{stat.st_size}\0{stat.st_mtime_ns}".encode()).hexdigest()[:16]
    folder = cache_root() / "gguf" / f"{file.stem}-{key}"
    if (folder / "config.json").is_file():
        return folder
    _require_gguf(file)
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=folder.parent))
    try:
        convert_gguf(file, staging)
        try:
            staging.rename(folder)
        except OSError:  # another process finished the same conversion first
            if not (folder / "config.json").is_file():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return folder
