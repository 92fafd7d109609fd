"""Row provenance: every experience row says where it came from, so selection, losses and metrics can tell an
on-policy sample from a hinted re-attempt, an expert trace or a verification task.

    code = row_kind("expert")            # 1
    names = row_kind_names()             # ["on_policy", "expert", "hinted", "verification", ...]

A batch carries one code per row (``RolloutBatch.row_kind``); a method that adds a new kind of row registers its name
once with ``register_row_kind``. Losses receive ``row_kind`` and one bool ``is_<kind>`` per registered kind.
"""

from __future__ import annotations

_KINDS: list[str] = ["on_policy", "expert", "hinted", "verification"]


def register_row_kind(name: str) -> int:
    """The code of ``name``, registering it when new (codes are never reused)."""
    if not name.isidentifier():
        raise ValueError(f"a row kind is an identifier, got {name!r}")
    if name not in _KINDS:
        _KINDS.append(name)
    return _KINDS.index(name)


def row_kind(name: str) -> int:
    if name not in _KINDS:
        raise KeyError(f"unknown row kind {name!r}; known: {', '.join(_KINDS)}")
    return _KINDS.index(name)


def row_kind_names() -> list[str]:
    return list(_KINDS)


ON_POLICY, EXPERT, HINTED, VERIFICATION = 0, 1, 2, 3
