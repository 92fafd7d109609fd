"""Policy-gradient losses and how per-token losses are averaged (docs/api.md, "Algorithms").

A registered loss maps (logp, old_logp, advantages, response_mask, **kw) to per-token losses L[N, T] and a
metrics dict; ``compute`` aggregates them. Tensors: N responses, T = padded response length.
"""

from __future__ import annotations

import torch

from rlvr.algos.registry import Registry

_REGISTRY = Registry("policy loss")
names = _REGISTRY.names

AGG_MODES = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm")


def register(name: str, *, default_agg: str = "token-mean", zero_at_zero_advantage: bool = False):
    """Register fn(logp, old_logp, advantages, response_mask, **kw) -> (L[N, T], metrics).

    ``zero_at_zero_advantage=True`` declares that a token with advantage 0 has loss 0 and gradient 0 whatever
    the log-probs (true of every surrogate of the form A * f(ratio)); the trainer then skips the forward and
    backward passes of responses whose advantages are all zero."""
    if default_agg not in AGG_MODES:
        raise ValueError(f"unknown aggregation {default_agg!r}; known: {', '.join(AGG_MODES)}")
    return _REGISTRY.register(name, default_agg=default_agg, zero_at_zero_advantage=zero_at_zero_advantage)


def default_agg(name: str) -> str:
    return _REGISTRY.info(name)["default_agg"]


def zero_at_zero_advantage(name: str) -> bool:
    return bool(_REGISTRY.info(name).get("zero_at_zero_advantage", False))


