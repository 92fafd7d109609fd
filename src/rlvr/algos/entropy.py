"""Per-token log-probabilities and entropy straight from logits."""

from __future__ import annotations

import math
from typing import Callable

import torch


def token_logprobs(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """log softmax(logits)[token] without materialising the full log-softmax tensor."""
    picked = logits.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
    return picked - torch.logsumexp(logits, dim=-1)


def entropy_from_logits(logits: torch.Tensor, *, chunk_rows: int = 4096) -> torch.Tensor:
    """Entropy H = logsumexp(z) - sum softmax(z) * z of the distribution each logit row defines.

    Without autograd the rows are processed in chunks, so the temporary softmax never holds more than
    ``chunk_rows`` x vocabulary values beside the logits themselves.
    """
    if logits.requires_grad and torch.is_grad_enabled():
        probs = torch.softmax(logits, dim=-1)
        return torch.logsumexp(logits, dim=-1) - (probs * logits).sum(-1)
    flat = logits.reshape(-1, logits.shape[-1])
    out = torch.empty(flat.shape[0], dtype=logits.dtype, device=logits.device)
    for start in range(0, flat.shape[0], chunk_rows):
        z = flat[start:start + chunk_rows]
        out[start:start + chunk_rows] = torch.logsumexp(z, dim=-1) - (torch.softmax(z, dim=-1) * z).sum(-1)
    return out.reshape(logits.shape[:-1])


def chunked_logprobs_entropy(
    hidden: torch.Tensor,
    head: Callable[[torch.Tensor], torch.Tensor],
    tokens: torch.Tensor,
    *,
    temperature: float = 1.0,
    chunk_rows: int = 1024,
    with_entropy: bool = False,
    entropy_grad: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(log softmax(head(hidden) / T)[token], entropy) for hidden [..., H] and tokens [...], ``chunk_rows``
    positions at a time, so the float32 logits never exist for more than one chunk: peak memory is
    chunk_rows x vocabulary instead of positions x vocabulary. Under autograd each chunk is checkpointed (its
    logits are recomputed in the backward pass rather than kept), the idea of fused linear cross-entropy (Hsu et
    al., 2024, "Liger Kernel: Efficient Triton Kernels for LLM Training", Sec. 3.3) written with torch ops. The
    values are those of ``token_logprobs`` and ``entropy_from_logits`` on the full logits (same per-row ops);
    the entropy is detached unless ``entropy_grad``.
    """
    from torch.utils.checkpoint import checkpoint

    shape = tokens.shape
    flat_h = hidden.reshape(-1, hidden.shape[-1])
    flat_t = tokens.reshape(-1)

    def piece(h: torch.Tensor, t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logits = head(h).float()
        if temperature not in (0.0, 1.0):
            logits = logits / temperature
        lse = torch.logsumexp(logits, dim=-1)
        logp = logits.gather(-1, t.unsqueeze(-1)).squeeze(-1) - lse
        if not with_entropy:
            return logp, logp.new_zeros(())
        z = logits if entropy_grad else logits.detach()
        return logp, torch.logsumexp(z, dim=-1) - (torch.softmax(z, dim=-1) * z).sum(-1)

    grad = torch.is_grad_enabled() and (flat_h.requires_grad or any(
        p.requires_grad for p in getattr(head, "parameters", lambda: [])()))
    logps, entropies = [], []
    for start in range(0, flat_h.shape[0], chunk_rows):
        h, t = flat_h[start:start + chunk_rows], flat_t[start:start + chunk_rows]
        logp, ent = checkpoint(piece, h, t, use_reentrant=False) if grad else piece(h, t)
        logps.append(logp)
        entropies.append(ent if entropy_grad else ent.detach())
    logp = torch.cat(logps).reshape(shape) if logps else flat_h.new_zeros(shape, dtype=torch.float32)
    if not with_entropy:
        return logp, None
    entropy = torch.cat(entropies).reshape(shape) if entropies else logp.new_zeros(shape)
    return logp, entropy


def forking_token_mask(entropy: torch.Tensor, response_mask: torch.Tensor, rho: float) -> torch.Tensor:
    """Keep only the top-``rho`` fraction of valid tokens by entropy across the whole batch.

    Wang et al., 2025, "Beyond the 80/20 Rule: High-Entropy Minority Tokens Drive Effective Reinforcement Learning for
    LLM Reasoning", Sec. 4 (the masked DAPO objective with indicator I[H_t >= tau_rho], rho = 0.2 in the paper): the
    policy gradient is restricted to the high-entropy "forking" tokens. Exactly ceil(rho * n_valid) tokens are kept
    (ties broken by position order in the flattened [N, T] batch, earlier first); masked-out positions are never
    selected; rho = 1 returns the mask unchanged. ``entropy`` is detached. Returns a mask of response_mask's dtype.
    """
    if not 0.0 < rho <= 1.0:
        raise ValueError(f"rho must be in (0, 1], got {rho}")
    if entropy.shape != response_mask.shape:
        raise ValueError(
            f"entropy {tuple(entropy.shape)} and response_mask {tuple(response_mask.shape)} differ in shape"
        )
    if rho == 1.0:
        return response_mask.clone()
    flat_mask = response_mask.reshape(-1)
    valid_idx = torch.nonzero(flat_mask != 0, as_tuple=False).squeeze(-1)
    n_valid = valid_idx.numel()
    # round first so that e.g. 0.1 * 30 = 3.0000000000000004 keeps 3 tokens, not 4
    k = min(n_valid, math.ceil(round(rho * n_valid, 9)))
    values = entropy.detach().reshape(-1)[valid_idx]
    order = torch.sort(values, descending=True, stable=True).indices[:k]
    keep = valid_idx[order]
    out = torch.zeros_like(flat_mask)
    out[keep] = flat_mask[keep]
    return out.reshape(response_mask.shape)
