"""Trust regions that adapt to the token: DCPO's probability-dependent clipping bounds and its smooth advantage
standardisation ("DCPO: Dynamic Clipping Policy Optimization", arXiv 2509.02333), and SAPO's
soft gate in place of hard clipping ("Soft Adaptive Policy Optimization", arXiv 2511.20347).
"""

from __future__ import annotations

import math
import torch

from rlvr.algos import advantages as adv_mod
from rlvr.algos import losses

# ------------------------------------------------------------------------------------------------------- DCPO

DCPO_MAX_RATIO = 10.0  # the released code caps the upper bound at max(clip_ratio_c, 10); its scripts set c = 10


def dcpo_bounds(old_logp: torch.Tensor, eps_low: float, eps_high: float, max_ratio: float = DCPO_MAX_RATIO
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """DCPO's dynamic-adaptive clipping bounds on r = p / q from the old token probability q (arXiv
    2509.02333, from the constraint |(r - 1) p| <= eps):

        0.5 + 0.5 sqrt(max(1 - 4 eps_low / q, 0)) <= r <= 0.5 + 0.5 sqrt(1 + 4 eps_high / q),

    the upper bound capped at ``max_ratio`` as in lime-RL/DCPO ``verl/trainer/ppo/core_algos.py::
    get_clip_low_high``. q = 0.9, eps = (0.16, 0.2) gives [0.768742, 1.187184]; q = 0.01 gives [0.5, 5.0]."""
    q = torch.exp(old_logp.detach())
    low = 0.5 + 0.5 * torch.sqrt((1 - 4 * eps_low / q).clamp(min=0))
    high = (0.5 + 0.5 * torch.sqrt(1 + 4 * eps_high / q)).clamp(max=max_ratio)
    return low, high


@losses.register("dcpo", default_agg="seq-mean-token-sum", zero_at_zero_advantage=True)
def dcpo(logp, old_logp, advantages, response_mask, *, clip_low=0.16, clip_high=0.2, dual_clip=None,
         eps_low: float | None = None, eps_high: float | None = None, max_ratio: float = DCPO_MAX_RATIO, **_):
    """DCPO's clipped surrogate (arXiv 2509.02333): L = -min(r A, clip(r, low(q), high(q)) A) with the
    bounds of ``dcpo_bounds`` from the old probability q; eps_low / eps_high default to the clip range
    (``algo.clip_low`` / ``algo.clip_high``; the paper's values are 0.16 / 0.2). ``dual_clip`` = c bounds the loss of
    negative-advantage tokens by -A c as in ``losses.ppo`` (the released scripts use c = 10). The default
    aggregation is the paper's OTM loss (1/G) sum_i sum_t L_it = ``seq-mean-token-sum``.
    metrics: clip_frac (share of valid tokens whose clipped term is the active one), ratio_mean, clip_low_mean /
    clip_high_mean (the bounds' means over valid tokens)."""
    low, high = dcpo_bounds(old_logp, clip_low if eps_low is None else eps_low,
                            clip_high if eps_high is None else eps_high, max_ratio)
    ratio = torch.exp(logp - old_logp)
    unclipped = advantages * ratio
    clipped = advantages * torch.minimum(torch.maximum(ratio, low), high)
    loss = -torch.minimum(unclipped, clipped)
    if dual_clip is not None:
        loss = torch.where(advantages < 0, torch.minimum(loss, -advantages * dual_clip), loss)
    return loss, {
        "clip_frac": losses._masked_mean((clipped < unclipped).to(logp.dtype), response_mask),
        "ratio_mean": losses._masked_mean(ratio.detach(), response_mask),
        "clip_low_mean": losses._masked_mean(low, response_mask),
        "clip_high_mean": losses._masked_mean(high, response_mask),
    }


def sas_update(visits: int, mean: float, std: float, new_mean: float, new_std: float) -> tuple[int, float, float]:
    """One visit of a prompt to DCPO's running reward statistics (DCPO, arXiv 2509.02333, "smooth advantage
    standardisation"): with
    n = visits + 1, mu <- (mu (n - 1) + mu_new) / n and
    sigma^2 <- [(n - 1) sigma^2 + sigma_new^2 + ((n - 1) / n)(mu_new - mu)^2] / n; the first visit takes the new
    values (lime-RL/DCPO ``core_algos.py::get_mean_std``)."""
    n = visits + 1
    if n == 1:
        return 1, float(new_mean), float(new_std)
    total_mean = (mean * (n - 1) + new_mean) / n
    var = ((n - 1) * std**2 + new_std**2 + (n - 1) / n * (new_mean - mean) ** 2) / n
    return n, float(total_mean), math.sqrt(var)


def _standardise(x: torch.Tensor, mean: float, std: float) -> torch.Tensor:
    return (x - mean) / std if std > 0 else torch.zeros_like(x)


def sas_group_advantages(rewards: torch.Tensor, visits: int, mean: float, std: float
                         ) -> tuple[torch.Tensor, tuple[int, float, float]]:
    """Smooth advantage standardisation of one group (DCPO, arXiv 2509.02333): with this visit's
    (mu_new, sigma_new) (unbiased std; 0 for a group of one) and the running totals after it,
    A_new = (R - mu_new) / sigma_new, A_tot = (R - mu_tot) / sigma_tot (0 where the std is 0),
    SA_new = ((n-1)/n) A_new + (1/n) A_tot, SA_tot = (1/n) A_new + ((n-1)/n) A_tot, and A is whichever of the two
    has the smaller magnitude (SA_tot on a tie, as in the released code). Returns (A per response, updated stats).

    Unlike GRPO, a group whose rewards are all equal gets a non-zero advantage from A_tot after its first visit."""
    r = rewards.detach().to(torch.float64)
    new_mean = float(r.mean())
    new_std = float(r.std()) if r.numel() > 1 else 0.0
    n, total_mean, total_std = sas_update(visits, mean, std, new_mean, new_std)
    a_new = _standardise(r, new_mean, new_std)
    a_tot = _standardise(r, total_mean, total_std)
    sa_new = (n - 1) / n * a_new + a_tot / n
    sa_tot = a_new / n + (n - 1) / n * a_tot
    chosen = torch.where(sa_new.abs() < sa_tot.abs(), sa_new, sa_tot)
    return chosen.to(rewards.dtype), (n, total_mean, total_std)


def _groups_in_order(index: torch.Tensor) -> list[torch.Tensor]:
    """Row indices of each group, groups in the order of their first row."""
    seen: dict[int, list[int]] = {}
    for row, g in enumerate(index.tolist()):
        seen.setdefault(g, []).append(row)
    return [torch.tensor(rows, dtype=torch.long) for rows in seen.values()]


SAS_STATE_KEY = "dcpo_sas"  # step_state[SAS_STATE_KEY] = {task id: (visits, mean, std)}


def _row_task_ids(task_ids, step_state, n: int) -> list[str]:
    ids = task_ids if task_ids is not None else (step_state or {}).get("task_ids")
    if step_state is None or ids is None:
        raise ValueError("dcpo_sas needs step_state (a dict kept across steps and checkpoints) and task_ids (the task "
                         "id of every row); the trainer passes both when advantages.needs('dcpo_sas') lists "
                         "'step_state'")
    ids = [str(t) for t in ids]
    if len(ids) != n:
        raise ValueError(f"dcpo_sas: {len(ids)} task ids for {n} rows; expected one task id per row")
    return ids


@adv_mod.register("dcpo_sas", needs=("step_state",))
def dcpo_sas(rewards, index, response_mask, *, step_state=None, task_ids=None, **_):
    """DCPO's smooth advantage standardisation (``sas_group_advantages``) per group, from the running reward
    statistics of each prompt (task id) before this batch, kept in ``step_state['dcpo_sas']`` {task id: (visits,
    mean, std)} and brought up to date with this batch (``sas_update``; each group is one
    visit of its task, two groups of one task in a batch are two visits in row order) before returning: the
    trainer saves ``step_state`` with every checkpoint, so a resumed run continues the same statistics.
    Not a constant-group-zero estimator: equal rewards get A = A_tot / n after a first visit."""
    ids = _row_task_ids(task_ids, step_state, rewards.shape[0])
    stats = step_state.setdefault(SAS_STATE_KEY, {})
    per_row = torch.zeros_like(rewards)
    for rows in _groups_in_order(index):
        task = ids[int(rows[0])]
        visits, mean, std = stats.get(task, (0, 0.0, 0.0))
        rows = rows.to(rewards.device)
        per_row[rows], stats[task] = sas_group_advantages(rewards[rows], int(visits), float(mean), float(std))
    return adv_mod.broadcast(per_row, response_mask)


def nonzero_advantage_fraction(advantages: torch.Tensor, response_mask: torch.Tensor) -> float:
    """Share of responses with a valid token whose advantage is non-zero (DCPO's "non-zero-advantage responses",
    arXiv 2509.02333); the metric ``nonzero_adv_frac``."""
    m = response_mask.to(torch.bool)
    rows = m.any(-1)
    if not bool(rows.any()):
        return 0.0
    nonzero = ((advantages != 0) & m).any(-1)
    return float((nonzero & rows).sum()) / float(rows.sum())


# ------------------------------------------------------------------------------------------------------- SAPO

SAPO_TAU_POS, SAPO_TAU_NEG = 1.0, 1.05


def sapo_gate(ratio: torch.Tensor, tau: torch.Tensor | float) -> torch.Tensor:
    """SAPO's soft gate f(r) = sigmoid(tau (r - 1)) * 4 / tau (SAPO, arXiv 2511.20347): f(1) = 2 / tau and
    f'(r) = 4 s (1 - s) with s = sigmoid(tau (r - 1)), so the gradient weight is exactly 1 on-policy (r = 1) and
    decays smoothly as r leaves 1, faster for larger tau."""
    return torch.sigmoid(tau * (ratio - 1)) * (4 / tau)


@losses.register("sapo", default_agg="seq-mean-token-mean", zero_at_zero_advantage=True)
def sapo(logp, old_logp, advantages, response_mask, *, tau_pos: float = SAPO_TAU_POS, tau_neg: float = SAPO_TAU_NEG,
         **_):
    """SAPO (arXiv 2511.20347): L = -f(r) A per token with f = ``sapo_gate``, tau = tau_pos where A > 0
    and tau_neg otherwise (tau_neg > tau_pos damps negative updates faster, the paper's asymmetry); no hard clipping,
    so the clip range is ignored. Defaults tau_pos = 1.0, tau_neg = 1.05 and sequence-mean-token-mean aggregation,
    as in verl (``core_algos.py::compute_policy_loss_sapo``, which also clamps log r to [-20, 20], done here) and TRL
    (``GRPOTrainer``, ``loss_type="sapo"``).
    metrics: ratio_mean, gate_weight (mean of f'(r) = 4 s (1 - s), the factor SAPO puts on each token's policy
    gradient; 1 on-policy)."""
    ratio = torch.exp((logp - old_logp).clamp(-20.0, 20.0))
    tau = torch.where(advantages > 0, torch.full_like(ratio, tau_pos), torch.full_like(ratio, tau_neg))
    loss = -sapo_gate(ratio, tau) * advantages
    s = torch.sigmoid(tau * (ratio.detach() - 1))
    return loss, {
        "ratio_mean": losses._masked_mean(ratio.detach(), response_mask),
        "gate_weight": losses._masked_mean(4 * s * (1 - s), response_mask),
    }