def compute(
    name: str,
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    dual_clip: float | None = None,
    agg: str | None = None,
    norm_length: int | None = None,
    token_weights: torch.Tensor | None = None,
    **kw,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Scalar loss and metrics of the loss registered under ``name``; agg=None uses that loss's default.

    ``token_weights`` [N, T] multiply the per-token losses before aggregation (e.g. truncated importance
    sampling weights, which must carry no gradient).
    """
    fn = _REGISTRY.get(name)
    per_token, metrics = fn(
        logp, old_logp, advantages, response_mask, clip_low=clip_low, clip_high=clip_high, dual_clip=dual_clip, **kw
    )
    if token_weights is not None:
        per_token = per_token * token_weights
    mode = agg or default_agg(name)
    return aggregate(per_token, response_mask, mode, norm_length=norm_length), metrics


def aggregate(loss: torch.Tensor, response_mask: torch.Tensor, mode: str, norm_length: int | None = None) -> torch.Tensor:
    """Average per-token losses L[N, T] over valid tokens; rows with no valid token are left out of sequence means.

    token-mean: sum(L*m)/sum(m) (DAPO, Yu et al. 2025, Eq. 12); seq-mean-token-mean: mean over sequences of
    their token means (GRPO, Shao et al. 2024, Eq. 3); seq-mean-token-sum: mean over sequences of their token
    sums; seq-mean-token-sum-norm: sum(L*m)/(N*T) with a constant T (Dr. GRPO, Liu et al. 2025, Sec. 3.1).
    """
    m = response_mask.to(loss.dtype)
    masked = loss * m
    if mode == "token-mean":
        return masked.sum() / m.sum().clamp(min=1)
    if mode == "seq-mean-token-sum-norm":
        length = norm_length if norm_length is not None else m.shape[-1]
        return masked.sum() / (m.shape[0] * length)
    rows = m.sum(-1) > 0
    if mode == "seq-mean-token-mean":
        per_seq = masked.sum(-1) / m.sum(-1).clamp(min=1)
    elif mode == "seq-mean-token-sum":
        per_seq = masked.sum(-1)
    else:
        raise ValueError(f"unknown aggregation {mode!r}; known: {', '.join(AGG_MODES)}")
    return per_seq[rows].sum() / rows.sum().clamp(min=1)


def aggregation_units(response_mask: torch.Tensor, mode: str) -> int:
    """How many units ``aggregate`` averages over: tokens for token-mean, non-empty rows or all rows otherwise.

    Splitting a batch into micro-batches, weighting each micro-batch's aggregate by units_mb / units_total
    gives exactly the aggregate of the whole batch.
    """
    if mode == "token-mean":
        return int(response_mask.sum())
    if mode == "seq-mean-token-sum-norm":
        return int(response_mask.shape[0])
    return int((response_mask.sum(-1) > 0).sum())


def _masked_mean(x: torch.Tensor, m: torch.Tensor) -> float:
    m = m.to(x.dtype)
    return float((x * m).sum() / m.sum().clamp(min=1))


@register("ppo", default_agg="token-mean", zero_at_zero_advantage=True)
def ppo(logp, old_logp, advantages, response_mask, *, clip_low=0.2, clip_high=0.2, dual_clip=None, **_):
    """PPO clipped surrogate (Schulman et al., 2017, Eq. 7) per token: L = -min(A r, A clip(r, 1-eps_low, 1+eps_high)).

    clip_high > clip_low is DAPO's clip-higher (Yu et al., 2025, Eq. 10). dual_clip=c bounds the loss of
    negative-advantage tokens by -A c (Ye et al., 2020, "Mastering Complex Control in MOBA Games", Eq. 5).
    """
    ratio = torch.exp(logp - old_logp)
    unclipped = advantages * ratio
    clipped = advantages * ratio.clamp(1 - clip_low, 1 + clip_high)
    loss = -torch.minimum(unclipped, clipped)
    is_clipped = clipped < unclipped
    if dual_clip is not None:
        bound = -advantages * dual_clip
        loss = torch.where(advantages < 0, torch.minimum(loss, bound), loss)
    return loss, {
        "clip_frac": _masked_mean(is_clipped.to(logp.dtype), response_mask),
        "ratio_mean": _masked_mean(ratio.detach(), response_mask),
    }


@register("gspo", default_agg="seq-mean-token-mean", zero_at_zero_advantage=True)
def gspo(logp, old_logp, advantages, response_mask, *, clip_low=0.2, clip_high=0.2, **_):
    """GSPO (Zheng et al., 2025, "Group Sequence Policy Optimization", Eqs. 5-7 and the GSPO-token form, Eq. 13).

    s_i = exp(mean_t (logp - old_logp)) over valid tokens; per token s_it = sg(s_i) exp(logp - sg(logp)),
    which equals s_i in value while the gradient flows through each token's logp;
    L = -min(s_it A, clip(s_it, 1-eps_low, 1+eps_high) A).
    """
    m = response_mask.to(logp.dtype)
    log_s = ((logp - old_logp) * m).sum(-1) / m.sum(-1).clamp(min=1)
    s_token = torch.exp(log_s.detach().unsqueeze(-1) + logp - logp.detach())
    unclipped = advantages * s_token
    clipped = advantages * s_token.clamp(1 - clip_low, 1 + clip_high)
    loss = -torch.minimum(unclipped, clipped)
    return loss, {
        "clip_frac": _masked_mean((clipped < unclipped).to(logp.dtype), response_mask),
        "ratio_mean": float(torch.exp(log_s.detach()).mean()) if log_s.numel() else 1.0,
    }


@register("cispo", default_agg="token-mean", zero_at_zero_advantage=True)
def cispo(logp, old_logp, advantages, response_mask, *, clip_low=0.2, clip_high=0.2, **_):
    """CISPO (MiniMax, 2025, "MiniMax-M1", Eq. 4): L = -sg(clip(r, 1-eps_low, 1+eps_high)) A logp.

    The importance weight is clipped and detached, so every token keeps a gradient; clip_low=1.0 is the
    paper's setting with no lower bound.
    """
    ratio = torch.exp(logp - old_logp)
    weight = ratio.clamp(1 - clip_low, 1 + clip_high).detach()
    loss = -weight * advantages * logp
    is_clipped = (ratio < 1 - clip_low) | (ratio > 1 + clip_high)
    return loss, {
        "clip_frac": _masked_mean(is_clipped.to(logp.dtype), response_mask),
        "ratio_mean": _masked_mean(ratio.detach(), response_mask),
    }


def value_loss(
    values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    clip: float | None = 0.2,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Clipped value loss of common PPO implementations (Schulman et al., 2017, PPO; the value clipping of OpenAI
    baselines' ppo2, discussed by Engstrom et al., 2020, "Implementation Matters in Deep Policy Gradients"):

    per token 0.5 * max((v - R)^2, (old_v + clip(v - old_v, -clip, clip) - R)^2), token-mean over valid tokens.
    clip=None gives the plain 0.5 * (v - R)^2. metrics: vf_clip_frac, the fraction of valid tokens where the
    clipped term is the larger one. old_values and returns are targets and carry no gradient.
    """
    old_values, returns = old_values.detach(), returns.detach()
    unclipped = (values - returns) ** 2
    if clip is None:
        per_token = unclipped
        clip_frac = 0.0
    else:
        v_clipped = old_values + (values - old_values).clamp(-clip, clip)
        clipped = (v_clipped - returns) ** 2
        per_token = torch.maximum(unclipped, clipped)
        clip_frac = _masked_mean((clipped > unclipped).to(values.dtype), response_mask)
    loss = aggregate(0.5 * per_token, response_mask, "token-mean")
    return loss, {"vf_clip_frac": clip_frac}
