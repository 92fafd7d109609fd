"""What a caller asks the runner to score: a registered verifier (ScoreRequest) or a user function
(CallableRequest), each with the response, the reference, options and, optionally, the prompt and the task's
metadata."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class ScoreRequest:
    """Score ``response`` against ``reference`` with the verifier named ``verifier`` and these options.

    ``prompt`` (a string or chat messages) and ``meta`` (the task's metadata) reach the verifier as keyword
    arguments only when they are not None and its signature names them or takes ``**kwargs``."""

    verifier: str
    response: str
    reference: Any
    options: dict[str, Any] = field(default_factory=dict)
    prompt: Any = None
    meta: dict[str, Any] | None = None


@dataclass(frozen=True)
class CallableRequest:
    """Score ``response`` with a user reward function ``fn(response, reference, **options) -> float | Verdict``.

    ``fn`` must be importable by reference (a module-level function of an importable module, not of the script
    being run); it always runs in a supervised worker. ``cache=False`` keeps its verdicts out of the cache (for
    rewards that are not pure functions of their inputs). ``prompt`` and ``meta`` are passed as for ScoreRequest."""

    fn: Callable[..., Any]
    response: str
    reference: Any
    options: dict[str, Any] = field(default_factory=dict)
    cache: bool = True
    prompt: Any = None
    meta: dict[str, Any] | None = None
