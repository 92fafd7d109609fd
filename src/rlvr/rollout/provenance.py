"""Row provenance: every experience row says where it came from, so selection, losses and metrics can tell an
on-policy sample from a hinted re-attempt, an expert trace or a verification task.

    code = row_kind("expert")            # 1
    names = row_kind_names()             # ["on_policy", "expert", "hinted", "verification", ...]

A batch carries one code per row (``RolloutBatch.row_kind``); a method that adds a new kind of row registers its name
once with ``register_row_kind``. Losses receive ``row_kind`` and one bool ``is_<kind>`` per registered kind.
"""

from __future__ import annotations

import torch

_KINDS: list[str] = ["on_policy", "expert", "hinted", "verification"]
_NOT_SAMPLED: set[str] = {"expert"}  # rows whose tokens the engine did not sample (their log-probs are placeholders)


def register_row_kind(name: str, *, sampled: bool = True) -> int:
    """The code of ``name``, registering it when new (codes are never reused). ``sampled=False``: the engine did not
    sample these rows' tokens, so their rollout log-probs never stand in for the old policy's."""
    if not name.isidentifier():
        raise ValueError(f"a row kind is an identifier, got {name!r}")
    if name not in _KINDS:
        _KINDS.append(name)
    if not sampled:
        _NOT_SAMPLED.add(name)
    return _KINDS.index(name)


def row_kind(name: str) -> int:
    if name not in _KINDS:
        raise KeyError(f"unknown row kind {name!r}; known: {', '.join(_KINDS)}")
    return _KINDS.index(name)


def row_kind_names() -> list[str]:
    return list(_KINDS)


ON_POLICY, EXPERT, HINTED, VERIFICATION = 0, 1, 2, 3


def all_sampled(codes: torch.Tensor) -> bool:
    """Whether the engine sampled every row's tokens (no expert trace or other row it did not sample)."""
    return not any(bool((codes == row_kind(name)).any()) for name in _NOT_SAMPLED)


def kind_flags(codes: torch.Tensor) -> dict[str, torch.Tensor]:
    """The loss inputs of provenance: ``row_kind`` and a bool ``is_<kind>`` [N] per registered kind."""
    return {"row_kind": codes, **{f"is_{name}": codes == i for i, name in enumerate(_KINDS)}}


def kind_metrics(codes: torch.Tensor, rewards: torch.Tensor) -> dict[str, float]:
    """``rows/<kind>`` and ``reward_mean/<kind>`` for every kind present in the batch."""
    out: dict[str, float] = {}
    for i, name in enumerate(_KINDS):
        rows = codes == i
        if rows.any():
            out[f"rows/{name}"] = int(rows.sum())
            out[f"reward_mean/{name}"] = float(rewards[rows.to(rewards.device)].float().mean())
    return out
