"""Process trees: find every descendant of a process and kill them all, even those that left its process group
or session (``setsid``, double forks).

Descendants are found by parentage in /proc. Reward workers are child subreapers (``PR_SET_CHILD_SUBREAPER``), so
an orphan of anything a call started is re-parented to its worker, not to init, and stays in the worker's tree.
A tree is first frozen top-down with SIGSTOP (a stopped process can neither fork nor reap its children, so no pid
in the tree can be reused while we work) and then killed with SIGKILL. Without /proc (not Linux) only the process
group is killed.
"""

from __future__ import annotations

import os
import signal
import sys
import time

_LINUX = sys.platform.startswith("linux")
_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
_MAX_ROUNDS = 1000  # freeze rounds; each round stops every process found, so only a tree growing faster ends it


def _parents() -> dict[int, int]:
    """pid -> parent pid of every process visible in /proc."""
    out = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return out
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
            out[int(name)] = int(stat[stat.rindex(b")") + 2 :].split(None, 2)[1])
        except (OSError, ValueError, IndexError):
            continue  # it exited meanwhile
    return out


def descendants(root: int, parents: dict[int, int] | None = None) -> set[int]:
    """Every process below ``root`` (not ``root`` itself)."""
    parents = _parents() if parents is None else parents
    children: dict[int, list[int]] = {}
    for pid, ppid in parents.items():
        children.setdefault(ppid, []).append(pid)
    found: set[int] = set()
    stack = [root]
    while stack:
        for child in children.get(stack.pop(), ()):
            if child not in found and child != root:
                found.add(child)
                stack.append(child)
    return found


def kill_tree(root: int, *, include_root: bool) -> list[int]:
    """SIGKILL every descendant of ``root`` (and ``root`` when ``include_root``); return the pids signalled.

    Safe against pid reuse as long as nothing but ``root``'s own parent reaps ``root``, and ``root`` does not reap
    its children meanwhile: the caller is ``root``'s parent, or ``root`` itself (killing its descendants)."""
    if not _LINUX:
        _killpg(root)
        if include_root:
            _kill(root, signal.SIGKILL)
        return [root] if include_root else []
    stopped: list[int] = []
    seen: set[int] = set()
    if include_root:
        _kill(root, signal.SIGSTOP)
        stopped.append(root)
        seen.add(root)
    for _ in range(_MAX_ROUNDS):
        # top-down: a process is listed only after its parent was stopped, so its pid stays its own
        new = [pid for pid in sorted(descendants(root)) if pid not in seen]
        if not new:
            break
        for pid in new:
            if pid != os.getpid():
                _kill(pid, signal.SIGSTOP)
                stopped.append(pid)
            seen.add(pid)
    for pid in stopped:
        _kill(pid, signal.SIGKILL)
    return stopped


def wait_gone(pids: list[int], timeout_s: float) -> bool:
    """Wait until none of ``pids`` runs any more (a zombie has stopped running); False at the timeout."""
    deadline = time.monotonic() + timeout_s
    for pid in pids:
        while _running(pid):
            if time.monotonic() > deadline:
                return False
            time.sleep(0.002)
    return True


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return False
    return stat[stat.rindex(b")") + 2 : stat.rindex(b")") + 3] not in (b"Z", b"X")


def _kill(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError, OSError):
        pass


def _killpg(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError, OSError):
        pass


def become_subreaper() -> bool:
    """Linux: adopt the orphans of this process's descendants (PR_SET_CHILD_SUBREAPER)."""
    return _prctl(_PR_SET_CHILD_SUBREAPER, 1)


def die_with_parent(sig: int = signal.SIGKILL) -> bool:
    """Linux: get ``sig`` when the thread that started this process goes away (PR_SET_PDEATHSIG)."""
    return _prctl(_PR_SET_PDEATHSIG, int(sig))


def _prctl(option: int, value: int) -> bool:
    if not _LINUX:
        return False
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(option, value, 0, 0, 0) == 0
    except Exception:
        return False
