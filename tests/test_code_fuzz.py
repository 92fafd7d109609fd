"""Property-based fuzzing of the checker's side of the channel: random bytes, mutated valid messages and
hostile frames go to the decoder and through a real pipe to a test that calls the program. Whatever
arrives, decoding takes bounded time and memory and ends in a value or the codec's own error, and a test
ends in a result: nothing reaches the caller as an exception."""

from __future__ import annotations

import math
import os
import struct
import time
import tracemalloc

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from code_sandbox_checks import assert_no_trace, sandbox_base  # noqa: F401 - a fixture
from rlvr.verifiers import Verdict, verify

from rlvr.verifiers.code import codec
from rlvr.verifiers.code.channel import Channel
from rlvr.verifiers.code import harness
from rlvr.verifiers.code.harness import Remote, Session, _one_test

pytestmark = pytest.mark.filterwarnings("ignore:Generating overly large repr")
SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
COST = 1 << 20  # a small cost cap, so the memory bound is easy to check

leaves = st.one_of(
    st.none(), st.booleans(), st.integers(), st.integers(min_value=-(2 ** 1000), max_value=2 ** 1000),
    st.floats(allow_nan=False), st.complex_numbers(allow_nan=False), st.text(), st.binary(),
    st.fractions(), st.decimals(allow_nan=False), st.dates(), st.datetimes(), st.times(), st.timedeltas(),
)
hashable = st.recursive(leaves, lambda inner: st.tuples(inner, inner) | st.frozensets(inner, max_size=4),
                        max_leaves=8)
numeric_lists = (  # long enough to travel packed, unless a member does not fit
    st.lists(st.integers(min_value=-(2 ** 63), max_value=2 ** 63 - 1), min_size=8, max_size=40)
    | st.lists(st.floats(allow_nan=False), min_size=8, max_size=40)
    | st.lists(st.integers() | st.floats(allow_nan=False) | st.booleans(), min_size=8, max_size=40)
)
values = st.recursive(
    leaves | numeric_lists,
    lambda inner: st.lists(inner, max_size=6) | st.tuples(inner, inner) | st.sets(hashable, max_size=6)
    | st.dictionaries(hashable, inner, max_size=6),
    max_leaves=40,
)


def deref(tag, number, name):
    return (tag, number, name)


def decode_bounded(data: bytes):
    """Decode under tracemalloc and a stopwatch; the result, or the codec's error, is returned."""
    tracemalloc.start()
    t0, cpu0 = time.monotonic(), time.process_time()
    try:
        result = codec.decode(data, deref, max_cost=COST, deadline=t0 + 5, clock=time.monotonic)
    except codec.CodecError as exc:
        result = exc
    finally:
        took = time.process_time() - cpu0  # decoding's own work: linear in the input, whatever the load
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    assert took < 2.0, took
    assert peak < 8 * COST + 4 * len(data), peak
    return result


def same(a, b) -> bool:
    """Equal and of the same types all the way down (1, 1.0 and True are not the same)."""
    if type(a) is not type(b):
        return False
    if type(a) in (list, tuple):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if type(a) is dict:
        return a.keys() == b.keys() and all(same(v, b[k]) and same(k, next(j for j in b if j == k)) for k, v in a.items())
    return a == b and repr(a) == repr(b) if type(a) in (float, complex) else a == b


@SETTINGS
@given(values)
def test_values_round_trip(value):
    assert same(codec.decode(codec.encode(value)), value)


@SETTINGS
@given(st.binary(max_size=8192))
def test_random_bytes_decode_in_bounded_time_and_memory(data):
    decode_bounded(data)


@st.composite
def mutated(draw):
    data = bytearray(codec.encode(draw(values)))
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["flip", "truncate", "insert", "count", "repeat"]))
        at = draw(st.integers(0, max(0, len(data) - 1)))
        if kind == "flip" and data:
            data[at] = draw(st.integers(0, 255))
        elif kind == "truncate":
            del data[at:]
        elif kind == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=16))
        elif kind == "count":  # a container claiming a huge number of members
            data[at:at] = draw(st.sampled_from([b"l", b"S", b"d", b"t", b"z"])) + b"\xff\xff\xff\xff\x0f"
        else:  # a stretch repeated: many members sharing one hash, or a long run of small ones
            data[at:at] = bytes(data[at : at + 8]) * draw(st.integers(1, 2000))
    return bytes(data)


@SETTINGS
@given(mutated())
def test_mutated_messages_decode_in_bounded_time_and_memory(data):
    decode_bounded(data)


def test_colliding_and_deep_structures_are_refused_cheaply():
    M = 2 ** 61 - 1
    header = bytearray(b"S")
    codec._varint(header, 5000)
    colliding = bytes(header) + b"".join(codec.encode(i * M) for i in range(5000))
    assert isinstance(decode_bounded(colliding), codec.TooLarge)
    deep = b"t\x01" * (codec.MAX_TUPLE_DEPTH + 10) + b"N"
    assert isinstance(decode_bounded(deep), codec.TooLarge)
    assert math.isinf(codec.decode(codec.encode(float("inf"))))


class _NoSandbox:
    """Stands in for the sandbox object: the replies come from the test, through a real pipe."""

    def kill(self, proc) -> None:
        pass


def session_reading(reply: bytes, close: bool) -> tuple[Session, int]:
    replies_r, replies_w = os.pipe()
    requests_r, requests_w = os.pipe()
    os.write(replies_w, reply)
    if close:
        os.close(replies_w)
    session = Session.__new__(Session)
    session.sandbox, session.proc = _NoSandbox(), None
    session.channel = Channel(replies_r, requests_w, [], 1024)
    session.deadline = time.monotonic() + 0.3
    session.dead, session.requests = False, 0
    return session, (requests_r if close else requests_r, replies_w)


frames = st.one_of(
    mutated().map(lambda body: struct.pack(">I", len(body)) + body),
    values.map(lambda v: codec.encode(("ok", v))).map(lambda body: struct.pack(">I", len(body)) + body),
    st.binary(max_size=4096),
    st.tuples(st.integers(0, 2 ** 32 - 1), st.binary(max_size=64)).map(lambda t: struct.pack(">I", t[0]) + t[1]),
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(frames, st.booleans(), st.sampled_from(["assert f(1) == 2", "assert list(f(1)) == [1]", "assert 3 in f(1)",
                                               "assert f(1)", "x = f(1)\nassert x == x"]))
def test_hostile_replies_end_in_a_test_result(reply, close, test):
    session, fds = session_reading(reply[:60_000], close)
    t0 = time.monotonic()
    try:
        result = _one_test(test, 0, {"f": Remote(session, 1, "function")}, session)
    finally:
        session.close()
        for fd in fds:
            try:
                os.close(fd)
            except OSError:
                pass
    assert isinstance(result, harness.TestResult) and result.status in ("passed", "failed", "timeout", "error")
    assert time.monotonic() - t0 < 3.0


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(frames.map(lambda frame: frame[:8192]))
def test_hostile_replies_from_a_real_sandbox(reply):
    """The same frames, written onto the channel by a program in a real bubblewrap sandbox."""
    program = (
        "import json, os, sys\nwfd = json.loads(sys.argv[2])['channel'][1]\n"
        f"def f(x):\n    os.write(wfd, {reply!r})\n    return x\n"
    )
    t0 = time.monotonic()
    v = verify("code", f"```python\n{program}\n```", {"tests": ["assert f(1) == 1", "assert f(2) == 2"]},
               timeout_s=1.0)
    assert isinstance(v, Verdict) and time.monotonic() - t0 < 8
    assert_no_trace()
