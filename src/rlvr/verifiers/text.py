"""Text verifiers: "exact" (normalised string match) and "numeric" (the last number in the response).

Both are pure, never raise for any model output, and stay linear-time on huge responses.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction
from typing import Any

from rlvr.verifiers.base import Status, Verdict
from rlvr.verifiers.registry import register_verifier

# Numbers with more digits, or a larger exponent, than this are not parsed (no giant integer arithmetic).
MAX_DIGITS = 1000
MAX_EXPONENT = 1000


def _bad_response(response: Any) -> Verdict:
    error = f"response is {type(response).__name__}, expected str"
    return Verdict(0.0, Status.ERROR, "bad_response", details={"error": error})


def _bad_reference(reference: Any, why: str) -> Verdict:
    details = {"error": why, "reference_type": type(reference).__name__}
    return Verdict(0.0, Status.ERROR, "bad_reference", details=details)


# ---------------------------------------------------------------------------------------------------- exact


def normalize_text(text: str, *, case_sensitive: bool = False) -> str:
    """Strip, collapse every run of whitespace to one space, and casefold unless ``case_sensitive``."""
    text = " ".join(text.split())
    return text if case_sensitive else text.casefold()


def _first_nonempty_line(text: str) -> str:
    for line in text.splitlines():
        if line.strip():
            return line
    return ""


@register_verifier("exact")
def exact(
    response: str,
    reference: Any,
    *,
    case_sensitive: bool = False,
    first_line: bool = False,
    timeout_s: float | None = None,  # the runner's budget; nothing here can run long
) -> Verdict:
    """Normalised exact match. ``reference``: a string, a number (compared as ``str(number)``) or a list of
    accepted strings (any may match). ``first_line=True`` compares only the response's first non-empty line."""
    refs = reference if isinstance(reference, (list, tuple)) else [reference]
    if not refs or not all(isinstance(r, (str, int, float)) for r in refs):
        return _bad_reference(reference, "expected a string, a number or a non-empty list of strings")
    accepted = {normalize_text(str(r), case_sensitive=case_sensitive) for r in refs}
    if "" in accepted:
        return _bad_reference(reference, "an accepted answer is empty")
    if not isinstance(response, str):
        return _bad_response(response)

    got = normalize_text(_first_nonempty_line(response) if first_line else response, case_sensitive=case_sensitive)
    if not got:
        return Verdict(0.0, Status.INCORRECT, "empty_response", extracted="")
    if got in accepted:
        return Verdict(1.0, Status.CORRECT, "exact_match", extracted=got)
    return Verdict(0.0, Status.INCORRECT, "mismatch", extracted=got)


# -------------------------------------------------------------------------------------------------- numeric

_NUMBER = re.compile(
    r"""
    (?P<sign>(?<![\w.)\]}])[-+\u2212])?         # a sign, unless it reads as a binary operator ("10-3")
    (?:
        (?P<num>\d+)/(?P<den>\d+)               # a simple fraction: 3/4
      | (?P<int>\d{1,3}(?:,\d{3})+(?!\d)|\d+)   # 1,234,567 or 1234567
        (?:\.(?P<frac>\d+))?                    # .5
        (?:[eE](?P<exp>[-+]?\d+))?              # e-3
      | (?<!\d)\.(?P<frac2>\d+)                 # .5 on its own
        (?:[eE](?P<exp2>[-+]?\d+))?
    )
    """,
    re.VERBOSE | re.ASCII,
)


