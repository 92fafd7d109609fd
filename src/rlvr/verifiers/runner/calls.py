"""Calling one verifier or reward function and turning whatever it does into a Verdict.

Used in the caller (inline and "threads" verifiers) and in worker processes (everything pooled)."""

from __future__ import annotations

import functools
import inspect
import math
import numbers
import traceback
from collections.abc import Callable
from typing import Any

from rlvr.verifiers.base import Status, Verdict

MAX_ERROR_CHARS = 2000

# Keyword arguments the runner itself supplies; each reaches a function only if its signature accepts it.
PASSED_IF_ACCEPTED = ("timeout_s", "prompt", "meta")
# ... and these only if its signature names them: a ``**kwargs`` catch-all does not receive them, because
# functions that take ``**kwargs`` often forward them as options to something that would reject a new name.
PASSED_IF_NAMED = ("truncated",)


def to_verdict(result: Any) -> Verdict:
    """A verifier's return value as a Verdict. A float keeps its value: status "correct" if >= 1,
    "incorrect" if <= 0, "partial" in between, reason "float_reward". A non-finite score (float or Verdict)
    becomes status "error"."""
    if isinstance(result, Verdict):
        score = result.score
        if type(score) is float and math.isfinite(score) and type(result.status) is Status:
            return result  # the common case, kept cheap for inline verifiers
        return _checked_verdict(result)
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


def _checked_verdict(v: Verdict) -> Verdict:
    score, status = v.score, v.status
    if isinstance(score, bool) or not isinstance(score, numbers.Real):
        return error("bad_verifier_return", f"Verdict.score is {type(score).__name__}, expected a float")
    score = float(score)
    if not math.isfinite(score):
        return error("non_finite_score", f"Verdict.score is {score}; a score must be a finite number")
    try:
        status = Status(status)
    except (ValueError, TypeError):
        return error("bad_verifier_return", f"Verdict.status {str(status)[:100]!r} is not a Status")
    return Verdict(score, status, v.reason, v.extracted, v.details)


def call_verifier(fn: Callable[..., Any], response: str, reference: Any, options: dict[str, Any] | None = None) -> Verdict:
    """Call one verifier in this process, unsupervised; any exception becomes Verdict(0.0, "error",
    "verifier_raised") (a MemoryError: reason "memory_limit")."""
    return guarded_call(fn, response, reference, options or {})


def guarded_call(
    fn: Callable[..., Any], response: Any, reference: Any, kwargs: dict[str, Any], *, catch_all: bool = False
) -> Verdict:
    """Call ``fn`` and turn whatever happens into a Verdict. In the caller's process KeyboardInterrupt still
    propagates; in a worker (catch_all) nothing does."""
    oom = False
    try:
        return to_verdict(fn(response, reference, **kwargs))
    except MemoryError:
        oom = True  # build the verdict after the handler, once the failed call's frames are released
    except (Exception, SystemExit) as exc:
        return raised(exc)
    except BaseException as exc:
        if not catch_all:
            raise
        return raised(exc)
    if oom:
        return Verdict(0.0, Status.ERROR, "memory_limit", details={"error": "MemoryError"})
    raise AssertionError("unreachable")


def raised(exc: BaseException) -> Verdict:
    """The error verdict of a call that raised ``exc``: its repr and (the end of) its traceback."""
    try:
        message = repr(exc)
    except BaseException:
        message = f"<{type(exc).__name__} whose repr failed>"
    if len(message) > MAX_ERROR_CHARS:
        message = message[:MAX_ERROR_CHARS] + "..."
    try:
        tb = "".join(traceback.format_exception(exc))
    except BaseException:
        tb = ""
    if len(tb) > MAX_ERROR_CHARS:
        tb = "..." + tb[-MAX_ERROR_CHARS:]
    return Verdict(0.0, Status.ERROR, "verifier_raised", details={"error": message, "traceback": tb})


def error(reason: str, message: str, verifier: str | None = None, **extra: Any) -> Verdict:
    """Verdict(0.0, "error", reason) with ``message`` (and the verifier's label) in details."""
    details: dict[str, Any] = {"error": message, **extra}
    if verifier is not None:
        details["verifier"] = verifier
    return Verdict(0.0, Status.ERROR, reason, details=details)


def keyword_args(fn: Callable[..., Any], options: dict[str, Any], prompt: Any = None, meta: Any = None, *,
                 truncated: bool = False) -> dict[str, Any]:
    """The keyword arguments ``fn`` is called with: the request's options, without "timeout_s" unless ``fn``
    accepts it (the runner enforces the budget either way), plus ``prompt`` / ``meta`` when given and accepted,
    plus ``truncated`` (True or False) when ``fn`` names that parameter and the options do not already hold it."""
    accepted = _accepted(fn)
    if prompt is None and meta is None and "timeout_s" not in options and "truncated" not in accepted:
        return options
    out = options if "timeout_s" not in options or "timeout_s" in accepted else {
        k: v for k, v in options.items() if k != "timeout_s"
    }
    if prompt is not None and "prompt" in accepted:
        out = {**out, "prompt": prompt}
    if meta is not None and "meta" in accepted:
        out = {**out, "meta": meta}
    if "truncated" in accepted and "truncated" not in out:
        out = {**out, "truncated": bool(truncated)}
    return out


def _accepted(fn: Callable[..., Any]) -> frozenset[str]:
    try:
        return _accepted_cached(fn)
    except TypeError:  # unhashable callable
        return _signature_accepts(fn)


@functools.lru_cache(maxsize=1024)
def _accepted_cached(fn: Callable[..., Any]) -> frozenset[str]:
    return _signature_accepts(fn)


def _signature_accepts(fn: Callable[..., Any]) -> frozenset[str]:
    """Which of PASSED_IF_ACCEPTED (all of them with ``**kwargs``) and PASSED_IF_NAMED ``fn`` takes as keyword
    arguments."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return frozenset()
    names = set()
    for p in params:
        if p.kind is inspect.Parameter.VAR_KEYWORD:
            names.update(PASSED_IF_ACCEPTED)
        elif p.name in PASSED_IF_ACCEPTED + PASSED_IF_NAMED and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY):
            names.add(p.name)
    return frozenset(names)


def bad_timeout(value: Any) -> bool:
    """True unless ``value`` is a finite number > 0."""
    return (
        isinstance(value, bool)
        or not isinstance(value, numbers.Real)
        or not math.isfinite(float(value))
        or float(value) <= 0
    )


def qualname(fn: Any) -> str:
    """"module.qualname" of a function, for labels and messages."""
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', type(fn).__qualname__)}"
