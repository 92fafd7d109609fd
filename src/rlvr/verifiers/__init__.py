"""Verifiers: check a model response against a reference and say why (docs/api.md, "Verifiers").

    from rlvr.verifiers import verify
    verify("numeric", "so the answer is 1,234.", "1234")   # Verdict(score=1.0, status=correct, ...)

Importing this package registers the built-in verifiers.
"""

from __future__ import annotations

from typing import Any

from rlvr.verifiers import text as _text  # noqa: F401  (registers "exact" and "numeric")
from rlvr.verifiers import choice as _choice  # noqa: F401  (registers "choice")
from rlvr.verifiers import regex as _regex  # noqa: F401  (registers "regex")
from rlvr.verifiers import json_ as _json  # noqa: F401  (registers "json")
from rlvr.verifiers import format as _format  # noqa: F401  (registers "format")
from rlvr.verifiers import sql as _sql  # noqa: F401  (registers "sql")
from rlvr.verifiers import grounding as _grounding  # noqa: F401  (registers "grounding")
from rlvr.verifiers import ifeval as _ifeval  # noqa: F401
from rlvr.verifiers import math as _math  # noqa: F401
from rlvr.verifiers import code as _code  # noqa: F401  (registers "code")
from rlvr.verifiers import judge as _judge  # noqa: F401  (registers "judge")
from rlvr.verifiers import rubric as _rubric  # noqa: F401  (registers "rubric")
from rlvr.verifiers import reasoning_gym as _reasoning_gym  # noqa: F401  (registers "reasoning_gym")
from rlvr.verifiers import remote as _remote  # noqa: F401  (registers "remote")
from rlvr.verifiers import chain as _chain  # noqa: F401  (registers "chain_answer")
from rlvr.verifiers import self_verify as _self_verify  # noqa: F401  (registers "self_verify")
from rlvr.verifiers import calibrated as _calibrated  # noqa: F401  (registers "calibrated" and "noisy")
from rlvr.verifiers.base import Status, Verdict
from rlvr.verifiers.registry import UnknownVerifierError, get_verifier, register_verifier, verifier_names
from rlvr.verifiers.runner import (
    CacheInfo,
    CallableRequest,
    RewardRunner,
    ScoreRequest,
    default_runner,
    score_batch,
    set_default_runner,
)


def verify(name: str, response: str, reference: Any, **options: Any) -> Verdict:
    """Score one response with the verifier ``name``. Never raises for bad model output (that is a Verdict);
    an unknown ``name`` raises UnknownVerifierError, whose message lists the known names."""
    return score_batch([ScoreRequest(name, response, reference, options)])[0]


__all__ = [
    "CacheInfo",
    "CallableRequest",
    "RewardRunner",
    "ScoreRequest",
    "Status",
    "UnknownVerifierError",
    "Verdict",
    "default_runner",
    "get_verifier",
    "register_verifier",
    "score_batch",
    "set_default_runner",
    "verifier_names",
    "verify",
]
