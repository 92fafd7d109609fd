"""What a caller asks the runner to score: a registered verifier (ScoreRequest) or a user function
(CallableRequest), each with the response, the reference, options and, optionally, the prompt, the task's
metadata and whether the response was cut off by the length limit."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class ScoreRequest:
    """Score ``response`` against ``reference`` with the verifier named ``verifier`` and these options.

    ``prompt`` (a string or chat messages) and ``meta`` (the task's metadata) reach the verifier as keyword
    arguments only when they are not None and its signature names them or takes ``**kwargs``.

    ``truncated``: the response hit the generation length limit without ending (a response cut at a stop string
    is not truncated). It reaches the verifier as ``truncated=`` only when its signature names a ``truncated``
    parameter (``**kwargs`` alone does not receive it: such functions often forward their keyword arguments as
    options), so a verifier can refuse to credit an answer the response never committed to."""

    verifier: str
    response: str
    reference: Any
    options: dict[str, Any] = field(default_factory=dict)
    prompt: Any = None
    meta: dict[str, Any] | None = None
    truncated: bool = False


@dataclass(frozen=True)
class CallableRequest:
    """Score ``response`` with a user reward function ``fn(response, reference, **options) -> float | Verdict``.

    ``fn`` must be importable by reference (a module-level function of an importable module, not of the script
    being run); it always runs in a supervised worker. ``cache=False`` keeps its verdicts out of the cache (for
    rewards that are not pure functions of their inputs). ``prompt``, ``meta`` and ``truncated`` are passed as for
    ScoreRequest."""

    fn: Callable[..., Any]
    response: str
    reference: Any
    options: dict[str, Any] = field(default_factory=dict)
    cache: bool = True
    prompt: Any = None
    meta: dict[str, Any] | None = None
    truncated: bool = False
