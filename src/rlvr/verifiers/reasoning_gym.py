"""reasoning-gym's scorers as a verifier: "reasoning_gym".

    verify("reasoning_gym", "... <answer>-4</answer>", {"dataset": "basic_arithmetic", "entry": entry})

``entry`` is the row reasoning-gym generated (question, answer, metadata); the score is exactly what the
dataset's own ``score_answer(answer, entry)`` returns for the answer pulled from the response. By default the
answer is the text of the last ``<answer>...</answer>`` block, as reasoning-gym's ``extract_answer`` takes it;
``extract="raw"`` passes the whole response; ``binary=True`` turns partial credit into 0 (docs/data.md shows
which scorers give partial credit to answers that merely contain the gold one). Scorers are third-party code that parses model text, so they run
in the runner's supervised worker processes. Which scorers can be gamed is listed in docs/data.md.
"""

from __future__ import annotations

import functools
import re
from typing import Any

from rlvr.verifiers.base import Status, Verdict
from rlvr.verifiers.registry import register_verifier

_ANSWER = re.compile(r"<answer>\s?(.*?)\s?</answer>", re.DOTALL)
EXTRACTORS = ("answer_tag", "raw")


def extract_answer(response: str) -> str | None:
    """The stripped text of the last ``<answer>`` block (reasoning-gym's rule), or None when there is none."""
    last = None
    for last in _ANSWER.finditer(response):
        pass
    return last.group(1).strip() if last else None


@functools.lru_cache(maxsize=None)
def scorer(dataset: str):
    """The ``score_answer`` of a reasoning-gym dataset, built once per process."""
    try:
        import reasoning_gym
    except ImportError:
        raise ImportError("the reasoning_gym verifier needs the 'reasoning-gym' library: pip install 'rlvr[data]'") from None
    return reasoning_gym.get_score_answer_fn(dataset)


def _error(reason: str, message: str) -> Verdict:
    return Verdict(0.0, Status.ERROR, reason, details={"error": message})


@register_verifier("reasoning_gym", isolation="process")
def reasoning_gym_verifier(
    response: str,
    reference: Any,
    *,
    extract: str = "answer_tag",
    binary: bool = False,
    timeout_s: float | None = None,  # the runner's budget
) -> Verdict:
    """Score ``response`` with the scorer of ``reference["dataset"]`` (module docstring)."""
    if not isinstance(response, str):
        return _error("bad_response", f"response is {type(response).__name__}, expected str")
    if extract not in EXTRACTORS:
        return _error("bad_options", f"extract must be one of {', '.join(EXTRACTORS)}, got {extract!r}")
    if not isinstance(reference, dict) or not isinstance(reference.get("dataset"), str) or not isinstance(
        reference.get("entry"), dict
    ):
        return _error("bad_reference", "reference must be {'dataset': NAME, 'entry': {question, answer, metadata}}")
    dataset = reference["dataset"]
    try:
        score_answer = scorer(dataset)
    except ValueError:
        return _error("bad_reference", f"reasoning-gym has no dataset {dataset!r}")
    answer = extract_answer(response) if extract == "answer_tag" else response
    if answer is None:
        return Verdict(0.0, Status.UNDECIDABLE, "no_answer_found", details={"dataset": dataset})
    try:
        score = float(score_answer(answer, reference["entry"]))
    except Exception as exc:  # a scorer that chokes on a strange answer gives that answer no credit
        return Verdict(0.0, Status.INCORRECT, "scorer_raised", answer, {"dataset": dataset, "error": repr(exc)[:300]})
    score = min(1.0, max(0.0, score))
    if binary and score < 1.0:  # many scorers give partial credit to any answer containing the gold one
        return Verdict(0.0, Status.INCORRECT, "reasoning_gym_partial_dropped", answer, {"dataset": dataset, "raw_score": score})
    status = Status.CORRECT if score >= 1.0 else Status.INCORRECT if score <= 0.0 else Status.PARTIAL
    return Verdict(score, status, f"reasoning_gym_{status.value}", answer, {"dataset": dataset})
