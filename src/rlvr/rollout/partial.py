"""Continuing responses that are under way: the "continue from these tokens" entry point of partial rollouts.

A partial rollout is generated in chunks, possibly with different weights for different chunks (the weights are
replaced between chunks). Continuing a response is sampling from the same engine with the response's tokens so far
appended to its prompt: a causal LM's distribution over the next token depends only on the tokens before it, so the
continuation samples from p(. | prompt, prefix) exactly as an uninterrupted generation would, and each new token's
log-prob is the one it was sampled with (kept with the token for the mismatch corrections, ``algo.is_correction``).
Any engine of the registry serves, since only ``engine.generate`` is called.

    pieces = continue_rows(engine, prompts, prefixes, budgets, params)
    pieces[i].tokens, pieces[i].logprobs, pieces[i].finished   # up to budgets[i] new tokens of row i

Sampling with a per-position temperature schedule (EAD) is not continued: a chunk would restart its positions.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from rlvr.rollout.base import SamplingParams


@dataclass
class Piece:
    """The tokens one chunk added to a response, each with the log-prob and entropy of the distribution it was sampled
    from; ``finished``: the chunk ended with an end-of-sequence token (the response is complete)."""

    tokens: list[int]
    logprobs: list[float]
    entropy: list[float]
    finished: bool


def continue_rows(engine, prompts: list[list[int]], prefixes: list[list[int]], budgets: list[int],
                  params: SamplingParams) -> list[Piece]:
    """Up to ``budgets[i]`` new tokens after ``prompts[i] + prefixes[i]`` for every row, one sample each, with the
    engine's current weights and ``params``' temperature, top-p and top-k. Rows with the same budget share one
    engine call (in their order), so the work of a chunk is one batched generation per distinct budget."""
    if not (len(prompts) == len(prefixes) == len(budgets)):
        raise ValueError(f"{len(prompts)} prompts, {len(prefixes)} prefixes and {len(budgets)} budgets: "
                         "one each per row")
    if params.temperature_schedule is not None:
        raise ValueError("a temperature schedule (EAD) samples by position in the response and cannot be continued "
                         "in chunks; turn off cluster.partial_rollouts or rollout.temperature_schedule")
    if any(b < 1 for b in budgets):
        raise ValueError(f"every row needs a budget of at least one token, got {min(budgets)}")
    pieces: list[Piece | None] = [None] * len(prompts)
    for budget in sorted(set(budgets)):
        rows = [i for i, b in enumerate(budgets) if b == budget]
        call = dataclasses.replace(params, n=1, max_new_tokens=budget)
        with torch.no_grad():
            batch = engine.generate([list(prompts[i]) + list(prefixes[i]) for i in rows], call)
        lengths = batch.response_mask.sum(-1).tolist()
        entropy = batch.entropy if batch.entropy is not None else torch.zeros_like(batch.logprobs)
        for j, i in enumerate(rows):
            n = int(lengths[j])
            pieces[i] = Piece(batch.response_ids[j, :n].tolist(), batch.logprobs[j, :n].tolist(),
                              entropy[j, :n].tolist(), finished=not bool(batch.truncated[j]))
    return pieces  # type: ignore[return-value]
