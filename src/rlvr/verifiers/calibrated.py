"""Verifier wrappers around another verifier (``inner``): ``calibrated`` rewards a stated confidence, ``noisy``
corrupts verdicts at set rates for experiments.

``calibrated`` (docs/rewards.md, "Calibration rewards"): the response states its confidence in a tag,
``... 42 <confidence>0.8</confidence>``; the inner verifier scores the response with the tags removed, and

- ``mode: brier`` (RLCR: Damani et al., 2025, "Beyond Binary Rewards: Training LMs to Reason About Their
  Uncertainty", arXiv 2507.16806, the reward R_RLCR): score = 1[correct] - (q - 1[correct])^2, in [-1, 1]. A missing tag, a
  value that is not a number or one outside [0, 1] is a format failure scored ``missing_score`` (default -2). The
  authors' code (damanimehul/RLCR, ``reward_fns.py``) zeroes the format, accuracy and Brier terms together on such a
  response, and its configs weigh the three 0.5 each: 0.5 (format + correct + 1 - (q - c)^2) = 1 + 0.5 R_RLCR, so a
  format failure (0) sits at R_RLCR = -2, below a confidently wrong answer (-1).
- ``mode: ternary`` (TruthRL: Wei et al., 2025, "TruthRL: Incentivizing Truthful LLMs via Reinforcement Learning",
  arXiv 2509.25760, the ternary reward): +1 correct, 0 abstention (the response holds one of ``abstain_phrases``,
  case-insensitive), -1 otherwise. A correct answer counts as correct even beside a hedge. The tag is optional.

The verdict's status is the inner verifier's (correct, incorrect, or its undecided status), its score the reward,
and its details hold ``confidence`` (the stated q, or None) and ``correct`` (bool, or None when the inner verifier
could not decide), which ``rlvr eval`` turns into calibration metrics (rlvr.eval.calibration).

``noisy``: the inner verdict seen through a noise channel ("Reinforcement Learning with Verifiable yet Noisy
Rewards under Imperfect Verifiers", arXiv 2510.00915): a correct verdict
becomes incorrect (score 0) with probability ``false_negative``, an incorrect or partial one correct (score 1) with
probability ``false_positive``; undecided verdicts pass unchanged. The draw is a hash of (seed, response,
reference), so a verdict is reproducible and independent of the order of the batch (identical responses to one task
flip together).

Options name the inner verifier (``inner``, default "exact") and its options (``inner_options``). Both wrappers are
registered with isolation "threads": a process-isolated inner verifier goes through the supervised runner, others
are called here (they bound their own time).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from typing import Any

from rlvr.verifiers.base import Status, Verdict
from rlvr.verifiers.registry import register_verifier

MODES = ("brier", "ternary")
DEFAULT_ABSTAIN_PHRASES = ("i don't know", "i do not know", "i'm not sure", "i am not sure")
_UNDECIDED = (Status.TIMEOUT, Status.ERROR, Status.UNDECIDABLE)
_TAG_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,63}")
_MAX_CONFIDENCE_CHARS = 64


def brier_reward(correct: bool, confidence: float) -> float:
    """RLCR's reward (Damani et al., 2025, R_RLCR): 1[correct] - (q - 1[correct])^2."""
    c = 1.0 if correct else 0.0
    return c - (confidence - c) ** 2


def ternary_reward(correct: bool, abstained: bool) -> float:
    """TruthRL's ternary reward: +1 correct, 0 abstained, -1 wrong."""
    return 1.0 if correct else 0.0 if abstained else -1.0


def parse_confidence(response: str, tag: str = "confidence") -> tuple[float | None, str, str]:
    """(q, problem, response without the tags): q from the LAST ``<tag>...</tag>`` (as the RLCR code reads it), or
    None with problem "missing_confidence" (no tag) or "bad_confidence" (not a finite number in [0, 1]).

    Tags pair as a lazy regex would pair them (each opening tag with the first closing tag after it), but in one
    linear pass: a lazy ``<tag>(.*?)</tag>`` rescans to the end for every unclosed opening tag, which is quadratic
    on a response of many of them."""
    opens = list(re.finditer(rf"<{re.escape(tag)}>", response, re.IGNORECASE))
    closes = list(re.finditer(rf"</{re.escape(tag)}>", response, re.IGNORECASE))
    spans, j, resume = [], 0, 0
    for o in opens:
        if o.start() < resume:
            continue  # inside the previous pair
        while j < len(closes) and closes[j].start() < o.end():
            j += 1
        if j == len(closes):
            break
        spans.append((o.start(), o.end(), closes[j].start(), closes[j].end()))
        resume = closes[j].end()
    pieces, last = [], 0
    for a, _, _, d in spans:
        pieces.append(response[last:a])
        last = d
    stripped = " ".join([*pieces, response[last:]]) if spans else response
    if not spans:
        return None, "missing_confidence", stripped
    _, b, c, _ = spans[-1]
    text = response[b:c].strip()
    if len(text) > _MAX_CONFIDENCE_CHARS:
        return None, "bad_confidence", stripped
    try:
        q = float(text)
    except ValueError:
        return None, "bad_confidence", stripped
    if not math.isfinite(q) or not 0.0 <= q <= 1.0:
        return None, "bad_confidence", stripped
    return q, "", stripped


