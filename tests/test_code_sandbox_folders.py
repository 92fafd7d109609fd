"""Sandbox folders: a configurable base, one owner per folder, and the folders of dead checkers removed when
rlvr next makes a sandbox there, while live checkers' folders are left alone. Owners are real processes."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from code_sandbox_checks import assert_no_trace, sandbox_base, sandbox_dirs  # noqa: F401 - a fixture
from rlvr.verifiers import Status, verify
from rlvr.verifiers.code.folders import GRACE_S, OWNER, SandboxFolder, remove_orphans

PROGRAM = "```python\ndef add(a, b):\n    return a + b\n```"
TESTS = {"language": "python", "tests": ["assert add(1, 2) == 3"]}

HOLD = """
import sys, time
from rlvr.verifiers.code.folders import SandboxFolder
folder = SandboxFolder(sys.argv[1])
print(folder.path, flush=True)
time.sleep(600)
"""


def owner_process(base: Path) -> tuple[subprocess.Popen, Path]:
    """A real checker process that makes a sandbox folder under ``base`` and keeps it."""
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(base)], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    return proc, Path(proc.stdout.readline().strip())


def test_the_option_and_the_variable_choose_the_base(sandbox_base, tmp_path):
    v = verify("code", PROGRAM, TESTS, timeout_s=3)
    assert v.status == Status.CORRECT and sandbox_base.is_dir()  # RLVR_SANDBOX_DIR (set by the fixture)
    chosen = tmp_path / "chosen"
    v = verify("code", PROGRAM, TESTS, timeout_s=3, sandbox_dir=str(chosen))
    assert v.status == Status.CORRECT and chosen.is_dir() and sandbox_dirs(chosen) == []
    assert_no_trace()


def test_folders_of_dead_checkers_are_removed_and_live_ones_kept(sandbox_base):
    sandbox_base.mkdir(parents=True)
    live, live_dir = owner_process(sandbox_base)
    dead, dead_dir = owner_process(sandbox_base)
    try:
        dead.send_signal(signal.SIGKILL)  # dies holding its folder, as a crashed checker would
        dead.wait(10)
        # a folder whose owner had not yet locked it (no pid written): left alone while young, removed when old
        young = sandbox_base / "rlvr-sandbox-young"
        young.mkdir()
        (young / OWNER).touch()
        old = sandbox_base / "rlvr-sandbox-old"
        old.mkdir()
        long_ago = time.time() - 2 * GRACE_S
        os.utime(old, (long_ago, long_ago))
        unrelated = sandbox_base / "not-a-sandbox"
        unrelated.mkdir()

        v = verify("code", PROGRAM, TESTS, timeout_s=3)  # the first sandbox this process makes here
        assert v.status == Status.CORRECT
        assert not dead_dir.exists() and not old.exists()
        assert live_dir.is_dir() and young.is_dir() and unrelated.is_dir()
        assert live.poll() is None
    finally:
        live.kill()
        live.wait(10)
    assert remove_orphans(sandbox_base) == [live_dir]  # now its owner is dead too
    shutil.rmtree(young)


def test_a_folder_in_use_survives_a_sweep(sandbox_base):
    folder = SandboxFolder()
    try:
        assert remove_orphans(sandbox_base) == [] and folder.path.is_dir()
        assert (folder.path / OWNER).read_text().strip() == str(os.getpid())
    finally:
        folder.remove()
    assert not folder.path.exists()


def test_concurrent_checkers_do_not_disturb_each_other(sandbox_base):
    """Two checker processes verify at once in one base folder, each sweeping on start: every verdict is
    right and nothing is left behind."""
    script = (
        "import sys\nfrom rlvr.verifiers import verify\n"
        f"p = {PROGRAM!r}\nt = {TESTS!r}\n"
        "bad = [v for v in (verify('code', p, t, timeout_s=5) for _ in range(6)) if v.status != 'correct']\n"
        "sys.exit(1 if bad else 0)\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    procs = [subprocess.Popen([sys.executable, "-c", script], env=env) for _ in range(2)]
    assert [p.wait(120) for p in procs] == [0, 0]
    assert_no_trace()
