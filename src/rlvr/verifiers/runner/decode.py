"""Carrying a verdict from a worker to the caller as plain JSON, so that nothing a reward returns runs code in
the caller.

A worker runs untrusted reward code, so whatever it sends is untrusted too. Pickle would let a returned object
choose what the caller executes while unpickling (sleep, os._exit, raise KeyboardInterrupt). Instead:

- in the worker, ``plain_verdict`` turns the Verdict into JSON-like data (str, int, float, bool, None, lists, dicts with
  str keys; any other object becomes its repr), stopping as soon as the text would pass the size cap;
- between them, frames are a 4-byte big-endian length and that many bytes; ``FrameReader`` reads them without
  blocking and refuses a frame longer than its cap as soon as its length is in;
- in the caller, ``decode`` parses the JSON (time linear in its size, memory bounded by the cap) and checks its
  shape; a score must be finite and a status one of Status's values.
"""

from __future__ import annotations

import json
import math
import os
import struct
from typing import Any

from rlvr.verifiers.base import Status, Verdict

HEADER = struct.Struct(">I")
MAX_DEPTH = 64  # nesting levels of details kept as data; deeper values make the verdict an error
MAX_REPR_CHARS = 1000  # an object that is not plain data travels as its repr, cut to this length
MAX_REASON_CHARS = 200
_STATUSES = {s.value: s for s in Status}


class TooLarge(Exception):
    """The encoded verdict would pass the size cap."""


class Unencodable(ValueError):
    """The verdict's details cannot be carried as data (they nest too deep)."""


class ProtocolError(Exception):
    """A worker sent something that is not a frame of the protocol (or a frame over the cap)."""


# ------------------------------------------------------------------------------------------ worker side


def frame(payload: bytes) -> bytes:
    return HEADER.pack(len(payload)) + payload


def plain_verdict(v: Any, max_bytes: int) -> dict[str, Any]:
    """``v`` (a Verdict) as JSON-like data built of exact builtin types; raises TooLarge as soon as it would take
    more than ``max_bytes`` as JSON, Unencodable when its details nest deeper than MAX_DEPTH. This is where a
    returned object's own code (properties, repr) runs, so the worker calls it inside the call's deadline."""
    return _plain_verdict(v, [max_bytes])


def encode(message: dict[str, Any], max_bytes: int) -> bytes:
    """JSON bytes of ``message`` (plain data only); raises TooLarge past ``max_bytes``."""
    text = json.dumps(message, ensure_ascii=True, separators=(",", ":"), allow_nan=True)
    if len(text) > max_bytes:
        raise TooLarge(len(text))
    return text.encode("ascii")


def _plain_verdict(v: Verdict, budget: list[int]) -> dict[str, Any]:
    score = float(v.score)
    if not math.isfinite(score):
        raise Unencodable(f"its score is {score}")
    return {
        "score": score,
        "status": Status(v.status).value,
        "reason": _plain(v.reason, budget, 0) if isinstance(v.reason, str) else _repr(v.reason, budget),
        "extracted": None if v.extracted is None else _plain(str(v.extracted), budget, 0),
        "details": _plain(dict(v.details) if v.details else {}, budget, 0),
    }


def _spend(budget: list[int], n: int) -> None:
    budget[0] -= n
    if budget[0] < 0:
        raise TooLarge


