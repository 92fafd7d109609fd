"""The "chain_answer" verifier: the final answer of a worked solution, written after its last ``#``.

A chain task's response shows its steps and ends with an answer line (``"12+34=46\\n46+5=51\\n#51"``). The verdict
compares the text after the response's last ``#``, up to the end of that line, with the reference: as integers
when both are integers (``#051`` and ``# 51`` match ``51``), else as whitespace-normalised text. A response without
``#`` is incorrect ("no_answer"), never an error. Linear time in the response; integers longer than ``MAX_DIGITS``
are compared as text, so no huge number is ever converted.
"""

from __future__ import annotations

import re
from typing import Any

from rlvr.verifiers.base import Status, Verdict
from rlvr.verifiers.registry import register_verifier

MAX_DIGITS = 100
_INTEGER = re.compile(r"[-+]?[0-9]+")


def answer_after_hash(response: str) -> str | None:
    """The stripped text after the last ``#`` up to the end of its line, or None when there is no ``#``."""
    at = response.rfind("#")
    if at < 0:
        return None
    return response[at + 1:].split("\n", 1)[0].strip()


def _canonical(text: str) -> str:
    text = " ".join(text.split())
    if _INTEGER.fullmatch(text) and len(text) <= MAX_DIGITS + 1:
        return str(int(text))
    return text


@register_verifier("chain_answer")
def chain_answer(response: str, reference: Any, *, timeout_s: float | None = None) -> Verdict:
    """1.0 when the answer after the last ``#`` equals ``reference`` (a string or an integer), else 0.0."""
    if isinstance(reference, bool) or not isinstance(reference, (str, int)) or not str(reference).strip():
        return Verdict(0.0, Status.ERROR, "bad_reference",
                       details={"error": "expected a non-empty string or an integer",
                                "reference_type": type(reference).__name__})
    if not isinstance(response, str):
        return Verdict(0.0, Status.ERROR, "bad_response",
                       details={"error": f"response is {type(response).__name__}, expected str"})
    got = answer_after_hash(response)
    if got is None:
        return Verdict(0.0, Status.INCORRECT, "no_answer")
    if _canonical(got) == _canonical(str(reference)):
        return Verdict(1.0, Status.CORRECT, "answer_match", extracted=got)
    return Verdict(0.0, Status.INCORRECT, "mismatch", extracted=got)
