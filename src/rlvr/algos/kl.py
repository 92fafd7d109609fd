"""Per-token KL estimators between the policy and a frozen reference (Schulman, 2020, "Approximating KL Divergence")."""

from __future__ import annotations

import torch

KINDS = ("k1", "k2", "k3")


def estimate(logp: torch.Tensor, ref_logp: torch.Tensor, kind: str = "k3") -> torch.Tensor:
    """KL(policy || ref) per token from samples of the policy, with d = logp - ref_logp.

    k1 = d (unbiased, high variance); k2 = d^2 / 2 (biased, low variance); k3 = exp(-d) - 1 + d
    (unbiased and non-negative; the estimator GRPO uses, DeepSeekMath Eq. 4).
    """
    d = logp - ref_logp
    if kind == "k1":
        return d
    if kind == "k2":
        return 0.5 * d.pow(2)
    if kind == "k3":
        return torch.expm1(-d) + d
    raise ValueError(f"unknown KL estimator {kind!r}; known: {', '.join(KINDS)}")
