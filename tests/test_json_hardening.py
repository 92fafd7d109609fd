"""The "json" verifier on JSON that parsers disagree about, on formats, and on schemas whose checks a hostile
instance can make slow: every call ends within its budget, from any thread."""

import json
import threading
import time

import pytest

from rlvr.verifiers import Status, verify
from rlvr.verifiers.json_schema import canonical

SLACK_S = 0.5 + 1.0  # the promise is timeout_s + 0.5 s; the extra second absorbs a loaded test machine


def _timed(response, reference, **options):
    start = time.perf_counter()
    v = verify("json", response, reference, **options)
    return v, time.perf_counter() - start


# ------------------------------------------------------------------------------------ ambiguous JSON

@pytest.mark.parametrize(
    "response, reason",
    [
        ('{"a": 1, "a": 2}', "duplicate_key"),
        ('{"ok": true, "x": {"k": 1, "k": 1}}', "duplicate_key"),  # equal values are still two keys
        ('[{"a": 1}, {"b": 1, "b": 2}]', "duplicate_key"),
        ('```json\n{"score": 0, "score": 10}\n```', "duplicate_key"),
        ("1e999", "non_finite_number"),
        ('{"a": -1e999}', "non_finite_number"),
        ('[1.5, 2E400]', "non_finite_number"),
        ("NaN", "non_finite_number"),
        ('{"a": -Infinity}', "non_finite_number"),
        ('{"a": 1e-999}', "number_underflow"),  # not zero, but a double reads it as 0.0
        ('{"a": 1,}', "invalid_json"),
    ],
)
def test_ambiguous_json_is_rejected(response, reason):
    v = verify("json", response, None)
    assert (v.score, v.status, v.reason) == (0.0, Status.INCORRECT, reason), v


@pytest.mark.parametrize(
    "response",
    ['{"a": 1, "b": {"a": 2}}', '[{"a": 1}, {"a": 2}]', "1.7976931348623157e308", '{"a": 5e-324}', '{"a": 0e-999}', '{"": 1, " ": 2}'],
)
def test_same_key_in_different_objects_and_extreme_finite_numbers_are_fine(response):
    v = verify("json", response, None)
    assert (v.score, v.reason) == (1.0, "valid_json"), v


def test_duplicate_key_cannot_satisfy_equals_by_parser_choice():
    v = verify("json", '{"answer": 3, "answer": 4}', {"equals": {"answer": 4}})
    assert (v.score, v.reason) == (0.0, "duplicate_key"), v


# ------------------------------------------------------------------------------------------- formats

FORMAT_CASES = [  # (format, accepted value, rejected value)
    ("email", "a@b.org", "not an email"),
    ("date", "2024-02-29", "2023-02-29"),
    ("date-time", "2024-05-01T12:30:00Z", "2024-05-01 12:30"),
    ("date-time", "2024-05-01T23:59:60+02:00", "2024-13-01T00:00:00Z"),
    ("time", "08:30:00.5-05:00", "25:00:00Z"),
    ("uri", "https://example.org/a?b=%20c", "example.org/no scheme"),
    ("uri", "urn:isbn:0451450523", "http://bad%zzescape"),
    ("uri-reference", "../a/b#frag", "has space"),
    ("hostname", "example.co.uk", "-bad-.example"),
    ("ipv4", "192.168.0.1", "256.1.1.1"),
    ("ipv6", "::1", "1::2::3"),
    ("uuid", "12345678-1234-5678-1234-567812345678", "1234"),
    ("json-pointer", "/a/b~1c", "a/b"),
    ("regex", "^[a-z]+$", "(unclosed"),
]


@pytest.mark.parametrize("fmt, good, bad", FORMAT_CASES)
def test_formats_are_asserted(fmt, good, bad):
    schema = {"schema": {"type": "string", "format": fmt}}
    ok = verify("json", f'"{good}"', schema)
    assert (ok.score, ok.reason) == (1.0, "schema_valid"), ok
    no = verify("json", f'"{bad}"', schema)
    assert (no.score, no.status, no.reason) == (0.0, Status.INCORRECT, "schema_violation"), no


@pytest.mark.parametrize("fmt", ["iri", "made-up-format", "duration", "uri-template"])
def test_unsupported_formats_are_refused_not_passed(fmt):
    schema = {"schema": {"type": "object", "properties": {"x": {"type": "string", "format": fmt}}}}
    v = verify("json", '{"x": "anything"}', schema)
    assert (v.score, v.status, v.reason) == (0.0, Status.ERROR, "unsupported_format"), v
    assert fmt in v.details["error"]
    off = verify("json", '{"x": "anything"}', schema, check_formats=False)
    assert (off.score, off.reason) == (1.0, "schema_valid"), off


def test_format_named_inside_data_keywords_is_not_a_format():
    schema = {"schema": {"const": {"format": "made-up"}}}
    assert verify("json", '{"format": "made-up"}', schema).score == 1.0


# ----------------------------------------------------------------------------------------- uniqueness

