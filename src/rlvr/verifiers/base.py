"""The verdict a verifier returns: a score plus why (docs/api.md, "Verifiers")."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any


class Status(str, enum.Enum):
    CORRECT = "correct"
    INCORRECT = "incorrect"
    PARTIAL = "partial"
    UNDECIDABLE = "undecidable"
    TIMEOUT = "timeout"
    ERROR = "error"


@dataclass(frozen=True)
class Verdict:
    score: float
    status: Status
    reason: str
    extracted: str | None = None
    details: dict[str, Any] = field(default_factory=dict)
