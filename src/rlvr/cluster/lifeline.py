"""Processes of a run die with the process that started it: a learner rank or worker whose driver is gone (killed
with SIGKILL included, which no handler sees) exits by itself instead of living on as an orphan."""

from __future__ import annotations

import ctypes
import os
import signal
import threading
import time

DRIVER_PID = "RLVR_DRIVER_PID"


def die_with_parent() -> None:
    """For ``subprocess.Popen(preexec_fn=...)``: the child receives SIGKILL when its parent dies (Linux's
    PR_SET_PDEATHSIG); elsewhere nothing happens and ``watch_driver`` alone applies."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG = 1
    except OSError:
        pass


def driver_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def watch_driver(pid: int | None = None, *, every_s: float = 0.5) -> threading.Thread | None:
    """Exit this process (status 1) as soon as the driver ``pid`` (default: $RLVR_DRIVER_PID) is gone or this
    process's parent has died and it was adopted by init. A daemon thread; None when there is no driver to watch."""
    if pid is None:
        pid = int(os.environ.get(DRIVER_PID, "0") or 0)
    if not pid:
        return None
    parent = os.getppid()

    def watch() -> None:
        while driver_alive(pid) and os.getppid() == parent:
            time.sleep(every_s)
        os._exit(1)

    thread = threading.Thread(target=watch, name="rlvr-driver-watch", daemon=True)
    thread.start()
    return thread
