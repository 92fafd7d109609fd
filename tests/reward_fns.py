"""Module-level reward functions for tests/test_runner.py: importable by the runner's worker processes.

Keep this module light (no torch, no pytest): every worker that runs one of these imports it."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import time

from rlvr.verifiers import Status, Verdict, register_verifier


def match(response, reference):
    return 1.0 if response == reference else 0.0


def half(response, reference):
    return 0.5


def pid_verdict(response, reference, delay=0.0):
    time.sleep(delay)
    return Verdict(1.0, Status.CORRECT, "pid", details={"pid": os.getpid(), "ppid": os.getppid()})


def slow_match(response, reference, delay=0.2):
    time.sleep(delay)
    return 1.0 if response == reference else 0.0


def counted_match(response, reference, **options):
    """``reference`` is a file path; every real call appends a line to it."""
    with open(reference, "a") as f:
        f.write(response + "\n")
    return 1.0 if response == "yes" else 0.0


def sleep_forever(response, reference):
    while True:
        time.sleep(3600)


def hog_memory(response, reference):
    """Allocate 100 MB blocks until the memory cap stops us; give up (and "pass") after 4 GB so a broken cap
    fails the test instead of the machine."""
    blocks = []
    for _ in range(40):
        blocks.append(bytearray(100 * 2**20))
        blocks[-1][:: 2**20] = b"\x01" * 100  # touch a page per MiB
    return 1.0


def segfault(response, reference):
    ctypes.string_at(0)
    return 1.0


def hard_exit(response, reference):
    os._exit(7)


def raises(response, reference):
    raise ValueError("bad response " + response)


def raises_system_exit(response, reference):
    sys.exit(3)


def returns_junk(response, reference):
    return "yes"


def grandchild_then_hang(response, reference):
    """Start a long-lived child, write its pid to the file ``reference``, then hang."""
    child = subprocess.Popen(["sleep", "1000"])
    with open(reference, "w") as f:
        f.write(str(child.pid))
    while True:
        time.sleep(3600)


def takes_timeout(response, reference, timeout_s=None):
    return Verdict(1.0, Status.CORRECT, "ok", details={"timeout_s": timeout_s})


def takes_kwargs(response, reference, **options):
    return Verdict(1.0, Status.CORRECT, "ok", details={"options": sorted(options)})


def no_options(response, reference):
    return 1.0


def nested_verify(response, reference):
    """A reward that itself calls a process-isolated verifier (runs inline inside the worker)."""
    from rlvr.verifiers import verify

    return verify("test.proc_upper", response, reference)


@register_verifier("test.proc_upper", isolation="process", replace=True)
def proc_upper(response, reference):
    """A registered verifier that must run in a worker process."""
    ok = response.upper() == str(reference).upper()
    return Verdict(float(ok), Status.CORRECT if ok else Status.INCORRECT, "upper", details={"pid": os.getpid()})


@register_verifier("test.hostile", isolation="process", replace=True)
def hostile(response, reference):
    """A reward that hangs, eats memory or segfaults when its reference says so; exact match otherwise."""
    behaviour = {"hang": sleep_forever, "oom": hog_memory, "segv": segfault}.get(reference)
    if behaviour is not None:
        behaviour(response, reference)
    return match(response.strip(), reference)
