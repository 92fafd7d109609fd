"""Rewards from the policy's confidence in its own tokens: self-certainty and negative entropy."""

from __future__ import annotations

import math

import torch

from rlvr.rewards.registry import Forward, PolicyBatch, register_reward_source


def response_logits(batch: PolicyBatch, forward: Forward | None) -> torch.Tensor:
    """logits[N,T,V] at the response positions (logits[:, t] predicts response_ids[:, t]): the batch's own, or one
    forward pass over prompt + response (left-padded prompts, right-padded responses, as the rollout gives them)."""
    if batch.logits is not None:
        return batch.logits
    if forward is None:
        raise ValueError("this reward needs the batch's logits or a forward function")
    ids = torch.cat([batch.prompt_ids, batch.response_ids], dim=1)
    mask = torch.cat([batch.prompt_mask, batch.response_mask], dim=1)
    P, T = batch.prompt_ids.shape[1], batch.response_ids.shape[1]
    return forward(ids, mask)[:, P - 1: P - 1 + T]


def _masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    mask = mask.to(values.dtype)
    return (values * mask).sum(-1) / mask.sum(-1).clamp(min=1)


@register_reward_source("self_certainty", needs=("response_mask",))
def self_certainty(batch: PolicyBatch, forward: Forward | None) -> torch.Tensor:
    """Intuitor's self-certainty (Zhao et al., 2025, "Learning to Reason without External Rewards",
    arXiv:2505.19590, Sec. 3, the self-certainty equation): the mean over response tokens of KL(U || p_t), the
    divergence of the next-token distribution from uniform,
        SC(o|q) = (1/|o|) * sum_t KL(U || p(.|q, o_<t)) = -(1/(|o| |V|)) * sum_t sum_j log(|V| * p(j|q, o_<t)).
    Uses ``batch.logits`` when given, else one forward pass. Returns Tensor[N] (0 for a uniform policy)."""
    logp = torch.log_softmax(response_logits(batch, forward).float(), dim=-1)
    V = logp.shape[-1]
    kl = -math.log(V) - logp.mean(-1)
    return _masked_mean(kl, batch.response_mask)


@register_reward_source("negative_entropy", needs=("response_mask",))
def negative_entropy(batch: PolicyBatch, forward: Forward | None) -> torch.Tensor:
    """Entropy minimisation as a reward: minus the mean token entropy of the response, -(1/|o|) sum_t H(p_t),
    H(p) = -sum_j p_j log p_j. This is RENT's reward (Prabhudesai et al., 2025, "Maximizing Confidence Alone
    Improves Reasoning", arXiv:2505.22660, Sec. 3) and the token-level estimate of EM-RL's negative trajectory
    entropy (Agarwal et al., 2025, "The Unreasonable Effectiveness of Entropy Minimization in LLM Reasoning",
    arXiv:2505.15134). Returns Tensor[N] (<= 0; 0 for a deterministic policy)."""
    logp = torch.log_softmax(response_logits(batch, forward).float(), dim=-1)
    entropy = -(logp.exp() * logp).sum(-1)
    return -_masked_mean(entropy, batch.response_mask)
