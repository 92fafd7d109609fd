"""A least-recently-used cache bounded by the bytes of its keys and values, not by their count.

A cache bounded by entries keeps 8192 x (whatever size a key may have): with model answers of 190 kB that is
gigabytes. Here every entry is charged its estimated size, the oldest entries go first, and an entry larger
than a quarter of the bound is never stored.
"""

from __future__ import annotations

import collections
import functools
import sys
import threading
from collections.abc import Callable
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])


def size_of(value: Any) -> int:
    """A cheap estimate of the bytes held by ``value`` (strings, tuples, lists, numbers, nested)."""
    stack, total = [value], 0
    while stack:
        v = stack.pop()
        total += sys.getsizeof(v)
        if isinstance(v, (tuple, list)):
            stack.extend(v)
        elif isinstance(v, dict):
            stack.extend(v.keys())
            stack.extend(v.values())
    return total


class ByteLRU:
    """A thread-safe LRU mapping whose entries together hold at most ``max_bytes`` (estimated)."""

    def __init__(self, max_bytes: int):
        self.max_bytes = max_bytes
        self._data: collections.OrderedDict[Any, tuple[Any, int]] = collections.OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, key: Any, default: Any = None) -> Any:
        with self._lock:
            hit = self._data.get(key)
            if hit is None:
                return default
            self._data.move_to_end(key)
            return hit[0]

    def put(self, key: Any, value: Any) -> None:
        size = size_of(key) + size_of(value)
        if size > self.max_bytes // 4:
            return
        with self._lock:
            old = self._data.pop(key, None)
            if old is not None:
                self._bytes -= old[1]
            self._data[key] = (value, size)
            self._bytes += size
            while self._bytes > self.max_bytes:
                _, (_, dropped) = self._data.popitem(last=False)
                self._bytes -= dropped

    def clear(self) -> None:
        with self._lock:
            self._data.clear()
            self._bytes = 0

    @property
    def bytes(self) -> int:
        return self._bytes

    def __len__(self) -> int:
        return len(self._data)


_MISSING = object()


def byte_cached(max_bytes: int) -> Callable[[F], F]:
    """Like ``functools.lru_cache`` for functions of hashable arguments, bounded in bytes; the wrapped
    function gets ``cache_clear()`` and ``cache`` (the ByteLRU). Exceptions are not cached."""

    def wrap(fn: F) -> F:
        cache = ByteLRU(max_bytes)

        @functools.wraps(fn)
        def cached(*args: Any, **kwargs: Any) -> Any:
            key = (args, tuple(sorted(kwargs.items()))) if kwargs else args
            hit = cache.get(key, _MISSING)
            if hit is not _MISSING:
                return hit
            value = fn(*args, **kwargs)
            cache.put(key, value)
            return value

        cached.cache = cache  # type: ignore[attr-defined]
        cached.cache_clear = cache.clear  # type: ignore[attr-defined]
        return cached  # type: ignore[return-value]

    return wrap


__all__ = ["ByteLRU", "byte_cached", "size_of"]
