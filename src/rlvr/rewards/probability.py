"""Rewards from the probability the policy gives the reference answer after its own reasoning.

Both sources build, for row i, the sequence  prompt_i + reasoning_i + reference  (reasoning_i = the response
tokens under ``reasoning_mask``), run the model once on the batch of these sequences, and read log p(y*_j | ...)
for every reference token j.
"""

from __future__ import annotations

import torch

from rlvr.rewards.registry import Forward, PolicyBatch, register_reward_source


def _rows(ids: torch.Tensor, mask: torch.Tensor) -> list[torch.Tensor]:
    return [row[m.bool()] for row, m in zip(ids, mask)]


def reference_logprobs(batch: PolicyBatch, forward: Forward, *, with_reasoning: bool = True
                       ) -> tuple[torch.Tensor, torch.Tensor]:
    """(logp[N,R], mask[N,R]): log-probability of each reference token after prompt (+ reasoning), right-padded."""
    prompts = _rows(batch.prompt_ids, batch.prompt_mask)
    if with_reasoning:
        keep = batch.reasoning_mask if batch.reasoning_mask is not None else batch.response_mask
        reasoning = _rows(batch.response_ids, keep)
    else:
        reasoning = [batch.response_ids.new_empty(0)] * len(prompts)
    refs = _rows(batch.reference_ids, batch.reference_mask)
    seqs = [torch.cat([p, z, y]) for p, z, y in zip(prompts, reasoning, refs)]
    width = max(len(s) for s in seqs)
    ids = batch.reference_ids.new_zeros((len(seqs), width))
    attn = torch.zeros_like(ids)
    for i, s in enumerate(seqs):
        ids[i, : len(s)] = s
        attn[i, : len(s)] = 1
    logp_all = torch.log_softmax(forward(ids, attn).float(), dim=-1)
    R = batch.reference_ids.shape[1]
    logp = torch.zeros((len(seqs), R), dtype=torch.float32, device=logp_all.device)
    mask = torch.zeros((len(seqs), R), dtype=torch.bool, device=logp_all.device)
    for i, (p, z, y) in enumerate(zip(prompts, reasoning, refs)):
        start = len(p) + len(z)  # position of the first reference token; it is predicted at start - 1
        positions = torch.arange(start - 1, start - 1 + len(y), device=logp_all.device)
        logp[i, : len(y)] = logp_all[i, positions, y.to(logp_all.device)]
        mask[i, : len(y)] = True
    return logp, mask


@register_reward_source("rlpr", needs=("forward", "prompt_ids", "prompt_mask", "response_ids", "response_mask",
                                       "reference_ids", "reference_mask"))
def rlpr(batch: PolicyBatch, forward: Forward, *, debias: bool = True) -> torch.Tensor:
    """RLPR's probability reward (Yu et al., 2025, "RLPR: Extrapolating RLVR to General Domains without
    Verifiers", arXiv:2506.18254, Sec. 2): the MEAN per-token probability of the reference answer y* after the
    model's own reasoning z,  r = (1/|y*|) * sum_j pi(y*_j | x, z, y*_<j)  (Eq. 2, f_seq = mean), debiased by the
    same quantity without reasoning, r' = (1/|y*|) * sum_j pi(y*_j | x, y*_<j), as  r_hat = clip(r - r', 0, 1)
    (Eq. 3). ``debias=False`` returns r. Filter prompts by the std of these rewards with ``std_filter``.
    Returns Tensor[N]."""
    logp, mask = reference_logprobs(batch, forward)
    r = (logp.exp() * mask).sum(-1) / mask.sum(-1).clamp(min=1)
    if not debias:
        return r
    base_logp, base_mask = reference_logprobs(batch, forward, with_reasoning=False)
    r_base = (base_logp.exp() * base_mask).sum(-1) / base_mask.sum(-1).clamp(min=1)
    return (r - r_base).clamp(0.0, 1.0)


@register_reward_source("verifree", needs=("forward", "prompt_ids", "prompt_mask", "response_ids", "response_mask",
                                           "reference_ids", "reference_mask"))
def verifree(batch: PolicyBatch, forward: Forward) -> torch.Tensor:
    """VeriFree's reward (Zhou et al., 2025, "Reinforcing General Reasoning without Verifiers", arXiv:2505.21493,
    Sec. 2): the probability of the WHOLE reference answer given the question and the model's reasoning trace,
    R(z) = pi(y* | x, z) = exp(sum_j log pi(y*_j | x, z, y*_<j)), the quantity whose expectation over z,
    J(theta) = E_{z ~ pi(.|x)}[pi(y* | x, z)], replaces the verifier's E[1{y = y*}]. Returns Tensor[N]."""
    logp, mask = reference_logprobs(batch, forward)
    return (logp * mask).sum(-1).exp()


def std_filter(rewards: torch.Tensor, index: torch.Tensor, beta: float) -> torch.Tensor:
    """RLPR's standard-deviation filtering (Sec. 2, "Standard Deviation Filtering"): keep the rows of the prompts
    whose group of rewards has a standard deviation of at least ``beta`` (too easy or too hard prompts give flat
    rewards and are dropped). Population std over each group. Returns a bool Tensor[N]."""
    keep = torch.zeros_like(rewards, dtype=torch.bool)
    for g in index.unique():
        rows = index == g
        keep[rows] = rewards[rows].float().std(unbiased=False) >= beta
    return keep


class StdThreshold:
    """RLPR's adaptive filtering threshold: beta follows an exponential moving average of the mean group std of
    the batches seen, beta <- m * beta + (1 - m) * mean_g std_g (m = ``momentum``); ``update`` returns the keep
    mask of this batch under the threshold before the update."""

    def __init__(self, beta: float = 0.0, momentum: float = 0.99):
        self.beta, self.momentum = float(beta), float(momentum)

    def update(self, rewards: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        keep = std_filter(rewards, index, self.beta)
        stds = torch.stack([rewards[index == g].float().std(unbiased=False) for g in index.unique()])
        self.beta = self.momentum * self.beta + (1 - self.momentum) * float(stds.mean())
        return keep
