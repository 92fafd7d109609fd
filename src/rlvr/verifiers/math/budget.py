"""The time budget of one verification, checked between bounded steps.

Every inline step whose cost grows with the input (big-integer arithmetic, polynomial products, probing,
comparing many boxed answers) calls ``check()`` before it starts; each single step is itself bounded by a
size guard checked before the work (bits of an operand, terms of a product), so a call overruns its
deadline by at most one such step (milliseconds). The deadline is per thread, so concurrent calls never
share one.
"""

from __future__ import annotations

import threading
import time

_local = threading.local()


class OutOfTime(Exception):
    """The call's deadline passed: the verdict is "timeout"."""


def set_deadline(at: float | None) -> float | None:
    """Make ``at`` (a ``time.monotonic()`` instant, None: none) the current thread's deadline; returns the
    previous one, to be given back to ``set_deadline`` when the work is done (a plain call, cheaper than a
    context manager on the fast path)."""
    previous = getattr(_local, "at", None)
    _local.at = at
    return previous


def check() -> None:
    """Raise OutOfTime once the current thread's deadline has passed."""
    at = getattr(_local, "at", None)
    if at is not None and time.monotonic() > at:
        raise OutOfTime


__all__ = ["OutOfTime", "check", "set_deadline"]
