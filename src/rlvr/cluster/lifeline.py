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


def process_table() -> dict[int, tuple[int, int]]:
    """pid -> (parent pid, start time in clock ticks) of every process, from /proc."""
    table: dict[int, tuple[int, int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                table[int(entry)] = (int(fields[1]), int(fields[19]))
            except (OSError, IndexError, ValueError):
                pass
    return table


def descendants(roots: set[int], table: dict[int, tuple[int, int]]) -> set[int]:
    found, frontier = set(), set(roots)
    while frontier:
        frontier = {pid for pid, (parent, _) in table.items() if parent in frontier} - found
        found |= frontier
    return found


def guard_tree(driver: int, *, every_s: float = 0.5) -> None:
    """Follow the processes ``driver`` starts (a local Ray cluster: its GCS, raylet, agents and workers) and SIGKILL
    those still running once the driver is gone, including those adopted by init in the meantime. A process is
    known by pid and start time, so a pid reused by an unrelated process is never touched."""
    known: dict[int, int] = {}
    me = os.getpid()
    while driver_alive(driver):
        table = process_table()
        known.update({pid: table[pid][1] for pid in descendants({driver}, table) - {me}})
        time.sleep(every_s)
    table = process_table()
    alive = {pid for pid, start in known.items() if pid in table and table[pid][1] == start}
    for pid in alive | (descendants(alive, table) - {me}):
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def start_guard():
    """Start ``guard_tree`` for this process in a detached helper process (it outlives a SIGKILL of this one);
    returns its Popen: terminate it when the processes it guards have been stopped normally."""
    import subprocess
    import sys

    return subprocess.Popen([sys.executable, "-m", "rlvr.cluster.lifeline", str(os.getpid())], stdin=subprocess.DEVNULL,
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)


if __name__ == "__main__":
    import sys

    guard_tree(int(sys.argv[1]))
