"""Helpers of the demo tests: a demo run in a fresh process (the pin of rlvr.train.determinism holds only where no
tensor operation ran before it) and the demo lines the README promises."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import torch

README = Path(__file__).resolve().parent.parent / "README.md"


def run_fresh(call: str, out: Path, timeout: float) -> dict:
    """``call`` (a Python expression returning a DemoResult, with ``out`` bound to the output folder) run in a new
    interpreter; its result as a dict. The last stdout line is kept under "line"."""
    code = ("import dataclasses, json, sys, warnings\n"
            "warnings.filterwarnings('error', message='train.deterministic')\n"  # a pin that came too late fails
            "from pathlib import Path\n"
            "from rlvr.demo import run_demo\n"
            "from rlvr.demo.agent import run_agent_demo\n"
            f"out = Path({str(out)!r})\n"
            f"result = {call}\n"
            "print('RESULT ' + json.dumps(dataclasses.asdict(result)))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.strip().splitlines()
    result = json.loads(lines[-1].removeprefix("RESULT "))
    result["line"] = lines[-2]
    return result


def readme_line(pattern: re.Pattern) -> str:
    """The one demo line of the README matching ``pattern``."""
    found = pattern.findall(README.read_text())
    assert len(found) == 1, f"README.md should hold exactly one line matching {pattern.pattern}; found {found}"
    return found[0]


def demo_command(*args: str, out: Path, timeout: float) -> str:
    """The last line that ``rlvr demo ARGS --out OUT --quiet`` prints."""
    done = subprocess.run([sys.executable, "-m", "rlvr.cli", "demo", *args, "--quiet", "--out", str(out)],
                          capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip().splitlines()[-1]


@contextmanager
def numerics_restored():
    """Leaves the test process's torch threads, deterministic-algorithm mode and environment as they were, after an
    in-process demo has pinned them (rlvr.train.determinism.pin_numerics)."""
    threads = torch.get_num_threads()
    deterministic = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    environ = dict(os.environ)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
        torch.use_deterministic_algorithms(deterministic, warn_only=warn_only)
        os.environ.clear()
        os.environ.update(environ)
