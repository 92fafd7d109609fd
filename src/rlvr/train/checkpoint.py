"""Checkpoints: a plain Hugging Face folder (save_pretrained) plus trainer_state.pt beside the weights.

A checkpoint is written into a temporary folder and renamed into place when complete, so a folder named
checkpoint-STEP is always whole.
"""

from __future__ import annotations

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


def save_checkpoint(run_dir: Path, step: int, model, tokenizer, trainer_state: dict[str, Any]) -> Path:
    final = run_dir / f"checkpoint-{step}"
    tmp = run_dir / f".tmp-checkpoint-{step}"
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    torch.save({**trainer_state, "step": step, "rng": rng_state()}, tmp / STATE_FILE)
    shutil.rmtree(final, ignore_errors=True)
    tmp.rename(final)
    return final


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


def load_trainer_state(checkpoint: Path) -> dict[str, Any]:
    return torch.load(checkpoint / STATE_FILE, weights_only=False)
