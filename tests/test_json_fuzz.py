"""Random and hostile text through the "json" verifier: always a verdict within the budget, never an exception."""

import json
import math
import time

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from rlvr.verifiers import Status, Verdict, verify  # noqa: E402

PIECES = ['{', '}', '[', ']', '"a"', '"b"', ':', ',', '1', '1e999', '-0', 'NaN', 'Infinity', 'true', 'null', ' ',
          '"\\u0000"', '"\\ud800"', '```json\n', '\n```', '"aaaaaaaaaaaaaaaaaaaaaaa!"', '1.5', '123456789012345678901']
texts = st.lists(st.sampled_from(PIECES), max_size=60).map("".join) | st.text(max_size=200)
SCHEMAS = [
    None,
    {"schema": {"type": "object", "properties": {"a": {"pattern": "^(a|a)*$"}}}},
    {"schema": {"type": "array", "uniqueItems": True, "items": {"format": "date-time"}}},
    {"schema": {"patternProperties": {"^(a+)+$": {"type": "integer"}}, "additionalProperties": False}},
    {"equals": {"a": 1}},
]
FAST = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FAST
@given(response=texts, reference=st.sampled_from(SCHEMAS))
def test_json_always_gives_a_verdict_in_time(response, reference):
    start = time.perf_counter()
    v = verify("json", response, reference, timeout_s=0.5)
    assert time.perf_counter() - start < 0.5 + 1.5
    assert isinstance(v, Verdict) and isinstance(v.status, Status)
    assert math.isfinite(v.score) and v.score in (0.0, 1.0)
    assert v.status != Status.ERROR, v


@FAST
@given(value=st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=3), inner, max_size=4),
    max_leaves=20,
))
def test_any_json_value_round_trips_as_valid_and_equal(value):
    text = json.dumps(value)
    v = verify("json", text, {"equals": value})
    assert (v.score, v.reason) == (1.0, "json_equal"), (text, v)
