"""Policy loss over groups that mix on-policy samples with expert traces (docs/api.md, "Algorithms").

Rows flagged ``is_expert`` [N] (an expert trace the engine did not sample) get an off-policy objective; every other
row gets the plain policy-gradient surrogate. The trainer passes ``is_expert`` from the rows' provenance; without
it every row is on-policy.
"""

from __future__ import annotations

from typing import Callable

import torch

from rlvr.algos import losses


def luffy_shaping(prob: torch.Tensor, gamma: float = 0.1) -> torch.Tensor:
    """LUFFY's policy shaping f(p) = p / (p + gamma) (Yan et al., 2025, "Learning to Reason under Off-Policy
    Guidance", arXiv 2504.14945, Sec. 3.3, Eq. 6). d f / d log p = gamma p / (p + gamma)^2, so low-probability expert
    tokens get a larger gradient than under the plain ratio p (whose derivative is p)."""
    return prob / (prob + gamma)


def luffy_expert_loss(logp, old_logp, advantages, *, gamma: float = 0.1, **_) -> tuple[torch.Tensor, torch.Tensor]:
    """(per-token loss, ratio) on expert tokens: L = -A f(pi_theta(t)), the behaviour probability taken as 1.

    Released code: ElliottYan/LUFFY ``luffy/verl/verl/mix_src/mix_core_alg.py``, ``compute_token_on_off_policy_loss``
    with ``off_policy_reshape="p_div_p_0.1"`` (``exp_scripts/train.sh``)."""
    ratio = luffy_shaping(torch.exp(logp), gamma)
    return -advantages * ratio, ratio


def rl_plus_expert_loss(logp, old_logp, advantages, *, explore_exp: float = 0.5, **_) -> tuple[torch.Tensor, torch.Tensor]:
    """(per-token loss, ratio) on expert tokens by RL-PLUS (Dong et al., 2025, "RL-PLUS: Countering Capability
    Boundary Collapse of LLMs in Reinforcement Learning with Hybrid-policy Optimization", arXiv 2508.00222, Eqs. 5-7):

    multiple importance sampling with the unknown expert policy approximated as pi_omega = (pi_old + 1) / 2,
    rho = 2 pi_theta / (pi_old + pi_omega), and the exploration-based advantage A (1 - sg(pi_theta))^explore_exp;
    L = -rho A (1 - sg(pi_theta))^explore_exp. Released code: YihongDong/RL-PLUS
    ``rl_plus/verl/verl/recipe/rlplus_core_alg.py``, ``compute_token_on_off_policy_loss`` with
    ``off_policy_strategy="RL-PLUS"`` (exponent 0.5 in the code)."""
    prob, old_prob = torch.exp(logp), torch.exp(old_logp)
    ratio = 2.0 * prob / (old_prob + 0.5 * (old_prob + 1.0))
    explore = (1.0 - prob.detach()).clamp(min=0.0) ** explore_exp
    return -ratio * advantages * explore, ratio


EXPERT_SHAPINGS: dict[str, Callable[..., tuple[torch.Tensor, torch.Tensor]]] = {
    "luffy": luffy_expert_loss,
    "rl_plus": rl_plus_expert_loss,
}


def _masked_mean(x: torch.Tensor, m: torch.Tensor) -> float:
    m = m.to(x.dtype)
    return float((x * m).sum() / m.sum().clamp(min=1))


@losses.register("mixed_policy", default_agg="seq-mean-token-sum-norm", zero_at_zero_advantage=True)
def mixed_policy(
    logp,
    old_logp,
    advantages,
    response_mask,
    *,
    clip_low=0.2,
    clip_high=0.2,
    dual_clip=None,
    is_expert=None,
    shaping: str = "luffy",
    gamma: float = 0.1,
    explore_exp: float = 0.5,
    on_policy_clip: bool = False,
    **_,
):
    """LUFFY / RL-PLUS mixed-policy loss per token (see ``luffy_expert_loss`` and ``rl_plus_expert_loss``).

    On-policy tokens: L = -A r with r = exp(logp - old_logp), unclipped as both released scripts run it
    (``loss_remove_clip=True``); ``on_policy_clip=True`` uses rlvr's ``ppo`` surrogate instead (clip_low, clip_high,
    dual_clip). Expert tokens (rows with ``is_expert``): ``shaping`` "luffy" (gamma) or "rl_plus" (explore_exp).
    The default aggregation ``seq-mean-token-sum-norm`` is the scripts' ``loss_remove_token_mean=True``
    (sum of L m / T_max), up to the constant N. Metrics: ``expert_token_frac`` (share of valid tokens on expert
    rows), ``expert_prob_mean`` and ``expert_ratio_mean`` over expert tokens, ``clip_frac`` and ``ratio_mean`` over
    on-policy tokens.
    """
    if shaping not in EXPERT_SHAPINGS:
        raise ValueError(f"mixed_policy: unknown shaping {shaping!r} (algo.loss_options.shaping); known: "
                         f"{', '.join(EXPERT_SHAPINGS)}")
    m = response_mask.to(torch.bool)
    if is_expert is None:
        expert_rows = torch.zeros(logp.shape[0], dtype=torch.bool, device=logp.device)
    else:
        expert_rows = torch.as_tensor(is_expert, device=logp.device).to(torch.bool).reshape(-1)
        if expert_rows.numel() != logp.shape[0]:
            raise ValueError(f"mixed_policy: is_expert has {expert_rows.numel()} rows, the batch {logp.shape[0]}")
    expert = expert_rows.unsqueeze(-1).expand_as(logp)

    # expert rows' ratio to the old policy never enters the on-policy branch (no overflow leaking NaN gradients)
    on_old_logp = torch.where(expert, logp.detach(), old_logp)
    ratio = torch.exp(logp - on_old_logp)
    if on_policy_clip:
        on_loss, on_metrics = losses.ppo(logp, on_old_logp, advantages, m & ~expert, clip_low=clip_low,
                                         clip_high=clip_high, dual_clip=dual_clip)
        clip_frac = on_metrics["clip_frac"]
    else:
        on_loss, clip_frac = -advantages * ratio, 0.0
    off_loss, off_ratio = EXPERT_SHAPINGS[shaping](logp, old_logp, advantages, gamma=gamma, explore_exp=explore_exp)
    loss = torch.where(expert, off_loss, on_loss)
    return loss, {
        "expert_token_frac": _masked_mean(expert.to(logp.dtype), m),
        "expert_prob_mean": _masked_mean(torch.exp(logp.detach()), m & expert),
        "expert_ratio_mean": _masked_mean(off_ratio.detach(), m & expert),
        "clip_frac": clip_frac,
        "ratio_mean": _masked_mean(ratio.detach(), m & ~expert),
    }
