"""Rollout/trainer mismatch corrections: truncated importance sampling (TIS) and the sequence-level, masking and
geometric corrections registered below (``algo.is_correction``).

Yao et al., 2025, "Your Efficient RL Framework Secretly Brings You Off-Policy RL Training": the rollout engine
(e.g. vLLM) and the trainer compute different probabilities for the same tokens under the same weights, so the
samples are slightly off-policy. TIS reweights each token's policy-gradient term by w = min(pi_trainer / pi_rollout, C).
Tensors: N responses, T = padded response length; response_mask [N, T] bool or 0/1 float.
"""

from __future__ import annotations

import math

import torch

from rlvr.algos.registry import Registry


def _valid(response_mask: torch.Tensor) -> torch.Tensor:
    return response_mask.bool() if response_mask.dtype != torch.bool else response_mask


def mismatch_metrics(
    trainer_logp: torch.Tensor, rollout_logp: torch.Tensor, response_mask: torch.Tensor
) -> dict[str, float]:
    """How far the trainer's token probabilities are from the rollout engine's, over valid tokens (python floats).

    With d = trainer_logp - rollout_logp and ratio = exp(d) = pi_trainer / pi_rollout (Yao et al., 2025):
      rollout_ratio_mean, rollout_ratio_max: mean and max of the ratio;
      rollout_kl: mean k3 estimate of KL(pi_rollout || pi_trainer) -- the tokens are samples of the rollout policy,
        so k3 = ratio - 1 - log(ratio) = exp(d) - 1 - d (Schulman, 2020, "Approximating KL Divergence") is unbiased
        and non-negative for that direction.
    A batch with no valid token gives 0.0 for every metric.
    """
    return _metrics(trainer_logp, rollout_logp, response_mask, cap=None)


def _metrics(trainer_logp, rollout_logp, response_mask, cap):
    valid = _valid(response_mask)
    names = ["rollout_ratio_mean", "rollout_ratio_max", "rollout_kl"] + ([] if cap is None else ["tis_clip_frac"])
    n = int(valid.sum())
    if n == 0:
        return {k: 0.0 for k in names}
    d = (trainer_logp.detach().float() - rollout_logp.detach().float())[valid]
    ratio = torch.exp(d)
    out = {
        "rollout_ratio_mean": float(ratio.mean()),
        "rollout_ratio_max": float(ratio.max()),
        "rollout_kl": float((torch.expm1(d) - d).mean()),
    }
    if cap is not None:
        out["tis_clip_frac"] = float((ratio > cap).float().mean())
    return out


def tis_weights(
    trainer_logp: torch.Tensor, rollout_logp: torch.Tensor, response_mask: torch.Tensor, *, cap: float = 2.0
) -> tuple[torch.Tensor, dict[str, float]]:
    """Truncated importance-sampling weights [N, T] and mismatch metrics.

    Yao et al., 2025, TIS correction: w_t = min(pi_trainer(y_t) / pi_rollout(y_t), C) with C = ``cap``, applied as a
    stop-gradient multiplier on each token's loss. Returned weights are detached, computed in trainer_logp's dtype,
    and 0 on masked positions. Metrics are those of ``mismatch_metrics`` plus "tis_clip_frac", the fraction of valid
    tokens whose ratio exceeds ``cap``.
    """
    if not cap > 0:
        raise ValueError(f"cap must be > 0, got {cap}")
    valid = _valid(response_mask)
    ratio = torch.exp(trainer_logp.detach() - rollout_logp.detach().to(trainer_logp.dtype))
    weights = torch.where(valid, ratio.clamp(max=cap), torch.zeros_like(ratio))
    return weights, _metrics(trainer_logp, rollout_logp, response_mask, cap=cap)


# ---------------------------------------------------------------------------------------------------------------
# Corrections beyond token-level TIS (``algo.is_correction``). Each is a pure function
#     fn(trainer_logp[N, T], rollout_logp[N, T], response_mask[N, T], **options) -> (weights[N, T], metrics)
# whose weights multiply each token's policy loss as a stop-gradient factor (0 on masked positions). With
# d_t = log pi_trainer(y_t) - log pi_rollout(y_t) over the valid tokens of a response:
#   sequence log-ratio  S = sum_t d_t      (log of the sequence importance ratio prod_t pi_trainer / pi_rollout)
#   geometric log-ratio G = S / |y|        (log of the per-token geometric mean of the ratios)
# Comparisons are made in log space, so a sequence ratio too large for a float never overflows.

_CORRECTIONS = Registry("mismatch correction")
correction_names = _CORRECTIONS.names


def register_correction(name: str, **defaults):
    """Register ``fn(trainer_logp, rollout_logp, response_mask, **options) -> (weights, metrics)`` under ``name``;
    ``defaults`` are its options' default values (the options a user may set)."""
    return _CORRECTIONS.register(name, defaults=defaults)


