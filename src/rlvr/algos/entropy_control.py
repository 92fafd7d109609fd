"""Entropy control by the tokens that drive entropy collapse: Clip-Cov and KL-Cov (Cui et al., 2025, "The Entropy
Mechanism of Reinforcement Learning for Reasoning Language Models", arXiv 2505.22617) and Lp-Reg's
protection of low-probability tokens ("Low-probability Tokens Sustain Exploration in
Reinforcement Learning with Verifiable Reward", arXiv 2510.03222).

Cov_t = (A_t - mean A)(logp_t - mean logp) over the valid tokens of the (micro-)batch the loss sees, rows with zero
advantage included: both losses register ``zero_at_zero_advantage=False`` so the trainer never drops those rows and
the means, and so the selected tokens, are those of the released code (volcengine/verl
``verl/trainer/ppo/core_algos.py``, ``compute_policy_loss_clip_cov`` / ``compute_policy_loss_kl_cov``, adapted
there from PRIME-RL/Entropy-Mechanism-of-RL). Selection happens per micro-batch, as in that code: the trainer's
``train.micro_batch_size`` therefore changes which tokens are chosen (not the loss's form).
"""

from __future__ import annotations

import hashlib

import torch

from rlvr.algos import kl, losses

CLIP_COV_DEFAULTS = {"cov_ratio": 2e-4, "cov_lb": 1.0, "cov_ub": 5.0}
KL_COV_DEFAULTS = {"kl_cov_ratio": 2e-3, "kl_coef": 1.0}


