"""On-policy distillation's advantage: the per-token reward itself, with discount 0 (Lu et al., 2025, Thinking
Machines, "On-Policy Distillation"; Agarwal et al., 2024, "On-Policy Distillation of Language Models: Learning from
Self-Generated Mistakes", arXiv 2306.13649).

The student samples; a teacher scores every sampled token; the reward of token t is the negative reverse KL on it,
-(log pi_student(y_t) - log pi_teacher(y_t)) (rlvr.train.parts_distill puts it, times ``algo.teacher_coef``, into the
batch's per-token rewards). With discount 0 the advantage of token t is that token's reward alone, not a return:
each token is pushed towards what the teacher would have said in the state the student reached. The released
implementation (thinking-machines-lab/tinker-cookbook, ``distillation/train_on_policy.py``, incorporate_kl_penalty:
kl_penalty_coef 1.0, kl_discount_factor 0.0, loss_fn "importance_sampling") adds that term to the group-centred
outcome advantage of the environment's reward; ``outcome_coef`` weights that outcome term here (0 = pure
distillation, the verifier's reward only logged).
"""

from __future__ import annotations

import torch

from rlvr.algos import advantages as adv_mod


def opd_advantages(token_rewards: torch.Tensor, response_mask: torch.Tensor, rewards: torch.Tensor | None = None,
                   index: torch.Tensor | None = None, outcome_coef: float = 0.0) -> torch.Tensor:
    """A_t = token_rewards_t + outcome_coef (r_i - mean of i's group) on valid tokens, 0 on padding; [N, T].

    ``token_rewards`` [N, T], ``response_mask`` [N, T]; ``rewards`` [N] and ``index`` [N] only when outcome_coef != 0.
    """
    m = response_mask.to(token_rewards.dtype)
    adv = token_rewards * m
    if outcome_coef:
        if rewards is None or index is None:
            raise ValueError("opd_advantages: outcome_coef != 0 needs the rewards and their group index")
        adv = adv + outcome_coef * adv_mod.broadcast(adv_mod.centred(rewards.to(adv.dtype), index), response_mask)
    return adv


@adv_mod.register("opd", needs=("token_rewards",))
def opd(rewards, index, response_mask, *, token_rewards=None, outcome_coef: float = 0.0, **_):
    """On-policy distillation (module docstring): the per-token reward at discount 0, plus ``outcome_coef`` times
    the group-centred outcome reward (``algo.advantage_options.outcome_coef``, default 0)."""
    if token_rewards is None:
        token_rewards = torch.zeros(response_mask.shape, dtype=rewards.dtype, device=rewards.device)
    if isinstance(outcome_coef, bool) or not isinstance(outcome_coef, (int, float)):
        raise ValueError(f"algo.advantage_options.outcome_coef: expected a number, got {outcome_coef!r}")
    return opd_advantages(token_rewards.to(rewards.dtype), response_mask, rewards, index, float(outcome_coef))
