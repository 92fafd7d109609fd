"""manifest.json in every run directory: what produced the run, so that it can be reproduced and audited.

Holds the rlvr version and git commit (when rlvr runs from a git checkout), Python/torch/transformers
versions, the platform, the seed, the resolved config, a SHA-256 of each data file (a generator spec
such as ``arithmetic:train`` is recorded as is), and ``sampler``: ``lean`` when the hf engine samples every call
through the lean decoder (rollout/llama_decoder.py), ``model`` when calls go through the model's own forward or
another engine, and ``host_allocator``: the malloc the process ran on (``tcmalloc`` or ``glibc``, rlvr.train.allocator).
A resumed run appends to ``starts``.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import json
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

import rlvr
from rlvr.rollout.llama_decoder import planned_sampler
from rlvr.train.allocator import host_allocator

MANIFEST = "manifest.json"


def file_sha256(path: str | os.PathLike[str], chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def git_commit(path: Path) -> str | None:
    """The commit of the git checkout holding ``path`` (with "-dirty" when it has local changes), or None."""
    try:
        commit = subprocess.run(["git", "-C", str(path), "rev-parse", "HEAD"], capture_output=True, text=True,
                                timeout=5)
        if commit.returncode != 0:
            return None
        dirty = subprocess.run(["git", "-C", str(path), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=5)
        return commit.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return None


def _version(module: str) -> str | None:
    try:
        return __import__(module).__version__
    except Exception:  # noqa: BLE001
        return None


def data_files(cfg) -> dict[str, dict[str, Any]]:
    out = {}
    for key in ("train", "eval"):
        source = getattr(cfg.data, key)
        if not source:
            continue
        path = source.split(":", 1)[1] if ":" in source and not os.path.exists(source) else source
        if os.path.isfile(path):
            out[f"data.{key}"] = {"source": source, "sha256": file_sha256(path), "bytes": os.path.getsize(path)}
        else:
            out[f"data.{key}"] = {"source": source, "generated": True}
    return out


def build_manifest(cfg) -> dict[str, Any]:
    return {
        "rlvr": {"version": rlvr.__version__, "git_commit": git_commit(Path(rlvr.__file__).resolve().parent)},
        "python": sys.version.split()[0],
        "torch": _version("torch"),
        "transformers": _version("transformers"),
        "platform": platform.platform(),
        "seed": cfg.train.seed,
        "model": cfg.model.path,
        "data": data_files(cfg),
        "sampler": planned_sampler(cfg),
        "host_allocator": host_allocator(),
        "config": dataclasses.asdict(cfg),
    }


def write_manifest(run_dir: Path, cfg, *, resumed_from: Path | None = None) -> Path:
    """Write (or, on a resume, update) RUN_DIR/manifest.json."""
    path = run_dir / MANIFEST
    manifest = build_manifest(cfg)
    starts = []
    if path.exists():
        try:
            starts = json.loads(path.read_text()).get("starts", [])
        except (json.JSONDecodeError, AttributeError):
            starts = []
    if resumed_from is None:
        starts = []  # a fresh run in this directory
    starts.append({"time": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                   "resumed_from": str(resumed_from) if resumed_from else None})
    manifest["starts"] = starts
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(manifest, indent=2, default=str) + "\n")
    tmp.replace(path)
    return path


__all__ = ["build_manifest", "file_sha256", "git_commit", "write_manifest"]
