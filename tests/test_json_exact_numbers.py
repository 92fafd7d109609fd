"""The "json" verifier decides numbers on the text they were written with: ``multipleOf`` and the bounds of a schema
exactly in decimal (binary doubles reject 0.3 as a multiple of 0.1), and a number a double cannot hold (1e-400
rounds to zero, 1e400 to infinity) is a clear verdict, never read silently as 0 or inf."""

import pytest

from rlvr.verifiers import Status, verify
from rlvr.verifiers.json_schema import JSONNumber, exact, is_multiple


def multiple_of(m):
    """The number, each item of an array and each value of an object must be a multiple of ``m``."""
    return {"schema": {"multipleOf": m, "items": {"multipleOf": m}, "additionalProperties": {"multipleOf": m}}}


# (response, divisor): right values, most of which binary floating point gets wrong
MULTIPLES = [
    ("0.3", 0.1), ("0.7", 0.1), ("2.3", 0.1), ("-0.3", 0.1), ("0.07", 0.01), ("0.29", 0.01), ("4.35", 0.01),
    ("19.99", 0.01), ("1.15", 0.05), ("0.000003", 0.000001), ("1e-7", 1e-8), ("3", 1.5), ("7.5", 2.5),
    ("1e308", 0.1), ("12345678901234567890.1", 0.1), ("1e300", 1e-300), ("0", 0.1), ("0.0", 0.3), ("9.0", 3),
    ("[0.1, 0.2, 0.3]", 0.1), ('{"price": 10.15}', 0.05), ("0.6000", 0.2),
]
NOT_MULTIPLES = [
    ("0.35", 0.1), ("0.3000000000000001", 0.1), ("0.295", 0.01), ("1.151", 0.05), ("3", 2), ("1.0000001", 1),
    ("1e-9", 1e-8), ("[0.1, 0.25]", 0.1), ("0.30000000000000004", 0.1),
]


@pytest.mark.parametrize("response, divisor", MULTIPLES)
def test_multiple_of_accepts_exact_decimal_multiples(response, divisor):
    v = verify("json", response, multiple_of(divisor))
    assert (v.score, v.reason) == (1.0, "schema_valid"), v


@pytest.mark.parametrize("response, divisor", NOT_MULTIPLES)
def test_multiple_of_rejects_values_that_are_not_multiples(response, divisor):
    v = verify("json", response, multiple_of(divisor))
    assert (v.score, v.status, v.reason) == (0.0, Status.INCORRECT, "schema_violation"), v
    assert "not a multiple" in v.details["errors"][0]["message"]


@pytest.mark.parametrize("response, schema, ok", [
    ("0.1", {"maximum": 0.1}, True),
    ("0.10000000000000001", {"maximum": 0.1}, False),  # a double reads both as 0.1
    ("0.1", {"exclusiveMaximum": 0.1}, False),
    ("0.09999999999999999999", {"exclusiveMaximum": 0.1}, True),
    ("-0.30000000000000001", {"minimum": -0.3}, False),
    ("2.00000000000000000001", {"exclusiveMinimum": 2}, True),
    ("2.0", {"exclusiveMinimum": 2}, False),
])
def test_bounds_are_exact(response, schema, ok):
    v = verify("json", response, {"schema": schema})
    assert v.score == float(ok), v


def test_draft4_boolean_exclusive_bounds_still_work():
    schema = {"$schema": "http://json-schema.org/draft-04/schema#", "maximum": 1, "exclusiveMaximum": True}
    assert verify("json", "1", {"schema": schema}).score == 0.0
    assert verify("json", "0.5", {"schema": schema}).score == 1.0


@pytest.mark.parametrize("response, reason", [
    ("1e-400", "number_underflow"),
    ("-1e-400", "number_underflow"),
    ('{"a": 2.4e-324}', "number_underflow"),
    ("[0.0000000000000000000000001e-330]", "number_underflow"),
    ("1e400", "non_finite_number"),
    ('{"a": -1.8e308}', "non_finite_number"),
    ("[1, 1e99999]", "non_finite_number"),
])
def test_numbers_a_double_cannot_hold_are_rejected(response, reason):
    v = verify("json", response, None)
    assert (v.score, v.status, v.reason) == (0.0, Status.INCORRECT, reason), v
    # and never satisfy a check they would pass as 0 or inf
    assert verify("json", response, {"schema": {"maximum": 0}}).score == 0.0
    assert verify("json", response, {"equals": 0}).score == 0.0


@pytest.mark.parametrize("response", ["0e-400", "0.000e999", "-0.0", "5e-324", "2.2250738585072014e-308",
                                      "1.7976931348623157e308"])
def test_true_zeros_and_extreme_doubles_are_valid(response):
    assert verify("json", response, None).reason == "valid_json"


def test_exact_values_and_the_literal():
    assert exact(JSONNumber("0.10")) == exact(0.1) == exact(JSONNumber("1e-1"))
    assert float(JSONNumber("0.3")) == 0.3 and JSONNumber("0.3").literal == "0.3"
    assert is_multiple(JSONNumber("0.3"), 0.1) and not is_multiple(0.1 + 0.2, 0.1)  # the float 0.30000000000000004
    assert is_multiple(10**30, 0.5) and not is_multiple(10**30 + 1, 2)


def test_a_long_literal_stays_fast():
    import time

    t0 = time.perf_counter()
    v = verify("json", "0." + "3" * 200_000 + "e-5", multiple_of(1e-300))
    assert v.reason == "schema_violation" and time.perf_counter() - t0 < 2.0
