"""Per-token log-probabilities and entropy straight from logits."""

from __future__ import annotations

import torch


def token_logprobs(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """log softmax(logits)[token] without materialising the full log-softmax tensor."""
    picked = logits.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
    return picked - torch.logsumexp(logits, dim=-1)


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Entropy H = logsumexp(z) - sum softmax(z) * z of the distribution each logit row defines."""
    probs = torch.softmax(logits, dim=-1)
    return torch.logsumexp(logits, dim=-1) - (probs * logits).sum(-1)
