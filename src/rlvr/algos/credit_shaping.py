"""Advantage estimators that reshape a group-relative advantage with the policy's own confidence: ACE's stronger
penalty for confident errors (Xu et al., 2026, "Overconfident Errors Need Stronger Correction: Asymmetric
Confidence Penalties for Reinforcement Learning", arXiv 2602.21420) and EMPG's entropy-modulated credit per agent
step (Liu et al., 2025, "Harnessing Uncertainty: Entropy-Modulated Policy Gradients for Long-Horizon LLM Agents",
arXiv 2509.09265).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from rlvr.algos import advantages as adv_mod

ACE_ALPHA = 1.0
EMPG_DEFAULTS = {"k": 1.0, "k_f": 1.0, "zeta": 0.1}


def _base_advantages(base: str, rewards, index, response_mask, epsilon: float) -> torch.Tensor:
    if base in ("ace", "empg"):
        raise ValueError(f"advantage_options.base={base!r} would call itself; use an outcome estimator such as grpo")
    needs = adv_mod.needs(base)
    if needs:
        raise ValueError(f"advantage_options.base={base!r} needs {', '.join(needs)}; ace and empg build on an outcome "
                         f"estimator that needs nothing more (grpo, dr_grpo, rloo)")
    return adv_mod.compute(base, rewards, index, response_mask, epsilon=epsilon)


def confidence_shift(old_logp: torch.Tensor, ref_logp: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """c_i = log pi_theta(y_i | x) - log pi_ref(y_i | x) = sum_t (old_logp - ref_logp) over the response's valid
    tokens (ACE's per-rollout confidence shift); [N]."""
    m = mask.to(old_logp.dtype)
    return ((old_logp - ref_logp) * m).sum(-1)


def ace_penalty(advantages: torch.Tensor, confidence: torch.Tensor, alpha: float = ACE_ALPHA) -> torch.Tensor:
    """A <- A (1 + alpha softplus(c_i)) where A < 0, unchanged where A >= 0 (ACE, arXiv 2602.21420: softplus beat
    ReLU in its ablation). ``advantages`` [N, T] or [N], ``confidence`` [N]. As c -> -inf the factor -> 1."""
    factor = 1 + alpha * F.softplus(confidence.to(advantages.dtype))
    if advantages.dim() == 2:
        factor = factor.unsqueeze(-1)
    return torch.where(advantages < 0, advantages * factor, advantages)


@adv_mod.register("ace", needs=("old_logp", "ref_logp"))
def ace(rewards, index, response_mask, *, old_logp=None, ref_logp=None, alpha: float = ACE_ALPHA,
        base: str = "grpo", epsilon: float = 1e-6, loss_mask=None, **_):
    """ACE (Xu et al., 2026): the ``base`` estimator's advantages (GRPO by default; ``advantage_options.base``),
    with every negative advantage scaled by 1 + alpha softplus(c_i), c_i the confidence shift of the whole rollout
    against the reference model from the old-policy pass (``confidence_shift``), over ``loss_mask`` where given
    (the policy's own tokens) else the response mask. ``alpha`` (``advantage_options.alpha``) defaults to 1.0."""
    if old_logp is None or ref_logp is None:
        raise ValueError("ace needs old_logp and ref_logp (the old policy's and the reference model's log-probs of "
                         "each response token); the trainer passes them when advantages.needs('ace') lists them")
    base_adv = _base_advantages(base, rewards, index, response_mask, epsilon)
    mask = response_mask if loss_mask is None else loss_mask
    return ace_penalty(base_adv, confidence_shift(old_logp, ref_logp, mask), alpha) * response_mask.to(base_adv.dtype)


def step_ids(step_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Number the agent steps (maximal runs of 1 in ``step_mask`` [N, T], one per model turn) over the batch, row
    by row: (id [N, T] with -1 outside every step, the row of each step [S])."""
    m = step_mask.to(torch.bool)
    starts = m & ~F.pad(m[:, :-1], (1, 0), value=False)
    counts = starts.sum(-1)
    offset = counts.cumsum(0) - counts
    ids = torch.where(m, starts.cumsum(-1) - 1 + offset.unsqueeze(-1), -1)
    rows = torch.repeat_interleave(torch.arange(m.shape[0], device=m.device), counts)
    return ids, rows


def empg_modulation(step_entropy: torch.Tensor, last_in_trajectory: torch.Tensor, *, k: float = EMPG_DEFAULTS["k"],
                    k_f: float = EMPG_DEFAULTS["k_f"], zeta: float = EMPG_DEFAULTS["zeta"]
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    """EMPG's per-step scale g and bonus b, so that A_step = g A(trajectory) + b (Liu et al., 2025, and the
    pseudocode of its project page): with H~ = (H - min H) / (max H - min H + 1e-8) over every step of the batch,
    g_k = exp(-k H~_k) / (mean exp(-k H~) + 1e-8) (self-calibrating gradient scaling) and b_k = zeta f_{k+1},
    f = exp(-k_f H~), the next step's clarity (0 for the last step of its trajectory; steps of one trajectory are
    consecutive). ``step_entropy`` [S], ``last_in_trajectory`` bool [S]."""
    h = step_entropy.to(torch.float64)
    if h.numel() == 0:
        return h.clone(), h.clone()
    norm = (h - h.min()) / (h.max() - h.min() + 1e-8)
    g = torch.exp(-k * norm)
    g = g / (g.mean() + 1e-8)
    clarity = torch.exp(-k_f * norm)
    bonus = torch.where(last_in_trajectory, torch.zeros_like(clarity), zeta * torch.roll(clarity, -1))
    return g.to(step_entropy.dtype), bonus.to(step_entropy.dtype)


@adv_mod.register("empg", needs=("entropy",))
def empg(rewards, index, response_mask, *, entropy=None, loss_mask=None, turns=None, base: str = "grpo",
         k: float = EMPG_DEFAULTS["k"], k_f: float = EMPG_DEFAULTS["k_f"], zeta: float = EMPG_DEFAULTS["zeta"],
         epsilon: float = 1e-6, **_):
    """EMPG (Liu et al., 2025): the ``base`` estimator's trajectory advantage A (GRPO by default), re-weighted per
    agent step by ``empg_modulation`` from the step's mean token entropy under the sampler (``entropy`` [N, T],
    ``RolloutBatch.entropy``). A step is a model turn: a run of ``turns`` (or else ``loss_mask``, or else the
    response mask: one step per single-turn response). Tokens outside every step keep the base advantage.
    Defaults k = k_f = 1, zeta = 0.1 (the project page's pseudocode). A final batch normalisation of the modulated
    advantages is not applied (not in the equations this follows)."""
    if entropy is None:
        raise ValueError("empg needs entropy: the sampler's per-token entropy of each response [N, T] "
                         "(RolloutBatch.entropy, filled by the hf engine)")
    base_adv = _base_advantages(base, rewards, index, response_mask, epsilon)
    step_mask = turns if turns is not None else (loss_mask if loss_mask is not None else response_mask)
    step_mask = step_mask.to(torch.bool) & response_mask.to(torch.bool)
    ids, rows = step_ids(step_mask)
    n_steps = rows.numel()
    if n_steps == 0:
        return base_adv
    inside = ids >= 0
    ent = entropy.to(base_adv.dtype)
    total = torch.zeros(n_steps, dtype=ent.dtype, device=ent.device).index_add_(0, ids[inside], ent[inside])
    count = torch.zeros(n_steps, dtype=ent.dtype, device=ent.device).index_add_(
        0, ids[inside], torch.ones_like(ent[inside]))
    last = torch.ones(n_steps, dtype=torch.bool, device=rows.device)
    last[:-1] = rows[1:] != rows[:-1]
    g, bonus = empg_modulation(total / count, last, k=k, k_f=k_f, zeta=zeta)
    safe = ids.clamp(min=0)
    return torch.where(inside, base_adv * g[safe] + bonus[safe], base_adv)