def abstains(text: str, phrases: tuple[str, ...]) -> bool:
    """True when ``text`` holds one of ``phrases`` (case-insensitive, typographic apostrophes read as ')."""
    norm = " ".join(text.replace("\u2019", "'").replace("\u2018", "'").lower().split())
    return any(p and " ".join(p.lower().split()) in norm for p in phrases)


def score_inner(inner: str, response: str, reference: Any, options: dict[str, Any], *, prompt: Any = None,
                meta: dict[str, Any] | None = None, truncated: bool = False) -> Verdict:
    """The verdict of the verifier named ``inner``: through the supervised runner when it is process-isolated,
    else called here. An unknown name is an error verdict (a wrapper never raises for its options)."""
    from rlvr.verifiers.registry import get_verifier, verifier_isolation
    from rlvr.verifiers.runner import ScoreRequest, call_verifier, score_batch
    from rlvr.verifiers.runner.calls import keyword_args

    try:
        fn = get_verifier(inner)
        isolation = verifier_isolation(inner)
    except (KeyError, TypeError) as exc:
        return Verdict(0.0, Status.ERROR, "unknown_inner_verifier", details={"error": str(exc)})
    if isolation == "process":
        return score_batch([ScoreRequest(inner, response, reference, dict(options), prompt=prompt, meta=meta,
                                         truncated=truncated)])[0]
    return call_verifier(fn, response, reference, keyword_args(fn, dict(options), prompt, meta, truncated=truncated))


def _options_problem(inner: Any, inner_options: Any) -> str | None:
    if not isinstance(inner, str) or not inner:
        return f"inner: expected a verifier name, got {inner!r}"
    if inner_options is not None and not isinstance(inner_options, dict):
        return f"inner_options: expected a mapping of the inner verifier's options, got {inner_options!r}"
    return None


def _inner_options(inner_options: dict | None, timeout_s: float | None) -> dict[str, Any]:
    opts = dict(inner_options or {})
    if timeout_s is not None:
        opts.setdefault("timeout_s", timeout_s)
    return opts


def _inner_summary(v: Verdict) -> dict[str, Any]:
    return {"score": v.score, "status": v.status.value, "reason": v.reason}


