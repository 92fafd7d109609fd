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


# --------------------------------------------------------------------- prompt and meta (tests/test_runner_requests.py)


def sees_prompt(response, reference, *, prompt=None, meta=None):
    return Verdict(1.0, Status.CORRECT, "seen", details={"prompt": prompt, "meta": meta})


def sees_prompt_only(response, reference, prompt=None):
    return Verdict(1.0, Status.CORRECT, "seen", details={"prompt": prompt})


def counted_prompt(response, reference, **kwargs):
    """``reference`` is a file path; every real call appends the prompt it saw."""
    with open(reference, "a") as f:
        f.write(f"{kwargs.get('prompt')}\n")
    return 1.0


# ---------------------------------------------------------------- hostile results (tests/test_runner_hostile.py)


class _OnUnpickle:
    """An object that runs ``call(*args)`` in whatever process unpickles it."""

    def __init__(self, call, *args):
        self.call, self.args = call, args

    def __reduce__(self):
        return (self.call, self.args)


def sleeps_when_unpickled(response, reference):
    return Verdict(1.0, Status.CORRECT, "payload", details={"x": _OnUnpickle(time.sleep, 20)})


def exits_when_unpickled(response, reference):
    return Verdict(1.0, Status.CORRECT, "payload", details={"x": _OnUnpickle(os._exit, 3)})


def interrupts_when_unpickled(response, reference):
    import signal

    return Verdict(1.0, Status.CORRECT, "payload", details={"x": _OnUnpickle(signal.raise_signal, signal.SIGINT)})


def huge_result(response, reference):
    """A verdict whose details are ``reference`` MiB of text."""
    return Verdict(1.0, Status.CORRECT, "huge", details={"blob": "x" * (int(reference) * 2**20)})


def non_finite_verdict(response, reference):
    return Verdict(float(reference), Status.CORRECT, "lies")


def odd_details(response, reference):
    return Verdict(0.5, "partial", "odd", "ex", details={1: (1, 2), "s": {3}, "o": object(), "b": b"\x00", "n": None})


def _worker_result_fd():
    return int(sys.argv[-1])  # the worker runs as `python -m rlvr.verifiers.runner.worker REQUEST_FD RESULT_FD`


def forges_garbage_frame(response, reference):
    os.write(_worker_result_fd(), b"\x00\x00\x00\x05junk!")
    time.sleep(5)
    return 1.0


def forges_oversized_frame(response, reference):
    os.write(_worker_result_fd(), b"\x7f\xff\xff\xff")
    time.sleep(5)
    return 1.0


def forges_partial_frame(response, reference):
    os.write(_worker_result_fd(), b"\x00\x00\x01\x00{")
    return 1.0


# ----------------------------------------------------------------- what a call leaves behind (test_runner_hostile.py)


def _spawn_escaped_sleeper(pid_file):
    """Start `sleep 1000` in its own session, double-forked so that it is nobody's child; write its pid."""
    code = (
        "import os, subprocess, sys\n"
        "p = subprocess.Popen(['sleep', '1000'], start_new_session=True)\n"
        "open(sys.argv[1], 'w').write(str(p.pid))\n"
        "os._exit(0)\n"
    )
    subprocess.run([sys.executable, "-c", code, pid_file], check=True)
    for _ in range(200):
        if os.path.exists(pid_file) and open(pid_file).read():
            return
        time.sleep(0.01)


def escaped_child_then_hang(response, reference):
    _spawn_escaped_sleeper(reference)
    while True:
        time.sleep(3600)


def escaped_child_then_return(response, reference):
    _spawn_escaped_sleeper(reference)
    return 1.0


def escaped_child_then_exit(response, reference):
    _spawn_escaped_sleeper(reference)
    os._exit(5)


def exits_later_from_a_thread(response, reference):
    import threading

    threading.Timer(float(reference), os._exit, (9,)).start()
    return 1.0


def exits_later_from_an_alarm(response, reference):
    import signal

    signal.signal(signal.SIGALRM, lambda *a: os._exit(9))
    signal.setitimer(signal.ITIMER_REAL, float(reference))
    return 1.0


def child_kills_worker_later(response, reference):
    subprocess.Popen(["sh", "-c", f"sleep {float(reference)}; kill -9 {os.getpid()}"], start_new_session=True)
    return 1.0


def changes_process_state(response, reference):
    os.chdir("/")
    os.environ["RLVR_LEAKED"] = "1"
    os.umask(0o077)
    return 1.0


def process_state(response, reference):
    mask = os.umask(0)
    os.umask(mask)
    return Verdict(1.0, Status.CORRECT, "state", details={
        "cwd": os.getcwd(), "leaked": os.environ.get("RLVR_LEAKED"), "umask": mask, "pid": os.getpid()})


def echo(response, reference):
    """Returns ``reference`` as it is (a Verdict, a float, anything): for fuzzing what the runner accepts."""
    return reference


