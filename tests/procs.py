"""Process helpers for the runner tests: is a pid alive, whose child is it, and the runner-still-works check."""

from __future__ import annotations

import time


def alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie counts as dead)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def parent(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def wait_dead(pid: int, within_s: float = 5.0) -> bool:
    """True once ``pid`` is dead, False if it still runs after ``within_s``."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if not alive(pid):
            return True
        time.sleep(0.02)
    return not alive(pid)


def still_works(runner) -> None:
    """The runner still works: a fresh pooled call is scored correctly."""
    import reward_fns as rf

    from rlvr.verifiers import CallableRequest, Status

    # a budget that covers a replacement worker's start on a loaded machine: the check is that it answers
    v = runner.score([CallableRequest(rf.match, "ok", "ok", {"timeout_s": 120.0}, cache=False)])[0]
    assert (v.score, v.status) == (1.0, Status.CORRECT), v


def children(pid: int) -> set[int]:
    """The live processes whose parent is ``pid``."""
    import os

    out = set()
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                if parent(int(name)) == pid and alive(int(name)):
                    out.add(int(name))
            except (OSError, IndexError, ValueError):
                continue
    return out


def rss_mib() -> float:
    """This process's resident memory, in MiB."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def warm(runner, budget_s: float = 120.0) -> None:
    """Start every worker of ``runner`` with a budget that covers a worker's start on a loaded machine (a call's
    clock runs from the call, start-up included), so that a test's own budgets measure only its calls."""
    import reward_fns as rf

    from rlvr.verifiers import CallableRequest, Status

    requests = [CallableRequest(rf.pid_verdict, str(i), None, {"timeout_s": budget_s, "delay": 0.2}, cache=False)
                for i in range(runner.workers)]
    verdicts = runner.score(requests)
    assert all(v.status == Status.CORRECT for v in verdicts), verdicts
