"""Verifiers: check a model response against a reference and say why (CONTRACTS.md C1).

    from rlvr.verifiers import verify
    verify("numeric", "so the answer is 1,234.", "1234")   # Verdict(score=1.0, status=correct, ...)

Importing this package registers the built-in verifiers.
"""

from __future__ import annotations

from typing import Any

from rlvr.verifiers import text as _text  # noqa: F401  (registers "exact" and "numeric")
from rlvr.verifiers.base import Status, Verdict
from rlvr.verifiers.registry import UnknownVerifierError, get_verifier, register_verifier, verifier_names
from rlvr.verifiers.runner import ScoreRequest, score_batch


def verify(name: str, response: str, reference: Any, **options: Any) -> Verdict:
    """Score one response with the verifier ``name``. Never raises for bad model output (that is a Verdict);
    an unknown ``name`` raises UnknownVerifierError, whose message lists the known names."""
    return score_batch([ScoreRequest(name, response, reference, options)])[0]


__all__ = [
    "ScoreRequest",
    "Status",
    "UnknownVerifierError",
    "Verdict",
    "get_verifier",
    "register_verifier",
    "score_batch",
    "verifier_names",
    "verify",
]
