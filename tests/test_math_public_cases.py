"""The public comparison (tests/data/math_public_cases.jsonl, sources cited in docs/verifiers.md): rlvr agrees
with the expected verdict on every case, and is right at least as often as Math-Verify on each source."""

from __future__ import annotations

import importlib.util
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("math_public_cases", ROOT / "benchmarks" / "math_public_cases.py")
compare = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(compare)  # type: ignore[union-attr]
CASES = compare.load_cases()
SOURCES = list(dict.fromkeys(c["source"] for c in CASES))


def test_every_source_has_cases_on_both_sides():
    assert len(SOURCES) >= 8
    for source in SOURCES:
        rows = [c for c in CASES if c["source"] == source]
        assert len(rows) >= 15, source
        assert {c["expected"] for c in rows} == {True, False}, source
        assert all(isinstance(c["response"], str) and isinstance(c["reference"], str) for c in rows)


@pytest.mark.parametrize("case", CASES, ids=[f"{c['source']}-{i}" for i, c in enumerate(CASES)])
def test_case(case):
    assert compare.rlvr_verdict(case) == case["expected"], case


def test_at_least_as_often_right_as_math_verify_on_every_source():
    pytest.importorskip("math_verify")
    verdicts = {"rlvr": [compare.rlvr_verdict(c) for c in CASES],
                "Math-Verify": [compare.math_verify_verdict(c) for c in CASES]}
    for source, _, right in compare.table(CASES, verdicts):
        assert right["rlvr"] >= right["Math-Verify"], (source, right)
