"""Where the old policy's log-probs come from, decided once per rollout batch from facts the batch declares.

    facts = BatchFacts.of(batch, engine_logprobs_serve=..., updates=2, read_while_shaping=False,
                          same_in_training=True, single_learner=True)
    source = decide(facts)  # Source.FIRST_UPDATE

The PPO ratio is pi_theta(o | q) / pi_old(o | h), h the context the row was SAMPLED in (its behaviour prompt; the
training prompt q unless a stage such as Guide's hints sampled it elsewhere). Three sources give pi_old:

- ``ENGINE``: the engine's sampling log-probs, when they are the trainer's own (the engine says so), the batch gets
  a single update, nothing reads them while shaping, and every row was sampled by the policy (no expert rows).
- ``FIRST_UPDATE``: the first update's own training-mode forward, taken before any weight moves. It sees the
  TRAINING prompt, so it is pi_old only when every row's behaviour prompt is its training prompt; and only when the
  model computes the same function in training mode (no dropout) and one learner holds every row's forward.
- ``SEPARATE_FORWARD``: a no-grad evaluation-mode forward of the behaviour prompts before the first update; always
  correct, used whenever neither of the others is.

The source is logged per step as ``old_logp_source`` (the number of ``Source``).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import torch


class Source(enum.IntEnum):
    ENGINE = 0
    SEPARATE_FORWARD = 1
    FIRST_UPDATE = 2


@dataclass(frozen=True)
class BatchFacts:
    engine_logprobs_serve: bool  # the engine's log-probs are the trainer's (not vLLM's, not async, no annealing)
    updates: int  # optimizer steps on this batch (ppo_epochs x mini_batches)
    read_while_shaping: bool  # a part or the estimator declares it needs the old log-probs before the updates
    all_sampled: bool  # every row was sampled by the current policy (no expert or injected rows)
    behaviour_differs: bool  # some row was sampled with a prompt other than the one it is trained on
    same_in_training: bool  # the model has no dropout: training-mode forward == evaluation-mode forward
    single_learner: bool  # one rank runs every row's forward (the first update's shards are not exchanged)


def behaviour_differs(prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, behaviour_ids: torch.Tensor | None,
                      behaviour_mask: torch.Tensor | None) -> bool:
    """True when some row's behaviour prompt is not its training prompt, token for token. Both are left-padded;
    a different padded width counts as different (the safe answer: a separate forward is always right)."""
    if behaviour_ids is None:
        return False
    if behaviour_ids.shape != prompt_ids.shape or not torch.equal(behaviour_mask.bool(), prompt_mask.bool()):
        return True
    kept = prompt_mask.bool()
    return not torch.equal(behaviour_ids[kept], prompt_ids[kept])


def decide(facts: BatchFacts) -> Source:
    """The one place that chooses the old log-probs' source (see the module docstring)."""
    if facts.engine_logprobs_serve and facts.updates == 1 and not facts.read_while_shaping and facts.all_sampled:
        return Source.ENGINE
    if facts.same_in_training and facts.single_learner and not facts.behaviour_differs:
        return Source.FIRST_UPDATE
    return Source.SEPARATE_FORWARD
