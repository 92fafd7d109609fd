"""The "self_verify" verifier: a model's rating of an answer, checked against the rating the outcome verifier implies.

A verification task (rlvr.rollout.stage_self_verify) shows the model a question and an answer and asks for a rating;
its reference is what the outcome verifier said about that answer. Two schemes:

- ``scheme="rise"`` (Liu et al., 2025, RISE, arXiv:2505.13445; the released verifier ``ver_reward_func`` in
  xyliu-cs/RISE ``verl_utils/reward/reward_func.py``): the reference is a rating ``"1.0"`` (correct), ``"-0.5"``
  (answered, wrong) or ``"-1.0"`` (no answer). The response scores 1.0 when its rating equals the reference
  (numerically: ``\\boxed{1}`` matches ``"1.0"``), -0.5 when it gives another rating, -1.0 when it gives none.
- ``scheme="critique"`` (Xi et al., 2025, Critique-RL, arXiv:2510.24320, stage I: the discriminability reward
  r_dis = 1(f(x, y, c) = r_oracle(x, y)); the released ``DiscriminationRewardFunc`` in WooooDyy/Critique-RL
  ``RL/Critique-RL/reward/reward_func.py`` pays 1.0 for the right judgement and -1.0 for a wrong or missing one):
  the reference is ``"correct"`` or ``"wrong"``; the response scores 1.0 when its judgement matches, else -1.0.

Where the rating is read (``format``):

- ``"boxed"``: the content of the response's last ``\\boxed{}`` (RISE's prompt asks for it). Under ``rise`` it must
  be a number; any other content is a rating that does not match (-0.5), as in RISE. Under ``critique`` it is a
  judgement word or number (below).
- ``"plain"``: the response's leading number or word, for short templates a small model can follow
  (``"Q:12+34= A:46 ok? "`` -> ``"y"``). Words: ``y``/``yes``/``correct``/``right``/``ok``/``true`` rate 1 (correct),
  ``n``/``no``/``wrong``/``incorrect``/``false`` rate -0.5 (wrong), ``none``/``missing`` rate -1 (no answer);
  a response that starts with anything else has no rating.

Under ``critique`` a number is a judgement too: above 0 is correct, 0 or below is wrong. Verdicts: ``correct``
(reason ``rating_match``), ``incorrect`` (``rating_mismatch``, ``no_rating``), ``error`` (``bad_reference``,
``bad_option``). ``extracted`` is the rating as read. Linear time in the response; only its last
``MAX_RESPONSE_CHARS`` characters are searched.
"""

from __future__ import annotations

import re
from fractions import Fraction
from typing import Any

from rlvr.verifiers.base import Status, Verdict
from rlvr.verifiers.math.extract import boxed_spans
from rlvr.verifiers.registry import register_verifier

MAX_RESPONSE_CHARS = 20_000
SCHEMES = ("rise", "critique")
FORMATS = ("boxed", "plain")

# RISE's three ratings (the generation reward of an answer, and of a verification)
CORRECT_RATING, WRONG_RATING, MISSING_RATING = Fraction(1), Fraction(-1, 2), Fraction(-1)
CRITIQUE_LABELS = ("correct", "wrong")

RATING_WORDS: dict[str, Fraction] = {
    **dict.fromkeys(("y", "yes", "correct", "right", "ok", "true"), CORRECT_RATING),
    **dict.fromkeys(("n", "no", "wrong", "incorrect", "false"), WRONG_RATING),
    **dict.fromkeys(("none", "missing"), MISSING_RATING),
}

_NUMBER = re.compile(r"[+-]?(?:\d{1,6}(?:\.\d{1,6})?|\.\d{1,6})")
_LEADING = re.compile(r"\s*([+\-\u2212]?(?:\d{1,6}(?:\.\d{1,6})?|\.\d{1,6})|[A-Za-z]{1,20})")


def number(text: str) -> Fraction | None:
    """The value of a short decimal (``"1"``, ``"1.0"``, ``"-0.5"``, ``"+.5"``), else None."""
    text = text.strip().replace("\u2212", "-").strip("$ ")
    return Fraction(text) if _NUMBER.fullmatch(text) else None


def rating_of(text: str, *, words: bool) -> Fraction | None:
    """A rating from a number, or (``words``) from a rating word; None when the text is neither."""
    value = number(text)
    if value is None and words:
        value = RATING_WORDS.get(text.strip().strip("$ .!").lower())
    return value


def read_rating(response: str, fmt: str) -> str | None:
    """The text of the response's rating: its last ``\\boxed{}`` (``boxed``) or its leading number or word
    (``plain``); None when there is none."""
    if fmt == "boxed":
        spans = boxed_spans(response)
        return spans[-1][1].strip() if spans else None
    m = _LEADING.match(response)
    return m.group(1) if m else None


def rise_reference(reference: Any) -> Fraction | None:
    if isinstance(reference, bool) or not isinstance(reference, (str, int, float)):
        return None
    value = number(str(reference))
    return value if value in (CORRECT_RATING, WRONG_RATING, MISSING_RATING) else None


def critique_reference(reference: Any) -> str | None:
    if not isinstance(reference, str):
        return None
    label = reference.strip().lower()
    return {"incorrect": "wrong"}.get(label, label) if label in (*CRITIQUE_LABELS, "incorrect") else None


def _judgement(rating: Fraction | None) -> str | None:
    return None if rating is None else "correct" if rating > 0 else "wrong"


@register_verifier("self_verify")
def self_verify(response: str, reference: Any, *, scheme: str = "rise", format: str = "boxed",  # noqa: A002
                timeout_s: float | None = None) -> Verdict:
    """The score of a rating of an answer against the outcome verifier's (module docstring)."""
    if scheme not in SCHEMES or format not in FORMATS:
        return Verdict(0.0, Status.ERROR, "bad_option",
                       details={"error": f"scheme must be one of {', '.join(SCHEMES)} and format one of "
                                         f"{', '.join(FORMATS)}, got scheme={scheme!r} format={format!r}"})
    expected: Any = rise_reference(reference) if scheme == "rise" else critique_reference(reference)
    if expected is None:
        wanted = '"1.0", "-0.5" or "-1.0"' if scheme == "rise" else '"correct" or "wrong"'
        return Verdict(0.0, Status.ERROR, "bad_reference",
                       details={"error": f"a {scheme} reference is {wanted}", "reference": repr(reference)[:80]})
    if not isinstance(response, str):
        return Verdict(0.0, Status.ERROR, "bad_response",
                       details={"error": f"response is {type(response).__name__}, expected str"})
    text = read_rating(response[-MAX_RESPONSE_CHARS:] if format == "boxed" else response[:200], format)
    words = format == "plain" or scheme == "critique"
    rating = None if text is None else rating_of(text, words=words)
    if scheme == "rise":
        if text is None or (rating is None and format == "plain"):
            return Verdict(float(MISSING_RATING), Status.INCORRECT, "no_rating", extracted=text)
        if rating == expected:
            return Verdict(float(CORRECT_RATING), Status.CORRECT, "rating_match", extracted=text)
        return Verdict(float(WRONG_RATING), Status.INCORRECT, "rating_mismatch", extracted=text)
    judged = _judgement(rating)
    if judged is None:
        return Verdict(-1.0, Status.INCORRECT, "no_rating", extracted=text)
    if judged == expected:
        return Verdict(1.0, Status.CORRECT, "rating_match", extracted=text)
    return Verdict(-1.0, Status.INCORRECT, "rating_mismatch", extracted=text)
