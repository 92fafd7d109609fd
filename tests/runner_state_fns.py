"""Reward functions for tests/test_runner_state.py: each ``change_*`` changes one kind of process-wide state in the
worker that runs it (and returns 1.0); ``probe`` reports that state as the next call sees it; ``check_*`` are
ordinary rewards whose verdict is right only in a clean worker."""

from __future__ import annotations

import ctypes
import decimal
import os
import signal
import sys
import time

from rlvr.verifiers import Status, Verdict

_KEEP: list = []  # objects a change keeps alive in the worker (leaked descriptors)
_LIBC = ctypes.CDLL(None)


def _status_masks() -> dict:
    with open("/proc/self/status") as f:
        return {line.split(":")[0]: line.split(":")[1].strip() for line in f if line.startswith("Sig")
                and line.split(":")[0] in ("SigIgn", "SigBlk", "SigCgt")}


def _fd_target(fd: int) -> str | None:
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return None


def _c_getenv(name: bytes) -> str | None:
    getenv = _LIBC.getenv
    getenv.restype = ctypes.c_char_p
    value = getenv(name)
    return None if value is None else value.decode()


def state() -> dict:
    """What the next call would see, as plain data."""
    import gc
    import locale
    import threading
    import warnings

    out = {
        "decimal": str(decimal.getcontext()), "decimal_default": str(decimal.DefaultContext),
        "fds": {fd: _fd_target(fd) for fd in (0, 1, 2)}, "open_fds": len(os.listdir("/proc/self/fd")),
        "signals": _status_masks(), "sigterm": int(signal.getsignal(signal.SIGTERM) or 0)
        if not callable(signal.getsignal(signal.SIGTERM)) else "callable",
        "env": os.environ.get("RLVR_STATE_PROBE"), "c_env": _c_getenv(b"RLVR_STATE_PROBE"),
        "c_env_only": _c_getenv(b"RLVR_C_ONLY_PROBE"), "tz": (time.timezone, time.tzname),
        "stdout": (type(sys.stdout).__name__, sys.stdout.closed, sys.stdout is sys.__stdout__),
        "stderr": (type(sys.stderr).__name__, sys.stderr.closed, sys.stderr is sys.__stderr__),
        "cwd": os.getcwd(), "umask": os.umask(0o022),
        "sys_path": list(sys.path), "meta_path": len(sys.meta_path), "json": type(sys.modules.get("json")).__name__,
        "len": len.__module__ if hasattr(len, "__module__") else None, "recursion": sys.getrecursionlimit(),
        "int_digits": sys.get_int_max_str_digits(), "warnings": len(warnings.filters),
        "locale": locale.setlocale(locale.LC_ALL), "gc": gc.isenabled(), "trace": threading.gettrace(),
        "rounding": _LIBC.fegetround(),
    }
    os.umask(out["umask"])
    out["trace"] = repr(out["trace"])
    for name, get in (("numpy", lambda m: (m.geterr(), m.get_printoptions()["precision"])),
                      ("mpmath", lambda m: m.mp.dps),
                      ("sympy.core.parameters", lambda m: m.global_parameters.evaluate)):
        module = sys.modules.get(name)
        out[name] = repr(get(module)) if module is not None else "not imported"
    return out


def probe(response, reference):
    return Verdict(1.0, Status.CORRECT, "probe", details={"state": state()})


# ---------------------------------------------------------------------------------------------- changes


def change_decimal(response, reference):
    decimal.getcontext().prec = 3
    decimal.getcontext().traps[decimal.Inexact] = True
    decimal.DefaultContext.prec = 5
    decimal.DefaultContext.rounding = decimal.ROUND_DOWN
    return 1.0


def change_numpy(response, reference):
    import numpy as np

    np.seterr(all="raise")
    np.set_printoptions(precision=2, threshold=3)
    return 1.0


def change_mpmath_and_sympy(response, reference):
    import mpmath
    import sympy  # noqa: F401
    from sympy.core.parameters import global_parameters

    mpmath.mp.dps = 5
    global_parameters.evaluate = False
    return 1.0


def change_std_fds(response, reference):
    """Standard output and error redirected to a file (dup2 over 1 and 2), standard input closed."""
    fd = os.open(reference, os.O_WRONLY | os.O_CREAT, 0o600)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    os.close(0)
    return 1.0


def change_leak_fds(response, reference):
    _KEEP.extend(open(os.devnull) for _ in range(200))
    return 1.0


def change_channel(response, reference):
    """/dev/null dup2'ed over every descriptor from 3 to 64 except the ones it opens itself: the worker's channel
    to the pool included."""
    null = os.open(os.devnull, os.O_RDWR)
    for fd in range(3, 64):
        if fd != null:
            try:
                os.dup2(null, fd)
            except OSError:
                pass
    return 1.0


def change_close_all_fds(response, reference):
    os.closerange(0, 4096)
    return 1.0


def change_signals(response, reference):
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM, signal.SIGTERM, signal.SIGUSR1})
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGALRM, signal.SIG_IGN)
    return 1.0


def change_signals_below_python(response, reference):
    _LIBC.signal(signal.SIGTERM, ctypes.c_void_p(1))  # SIG_IGN, behind Python's back
    _LIBC.signal(signal.SIGUSR2, ctypes.c_void_p(1))
    mask = (ctypes.c_ulong * 16)()
    mask[0] = (1 << (signal.SIGALRM - 1)) | (1 << (signal.SIGHUP - 1))
    _LIBC.sigprocmask(0, ctypes.byref(mask), None)  # SIG_BLOCK
    return 1.0