def _plain(value: Any, budget: list[int], depth: int) -> Any:
    """``value`` as JSON-like data built of exact builtin types, charging its approximate encoded size."""
    if depth > MAX_DEPTH:
        raise Unencodable(f"its details nest deeper than {MAX_DEPTH} levels (or refer to themselves)")
    if value is None or value is True or value is False:
        _spend(budget, 5)
        return value
    if isinstance(value, str):
        _spend(budget, len(value) + 2)
        return str.__str__(value)  # an exact str, whatever subclass came in
    if isinstance(value, int):
        if value.bit_length() > 4000:
            return _repr(value, budget)
        _spend(budget, value.bit_length() // 3 + 2)
        return int.__index__(value)
    if isinstance(value, float):
        _spend(budget, 24)
        return float.__float__(value)
    if isinstance(value, dict):
        _spend(budget, 2)
        out = {}
        for k, v in list(value.items()):
            key = k if isinstance(k, str) else (json.dumps(k) if k is None or isinstance(k, (bool, int, float)) else _repr(k, budget))
            out[str.__str__(_plain(key, budget, depth + 1))] = _plain(v, budget, depth + 1)
        return out
    if isinstance(value, (list, tuple, set, frozenset)):
        _spend(budget, 2)
        return [_plain(v, budget, depth + 1) for v in list(value)]
    return _repr(value, budget)


def _repr(value: Any, budget: list[int]) -> str:
    try:
        text = repr(value)
    except Exception as exc:
        text = f"<{type(value).__name__} whose repr raised {type(exc).__name__}>"
    if not isinstance(text, str):
        text = f"<{type(value).__name__}>"
    text = str.__str__(text)[:MAX_REPR_CHARS]
    _spend(budget, len(text) + 2)
    return text


# ------------------------------------------------------------------------------------------ caller side


class FrameReader:
    """Frames from a non-blocking file descriptor, each at most ``max_bytes`` long. A frame's length is checked
    as soon as its header is in, so the reader never holds more than one capped frame plus one read's chunk."""

    CHUNK = 1 << 16

    def __init__(self, fd: int, max_bytes: int):
        self.fd, self.max_bytes = fd, max_bytes
        self.buf = bytearray()
        self.eof = False

    def read(self) -> list[bytes]:
        """Complete frames available now (reads until the pipe is drained); ProtocolError on an oversized frame.
        Sets ``eof`` when the writer has gone."""
        frames: list[bytes] = []
        while True:
            try:
                chunk = os.read(self.fd, self.CHUNK)
            except BlockingIOError:
                return frames
            except OSError:
                self.eof = True
                return frames
            if not chunk:
                self.eof = True
                return frames
            self.buf += chunk
            while len(self.buf) >= HEADER.size:
                (n,) = HEADER.unpack_from(self.buf)
                if n > self.max_bytes:
                    raise ProtocolError(f"a frame of {n} bytes (the cap is {self.max_bytes})")
                if len(self.buf) < HEADER.size + n:
                    break
                frames.append(bytes(self.buf[HEADER.size : HEADER.size + n]))
                del self.buf[: HEADER.size + n]
            if len(chunk) < self.CHUNK:  # the pipe had no more: skip the read that would only say so
                return frames


def decode(payload: bytes) -> dict[str, Any]:
    """A worker's message: a JSON object; raises ProtocolError for anything else."""
    try:
        message = json.loads(payload)
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise ProtocolError(f"not JSON: {exc}") from None
    if type(message) is not dict:
        raise ProtocolError("not a JSON object")
    return message


def decode_verdict(data: Any) -> Verdict:
    """The Verdict in a worker's result message; ProtocolError when its shape is wrong. A non-finite score is
    refused in the worker already; here it is checked again, as everything a worker sends."""
    if type(data) is not dict:
        raise ProtocolError("verdict is not an object")
    score, status, reason = data.get("score"), data.get("status"), data.get("reason")
    extracted, details = data.get("extracted"), data.get("details")
    if type(score) not in (int, float) or not math.isfinite(score):
        raise ProtocolError(f"bad score {str(score)[:50]!r}")
    if type(status) is not str or status not in _STATUSES:
        raise ProtocolError(f"bad status {str(status)[:50]!r}")
    if type(reason) is not str or (extracted is not None and type(extracted) is not str) or type(details) is not dict:
        raise ProtocolError("bad reason, extracted or details")
    return Verdict(float(score), _STATUSES[status], reason[:MAX_REASON_CHARS], extracted, details)