# ---------------------------------------------------------------------------- fuzzing (tests/test_runner_fuzz.py)


class _BadRepr:
    def __init__(self, behaviour):
        self.behaviour = behaviour

    def __repr__(self):
        if self.behaviour == "raise":
            raise RuntimeError("no repr")
        if self.behaviour == "interrupt":
            raise KeyboardInterrupt
        if self.behaviour == "exit":
            raise SystemExit(4)
        return 12345  # not a str


class _LyingVerdict(Verdict):
    @property
    def score(self):
        raise KeyboardInterrupt


def hostile_return(response, kind):
    """Something odd to return, built here in the worker: ``kind`` names it."""
    if kind == "deep":
        value = []
        for _ in range(100_000):
            value = [value]
        return Verdict(1.0, Status.CORRECT, "deep", details={"v": value})
    if kind == "cycle":
        d = {}
        d["d"] = d
        return Verdict(1.0, Status.CORRECT, "cycle", details=d)
    if kind.startswith("repr_"):
        return Verdict(1.0, Status.CORRECT, "repr", details={"o": _BadRepr(kind[5:])})
    if kind == "huge_int":
        return Verdict(1.0, Status.CORRECT, "int", details={"n": 10**20000})
    if kind == "lying_verdict":
        return object.__new__(_LyingVerdict)
    if kind == "details_not_dict":
        return Verdict(1.0, Status.CORRECT, "x", details=[1, 2])
    if kind == "big_string":
        return Verdict(1.0, Status.CORRECT, "big", details={"s": "y" * (3 * 2**20)})
    if kind == "many_keys":
        return Verdict(1.0, Status.CORRECT, "keys", details={str(i): i for i in range(200_000)})
    if kind == "surrogates":
        return Verdict(1.0, Status.CORRECT, "\ud800", "\udfff", details={"\ud800": "\x00"})
    raise ValueError(kind)


HOSTILE_KINDS = ("deep", "cycle", "repr_raise", "repr_interrupt", "repr_exit", "repr_type", "huge_int",
                 "lying_verdict", "details_not_dict", "big_string", "many_keys", "surrogates")


def writes_raw(response, data):
    """Write ``data`` straight into the worker's result channel, then return normally."""
    os.write(_worker_result_fd(), data)
    return 1.0


def forks_and_returns_twice(response, reference):
    """Both the worker and its forked child return from here: only the worker may answer."""
    child = os.fork()
    return Verdict(1.0, Status.CORRECT, "forked", details={"child": child == 0})


# ------------------------------------------------------- deadlines under load (tests/test_deadlines_round4.py)


def ignores_sigterm_and_sleeps(response, reference):
    import signal

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGALRM):
        signal.signal(sig, signal.SIG_IGN)
    while True:
        time.sleep(3600)


def blocks_signals_and_sleeps(response, reference):
    import signal

    signal.pthread_sigmask(signal.SIG_BLOCK, set(signal.valid_signals()))
    while True:
        time.sleep(3600)


def forks_stubborn_child_and_waits(response, reference):
    """A child that ignores the catchable signals and leaves the process group; the call waits for it."""
    import signal

    pid = os.fork()
    if pid == 0:
        os.setsid()
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN)
        while True:
            time.sleep(3600)
    os.waitpid(pid, 0)
    return 1.0


def busy_loop(response, reference):
    while True:
        pass


def just_too_late(response, reference, timeout_s=2.0):
    """An honest answer that is complete only after the budget: never credited."""
    time.sleep(float(timeout_s) + float(reference))
    return 1.0


class _SlowRepr:
    def __repr__(self):
        time.sleep(3600)
        return "never"


class _SlowState:
    """Slow to rebuild from a pickle: its __reduce__ and __setstate__ sleep."""

    def __reduce__(self):
        time.sleep(3600)
        return (_SlowState, ())

    def __setstate__(self, state):
        time.sleep(3600)


class _SlowScore(Verdict):
    @property
    def score(self):
        time.sleep(3600)
        return 1.0


def slow_to_encode(response, kind):
    """A correct verdict whose own code (repr, pickling hooks, a property) is slow to run when it is read."""
    if kind == "repr":
        return Verdict(1.0, Status.CORRECT, "slow", details={"x": _SlowRepr()})
    if kind == "state":
        return Verdict(1.0, Status.CORRECT, "slow", details={"x": [_SlowState()] * 3})
    if kind == "score":
        v = object.__new__(_SlowScore)
        for name, value in (("status", Status.CORRECT), ("reason", "slow"), ("extracted", None), ("details", {})):
            object.__setattr__(v, name, value)
        return v
    raise ValueError(kind)


def big_result(response, reference):
    """A verdict of ``reference`` MiB, built in pieces: under the cap it must still come back in time."""
    return Verdict(1.0, Status.CORRECT, "big", details={"rows": ["y" * 1000] * (int(reference) * 1024)})
