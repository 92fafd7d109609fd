"""The "regex" verifier: the (stripped) response must match a pattern.

    verify("regex", "  2024-05-01 ", r"\\d{4}-\\d{2}-\\d{2}")                              # correct, "regex_match"
    verify("regex", "Date: 2024-05-01", {"pattern": r"\\d{4}-\\d{2}-\\d{2}", "mode": "search"})   # correct

reference: a pattern string (matched with ``re.fullmatch``), or a dict
``{"pattern": str, "flags": "imsx", "mode": "fullmatch" | "search" | "match"}`` (flags: i = IGNORECASE,
m = MULTILINE, s = DOTALL, x = VERBOSE, a = ASCII; mode defaults to "fullmatch").

User patterns can backtrack catastrophically, so this verifier is registered with isolation="process" (the runner
kills it at its wall-clock budget) and a response longer than ``max_chars`` (after stripping) is "undecidable",
reason "response_too_long", without running the pattern.

Reasons: "regex_match", "regex_no_match", "response_too_long" (undecidable), "bad_pattern" / "bad_reference" /
"bad_option" / "bad_response" (status "error"). ``extracted`` is the matched text (the whole stripped response for
fullmatch, the match for search/match) or, without a match, the stripped response (cut to 1000 characters).
"""

from __future__ import annotations

import re
from typing import Any

from rlvr.verifiers.base import Status, Verdict
from rlvr.verifiers.registry import register_verifier

FLAG_LETTERS = {"i": re.IGNORECASE, "m": re.MULTILINE, "s": re.DOTALL, "x": re.VERBOSE, "a": re.ASCII}
MODES = ("fullmatch", "search", "match")
_MAX_EXTRACTED = 1000


def _error(reason: str, why: str) -> Verdict:
    return Verdict(0.0, Status.ERROR, reason, details={"error": why})


def _clip(text: str) -> str:
    return text if len(text) <= _MAX_EXTRACTED else text[:_MAX_EXTRACTED] + "..."


def _parse_reference(reference: Any) -> tuple[str, int, str] | Verdict:
    if isinstance(reference, str):
        return reference, 0, "fullmatch"
    if not isinstance(reference, dict):
        return _error("bad_reference", f"expected a pattern string or a dict, got {type(reference).__name__}")
    unknown = sorted(set(reference) - {"pattern", "flags", "mode"})
    if unknown:
        return _error("bad_reference", f"unknown reference keys: {', '.join(map(str, unknown))}")
    pattern = reference.get("pattern")
    if not isinstance(pattern, str):
        return _error("bad_reference", "reference['pattern'] must be a string")
    flags_text = reference.get("flags", "") or ""
    if not isinstance(flags_text, str):
        return _error("bad_reference", "reference['flags'] must be a string of flag letters such as 'is'")
    flags = 0
    for letter in flags_text.lower():
        if letter not in FLAG_LETTERS:
            return _error("bad_reference", f"unknown regex flag {letter!r}; known: {''.join(FLAG_LETTERS)}")
        flags |= FLAG_LETTERS[letter]
    mode = reference.get("mode", "fullmatch")
    if mode not in MODES:
        return _error("bad_reference", f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    return pattern, flags, mode


@register_verifier("regex", isolation="process")
def regex(
    response: str,
    reference: Any,
    *,
    max_chars: int = 100_000,
    timeout_s: float | None = None,  # enforced by the runner's worker process
) -> Verdict:
    """Score 1 iff the stripped response matches the reference pattern (see the module docstring)."""
    parsed = _parse_reference(reference)
    if isinstance(parsed, Verdict):
        return parsed
    pattern, flags, mode = parsed
    if isinstance(max_chars, bool) or not isinstance(max_chars, int) or max_chars < 0:
        return _error("bad_option", f"max_chars must be an int >= 0, got {max_chars!r}")
    try:
        compiled = re.compile(pattern, flags)
    except (re.error, OverflowError, RecursionError, ValueError) as exc:
        return _error("bad_pattern", f"{type(exc).__name__}: {exc}")
    if not isinstance(response, str):
        return _error("bad_response", f"response is {type(response).__name__}, expected str")

    text = response.strip()
    if len(text) > max_chars:
        details = {"chars": len(text), "max_chars": max_chars}
        return Verdict(0.0, Status.UNDECIDABLE, "response_too_long", details=details)
    m = getattr(compiled, mode)(text)
    details = {"mode": mode}
    if m is None:
        return Verdict(0.0, Status.INCORRECT, "regex_no_match", extracted=_clip(text), details=details)
    return Verdict(1.0, Status.CORRECT, "regex_match", extracted=_clip(m.group(0)), details=details)
