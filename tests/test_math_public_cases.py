"""The public comparison (tests/data/math_public_*.jsonl; sources and disagreements in docs/math_public_comparison.md):
rlvr agrees with the expected verdict on every case except the known, documented ones
(tests/data/math_public_known_wrong.json, whose verdicts are pinned so a fix shows up), and is right at least as
often as Math-Verify on each source once those are set aside."""

from __future__ import annotations

import functools
import importlib.util
import json
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("math_public_cases", ROOT / "benchmarks" / "math_public_cases.py")
compare = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(compare)  # type: ignore[union-attr]
CASES = compare.load_cases()
SOURCES = list(dict.fromkeys(c["source"] for c in CASES))
KNOWN_FILE = compare.KNOWN_WRONG
KNOWN = json.loads(KNOWN_FILE.read_text(encoding="utf-8"))
KNOWN_WRONG: dict[str, str] = KNOWN["cases"]  # case id -> family


@functools.lru_cache(maxsize=None)
def rlvr_verdicts() -> tuple[bool, ...]:
    return tuple(compare.rlvr_verdict(c) for c in CASES)


def test_every_source_has_cases_on_both_sides():
    assert len(SOURCES) >= 12
    for source in SOURCES:
        rows = [c for c in CASES if c["source"] == source]
        assert len(rows) >= 4, source
        assert all(isinstance(c.get("response", c.get("answer")), str) and isinstance(c["reference"], str)
                   for c in rows), source
    assert {c["expected"] for c in CASES} == {True, False}


def test_cases_from_other_projects_cite_where_they_come_from():
    ids = [c["id"] for c in CASES]
    assert len(ids) == len(set(ids)), "case ids must be unique"
    for c in CASES:
        if c["file"] != compare.CASES.name:
            assert c.get("repo") and c.get("path") and len(c.get("commit", "")) == 40, c["id"]
        if "source_expected" in c:  # a disputed verdict says why
            assert c["source_expected"] != c["expected"] and c.get("note", "").startswith("disputed: "), c["id"]


def test_every_known_disagreement_names_a_case_and_a_family():
    ids = {c["id"] for c in CASES}
    assert set(KNOWN_WRONG) <= ids, set(KNOWN_WRONG) - ids
    for case_id, family in KNOWN_WRONG.items():
        assert family in KNOWN["families"] and KNOWN["families"][family].strip(), case_id


@pytest.mark.parametrize("index", range(len(CASES)), ids=[c["id"] for c in CASES])
def test_case(index):
    case, verdict = CASES[index], rlvr_verdicts()[index]
    if case["id"] in KNOWN_WRONG:
        assert verdict != case["expected"], (
            f"rlvr now gets {case['id']} right: run `python benchmarks/math_public_cases.py --prune-known` (family "
            f"{KNOWN_WRONG[case['id']]!r}), then update docs/math_public_comparison.md")
    else:
        assert verdict == case["expected"], case


def test_at_least_as_often_right_as_math_verify_on_every_source():
    pytest.importorskip("math_verify")
    theirs = [compare.math_verify_verdict(c) for c in CASES]
    verdicts = {"rlvr": list(rlvr_verdicts()), "Math-Verify": theirs}
    for source, _, counts in compare.table(CASES, verdicts):
        excused = sum(1 for c, ours, mv in zip(CASES, verdicts["rlvr"], theirs)
                      if c["source"] == source and c["id"] in KNOWN_WRONG and ours != c["expected"]
                      and mv == c["expected"])
        assert counts["rlvr"] + excused >= counts["Math-Verify"], (source, counts, excused)


def test_the_table_counts_each_kind_of_miss():
    cases = [{"source": "s", "expected": e, "id": str(i)} for i, e in enumerate([True, True, False, False, True])]
    ours = [True, False, False, True, False]
    theirs = [True, True, True, True, False]
    [(source, n, counts)] = compare.table(cases, {"rlvr": ours, "Math-Verify": theirs}, [0.001] * 5)
    assert (source, n) == ("s", 5)
    assert (counts["rlvr"], counts["Math-Verify"]) == (2, 2)
    assert (counts["both wrong"], counts["rlvr-only wrong"], counts["Math-Verify-only wrong"]) == (2, 1, 1)
    assert counts["p50 ms"] == pytest.approx(1.0)


def test_references_lose_one_pair_of_delimiters_and_answers_are_presented_boxed():
    assert compare.bare_reference("$x \\in [-2,7]$") == "x \\in [-2,7]"
    assert compare.bare_reference("$$(1, +\\infty)$$") == "(1, +\\infty)"
    assert compare.bare_reference("\\(5\\)") == "5"
    assert compare.bare_reference("$21,16$ or $11$") == "$21,16$ or $11$"  # two spans: kept as written
    assert compare.response_text({"answer": "\\frac{1}{2}"}) == "The final answer is $\\boxed{\\frac{1}{2}}$."
    assert compare.response_text({"response": "r", "answer": "a"}) == "r"
