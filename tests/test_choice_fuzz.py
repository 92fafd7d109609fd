"""Random and hostile text through the "choice" and "format" verifiers: always a verdict, never an exception,
and no credit for a response that only negates the gold letter."""

import math

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from rlvr.verifiers import Status, Verdict, verify  # noqa: E402

PIECES = [
    "A", "B", "C", "D", "E", "I", "a", "c", " ", "\n", "not ", "Answer: ", "The answer is ", "**", "(", ")", "\\boxed{",
    "}", "$", "\\mathrm{", "*2", "=", "-1", ".", ",", " or ", " and ", "neither ", " nor ", "I don't know", "n't ",
    "\u200b", "\ufeff", "\u00a0", "E.g.", "is wrong", "<think>", "</think>", "<answer>", "</answer>", "&nbsp;",
    "<!--", "-->", "Option ", "rule out ",
]
texts = st.lists(st.sampled_from(PIECES), max_size=40).map("".join) | st.text(max_size=200)
FAST = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _valid(v):
    assert isinstance(v, Verdict)
    assert isinstance(v.status, Status) and math.isfinite(v.score) and 0.0 <= v.score <= 1.0
    assert v.status != Status.ERROR, v


@FAST
@given(response=texts, gold=st.sampled_from("ABCDE"))
def test_choice_always_gives_a_verdict(response, gold):
    v = verify("choice", response, gold, choices="ABCDE")
    _valid(v)
    if v.score == 1.0:
        assert v.extracted == gold


@FAST
@given(prefix=texts, gold=st.sampled_from("ABCD"), negation=st.sampled_from(
    ["Answer: not {}", "It is not {}.", "I would not pick {}", "Definitely not ({}).", "{} is wrong.", "Neither {} nor"]
))
def test_a_response_ending_in_a_negated_gold_letter_with_no_other_letter_gets_nothing(prefix, gold, negation):
    prefix = "".join(ch for ch in prefix if ch.upper() not in "ABCDEI")  # no other candidate letters
    v = verify("choice", prefix + "\n" + negation.format(gold), gold)
    assert v.score == 0.0, v


@FAST
@given(response=texts)
def test_format_always_gives_a_verdict(response):
    _valid(verify("format", response, None))
