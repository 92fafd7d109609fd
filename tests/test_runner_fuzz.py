"""Property-based fuzzing of the reward runner: random return values, hostile objects and raw bytes on the
result channel. Whatever comes back, the caller gets a well-formed Verdict within the call's time budget, its
memory stays put, and nothing reaches it as an exception."""

import json
import math
import os
import struct
import time

import pytest
import reward_fns as rf
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from procs import rss_mib, still_works, warm

from rlvr.verifiers import CallableRequest, RewardRunner, Status, Verdict
from rlvr.verifiers.runner import decode

C = CallableRequest
TIMEOUT_S = 2.0
SLACK_S = 8.0  # a worker restart on a loaded 2-core machine, on top of the call's own budget
FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)

leaves = st.one_of(
    st.none(), st.booleans(), st.integers(), st.integers(min_value=-(10**400), max_value=10**400),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=40), st.binary(max_size=20),
    st.complex_numbers(allow_nan=True),
)
values = st.recursive(
    leaves,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.tuples(inner, inner),
        st.frozensets(st.integers(), max_size=3),
        st.dictionaries(st.one_of(st.text(max_size=6), st.integers(), st.booleans(), st.none()), inner, max_size=4),
    ),
    max_leaves=25,
)
verdicts = st.builds(
    Verdict,
    score=st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(), st.booleans(), st.text(max_size=5),
                    st.none()),
    status=st.one_of(st.sampled_from(list(Status)), st.sampled_from([s.value for s in Status]), st.text(max_size=8),
                     st.integers()),
    reason=st.one_of(st.text(max_size=30), st.integers(), st.none()),
    extracted=st.one_of(st.none(), st.text(max_size=30), st.integers()),
    details=st.one_of(st.dictionaries(st.text(max_size=6), values, max_size=5), values),
)


@pytest.fixture(scope="module")
def runner():
    with RewardRunner(workers=2, timeout_s=TIMEOUT_S, memory_mb=1024) as r:
        warm(r)
        yield r




def _well_formed(v: object) -> None:
    assert type(v) is Verdict, v
    assert type(v.status) is Status and type(v.score) is float and math.isfinite(v.score), v
    assert type(v.reason) is str and type(v.details) is dict and (v.extracted is None or type(v.extracted) is str), v


def _score_bounded(runner, requests):
    t0 = time.monotonic()
    out = runner.score(requests)
    assert time.monotonic() - t0 < TIMEOUT_S * len(requests) + SLACK_S
    for v in out:
        _well_formed(v)
    return out


@FUZZ
@given(value=st.one_of(values, verdicts))
def test_any_return_value_becomes_a_well_formed_verdict(runner, value):
    v = _score_bounded(runner, [C(rf.echo, "x", value, cache=False)])[0]
    if isinstance(value, Verdict) and isinstance(value.score, float) and math.isfinite(value.score) \
            and value.status in list(Status) and isinstance(value.reason, str) and isinstance(value.details, dict):
        assert (v.score, v.status) == (value.score, Status(value.status)), (value, v)  # honest verdicts arrive
    if type(value) in (int, float) and math.isfinite(value):
        assert v.score == float(value) and v.reason == "float_reward"


@settings(max_examples=len(rf.HOSTILE_KINDS) * 2, deadline=None, suppress_health_check=list(HealthCheck),
          derandomize=True)
@given(kinds=st.lists(st.sampled_from(rf.HOSTILE_KINDS), min_size=1, max_size=3))
def test_hostile_return_values_never_reach_the_caller(runner, kinds):
    before = rss_mib()
    _score_bounded(runner, [C(rf.hostile_return, str(i), kind, cache=False) for i, kind in enumerate(kinds)])
    assert rss_mib() - before < 100


frames = st.one_of(
    st.binary(max_size=64),
    st.builds(lambda n, body: struct.pack(">I", n) + body, st.integers(0, 2**32 - 1), st.binary(max_size=64)),
    st.builds(lambda text: struct.pack(">I", len(text)) + text,
              values.map(lambda v: json.dumps(v, default=repr).encode())),
    st.builds(lambda seq, verdict: (lambda t: struct.pack(">I", len(t)) + t)(json.dumps(
        {"seq": seq, "verdict": verdict, "retire": False}, default=repr).encode()),
        st.integers(-2, 3), st.dictionaries(st.sampled_from(["score", "status", "reason", "extracted", "details"]),
                                            values, max_size=5)),
)


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(data=frames)
def test_raw_bytes_on_the_result_channel_cost_at_most_the_call(runner, data):
    _score_bounded(runner, [C(rf.writes_raw, "x", data, {"timeout_s": 1.0}, cache=False)])


def test_the_runner_still_works_after_fuzzing(runner):
    still_works(runner)
    assert runner.stats()["workers"] >= 1


# ------------------------------------------------------------------------------ the decoder alone


@settings(max_examples=400, deadline=None, derandomize=True)
@given(payload=st.one_of(st.binary(max_size=300), values.map(lambda v: json.dumps(v, default=repr).encode())))
def test_the_decoder_only_ever_raises_protocol_error(payload):
    try:
        message = decode.decode(payload)
        decode.decode_verdict(message.get("verdict"))
    except decode.ProtocolError:
        pass


@settings(max_examples=200, deadline=None, derandomize=True)
@given(chunks=st.lists(st.binary(max_size=50), max_size=6), cap=st.integers(0, 64))
def test_the_frame_reader_never_holds_more_than_one_capped_frame(chunks, cap):
    r, w = os.pipe()
    os.set_blocking(r, False)
    try:
        reader = decode.FrameReader(r, cap)
        for chunk in chunks:
            os.write(w, chunk)
            try:
                for frame in reader.read():
                    assert len(frame) <= cap
            except decode.ProtocolError:
                break
            assert len(reader.buf) <= decode.HEADER.size + cap  # at most one partial frame is held
    finally:
        os.close(r)
        os.close(w)