@register_verifier("calibrated", isolation="threads")
def calibrated(response: str, reference: Any = None, *, inner: str = "exact", inner_options: dict | None = None,
               tag: str = "confidence", mode: str = "brier", abstain_phrases: Any = DEFAULT_ABSTAIN_PHRASES,
               missing_score: float = -2.0, prompt: Any = None, meta: dict[str, Any] | None = None,
               truncated: bool = False, timeout_s: float | None = None) -> Verdict:
    """RLCR's Brier reward or TruthRL's ternary reward over the inner verifier's correctness (module docstring)."""
    problem = _options_problem(inner, inner_options)
    if problem is None and mode not in MODES:
        problem = f"mode: expected one of {', '.join(MODES)}, got {mode!r}"
    if problem is None and (not isinstance(tag, str) or not _TAG_NAME.fullmatch(tag)):
        problem = f"tag: expected a tag name such as 'confidence', got {tag!r}"
    if isinstance(abstain_phrases, str):
        abstain_phrases = (abstain_phrases,)
    if problem is None and (not isinstance(abstain_phrases, (list, tuple))
                            or not all(isinstance(p, str) for p in abstain_phrases)):
        problem = f"abstain_phrases: expected a list of strings, got {abstain_phrases!r}"
    if problem is None and (isinstance(missing_score, bool) or not isinstance(missing_score, (int, float))
                            or not math.isfinite(missing_score)):
        problem = f"missing_score: expected a finite number, got {missing_score!r}"
    if problem is not None:
        return Verdict(0.0, Status.ERROR, "bad_options", details={"error": f"calibrated verifier option {problem}"})
    if not isinstance(response, str):
        return Verdict(0.0, Status.ERROR, "bad_response", details={"error": "response is not a string"})

    q, parse_problem, answer = parse_confidence(response, tag)
    verdict = score_inner(inner, answer, reference, _inner_options(inner_options, timeout_s), prompt=prompt,
                          meta=meta, truncated=truncated)
    details: dict[str, Any] = {"mode": mode, "confidence": q, "inner": _inner_summary(verdict)}
    if verdict.status in _UNDECIDED:
        error = verdict.details.get("error") if isinstance(verdict.details, dict) else None
        return Verdict(0.0, verdict.status, f"inner_{verdict.reason}", extracted=verdict.extracted,
                       details={**details, "correct": None, **({"error": error} if error is not None else {})})
    correct = verdict.status is Status.CORRECT
    status = Status.CORRECT if correct else Status.INCORRECT
    details["correct"] = correct
    if mode == "ternary":
        abstained = not correct and abstains(answer, tuple(abstain_phrases))
        details["abstained"] = abstained
        reason = "correct" if correct else "abstained" if abstained else "wrong"
        return Verdict(ternary_reward(correct, abstained), status, reason, extracted=verdict.extracted, details=details)
    if q is None:
        return Verdict(float(missing_score), status, parse_problem, extracted=verdict.extracted, details=details)
    return Verdict(brier_reward(correct, q), status, "brier", extracted=verdict.extracted, details=details)


def flip_draw(seed: Any, response: str, reference: Any) -> float:
    """A uniform number in [0, 1) fixed by (seed, response, reference): SHA-256 of their canonical JSON."""
    key = json.dumps([seed, response, reference], sort_keys=True, ensure_ascii=False, default=repr)
    return int.from_bytes(hashlib.sha256(key.encode("utf-8", "surrogatepass")).digest()[:8], "big") / 2.0**64


def _rate_problem(name: str, rate: Any) -> str | None:
    if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not math.isfinite(rate) or not 0 <= rate <= 1:
        return f"{name}: expected a rate in [0, 1], got {rate!r}"
    return None


@register_verifier("noisy", isolation="threads")
def noisy(response: str, reference: Any = None, *, inner: str = "exact", inner_options: dict | None = None,
          false_positive: float = 0.0, false_negative: float = 0.0, seed: int = 0, prompt: Any = None,
          meta: dict[str, Any] | None = None, truncated: bool = False, timeout_s: float | None = None) -> Verdict:
    """The inner verdict flipped at the rates ``false_positive`` / ``false_negative`` (module docstring)."""
    problem = (_options_problem(inner, inner_options) or _rate_problem("false_positive", false_positive)
               or _rate_problem("false_negative", false_negative))
    if problem is None and (isinstance(seed, bool) or not isinstance(seed, (int, str))):
        problem = f"seed: expected an integer, got {seed!r}"
    if problem is not None:
        return Verdict(0.0, Status.ERROR, "bad_options", details={"error": f"noisy verifier option {problem}"})
    if not isinstance(response, str):
        return Verdict(0.0, Status.ERROR, "bad_response", details={"error": "response is not a string"})
    verdict = score_inner(inner, response, reference, _inner_options(inner_options, timeout_s), prompt=prompt,
                          meta=meta, truncated=truncated)
    if verdict.status in _UNDECIDED:
        return verdict
    u = flip_draw(seed, response, reference)
    was_correct = verdict.status is Status.CORRECT
    flipped = u < (false_negative if was_correct else false_positive)
    noise = {"flipped": flipped, "draw": u, "inner": _inner_summary(verdict)}
    if not flipped:
        return Verdict(verdict.score, verdict.status, verdict.reason, extracted=verdict.extracted,
                       details={**verdict.details, "noisy": noise})
    # a flipped verdict drops the inner details: they describe the verdict it no longer is (a "correct" flag, say)
    details = {"noisy": {**noise, "inner_details": verdict.details}}
    if was_correct:
        return Verdict(0.0, Status.INCORRECT, "noisy_false_negative", extracted=verdict.extracted, details=details)
    return Verdict(1.0, Status.CORRECT, "noisy_false_positive", extracted=verdict.extracted, details=details)