def _number_value(m: re.Match[str]) -> tuple[Fraction | None, str | None]:
    """The exact value of a matched number, or (None, reason) when it is too big to handle or meaningless."""
    sign = -1 if m["sign"] in ("-", "\u2212") else 1
    if m["num"] is not None:
        if len(m["num"]) + len(m["den"]) > MAX_DIGITS:
            return None, "number_too_long"
        den = int(m["den"])
        return (None, "division_by_zero") if den == 0 else (sign * Fraction(int(m["num"]), den), None)

    digits = (m["int"] or "").replace(",", "") + (m["frac"] or m["frac2"] or "")
    if len(digits) > MAX_DIGITS:
        return None, "number_too_long"
    mantissa = int(digits)
    exp_text = (m["exp"] or m["exp2"] or "0").lstrip("+")
    exp_digits = exp_text.lstrip("-").lstrip("0")
    if len(exp_digits) > len(str(MAX_EXPONENT)) or int(exp_digits or "0") > MAX_EXPONENT:
        return (Fraction(0), None) if mantissa == 0 else (None, "number_out_of_range")
    exponent = int(exp_text) - len(m["frac"] or m["frac2"] or "")
    return sign * mantissa * Fraction(10) ** exponent, None


def _last_number(text: str) -> re.Match[str] | None:
    last = None
    for last in _NUMBER.finditer(text):
        pass
    return last


def _reference_value(reference: Any) -> tuple[Fraction | None, bool, str | None]:
    """(value, exact, problem) for the gold answer: ints and numeric strings are exact, floats are not."""
    if isinstance(reference, bool):
        return None, False, "a boolean is not a number"
    if isinstance(reference, int):
        return Fraction(reference), True, None
    if isinstance(reference, float):
        if not math.isfinite(reference):
            return None, False, "not a finite number"
        return Fraction(reference), False, None
    if isinstance(reference, str):
        m = _NUMBER.fullmatch(reference.strip())
        if m is None:
            return None, False, f"not a number: {reference[:80]!r}"
        value, problem = _number_value(m)
        return value, True, problem
    return None, False, f"expected a number or a numeric string, got {type(reference).__name__}"


def _tolerance(value: Any, name: str) -> Fraction:
    tol = Fraction(value)  # raises on junk; the runner turns that into an "error" verdict
    if tol < 0:
        raise ValueError(f"{name} must be >= 0, got {value!r}")
    return tol


@register_verifier("numeric")
def numeric(
    response: str,
    reference: Any,
    *,
    rel_tol: float = 1e-9,
    abs_tol: float = 1e-9,
    timeout_s: float | None = None,  # the runner's budget; nothing here can run long
) -> Verdict:
    """Compare the LAST number in the response (1,234 / -3.5 / 3/4 / 1e-3) with the reference number.

    When both sides are exact (ints, decimal strings, fractions) the comparison is exact rational equality;
    when the reference is a float, ``|a - b| <= max(rel_tol * max(|a|, |b|), abs_tol)`` (as math.isclose,
    but computed in rationals so huge values cannot overflow)."""
    ref, ref_exact, problem = _reference_value(reference)
    if ref is None:
        return _bad_reference(reference, problem or "not a number")
    rel, abs_ = _tolerance(rel_tol, "rel_tol"), _tolerance(abs_tol, "abs_tol")
    if not isinstance(response, str):
        return _bad_response(response)

    m = _last_number(response)
    if m is None:
        return Verdict(0.0, Status.UNDECIDABLE, "no_number_found")
    token = m.group(0)
    extracted = token if len(token) <= 100 else token[:100] + "..."
    value, problem = _number_value(m)
    if value is None:
        return Verdict(0.0, Status.UNDECIDABLE, problem or "unparsable_number", extracted=extracted)

    mode = "exact" if ref_exact else "tolerance"
    if value == ref:
        return Verdict(1.0, Status.CORRECT, "numeric_equal", extracted=extracted, details={"mode": mode})
    if not ref_exact and abs(value - ref) <= max(rel * max(abs(value), abs(ref)), abs_):
        return Verdict(1.0, Status.CORRECT, "numeric_close", extracted=extracted, details={"mode": mode})
    return Verdict(0.0, Status.INCORRECT, "numeric_mismatch", extracted=extracted, details={"mode": mode})
