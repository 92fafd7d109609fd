"""The verdict cache: an LRU of verdicts of pooled calls, bounded in entries and in characters held.

A key is (who, response, canonical JSON of reference, options, prompt and meta). Only plain JSON values make a
key (str/int/float/bool/None, lists, dicts with str keys), so equal keys mean equal inputs; who is a registered
verifier's name and function, or a user function's module and qualified name (only for plain module-level
functions, assumed pure). Only deterministic statuses are stored (correct, incorrect, partial, undecidable).
"""

from __future__ import annotations

import collections
import copy
import dataclasses
import inspect
import json
import sys
import threading
from typing import Any, NamedTuple

from rlvr.verifiers.base import Status, Verdict

DETERMINISTIC = frozenset({Status.CORRECT, Status.INCORRECT, Status.PARTIAL, Status.UNDECIDABLE})
_MAX_DEPTH = 64
_ENTRY_OVERHEAD = 256  # characters charged per entry on top of its key's text


class CacheInfo(NamedTuple):
    hits: int
    misses: int
    maxsize: int
    currsize: int


class VerdictCache:
    """Thread-safe LRU of verdicts; ``get`` and ``put`` copy, so callers may mutate what they receive."""

    def __init__(self, maxsize: int, max_chars: int):
        self.maxsize, self.max_chars = maxsize, max_chars
        self.lock = threading.Lock()
        self.entries: collections.OrderedDict[Any, tuple[Verdict, int]] = collections.OrderedDict()
        self.chars = 0
        self.hits = self.misses = 0

    def get(self, key: Any) -> Verdict | None:
        with self.lock:
            hit = self.entries.get(key)
            if hit is None:
                self.misses += 1
                return None
            self.entries.move_to_end(key)
            self.hits += 1
        return copy_verdict(hit[0])

    def put(self, key: Any, verdict: Verdict) -> None:
        if not self.maxsize or verdict.status not in DETERMINISTIC:
            return
        size = sum(len(part) for part in key[1:]) + _ENTRY_OVERHEAD
        if size > self.max_chars:
            return
        stored = copy_verdict(verdict)
        with self.lock:
            old = self.entries.pop(key, None)
            if old is not None:
                self.chars -= old[1]
            self.entries[key] = (stored, size)
            self.chars += size
            while self.entries and (len(self.entries) > self.maxsize or self.chars > self.max_chars):
                _, (_, evicted) = self.entries.popitem(last=False)
                self.chars -= evicted

    def info(self) -> CacheInfo:
        with self.lock:
            return CacheInfo(self.hits, self.misses, self.maxsize, len(self.entries))

    def clear(self) -> None:
        with self.lock:
            self.entries.clear()
            self.chars = 0
            self.hits = self.misses = 0


def cache_key(name: str | None, fn: Any, response: Any, reference: Any, options: dict[str, Any],
              prompt: Any, meta: Any) -> tuple | None:
    """The key of a call, or None when it must not be cached (inputs that are not plain JSON, a user callable
    that is not a plain module-level function)."""
    if not isinstance(response, str):
        return None
    if name is not None:
        who: tuple = ("verifier", name, f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', '?')}")
    else:
        qual = module_level_name(fn)
        if qual is None:
            return None
        who = ("callable", qual)
    parts = [canonical_json(v) for v in (reference, options, prompt, meta)]
    if any(p is None for p in parts):
        return None
    return (who, response, *parts)


def module_level_name(fn: Any) -> str | None:
    """"module:qualname" for a plain function reachable under that name in its module; None otherwise."""
    if not inspect.isfunction(fn):
        return None
    module, qualname = getattr(fn, "__module__", None), getattr(fn, "__qualname__", "")
    if not module or not qualname or "<" in qualname:
        return None
    obj: Any = sys.modules.get(module)
    for part in qualname.split("."):
        obj = getattr(obj, part, None)
    return f"{module}:{qualname}" if obj is fn else None


def canonical_json(value: Any) -> str | None:
    """A canonical JSON text for plain JSON values (dict keys sorted); None for anything else."""
    if not _plain_json(value, 0):
        return None
    try:
        return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    except (TypeError, ValueError, RecursionError):
        return None


def _plain_json(value: Any, depth: int) -> bool:
    if depth > _MAX_DEPTH:
        return False
    kind = type(value)
    if value is None or kind in (str, int, float, bool):
        return True
    if kind is list:
        return all(_plain_json(v, depth + 1) for v in value)
    if kind is dict:
        return all(type(k) is str and _plain_json(v, depth + 1) for k, v in value.items())
    return False


def copy_verdict(v: Verdict) -> Verdict:
    """A verdict whose details the caller may mutate without touching the cache or another caller's copy."""
    if not v.details:
        return v
    try:
        details = copy.deepcopy(v.details)
    except Exception:
        details = dict(v.details)
    return dataclasses.replace(v, details=details)
