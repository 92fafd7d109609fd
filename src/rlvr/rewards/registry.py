"""Reward sources that need the policy: a name -> ``fn(batch: PolicyBatch, forward, **options) -> Tensor[N]``.

A source declares what it needs from the batch and whether it calls the model; ``compute`` checks both before
calling it, so a missing field is an error that names it, never a silent zero::

    @register_reward_source("my_confidence", needs=("forward",))
    def my_confidence(batch, forward, **options): ...
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

import torch

from rlvr.errors import UnknownName, UserError

Forward = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]  # (input_ids[B,L], attention_mask[B,L]) -> logits[B,L,V]


@dataclass
class PolicyBatch:
    """The tensors of one experience batch that policy-based rewards read (N rows, each one response).

    prompt_ids[N,P] / prompt_mask[N,P]:       the prompts, LEFT-padded (mask 1 on real tokens).
    response_ids[N,T] / response_mask[N,T]:   the sampled responses, RIGHT-padded.
    index[N]:                                 group id of each row (rows of the same prompt share it).
    reasoning_mask[N,T] (optional):           1 on the response tokens kept before the reference answer (RLPR's z,
                                              VeriFree's reasoning trace): a prefix of each response, e.g. up to and
                                              including "<answer>"; default: the whole response.
    reference_ids[N,R] / reference_mask[N,R]: the reference answer's tokens, RIGHT-padded (needed by rlpr, verifree).
    answers (optional):                       each response's extracted final answer as a canonical string, or None
                                              when it has none (needed by majority_vote, semantic_entropy).
    logits[N,T,V] (optional):                 the policy's logits at the response positions (logits[:, t] predicts
                                              response_ids[:, t]); self_certainty and negative_entropy use them when
                                              given instead of calling the model.
    """

    prompt_ids: torch.Tensor | None = None
    prompt_mask: torch.Tensor | None = None
    response_ids: torch.Tensor | None = None
    response_mask: torch.Tensor | None = None
    index: torch.Tensor | None = None
    reasoning_mask: torch.Tensor | None = None
    reference_ids: torch.Tensor | None = None
    reference_mask: torch.Tensor | None = None
    answers: list[str | None] | None = None
    logits: torch.Tensor | None = None


FIELDS = tuple(f.name for f in fields(PolicyBatch))


@dataclass(frozen=True)
class RewardSource:
    name: str
    fn: Callable[..., torch.Tensor]
    needs: tuple[str, ...]  # PolicyBatch fields, and "forward" when it calls the model


_SOURCES: dict[str, RewardSource] = {}


def register_reward_source(name: str, *, needs: tuple[str, ...] | list[str] = ()) -> Callable:
    """Decorator registering a policy-based reward under ``name``; ``needs`` lists the PolicyBatch fields it reads
    and "forward" if it calls the model. Registering another function under a taken name raises ValueError."""
    unknown = set(needs) - set(FIELDS) - {"forward"}
    if unknown:
        raise UserError(f"reward source {name!r}: unknown needs {sorted(unknown)}; known: forward, {', '.join(FIELDS)}")

    def decorator(fn: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
        old = _SOURCES.get(name)
        if old is not None and old.fn.__qualname__ != fn.__qualname__:
            raise UserError(f"reward source {name!r} is already registered ({old.fn.__module__}.{old.fn.__qualname__})")
        _SOURCES[name] = RewardSource(name, fn, tuple(needs))
        return fn

    return decorator


def get_reward_source(name: str) -> RewardSource:
    try:
        return _SOURCES[name]
    except KeyError:
        close = difflib.get_close_matches(name, list(_SOURCES), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise UnknownName(f"unknown reward source {name!r}{hint}; known: {', '.join(sorted(_SOURCES))}") from None


def reward_source_names() -> list[str]:
    return sorted(_SOURCES)


def compute(name: str, batch: PolicyBatch, forward: Forward | None = None, **options: Any) -> torch.Tensor:
    """The reward of every row of ``batch`` (a float Tensor[N]) from the source ``name``, without gradients."""
    source = get_reward_source(name)
    missing = [n for n in source.needs if (forward if n == "forward" else getattr(batch, n)) is None]
    if missing:
        raise UserError(f"reward source {name!r} needs {', '.join(missing)}; the batch does not carry "
                         + ("them" if len(missing) > 1 else "it"))
    with torch.no_grad():
        out = source.fn(batch, forward, **options)
    return out.detach().float()
