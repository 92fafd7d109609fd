"""The one place verifiers are called: ``score_batch`` (used by the trainer, eval and ``verify``).

Today it calls each verifier in-process, one after another, and turns whatever happens into a Verdict:
a float return becomes a Verdict, an exception becomes status "error". Supervision of runaway verifiers
(a process pool with hard wall-clock timeouts, memory caps and caching, CONTRACTS.md C1) lands here later,
so that no caller has to change.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from rlvr.verifiers.base import Status, Verdict
from rlvr.verifiers.registry import VerifierFn, get_verifier

_MAX_ERROR_CHARS = 2000


@dataclass(frozen=True)
class ScoreRequest:
    """Score ``response`` against ``reference`` with the verifier named ``verifier`` and these options."""

    verifier: str
    response: str
    reference: Any
    options: dict[str, Any] = field(default_factory=dict)


def score_batch(items: Sequence[ScoreRequest]) -> list[Verdict]:
    """One Verdict per request, in order. Never raises because of a response or a verifier's failure;
    an unknown verifier name (a caller error) raises UnknownVerifierError before anything is scored."""
    items = list(items)
    fns = [get_verifier(item.verifier) for item in items]
    return [call_verifier(fn, item.response, item.reference, item.options) for fn, item in zip(fns, items)]


def call_verifier(fn: VerifierFn, response: str, reference: Any, options: dict[str, Any] | None = None) -> Verdict:
    """Call one verifier in-process; any exception becomes Verdict(0.0, "error", "verifier_raised")."""
    try:
        result = fn(response, reference, **(options or {}))
    except Exception as exc:  # a verifier bug or bad options must not crash a long run
        error = repr(exc)
        if len(error) > _MAX_ERROR_CHARS:
            error = error[:_MAX_ERROR_CHARS] + "..."
        return Verdict(0.0, Status.ERROR, "verifier_raised", details={"error": error})
    return to_verdict(result)


def to_verdict(result: Any) -> Verdict:
    """A verifier's return value as a Verdict. A float keeps its value: status "correct" if >= 1,
    "incorrect" if <= 0, "partial" in between, reason "float_reward"."""
    if isinstance(result, Verdict):
        return result
    if isinstance(result, numbers.Real):
        score = float(result)
        if not math.isfinite(score):
            return Verdict(0.0, Status.ERROR, "bad_float_reward", details={"error": f"verifier returned {score}"})
        if score >= 1:
            status = Status.CORRECT
        elif score <= 0:
            status = Status.INCORRECT
        else:
            status = Status.PARTIAL
        return Verdict(score, status, "float_reward")
    return Verdict(
        0.0,
        Status.ERROR,
        "bad_verifier_return",
        details={"error": f"verifier returned {type(result).__name__}, expected a Verdict or a float"},
    )
