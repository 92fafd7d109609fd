"""One task: a prompt and what a verifier checks the answer against (docs/api.md, "Data rows")."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rlvr.errors import UserError

Prompt = str | list[dict[str, str]]


@dataclass(frozen=True)
class Task:
    prompt: Prompt
    reference: Any
    id: str
    verifier: str | None = None
    verifier_options: dict[str, Any] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)
    env: str | None = None  # the environment the task runs in (rlvr.envs; None = single_turn)
    env_options: dict[str, Any] = field(default_factory=dict)  # the environment's options (tools, max_turns, ...)
    images: tuple = ()  # the prompt's images: file paths or encoded image bytes, in the order the prompt shows them


class DataError(UserError):
    """A data row that cannot be used; the message names the file, line and field."""