def change_environment(response, reference):
    os.environ["RLVR_STATE_PROBE"] = "python-level"
    _LIBC.setenv(b"RLVR_C_ONLY_PROBE", b"c-level", 1)
    _LIBC.unsetenv(b"PATH")
    os.environ["TZ"] = "Asia/Kolkata"
    time.tzset()
    return 1.0


def change_streams(response, reference):
    import io

    sys.stdout = io.StringIO()
    sys.__stdout__.close()
    sys.stderr.close()
    return 1.0


def change_directory(response, reference):
    os.chdir(reference)
    os.umask(0o777)
    return 1.0


def change_interpreter(response, reference):
    import builtins
    import types
    import warnings

    sys.path.insert(0, "/nonexistent")
    sys.meta_path.insert(0, object())
    fake_json = types.ModuleType("json")
    fake_json.loads = lambda text: {"tampered": True}
    sys.modules["json"] = fake_json
    builtins.len = lambda obj: 0
    builtins.planted_name = "x"
    sys.setrecursionlimit(80)
    sys.set_int_max_str_digits(640)
    warnings.simplefilter("error")
    import gc
    import locale

    locale.setlocale(locale.LC_ALL, "C" if locale.setlocale(locale.LC_ALL) != "C" else "C.utf8")
    gc.disable()
    import threading

    threading.settrace(lambda *a: None)
    return 1.0


def change_plant_module(response, reference):
    import types

    planted = types.ModuleType("rlvr_planted_probe")
    planted.answer = lambda: 1.0
    sys.modules["rlvr_planted_probe"] = planted
    return 1.0


def change_audit_hook(response, reference):
    def refuse_opens(event, args):
        if event == "open" and str(args[0]).endswith(".rlvr-probe"):
            raise PermissionError("no opening files")

    sys.addaudithook(refuse_opens)
    return 1.0


def change_rounding(response, reference):
    _LIBC.fesetround(int(reference))
    return 1.0


# ---------------------------------------------------------------------------------------------- checks


def check_decimal(response, reference):
    return 1.0 if str(decimal.Decimal(1) / decimal.Decimal(3)) == reference else 0.0


def check_numpy(response, reference):
    import numpy as np

    value = np.array([1.0]) / np.array([0.0])  # raises FloatingPointError under seterr(all="raise")
    return 1.0 if str(np.array([1 / 3])) == reference and np.isinf(value[0]) else 0.0


def check_sympy(response, reference):
    import mpmath
    import sympy

    return 1.0 if sympy.sympify("1 + 1") == 2 and str(mpmath.mpf(1) / 3) == reference else 0.0


def check_print(response, reference):
    print("a line to standard output", flush=True)
    print("a line to standard error", file=sys.stderr, flush=True)
    os.fstat(0)
    return 1.0 if _fd_target(1) != reference and _fd_target(2) != reference else 0.0


def check_alarm(response, reference):
    """A reward with its own SIGALRM timeout: right only if the signal is delivered."""
    class Fired(Exception):
        pass

    def on_alarm(signum, frame):
        raise Fired

    old = signal.signal(signal.SIGALRM, on_alarm)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.05)
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            pass
        return 0.0
    except Fired:
        return 1.0
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def check_child_environment(response, reference):
    import subprocess

    out = subprocess.run(["/bin/sh", "-c", 'echo "$RLVR_C_ONLY_PROBE|$RLVR_STATE_PROBE"'], capture_output=True,
                         text=True, timeout=10).stdout.strip()
    return 1.0 if out == "|" else 0.0


def check_interpreter(response, reference):
    import json

    def depth(n):
        return 0 if n == 0 else 1 + depth(n - 1)

    ok = json.loads("[1, 2]") == [1, 2] and len("abc") == 3 and depth(500) == 500 and len(str(int("7" * 1000))) == 1000
    import warnings

    warnings.warn("only a warning")
    return 1.0 if ok else 0.0


def check_planted(response, reference):
    try:
        import rlvr_planted_probe  # noqa: F401
    except ImportError:
        return 1.0
    return 0.0


def check_audit(response, reference):
    path = os.path.join(reference, "x.rlvr-probe")
    with open(path, "w") as f:
        f.write("fine")
    return 1.0


def check_rounding(response, reference):
    return 1.0 if (1.0 / 3.0).hex() == reference else 0.0


def change_monitoring(response, reference):
    """A sys.monitoring tool (Python 3.12+) whose callback breaks every function call that follows."""
    monitoring = sys.monitoring
    monitoring.use_tool_id(4, "rlvr-probe")

    def on_start(code, offset):
        raise RuntimeError("monitored")

    monitoring.register_callback(4, monitoring.events.PY_START, on_start)
    monitoring.set_events(4, monitoring.events.PY_START)
    return 1.0


def check_monitoring(response, reference):
    return 1.0 if sys.monitoring.get_tool(4) is None else 0.0


def change_seeds(response, reference):
    import random

    import numpy as np

    random.seed(1234)
    np.random.seed(1234)
    return 1.0


def draws(response, reference):
    import random

    import numpy as np

    return Verdict(1.0, Status.CORRECT, "draws", details={"random": random.random(), "numpy": float(np.random.rand())})
