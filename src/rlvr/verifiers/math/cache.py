"""A least-recently-used cache bounded by bytes, not by its count of entries.

A cache bounded by entries keeps 8192 x (whatever size a key may have): with model answers of 190 kB that is
gigabytes. Here every entry is charged an upper estimate of its bytes, proportional to the characters of its
key's strings (the caller states how many bytes key and value hold per character at most: a normalised string
is a small multiple of its input, a parse tree a larger one), the oldest entries go first, and an entry larger
than a quarter of the bound is never stored. Charging by characters keeps a lookup as cheap as a dict access.
"""

from __future__ import annotations

import collections
import functools
import threading
from collections.abc import Callable
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])
ENTRY_OVERHEAD = 200  # bytes of the entry itself: the dict slot, the key tuple, small values


def chars(key: Any) -> int:
    """Characters of the strings in ``key`` (a string, or a tuple holding strings one level deep)."""
    if type(key) is str:
        return len(key)
    if isinstance(key, tuple):
        return sum(len(k) for k in key if type(k) is str)
    return 0


class ByteLRU:
    """A thread-safe LRU mapping whose entries together are charged at most ``max_bytes``, each entry
    ENTRY_OVERHEAD plus ``bytes_per_char`` per character of its key."""

    def __init__(self, max_bytes: int, bytes_per_char: int):
        self.max_bytes = max_bytes
        self.bytes_per_char = bytes_per_char
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
        size = ENTRY_OVERHEAD + self.bytes_per_char * chars(key)
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


def byte_cached(max_bytes: int, bytes_per_char: int) -> Callable[[F], F]:
    """Like ``functools.lru_cache`` for functions of strings and other small hashable arguments, bounded in
    bytes (see ByteLRU); the wrapped function gets ``cache`` and ``cache_clear()``. Exceptions are not cached."""

    def wrap(fn: F) -> F:
        cache = ByteLRU(max_bytes, bytes_per_char)

        @functools.wraps(fn)
        def cached(*args: Any, **kwargs: Any) -> Any:
            key = (*args, *kwargs.items()) if kwargs else args
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


__all__ = ["ByteLRU", "byte_cached", "chars"]