@pytest.mark.parametrize(
    "items, unique",
    [
        ([1, 1.0], False),
        ([1, True], True),
        ([0, False, None, "", [], {}], True),
        ([{"a": 1, "b": 2}, {"b": 2, "a": 1}], False),
        ([[1, 2], [2, 1]], True),
        ([{"a": [1, {"b": None}]}, {"a": [1, {"b": None}]}], False),
    ],
)
def test_unique_items_follow_json_equality(items, unique):
    if len(items) == 2:
        assert (canonical(items[0]) == canonical(items[1])) is not unique
    v = verify("json", json.dumps(items), {"schema": {"uniqueItems": True}})
    assert v.score == (1.0 if unique else 0.0), v


def test_unique_items_on_a_huge_unsortable_array_is_linear():
    # objects cannot be sorted, so jsonschema compares every pair: 40,000 items took minutes
    items = ",".join(f'{{"i": {i}}}' for i in range(40_000))
    v, elapsed = _timed(f"[{items}]", {"schema": {"type": "array", "uniqueItems": True}}, timeout_s=5)
    assert (v.score, v.reason) == (1.0, "schema_valid"), v
    assert elapsed < 5 + SLACK_S
    v, _ = _timed(f'[{items}, {{"i": 7}}]', {"schema": {"uniqueItems": True}}, timeout_s=5)
    assert (v.score, v.reason) == (0.0, "schema_violation"), v
    assert "repeats item 7" in v.details["errors"][0]["message"]


# ------------------------------------------------------------------------------------ patterns under budget

EVIL = "^(a|a)*$"  # exponential backtracking in re on "aaaa...!"


@pytest.mark.parametrize(
    "schema, response",
    [
        ({"type": "string", "pattern": EVIL}, '"' + "a" * 40 + '!"'),
        ({"type": "object", "patternProperties": {EVIL: {"type": "integer"}}}, '{"' + "a" * 40 + '!": 1}'),
        (
            {"type": "object", "patternProperties": {EVIL: {}}, "additionalProperties": False},
            '{"' + "a" * 40 + '!": 1}',
        ),
        ({"type": "array", "items": {"pattern": "^(\\d|\\d)*$"}}, '["' + "1" * 40 + 'x"]'),
    ],
)
def test_catastrophic_patterns_end_at_the_budget(schema, response):
    v, elapsed = _timed(response, {"schema": schema}, timeout_s=1.0)
    assert (v.score, v.status, v.reason) == (0.0, Status.TIMEOUT, "timeout"), v
    assert elapsed < 1.0 + SLACK_S


def test_patterns_still_decide_when_fast():
    schema = {"schema": {"type": "object", "patternProperties": {"^x_": {"type": "integer"}},
                         "additionalProperties": False}}
    assert verify("json", '{"x_a": 1, "x_b": 2}', schema).score == 1.0
    bad = verify("json", '{"x_a": "1"}', schema)
    assert (bad.score, bad.details["errors"][0]["path"]) == (0.0, "$.x_a"), bad
    extra = verify("json", '{"y": 1}', schema)
    assert extra.score == 0.0 and "'y'" in extra.details["errors"][0]["message"], extra
    assert verify("json", '"abc-123"', {"schema": {"pattern": "^[a-z]+-\\d+$"}}).score == 1.0
    assert verify("json", '"abc"', {"schema": {"pattern": "^[a-z]+-\\d+$"}}).score == 0.0


def test_a_slow_schema_without_patterns_ends_at_the_budget():
    # every item is tried against 40 alternatives, each failing: slow, but stopped between keyword calls
    schema = {"type": "array", "items": {"anyOf": [{"type": "string", "minLength": n} for n in range(40)]}}
    items = ",".join(['"x"'] * 200_000)
    v, elapsed = _timed(f"[{items}]", {"schema": schema}, timeout_s=0.5)
    assert (v.status, v.reason) == (Status.TIMEOUT, "timeout"), v
    assert elapsed < 0.5 + SLACK_S + 1.0  # parsing 200,000 items precedes the budgeted part


def test_unevaluated_with_pattern_properties_is_refused():
    schema = {"schema": {"patternProperties": {"^a": {}}, "unevaluatedProperties": False}}
    v = verify("json", '{"a": 1}', schema)
    assert (v.status, v.reason) == (Status.ERROR, "unsupported_schema"), v


def test_budget_holds_from_many_threads():
    schema = {"schema": {"type": "string", "pattern": EVIL}}
    response = '"' + "a" * 40 + '!"'
    results = []

    def call():
        results.append(_timed(response, schema, timeout_s=1.0))

    threads = [threading.Thread(target=call) for _ in range(4)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 4
    for v, elapsed in results:
        assert v.status == Status.TIMEOUT, v
        assert elapsed < 1.0 + SLACK_S
    assert time.perf_counter() - start < 1.0 + SLACK_S


@pytest.mark.parametrize("timeout_s", [0, -1, float("nan"), "5", True])
def test_bad_timeout_is_an_error_verdict(timeout_s):
    v = verify("json", "{}", None, timeout_s=timeout_s)
    assert (v.status, v.reason) == (Status.ERROR, "bad_option"), v
