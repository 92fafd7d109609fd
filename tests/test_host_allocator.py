"""The training process's malloc: the rlvr command starts itself again on TCMalloc (rlvr.train.allocator), and what
that process starts does not inherit the preload."""

import json
import os
import subprocess
import sys

import pytest

from rlvr.errors import UserError
from rlvr.train import allocator

CHILD = r"""
import json, os, sys
from rlvr.train.allocator import host_allocator, relaunch_with_tcmalloc
relaunch_with_tcmalloc()
child = os.popen(sys.executable + " -c 'import os; print(os.environ.get(\"LD_PRELOAD\"))'").read().strip()
print(json.dumps({"allocator": host_allocator(), "ld_preload": os.environ.get("LD_PRELOAD"), "child": child}))
"""


def _child(**env) -> dict:
    environ = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", allocator.HOST_ALLOCATOR_ENV)}
    done = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=120,
                          env={**environ, **env})
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_tcmalloc_is_installed():
    """The Makefile's `system` target installs it; without it every run keeps glibc's malloc (slower updates)."""
    assert allocator.find_tcmalloc() is not None, "install libtcmalloc-minimal4 (make system does)"


@pytest.mark.parametrize("requested, expected", [
    (None, "tcmalloc"),  # auto, the default
    ("auto", "tcmalloc"),
    ("tcmalloc", "tcmalloc"),
    ("system", "glibc"),
])
def test_the_program_runs_on_the_requested_allocator(requested, expected):
    got = _child(**({allocator.HOST_ALLOCATOR_ENV: requested} if requested else {}))
    assert got == {"allocator": expected, "ld_preload": None, "child": "None"}


def test_auto_leaves_a_users_preload_alone_and_tcmalloc_keeps_it():
    library = allocator.find_tcmalloc()
    # a preload of the user's own (here the C library itself, harmless): auto does not relaunch
    libc = "libc.so.6"
    got = _child(LD_PRELOAD=libc)
    assert got == {"allocator": "glibc", "ld_preload": libc, "child": libc}
    # asked for explicitly, TCMalloc goes first and the user's preload is restored for what the process starts
    got = _child(LD_PRELOAD=libc, **{allocator.HOST_ALLOCATOR_ENV: "tcmalloc"})
    assert got == {"allocator": "tcmalloc", "ld_preload": libc, "child": libc}, library


@pytest.mark.parametrize("before", [{}, {"LD_PRELOAD": "/opt/libmine.so"}, {"LD_PRELOAD": ""}])
def test_relaunch_environment_round_trip(before):
    env = allocator.relaunch_environment({"PATH": "/bin", **before}, "/lib/libtcmalloc.so.4")
    assert env["LD_PRELOAD"].split()[0] == "/lib/libtcmalloc.so.4"
    assert allocator.restore_environment(env)
    assert {k: v for k, v in env.items() if k != allocator._LARGE_ALLOC_REPORT} == {"PATH": "/bin", **before}
    assert not allocator.restore_environment(env)  # only once: a process it starts is not a relaunch


def test_bad_choice_and_missing_library_are_clear_errors(monkeypatch):
    with pytest.raises(UserError, match="RLVR_HOST_ALLOCATOR='jemalloc': expected one of auto, tcmalloc, system"):
        allocator.requested_host_allocator({allocator.HOST_ALLOCATOR_ENV: "jemalloc"})
    monkeypatch.setattr(allocator, "find_tcmalloc", lambda: None)
    monkeypatch.setattr(allocator, "host_allocator", lambda: "glibc")
    monkeypatch.setenv(allocator.HOST_ALLOCATOR_ENV, "tcmalloc")
    with pytest.raises(UserError, match="libtcmalloc-minimal4"):
        allocator.relaunch_with_tcmalloc()
    monkeypatch.setenv(allocator.HOST_ALLOCATOR_ENV, "auto")
    allocator.relaunch_with_tcmalloc()  # auto without the library: the process goes on as it is
    # relaunched, but the dynamic loader did not preload the library (it printed why): asked for, that is an error
    monkeypatch.setenv(allocator.HOST_ALLOCATOR_ENV, "tcmalloc")
    monkeypatch.delenv("LD_PRELOAD", raising=False)
    monkeypatch.setenv(allocator._RELAUNCHED, "-")
    with pytest.raises(UserError, match="did not preload"):
        allocator.relaunch_with_tcmalloc()


def test_cli_reports_a_bad_choice(tmp_path):
    env = {**os.environ, allocator.HOST_ALLOCATOR_ENV: "fast"}
    done = subprocess.run([sys.executable, "-m", "rlvr.cli", "train", "/dev/null"], capture_output=True, text=True,
                          timeout=120, env=env)
    assert done.returncode == 2
    assert "rlvr train: error: RLVR_HOST_ALLOCATOR='fast'" in done.stderr
