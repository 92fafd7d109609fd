"""The "ifeval" verifier: does a response follow a prompt's verifiable instructions? (IFEval, arXiv:2311.07911)

    verify("ifeval", response, {
        "instruction_id_list": ["punctuation:no_comma", "length_constraints:number_words"],
        "kwargs": [{}, {"relation": "at least", "num_words": 300}],
    })

``reference`` is the checking part of an IFEval row, or a whole row ("key", "prompt", "instruction_id_list",
"kwargs"), as a dict or a JSON string. Null kwargs values are ignored (IFEval's files list every kwarg name on
every row). All 25 instruction ids of IFEval are supported (:func:`instruction_ids`), with IFEval's kwarg names.

The score is the fraction of instructions followed (IFEval's instruction-level accuracy); status is "correct"
only when all are followed (IFEval's prompt-level accuracy), "partial" when some are, "incorrect" when none.
details["instructions"] lists {"id", "followed", "kwargs"} per instruction, in order.

Option ``mode``: "strict" (default) checks the response as it is; "loose" is IFEval's loose accuracy: an
instruction counts as followed if any of eight variants passes -- the response, with its first line removed,
with its last line removed, with both removed, and each of those four with every "*" removed.
As in IFEval, an empty (blank) response, or variant, follows nothing.

Errors (score 0.0, status "error"): an unknown instruction id -> reason "unknown_instruction:<id>"; missing,
unexpected or invalid kwargs -> "bad_kwargs:<id>"; a malformed reference -> "bad_reference"; a response that
is not a string -> "bad_response"; an unknown mode -> "bad_mode". All checks are linear-time, so the verifier
runs inline.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from rlvr.verifiers.base import Status, Verdict
from rlvr.verifiers.ifeval.instructions import (
    BadKwargs,
    Checker,
    UnknownInstruction,
    build_checker,
    clean_kwargs,
    instruction_ids,
)
from rlvr.verifiers.registry import register_verifier

MODES = ("strict", "loose")

__all__ = ["MODES", "build_checker", "ifeval", "instruction_ids", "loose_variants"]


def loose_variants(response: str) -> list[str]:
    """IFEval's loose-mode variants of a response, the response itself first."""
    lines = response.split("\n")
    without_first = "\n".join(lines[1:]).strip()
    without_last = "\n".join(lines[:-1]).strip()
    without_both = "\n".join(lines[1:-1]).strip()
    variants = [response, without_first, without_last, without_both]
    return variants + [v.replace("*", "") for v in variants]


def _error(reason: str, error: str, **details: Any) -> Verdict:
    return Verdict(0.0, Status.ERROR, reason, details={"error": error, **details})


def _parse_reference(reference: Any) -> tuple[list[Any], list[Any]] | str:
    """(instruction ids, kwargs list), or a message saying what is wrong."""
    if isinstance(reference, (str, bytes)):
        try:
            reference = json.loads(reference)
        except ValueError:
            return "reference is a string but not JSON"
    if not isinstance(reference, Mapping):
        return f"reference must be an object with instruction_id_list and kwargs, got {type(reference).__name__}"
    ids = reference.get("instruction_id_list")
    if not isinstance(ids, (list, tuple)) or not ids:
        return "reference needs a non-empty list instruction_id_list"
    kwargs = reference.get("kwargs")
    if kwargs is None:
        kwargs = [{}] * len(ids)
    if not isinstance(kwargs, (list, tuple)):
        return "reference kwargs must be a list with one object per instruction"
    if len(kwargs) != len(ids):
        return f"reference has {len(ids)} instruction ids but {len(kwargs)} kwargs entries"
    return list(ids), list(kwargs)


def _follows(checker: Checker, texts: list[str]) -> bool:
    return any(text.strip() and checker(text) for text in texts)


@register_verifier("ifeval")
def ifeval(
    response: str,
    reference: Any,
    *,
    mode: str = "strict",
    timeout_s: float | None = None,  # the runner's budget; every check here is linear-time
) -> Verdict:
    """Check ``response`` against an IFEval row's instructions (module docstring)."""
    if mode not in MODES:
        return _error("bad_mode", f"mode must be one of {list(MODES)}, got {mode!r}")
    parsed = _parse_reference(reference)
    if isinstance(parsed, str):
        return _error("bad_reference", parsed, reference_type=type(reference).__name__)
    ids, kwargs_list = parsed

    checkers: list[Checker] = []
    used_kwargs: list[dict[str, Any]] = []
    for instruction_id, kwargs in zip(ids, kwargs_list):
        try:
            checkers.append(build_checker(instruction_id, kwargs))
            used_kwargs.append(clean_kwargs(kwargs))
        except UnknownInstruction:
            return _error(
                f"unknown_instruction:{instruction_id}",
                f"unknown IFEval instruction id {instruction_id!r}",
                known=instruction_ids(),
            )
        except BadKwargs as exc:
            return _error(f"bad_kwargs:{instruction_id}", str(exc))

    if not isinstance(response, str):
        return _error("bad_response", f"response is {type(response).__name__}, expected str")

    texts = loose_variants(response) if mode == "loose" else [response]
    try:
        followed = [_follows(checker, texts) for checker in checkers]
    except ImportError as exc:  # langdetect is not installed
        return _error("missing_dependency", f"{exc}; install langdetect for IFEval's language checks")

    results = [
        {"id": instruction_id, "followed": ok, "kwargs": kwargs}
        for instruction_id, ok, kwargs in zip(ids, followed, used_kwargs)
    ]
    n_followed = sum(followed)
    score = n_followed / len(followed)
    if n_followed == len(followed):
        status, reason, score = Status.CORRECT, "all_followed", 1.0
    elif n_followed:
        status, reason = Status.PARTIAL, "some_followed"
    else:
        status, reason = Status.INCORRECT, "none_followed"
    details = {"mode": mode, "instructions": results, "num_followed": n_followed, "num_instructions": len(followed)}
    return Verdict(score, status, reason, details=details)
