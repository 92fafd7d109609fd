"""The time budget of one verification, checked between bounded steps.

Every inline step whose cost grows with the input (big-integer arithmetic, polynomial products, probing,
comparing many boxed answers) calls ``check()`` before it starts; each single step is itself bounded by a
size guard checked before the work (bits of an operand, terms of a product), so a call overruns its
deadline by at most one such step (milliseconds). The deadline is per thread, so concurrent calls never
share one.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator

_local = threading.local()


class OutOfTime(Exception):
    """The call's deadline passed: the verdict is "timeout"."""


@contextlib.contextmanager
def deadline(at: float | None) -> Iterator[None]:
    """Run the enclosed work under the monotonic deadline ``at`` (None: no deadline)."""
    previous = getattr(_local, "at", None)
    _local.at = at
    try:
        yield
    finally:
        _local.at = previous


def check() -> None:
    """Raise OutOfTime once the current thread's deadline has passed."""
    at = getattr(_local, "at", None)
    if at is not None and time.monotonic() > at:
        raise OutOfTime


__all__ = ["OutOfTime", "check", "deadline"]