def token_covariance(logp: torch.Tensor, advantages: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """Cov_t = (A_t - mean A)(sg(logp_t) - mean sg(logp)) with both means over the valid tokens; [N, T], no gradient.

    Cui et al., 2025: the per-token term of the covariance between log-probability and advantage whose batch
    sum drives the change of entropy. Padding positions hold 0 and must be excluded by ``response_mask``."""
    m = response_mask.to(torch.bool)
    lp = logp.detach()
    adv = advantages.detach().to(lp.dtype)
    n = m.sum().clamp(min=1)
    mean_adv = (adv * m).sum() / n
    mean_lp = (lp * m).sum() / n
    return torch.where(m, (adv - mean_adv) * (lp - mean_lp), torch.zeros_like(lp))


def selection_count(ratio: float, n_valid: int) -> int:
    """max(1, floor(ratio * n_valid)): how many tokens Clip-Cov and KL-Cov act on (never none while any is valid)."""
    return max(1, int(ratio * n_valid)) if n_valid else 0


def _seeded_generator(seed: int, logp: torch.Tensor, old_logp: torch.Tensor, mask: torch.Tensor) -> torch.Generator:
    """A CPU generator seeded from ``seed`` and a digest of the micro-batch (its shape and old log-probs): the same
    batch gives the same pick on every run and after a resume, and different batches give different picks."""
    digest = hashlib.blake2b(digest_size=8)
    digest.update(repr((int(seed), tuple(logp.shape))).encode())
    digest.update((old_logp.detach() * mask).to("cpu", torch.float64).contiguous().numpy().tobytes())
    return torch.Generator().manual_seed(int.from_bytes(digest.digest(), "little") & ((1 << 63) - 1))


def clip_cov_mask(
    cov: torch.Tensor,
    candidates: torch.Tensor,
    n_valid: int,
    *,
    cov_ratio: float,
    cov_lb: float,
    cov_ub: float,
    generator: torch.Generator,
) -> torch.Tensor:
    """Bool [N, T], True at the tokens Clip-Cov detaches: max(1, floor(cov_ratio * n_valid)) picked uniformly at
    random (without replacement) among the ``candidates`` whose covariance lies strictly inside (cov_lb, cov_ub);
    all of them when fewer qualify (Cui et al., 2025, "Clip-Cov")."""
    eligible = candidates & (cov > cov_lb) & (cov < cov_ub)
    where = eligible.reshape(-1).nonzero().squeeze(-1)
    k = min(selection_count(cov_ratio, n_valid), where.numel())
    chosen = torch.zeros(cov.numel(), dtype=torch.bool, device=cov.device)
    if k:
        order = torch.randperm(where.numel(), generator=generator)[:k].to(where.device)
        chosen[where[order]] = True
    return chosen.reshape(cov.shape)


@losses.register("clip_cov", default_agg="token-mean", zero_at_zero_advantage=False)
def clip_cov(logp, old_logp, advantages, response_mask, *, clip_low=0.2, clip_high=0.2, dual_clip=None,
             cov_ratio=CLIP_COV_DEFAULTS["cov_ratio"], cov_lb=CLIP_COV_DEFAULTS["cov_lb"],
             cov_ub=CLIP_COV_DEFAULTS["cov_ub"], generator: torch.Generator | None = None, seed: int = 0, **_):
    """Clip-Cov (Cui et al., 2025): the PPO clipped surrogate (``losses.ppo``) on every token, except a
    random max(1, floor(r N)) of the tokens not already clipped by PPO whose Cov_t lies in (cov_lb, cov_ub): their
    loss and gradient are exactly 0. Defaults r = 2e-4, (1, 5), as in the paper and verl.

    The random pick draws from ``generator`` when one is passed (a loss input); otherwise from a generator seeded
    by the ``seed`` loss option and a digest of the micro-batch, so a run and its resume pick the same tokens.
    ``dual_clip`` (``algo.dual_clip``) is accepted and ignored: verl's ``compute_policy_loss_clip_cov`` (commit
    b178a3c) takes max(-A r, -A clip(r)) with no dual-clip bound, and a dual clip would cap exactly the
    negative-advantage tokens whose covariance this loss selects on.
    metrics: clip_frac (PPO's), cov_detached_frac (the share of valid tokens detached)."""
    del dual_clip
    ppo_loss, metrics = losses.ppo(logp, old_logp, advantages, response_mask, clip_low=clip_low,
                                   clip_high=clip_high, dual_clip=None)
    m = response_mask.to(torch.bool)
    ratio = torch.exp(logp.detach() - old_logp)
    adv = advantages.to(ratio.dtype)
    unclipped, clipped = adv * ratio, adv * ratio.clamp(1 - clip_low, 1 + clip_high)
    candidates = m & ~(clipped < unclipped)  # PPO already stops the gradient of clipped tokens
    cov = token_covariance(logp, advantages, response_mask)
    if generator is None:
        generator = _seeded_generator(seed, logp, old_logp, m)
    detached = clip_cov_mask(cov, candidates, int(m.sum()), cov_ratio=cov_ratio, cov_lb=cov_lb, cov_ub=cov_ub,
                             generator=generator)
    loss = torch.where(detached, torch.zeros_like(ppo_loss), ppo_loss)
    metrics["cov_detached_frac"] = losses._masked_mean(detached.to(logp.dtype), response_mask)
    return loss, metrics


def kl_cov_mask(cov: torch.Tensor, response_mask: torch.Tensor, kl_cov_ratio: float) -> torch.Tensor:
    """Bool [N, T], True at the max(1, floor(kl_cov_ratio * n_valid)) valid tokens of largest Cov_t (KL-Cov's set)."""
    m = response_mask.to(torch.bool)
    where = m.reshape(-1).nonzero().squeeze(-1)
    chosen = torch.zeros(cov.numel(), dtype=torch.bool, device=cov.device)
    k = selection_count(kl_cov_ratio, where.numel())
    if k:
        top = torch.topk(cov.reshape(-1)[where], k, largest=True).indices
        chosen[where[top]] = True
    return chosen.reshape(cov.shape)


@losses.register("kl_cov", default_agg="token-mean", zero_at_zero_advantage=False)
def kl_cov(logp, old_logp, advantages, response_mask, *, kl_cov_ratio=KL_COV_DEFAULTS["kl_cov_ratio"],
           kl_coef=KL_COV_DEFAULTS["kl_coef"], **_):
    """KL-Cov (Cui et al., 2025): L_t = -A_t r_t + kl_coef |logp_t - old_logp_t| on the top
    max(1, floor(k N)) valid tokens by Cov_t, and the plain L_t = -A_t r_t on every other token: no PPO clipping
    anywhere (verl's ``compute_policy_loss_kl_cov`` likewise ignores the clip range). Defaults k = 2e-3 (the paper's
    7B setting; 2e-4 for 32B), kl_coef = 1 (verl's ``ppo_kl_coef``).
    metrics: kl_cov_frac (share of valid tokens penalised), ratio_mean, abs_log_ratio (mean |logp - old_logp|)."""
    log_ratio = logp - old_logp
    ratio = torch.exp(log_ratio)
    selected = kl_cov_mask(token_covariance(logp, advantages, response_mask), response_mask, kl_cov_ratio)
    loss = -advantages * ratio + torch.where(selected, kl_coef * log_ratio.abs(), torch.zeros_like(ratio))
    return loss, {
        "kl_cov_frac": losses._masked_mean(selected.to(logp.dtype), response_mask),
        "ratio_mean": losses._masked_mean(ratio.detach(), response_mask),
        "abs_log_ratio": losses._masked_mean(log_ratio.detach().abs(), response_mask),
    }


# ---------------------------------------------------------------------------------------------------- Lp-Reg

LP_REG_DEFAULTS = {"kappa": 0.02, "neg_frac": 0.01, "pos_frac": 0.0, "coef": 1.0}
K3_CAP = 10.0  # verl's low_var_kl clamps the estimate to [-10, 10]


def minp_kept_logmass(logits: torch.Tensor, kappa: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Min-p proxy of a distribution (Lp-Reg, arXiv 2510.03222; ``dp_actor.apply_min_p`` in its code): keep the
    tokens with p_v >= kappa * max p.

    ``logits`` [..., V] (already temperature-scaled) -> (log sum_{kept} p_v, log(kappa * max p)), each [...].
    A sampled token y is kept iff log p_y >= the second value; its proxy log-prob is then log p_y - the first
    (``proxy_logprobs``). Computed without gradient, chunk by chunk where the caller has the logits."""
    with torch.no_grad():
        logp = torch.log_softmax(logits.float() if logits.dtype in (torch.float16, torch.bfloat16) else logits, -1)
        threshold = logp.max(-1, keepdim=True).values + torch.log(torch.tensor(kappa, dtype=logp.dtype))
        kept = torch.where(logp >= threshold, logp, torch.full_like(logp, float("-inf")))
        return torch.logsumexp(kept, -1), threshold.squeeze(-1)


def proxy_logprobs(token_logp: torch.Tensor, kept_logmass: torch.Tensor, log_threshold: torch.Tensor) -> torch.Tensor:
    """log pi_proxy(y_t) = log pi(y_t) - log sum_{kept} pi(v) where y_t is kept, -inf where min-p filtered it out
    (the released code sets filtered logits to -1e4: such a token can never fall below its proxy either)."""
    kept = token_logp >= log_threshold
    return torch.where(kept, token_logp - kept_logmass, torch.full_like(token_logp, float("-inf")))


def minp_proxy_logprobs(logits: torch.Tensor, tokens: torch.Tensor, kappa: float) -> torch.Tensor:
    """Proxy log-probs [N, T] of the ``tokens`` [N, T] under the min-p proxy of ``logits`` [N, T, V]."""
    with torch.no_grad():
        mass, threshold = minp_kept_logmass(logits, kappa)
        token_logp = torch.log_softmax(logits.to(mass.dtype), -1).gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
        return proxy_logprobs(token_logp, mass, threshold)


def lowest_logp_tokens(logp: torch.Tensor, pool: torch.Tensor, frac: float) -> torch.Tensor:
    """Bool [N, T]: the k = max(1, floor(frac * |pool|)) tokens of ``pool`` with the lowest current log-prob,
    and none unless k > 1 (so frac = 0 is off, as ``logp_pos_k_percent=0`` is in the released code)."""
    where = pool.reshape(-1).nonzero().squeeze(-1)
    chosen = torch.zeros(pool.numel(), dtype=torch.bool, device=pool.device)
    k = max(1, int(frac * where.numel())) if where.numel() else 0
    if k > 1:
        low = torch.topk(logp.detach().reshape(-1)[where], k, largest=False).indices
        chosen[where[low]] = True
    return chosen.reshape(pool.shape)


def lp_reg_selection(logp: torch.Tensor, proxy_logp: torch.Tensor, advantages: torch.Tensor,
                     response_mask: torch.Tensor, *, neg_frac: float = LP_REG_DEFAULTS["neg_frac"],
                     pos_frac: float = LP_REG_DEFAULTS["pos_frac"]) -> torch.Tensor:
    """Bool [N, T]: the tokens Lp-Reg regularises (Lp-Reg, arXiv 2510.03222; CarlanLark/Lp-Reg-dev,
    ``verl/trainer/ppo/core_algos.py::compute_policy_loss_lp_reg``): among the valid tokens with A < 0 (and,
    with pos_frac > 0, those with A > 0 separately), the fraction with the lowest current log-prob, kept only where
    the current log-prob is below the proxy's (log pi_theta < log pi_proxy)."""
    m = response_mask.to(torch.bool)
    adv = advantages.detach()
    chosen = lowest_logp_tokens(logp, m & (adv < 0), neg_frac) | lowest_logp_tokens(logp, m & (adv > 0), pos_frac)
    return chosen & (logp.detach() < proxy_logp)


def lp_reg_penalty(logp: torch.Tensor, proxy_logp: torch.Tensor, selected: torch.Tensor,
                   coef: float = LP_REG_DEFAULTS["coef"]) -> torch.Tensor:
    """coef * k3 per token on the ``selected`` tokens (0 elsewhere), k3 = e^d - d - 1 with d = log pi_proxy -
    log pi_theta (KL(pi_proxy || pi_theta) estimated on the sampled token, verl's ``low_var_kl``, capped at 10);
    the gradient flows through logp and pulls a selected token's probability back up towards the proxy's."""
    safe_proxy = torch.where(selected, proxy_logp, logp.detach())  # no -inf reaches the arithmetic
    k3 = kl.estimate(logp, safe_proxy, "k3").clamp(max=K3_CAP)
    return torch.where(selected, coef * k3, torch.zeros_like(k3))