def correction_defaults(name: str) -> dict[str, float | str | None]:
    return dict(_CORRECTIONS.info(name)["defaults"])


def correction_weights(name: str, trainer_logp: torch.Tensor, rollout_logp: torch.Tensor,
                       response_mask: torch.Tensor, **options) -> tuple[torch.Tensor, dict[str, float]]:
    """The weights and metrics of the correction registered as ``name``, its defaults overridden by ``options``."""
    fn = _CORRECTIONS.get(name)
    return fn(trainer_logp, rollout_logp, response_mask, **{**correction_defaults(name), **options})


def log_ratios(trainer_logp: torch.Tensor, rollout_logp: torch.Tensor,
               response_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(d [N, T] float64 with 0 on padding, S [N], G [N], valid [N, T] bool): the token, sequence and geometric
    log-ratios defined above. A row with no valid token has S = G = 0."""
    valid = _valid(response_mask)
    zero = torch.zeros((), dtype=torch.float64, device=trainer_logp.device)
    d = torch.where(valid, trainer_logp.detach().double() - rollout_logp.detach().double(), zero)
    seq = d.sum(-1)
    geo = seq / valid.sum(-1).clamp(min=1)
    return d, seq, geo, valid


def log_ratio_metrics(trainer_logp: torch.Tensor, rollout_logp: torch.Tensor,
                      response_mask: torch.Tensor) -> dict[str, float]:
    """Token and sequence log-ratio statistics that tell which correction a run needs (python floats):
    mismatch/token_log_ratio_{mean,std,abs_max} over valid tokens, mismatch/seq_log_ratio_{mean,min,max} and
    mismatch/geo_log_ratio_{mean,abs_max} over responses with a valid token. All 0.0 without a valid token."""
    d, seq, geo, valid = log_ratios(trainer_logp, rollout_logp, response_mask)
    names = ["token_log_ratio_mean", "token_log_ratio_std", "token_log_ratio_abs_max", "seq_log_ratio_mean",
             "seq_log_ratio_min", "seq_log_ratio_max", "geo_log_ratio_mean", "geo_log_ratio_abs_max"]
    if not valid.any():
        return {f"mismatch/{k}": 0.0 for k in names}
    tokens, rows = d[valid], valid.any(-1)
    seq, geo = seq[rows], geo[rows]
    values = [tokens.mean(), tokens.std(unbiased=False), tokens.abs().max(), seq.mean(), seq.min(), seq.max(),
              geo.mean(), geo.abs().max()]
    return {f"mismatch/{k}": float(v) for k, v in zip(names, values)}


def _bounds(low: float | None, high: float) -> tuple[float, float]:
    """(low, high) of a two-sided band with low defaulting to 1 / high (verl's rollout_rs_threshold_lower)."""
    low = 1.0 / high if low is None else low
    if not 0 <= low < high:
        raise ValueError(f"need 0 <= low < high, got low={low}, high={high}")
    return low, high


def _in_band(log_value: torch.Tensor, low: float, high: float) -> torch.Tensor:
    above_low = log_value >= math.log(low) if low > 0 else torch.ones_like(log_value, dtype=torch.bool)
    return above_low & (log_value <= math.log(high))


def _mask_metrics(kept: torch.Tensor, valid: torch.Tensor) -> dict[str, float]:
    """Fractions of valid tokens and of responses (with a valid token) that the correction zeroed."""
    rows = valid.any(-1)
    n, r = int(valid.sum()), int(rows.sum())
    dropped = valid & ~kept
    return {"mismatch/masked_token_frac": int(dropped.sum()) / n if n else 0.0,
            "mismatch/masked_seq_frac": int((dropped.any(-1) & rows).sum()) / r if r else 0.0}


@register_correction("seq_tis", cap=2.0)
def seq_tis_weights(trainer_logp, rollout_logp, response_mask, *, cap: float = 2.0):
    """Sequence-level truncated importance sampling: every token of response i gets w_i = min(exp(S_i), C), the
    sequence ratio prod_t pi_trainer / pi_rollout truncated at C = ``cap`` (the "sequence" level of verl's rollout
    correction, ``rollout_is="sequence"`` with ``rollout_is_threshold``, the same at verl commits 9b718e1 and
    b178a3c, ``compute_rollout_correction_weights``; its optional ``rollout_is_batch_normalize``, off by default,
    is not implemented; after Yao et al., 2025's token-level TIS). Unbiased up to the truncation, higher variance than token TIS.
    Metrics: mismatch/truncated_seq_frac, the responses whose ratio exceeded C."""
    if not cap > 0:
        raise ValueError(f"cap must be > 0, got {cap}")
    _, seq, _, valid = log_ratios(trainer_logp, rollout_logp, response_mask)
    w = torch.exp(seq.clamp(max=math.log(cap)))
    weights = torch.where(valid, w.unsqueeze(-1), torch.zeros((), dtype=w.dtype, device=w.device)).to(trainer_logp.dtype)
    rows = valid.any(-1)
    r = int(rows.sum())
    return weights, {"mismatch/truncated_seq_frac": int(((seq > math.log(cap)) & rows).sum()) / r if r else 0.0}


@register_correction("seq_mask", low=None, high=2.0)
def seq_mask_weights(trainer_logp, rollout_logp, response_mask, *, low: float | None = None, high: float = 2.0):
    """Sequence-level masking (rejection): weight 1 on every token of a response whose sequence ratio exp(S_i) lies
    in [low, high], else 0; low defaults to 1 / high. verl's earlier ``rollout_rs="sequence"`` (commit 9b718e1)
    bounds exp(S) the same way; its current ``rollout_rs="seq_sum_k1"`` (commit b178a3c) bounds the sum of
    k1 = -log k_t, the inverse ratio exp(-S), in [lower, upper]: the same band when low = 1 / high, and verl's
    asymmetric [l, u] is low = 1 / u, high = 1 / l here."""
    low, high = _bounds(low, high)
    _, seq, _, valid = log_ratios(trainer_logp, rollout_logp, response_mask)
    kept = valid & _in_band(seq, low, high).unsqueeze(-1)
    return kept.to(trainer_logp.dtype), _mask_metrics(kept, valid)


@register_correction("geo_mask", low=None, high=1.001, veto=None)
def geo_mask_weights(trainer_logp, rollout_logp, response_mask, *, low: float | None = None, high: float = 1.001,
                     veto: float | None = None):
    """Geometric sequence masking: weight 1 on every token of a response whose per-token geometric mean ratio
    exp(G_i) = exp(S_i / |y_i|) lies in [low, high], else 0. Unlike the sequence ratio it does not grow with the
    response length, so long responses are not masked for their length alone. With ``veto`` (off by default), a
    response with any valid token whose ratio k_t is below ``veto`` is masked too.

    verl: its earlier API (commit 9b718e1, ``rollout_rs="geometric"``) bounds exp(G) itself, and its
    ``decoupled_geo_rs`` preset is high = 1.001, low = 1 / high with ``rollout_token_veto_threshold=1e-4``: that
    preset is ``{veto: 0.0001}`` here. Its current API (commit b178a3c, ``rollout_rs="seq_mean_k1"``, preset
    threshold "0.999_1.001") bounds the mean of k1 = -log k_t, so the INVERSE ratio exp(-G) lies in [lower, upper]:
    verl's band [l, u] is low = 1 / u, high = 1 / l here (the preset: 0.999001 and 1.001001), and it has no veto."""
    low, high = _bounds(low, high)
    d, _, geo, valid = log_ratios(trainer_logp, rollout_logp, response_mask)
    keep_rows = _in_band(geo, low, high)
    if veto is not None:
        if not veto > 0:
            raise ValueError(f"veto must be > 0, got {veto}")
        keep_rows &= ~(valid & (d < math.log(veto))).any(-1)
    kept = valid & keep_rows.unsqueeze(-1)
    return kept.to(trainer_logp.dtype), _mask_metrics(kept, valid)


@register_correction("token_mask", low=0.5, high=5.0, weight="ratio")
def token_mask_weights(trainer_logp, rollout_logp, response_mask, *, low: float = 0.5, high: float = 5.0,
                       weight: str = "ratio"):
    """IcePop token masking (Ling Team, 2025: the blog "Small Leak Can Sink a Great Ship -- Boost RL Training on MoE
    with IcePop!" and the Ring-1T report "Every Step Evolves", the masked policy gradient): each token's gradient is
    multiplied by
    M(k) = k if alpha <= k <= beta else 0, with k = pi_trainer(y_t) / pi_rollout(y_t) and the two-sided bounds
    alpha = ``low`` (0.5), beta = ``high`` (5.0), the paper's values. ``weight="mask"`` keeps a 0/1 mask instead
    of k inside the band (verl's token-level rejection, ``rollout_rs=token``)."""
    if weight not in ("ratio", "mask"):
        raise ValueError(f"weight must be 'ratio' or 'mask', got {weight!r}")
    low, high = _bounds(low, high)
    d, _, _, valid = log_ratios(trainer_logp, rollout_logp, response_mask)
    kept = valid & _in_band(d, low, high)
    value = torch.exp(d) if weight == "ratio" else torch.ones_like(d)
    weights = torch.where(kept, value, torch.zeros((), dtype=d.dtype, device=d.device)).to(trainer_logp.dtype)
    return weights, _mask_metrics(kept, valid)


@register_correction("tis", cap=2.0)
def _tis(trainer_logp, rollout_logp, response_mask, *, cap: float = 2.0):
    """Token-level TIS under the registry (``tis_weights``)."""
    return tis_weights(trainer_logp, rollout_logp, response_mask, cap=cap)
