"""Checkpoints: a plain Hugging Face folder (save_pretrained) plus trainer_state.pt beside the weights.

A checkpoint is written into a temporary folder, flushed to disk, and renamed into place when complete, so
a folder named checkpoint-STEP is always whole: a kill during a save leaves the previous checkpoints usable
and a ``.tmp-checkpoint-STEP`` folder that the next start removes. The state is read back as tensors and plain
data only (``load_trainer_state``): it is input a resume trusts, so it may not name code to run.
"""

from __future__ import annotations

import os
import random
import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch

STATE_FILE = "trainer_state.pt"
_NAME = re.compile(r"^checkpoint-(\d+)$")


def rng_state() -> dict[str, Any]:
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


TMP_PREFIX = ".tmp-checkpoint-"


def _fsync_tree(path: Path) -> None:
    for child in path.iterdir():
        if child.is_file():
            with open(child, "rb") as f:
                os.fsync(f.fileno())
    _fsync_dir(path)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def save_tokenizer(tokenizer, folder: Path) -> None:
    """The tokenizer, or for a vision-language model its whole processor (image processor, tokenizer, chat
    template), so the folder loads back with AutoProcessor as it was given."""
    from rlvr.models.multimodal import processor_of

    processor = processor_of(tokenizer)
    (processor if processor is not None else tokenizer).save_pretrained(folder)


def save_checkpoint(run_dir: Path, step: int, model, tokenizer, trainer_state: dict[str, Any],
                    folders: dict[str, Any] | None = None) -> Path:
    """checkpoint-STEP: the policy as a Hugging Face folder, the trainer state, and ``folders`` (second models a run
    trains, such as an implicit PRM: {name: object with save_pretrained}) as Hugging Face folders inside it. Written
    to a temporary folder and renamed, so a kill leaves the previous checkpoint whole."""
    final = run_dir / f"checkpoint-{step}"
    tmp = run_dir / f"{TMP_PREFIX}{step}"
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    save_tokenizer(tokenizer, tmp)
    for name, other in (folders or {}).items():
        other.save_pretrained(tmp / name)
        save_tokenizer(tokenizer, tmp / name)
    torch.save({**trainer_state, "step": step, "rng": rng_state()}, tmp / STATE_FILE)
    _fsync_tree(tmp)
    if final.exists():  # the same step saved again (a resumed run): move the old one aside first
        old = run_dir / f"{TMP_PREFIX}{step}-old"
        shutil.rmtree(old, ignore_errors=True)
        final.rename(old)
        tmp.rename(final)
        shutil.rmtree(old, ignore_errors=True)
    else:
        tmp.rename(final)
    _fsync_dir(run_dir)
    return final


def remove_partial_checkpoints(run_dir: Path) -> list[Path]:
    """Delete the temporary folders of saves that never completed (a kill during a save)."""
    removed = []
    for child in run_dir.glob(f"{TMP_PREFIX}*"):
        shutil.rmtree(child, ignore_errors=True)
        removed.append(child)
    return removed


def prune_checkpoints(run_dir: Path, keep_last: int) -> list[Path]:
    """Keep the newest ``keep_last`` complete checkpoints (0 keeps all); returns what was deleted."""
    if keep_last <= 0:
        return []
    doomed = [path for _, path in list_checkpoints(run_dir)[:-keep_last]]
    for path in doomed:
        shutil.rmtree(path, ignore_errors=True)
    return doomed


def list_checkpoints(run_dir: Path) -> list[tuple[int, Path]]:
    """Complete checkpoints of a run, oldest first."""
    if not run_dir.is_dir():
        return []
    found = []
    for child in run_dir.iterdir():
        match = _NAME.match(child.name)
        if match and (child / STATE_FILE).is_file():
            found.append((int(match.group(1)), child))
    return sorted(found)


def latest_checkpoint(run_dir: Path) -> Path | None:
    found = list_checkpoints(run_dir)
    return found[-1][1] if found else None


# The keys every trainer state has (the SFT and RL runs both write them); others are optional.
REQUIRED_KEYS = ("step", "optimizer", "scheduler", "sampler", "rng")


def _numpy_globals() -> list[Any]:
    """What a trainer state may hold besides tensors and plain containers: numpy's random state (an array). The
    unpickler allows nothing else, so a tampered state file cannot name a function to run."""
    try:
        from numpy._core.multiarray import _reconstruct
    except ImportError:  # numpy 1
        from numpy.core.multiarray import _reconstruct

    return [np.ndarray, np.dtype, _reconstruct, type(np.dtype(np.uint32))]


