"""Checks shared by the code-verifier tests: a sandbox folder per test, and "no trace left" scoped to it, so
another rlvr process on the same machine (a second `make test`, a training run) never makes a test fail."""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path

import pytest

from rlvr.verifiers.code.pool import POOL
from rlvr.verifiers.code.sandbox import _UID_BASE, uid_of


@pytest.fixture(autouse=True)
def sandbox_base(tmp_path, monkeypatch) -> Path:
    """Every test makes its sandboxes in a folder of its own (RLVR_SANDBOX_DIR); at its end the pooled fork
    servers it started are closed, and nothing may be left in the folder."""
    base = tmp_path / f"sandboxes-{uuid.uuid4().hex[:12]}"
    monkeypatch.setenv("RLVR_SANDBOX_DIR", str(base))
    yield base
    POOL.close()
    assert sandbox_dirs(base, servers=True) == [], "a fork server's folder outlived the pool"


def sandbox_processes(base: Path) -> list[int]:
    """Sandboxed processes whose folder lies under ``base``: bound at /box (bubblewrap level) or their cwd
    (process level). Other checkers' sandboxes are not counted."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            if (uid_of(entry.name) or 0) < _UID_BASE:
                continue
            with open(f"/proc/{entry.name}/mountinfo") as f:
                mounts = f.read()
            cwd = os.readlink(f"/proc/{entry.name}/cwd")
        except OSError:
            continue
        if f"{base.name}/rlvr-sandbox-" in mounts or str(base) in cwd:
            found.append(int(entry.name))
    return found


def sandbox_dirs(base: Path, servers: bool = False) -> list[str]:
    """Sandbox folders under ``base``; those of pooled fork servers (which outlive a call) only if asked."""
    if not base.exists():
        return []
    return [p for p in os.listdir(base)
            if p.startswith("rlvr-sandbox-") and (servers or not p.startswith("rlvr-sandbox-server-"))]


def assert_no_trace() -> None:
    base = Path(os.environ["RLVR_SANDBOX_DIR"])
    deadline = time.monotonic() + 3
    while sandbox_processes(base) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sandbox_processes(base) == [], "a sandboxed process outlived its run"
    assert sandbox_dirs(base) == [], "a sandbox directory was left behind"
