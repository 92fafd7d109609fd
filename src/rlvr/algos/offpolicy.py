"""Rollout/trainer mismatch correction: truncated importance sampling (TIS).

Yao et al., 2025, "Your Efficient RL Framework Secretly Brings You Off-Policy RL Training": the rollout engine
(e.g. vLLM) and the trainer compute different probabilities for the same tokens under the same weights, so the
samples are slightly off-policy. TIS reweights each token's policy-gradient term by w = min(pi_trainer / pi_rollout, C).
Tensors: N responses, T = padded response length; response_mask [N, T] bool or 0/1 float.
"""

from __future__ import annotations

import torch


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