def _own_data_classes(path: Path) -> list[type]:
    """The classes ``path`` names that are rlvr's own dataclasses or enums (the batches and groups an asynchronous
    or streaming run checkpoints under way): plain data by construction, so rebuilding them runs no code of the
    file's choosing. Anything else the file names stays refused by the unpickler."""
    import dataclasses
    import enum
    import importlib

    try:
        names = torch.serialization.get_unsafe_globals_in_checkpoint(path)
    except Exception:  # noqa: BLE001 - an unreadable file: torch.load says why
        return []
    allowed = []
    for name in names:
        module, _, qualname = name.rpartition(".")
        if module != "rlvr" and not module.startswith("rlvr."):
            continue
        try:
            found: Any = importlib.import_module(module)
            for part in qualname.split("."):
                found = getattr(found, part)
        except (ImportError, AttributeError):
            continue
        if isinstance(found, type) and (dataclasses.is_dataclass(found) or issubclass(found, enum.Enum)):
            allowed.append(found)
    return allowed


def load_trainer_state(checkpoint: Path) -> dict[str, Any]:
    """The trainer state of ``checkpoint``, unpickled as tensors and plain data only (``weights_only``) and checked
    against its folder: the step in it is the folder's (checkpoint-STEP) and the keys every state has are there. A
    state that fails either is a UserError naming the file, never a silent resume that rewrites logged steps."""
    from rlvr.errors import UserError

    path = Path(checkpoint) / STATE_FILE
    try:
        with torch.serialization.safe_globals(_numpy_globals() + _own_data_classes(path)):
            state = torch.load(path, weights_only=True, map_location="cpu")
    except FileNotFoundError:
        raise UserError(f"{path}: not found (a checkpoint folder holds the trainer state beside the weights)") from None
    except Exception as exc:  # noqa: BLE001 - torch raises many kinds for a truncated, foreign or tampered file
        reason = " ".join(str(exc).split())
        if "weights_only" in reason or "global" in reason.lower():
            reason = "it holds objects other than tensors and plain data, which are never unpickled"
        raise UserError(f"{path}: not a readable trainer state ({type(exc).__name__}: {reason[:200]})") from None
    if not isinstance(state, dict):
        raise UserError(f"{path}: not a trainer state (expected a dict, got {type(state).__name__})")
    missing = [key for key in REQUIRED_KEYS if key not in state]
    if missing:
        raise UserError(f"{path}: trainer state lacks {', '.join(missing)} (expected {', '.join(REQUIRED_KEYS)})")
    match = _NAME.match(Path(checkpoint).name)
    step = state["step"]
    if not isinstance(step, int) or isinstance(step, bool) or step < 0 or (match and step != int(match.group(1))):
        where = f"its folder {Path(checkpoint).name}" if match else "a checkpoint step"
        raise UserError(f"{path}: trainer state says step {step!r}, which disagrees with {where}; refusing to resume "
                        "from it (the logged steps after it would be rewritten)")
    check_folder_files(Path(checkpoint))
    return state


def check_folder_files(folder: Path) -> None:
    """A UserError naming the first JSON file (config, tokenizer, generation config) that does not parse or
    safetensors file whose header does not, in a checkpoint folder and the second models' folders inside it: read
    before any model loads, so a damaged checkpoint is one line instead of a loader's traceback."""
    import json

    from rlvr.errors import UserError

    for path in sorted(folder.glob("*.json")) + sorted(folder.glob("*/*.json")):
        try:
            json.loads(path.read_bytes().decode("utf-8"))
        except (ValueError, RecursionError) as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
            raise UserError(f"{path}: not valid JSON ({type(exc).__name__}: {str(exc)[:120]}); the checkpoint "
                            "folder is damaged") from None
    for path in sorted(folder.glob("*.safetensors")) + sorted(folder.glob("*/*.safetensors")):
        from safetensors import safe_open

        try:
            with safe_open(str(path), framework="pt") as opened:
                opened.keys()
        except Exception as exc:  # noqa: BLE001 - safetensors raises its own error type for a damaged header
            raise UserError(f"{path}: not a readable safetensors file ({str(exc)[:120]}); the checkpoint folder is "
                            "damaged") from None
