"""Advantage estimators: rewards of N responses in groups -> per-token advantages [N, T] (docs/api.md, "Algorithms").

Outcome rewards give one advantage per response, broadcast to every valid response token.
"""

from __future__ import annotations

import torch

from rlvr.algos.registry import Registry

_REGISTRY = Registry("advantage estimator")
names = _REGISTRY.names


def register(name: str, *, needs: tuple[str, ...] = ()):
    """Register fn(rewards, index, response_mask, **kw) -> advantages [N, T].

    ``needs`` names the extra inputs the estimator uses, which the trainer then provides as keywords:
    "values" (a critic's per-token values; the trainer trains a value head), "baseline_rewards" (the reward of
    a greedy response to the same prompt; the trainer samples one) or "token_rewards" (per-token reward terms
    [N, T] such as a KL penalty, kept apart from the outcome ``rewards``; estimators that do not declare it get
    those terms summed into ``rewards``). Every estimator receives ``epsilon`` and must accept unknown keywords.
    """
    return _REGISTRY.register(name, needs=tuple(needs))


def needs(name: str) -> tuple[str, ...]:
    return _REGISTRY.info(name)["needs"]


def compute(name: str, rewards: torch.Tensor, index: torch.Tensor, response_mask: torch.Tensor, **kw) -> torch.Tensor:
    """Advantages [N, T] from the estimator registered under ``name``."""
    return _REGISTRY.get(name)(rewards, index, response_mask, **kw)


def broadcast(per_response: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """One value per response -> that value on each valid token, 0 on padding."""
    return per_response.unsqueeze(-1) * response_mask.to(per_response.dtype)


def group_stats(rewards: torch.Tensor, index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-response (group size, group sum, group mean) for the group each response belongs to."""
    _, group = torch.unique(index, return_inverse=True)
    n_groups = int(group.max()) + 1 if group.numel() else 0
    count = torch.zeros(n_groups, dtype=rewards.dtype, device=rewards.device).index_add_(0, group, torch.ones_like(rewards))
    total = torch.zeros(n_groups, dtype=rewards.dtype, device=rewards.device).index_add_(0, group, rewards)
    return count[group], total[group], (total / count)[group]


def constant_groups(rewards: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """Bool [N]: True where every response of the response's group got exactly the same reward.

    Such a group carries no learning signal; the group-baseline estimators return exactly 0 for it, which a
    floating-point ``r - mean`` does not guarantee (eight rewards of 0.7 have a float32 mean of 0.70000005)."""
    if rewards.numel() == 0:
        return torch.zeros(0, dtype=torch.bool, device=rewards.device)
    _, group = torch.unique(index, return_inverse=True)
    n_groups = int(group.max()) + 1
    r = rewards.detach()
    lo = torch.full((n_groups,), float("inf"), dtype=r.dtype, device=r.device).scatter_reduce(0, group, r, "amin")
    hi = torch.full((n_groups,), float("-inf"), dtype=r.dtype, device=r.device).scatter_reduce(0, group, r, "amax")
    return (lo == hi)[group]


def centred(rewards: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """r_i - mean of its group, exactly 0 for groups whose rewards are all equal."""
    _, _, mean = group_stats(rewards, index)
    return torch.where(constant_groups(rewards, index), torch.zeros_like(rewards), rewards - mean)


def group_std(rewards: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """Per-response unbiased sample std of its group (0 for groups of size 1)."""
    _, group = torch.unique(index, return_inverse=True)
    count, _, mean = group_stats(rewards, index)
    n_groups = int(group.max()) + 1 if group.numel() else 0
    sq = torch.zeros(n_groups, dtype=rewards.dtype, device=rewards.device).index_add_(0, group, (rewards - mean) ** 2)
    var = sq[group] / (count - 1).clamp(min=1)
    return var.sqrt()


@register("grpo")
def grpo(rewards, index, response_mask, *, epsilon: float = 1e-6, **_):
    """GRPO (Shao et al., 2024, "DeepSeekMath", Sec. 4.1.2): A_i = (r_i - mean_g) / (std_g + eps).

    std is the unbiased sample std of the group; a group of size 1 gets advantage 0.
    """
    count, _, _ = group_stats(rewards, index)
    adv = centred(rewards, index) / (group_std(rewards, index) + epsilon)
    return broadcast(torch.where(count > 1, adv, torch.zeros_like(adv)), response_mask)


@register("dr_grpo")
def dr_grpo(rewards, index, response_mask, **_):
    """Dr. GRPO (Liu et al., 2025, "Understanding R1-Zero-Like Training", Eq. 3): A_i = r_i - mean_g, no std scaling."""
    return broadcast(centred(rewards, index), response_mask)


@register("rloo")
def rloo(rewards, index, response_mask, **_):
    """RLOO (Ahmadian et al., 2024, "Back to Basics", Eq. 6): A_i = r_i - mean of the other responses in the group.

    A group of size 1 has no other response and gets advantage 0.
    """
    count, total, _ = group_stats(rewards, index)
    baseline = (total - rewards) / (count - 1).clamp(min=1)
    informative = (count > 1) & ~constant_groups(rewards, index)
    adv = torch.where(informative, rewards - baseline, torch.zeros_like(rewards))
    return broadcast(adv, response_mask)


def _valid(response_mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return response_mask.to(dtype)


def masked_whiten(values: torch.Tensor, response_mask: torch.Tensor, epsilon: float = 1e-6) -> torch.Tensor:
    """(x - mean) / (std + epsilon) with mean and std over the valid tokens of the whole batch; 0 on padding.

    std is the population (biased, divide by the number of valid tokens) std, as in OpenRLHF's masked whitening.
    One valid token, or all valid values equal, gives 0 everywhere (never NaN); no valid token gives all 0.
    """
    m = _valid(response_mask, values.dtype)
    n = m.sum().clamp(min=1)
    mean = (values * m).sum() / n
    centred = (values - mean) * m
    std = ((centred**2).sum() / n).sqrt()
    return centred / (std + epsilon) * m


def _reverse_cumsum(x: torch.Tensor) -> torch.Tensor:
    """out[:, t] = sum_{t' >= t} x[:, t']."""
    return x.flip(-1).cumsum(-1).flip(-1)


def _reinforce_pp_whitened(score, index, response_mask, token_rewards, epsilon):
    """Per-token returns score_i + sum_{t' >= t} token_rewards (gamma = 1), whitened over the batch's valid tokens."""
    m = _valid(response_mask, score.dtype)
    returns = broadcast(score, response_mask)
    has_token_rewards = token_rewards is not None and bool((token_rewards.to(score.dtype) * m).ne(0).any())
    if has_token_rewards:
        returns = returns + _reverse_cumsum(token_rewards.to(score.dtype) * m) * m
    adv = masked_whiten(returns, response_mask, epsilon)
    if not has_token_rewards:  # a group with equal rewards stays at exactly 0 rather than -mean/std of the batch
        adv = adv * (~constant_groups(score, index)).to(adv.dtype).unsqueeze(-1)
    return adv


@register("reinforce_pp", needs=("token_rewards",))
def reinforce_pp(rewards, index, response_mask, *, token_rewards=None, epsilon: float = 1e-6, **_):
    """REINFORCE++ (Hu et al., 2025, "REINFORCE++: Stabilizing Critic-Free Policy Optimization with Global
    Advantage Normalization", Sec. 3): no per-prompt baseline; the per-token return is the outcome reward plus
    the per-token ``token_rewards`` (e.g. -kl_coef * KL) summed to the end of the response (gamma = 1), and the
    returns are normalised over every valid token of the batch (global advantage normalisation, population std;
    see ``masked_whiten``). A batch whose rewards are all equal (and has no token rewards) gets exactly 0.
    """
    batch = torch.zeros_like(index)
    return _reinforce_pp_whitened(centred(rewards, batch), batch, response_mask, token_rewards, epsilon)


@register("reinforce_pp_baseline", needs=("token_rewards",))
def reinforce_pp_baseline(rewards, index, response_mask, *, token_rewards=None, epsilon: float = 1e-6, **_):
    """REINFORCE++-baseline (Hu et al., 2025, Sec. 3, the variant for group sampling): score_i = r_i - mean of its
    group, then the same per-token returns and global normalisation as ``reinforce_pp``.

    A group whose rewards are all equal carries no signal and keeps advantage exactly 0 on every token when there
    are no per-token rewards (global normalisation would otherwise shift it by -mean/std of the batch).
    """
    return _reinforce_pp_whitened(centred(rewards, index), index, response_mask, token_rewards, epsilon)


@register("remax", needs=("baseline_rewards",))
def remax(rewards, index, response_mask, *, baseline_rewards=None, **_):
    """ReMax (Li et al., 2023, "ReMax: A Simple, Effective, and Efficient Reinforcement Learning Method for Aligning
    Large Language Models", Algorithm 1): A_i = r(x, y_i) - r(x, y_greedy), the greedy response's reward as baseline.

    ``baseline_rewards`` [N] holds, for each response, the reward of the greedy response to its prompt.
    """
    if baseline_rewards is None:
        raise ValueError(
            "remax needs baseline_rewards: the reward of a greedy response to the same prompt, one per response "
            "(the trainer samples a greedy response per prompt when advantages.needs('remax') lists it)"
        )
    baseline = torch.as_tensor(baseline_rewards, dtype=rewards.dtype, device=rewards.device)
    return broadcast(rewards - baseline, response_mask)


def outcome_token_rewards(rewards: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """[N, T] with r_i at the last valid token of row i and 0 elsewhere (rows with no valid token are all 0)."""
    m = response_mask.to(torch.bool)
    T = m.shape[-1]
    pos = torch.arange(T, device=m.device).expand_as(m)
    if T == 0:
        return torch.zeros(m.shape, dtype=rewards.dtype, device=rewards.device)
    last = torch.where(m, pos, torch.full_like(pos, -1)).max(-1).values
    out = torch.zeros(m.shape, dtype=rewards.dtype, device=rewards.device)
    rows = last >= 0
    out[rows.nonzero().squeeze(-1), last[rows]] = rewards[rows]
    return out


def gae_advantages_and_returns(
    token_level_rewards: torch.Tensor,
    values: torch.Tensor,
    response_mask: torch.Tensor,
    gamma: float = 1.0,
    lam: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalized Advantage Estimation (Schulman et al., 2016, "High-Dimensional Continuous Control Using
    Generalized Advantage Estimation", Eq. 16) over the valid tokens of each row; unwhitened, 0 on padding.

    delta_t = r_t + gamma V_{t+1} - V_t and A_t = delta_t + gamma lam A_{t+1}, where "t+1" is the next valid
    token (padding is skipped) and V after the last valid token is 0. returns = advantages + values are the
    critic's regression targets. Computed without gradient (values are the rollout's old values).
    """
    with torch.no_grad():
        dtype = token_level_rewards.dtype
        m = response_mask.to(dtype)
        r = token_level_rewards * m
        v = values.to(dtype) * m
        N, T = m.shape
        next_value = torch.zeros(N, dtype=dtype, device=r.device)
        next_adv = torch.zeros(N, dtype=dtype, device=r.device)
        adv = torch.zeros_like(r)
        for t in reversed(range(T)):
            delta = r[:, t] + gamma * next_value - v[:, t]
            a_t = delta + gamma * lam * next_adv
            valid = m[:, t]
            adv[:, t] = a_t * valid
            next_value = v[:, t] * valid + next_value * (1 - valid)
            next_adv = a_t * valid + next_adv * (1 - valid)
        returns = (adv + v) * m
    return adv, returns


@register("gae", needs=("values", "token_rewards"))
def gae(
    rewards,
    index,
    response_mask,
    *,
    values=None,
    token_rewards=None,
    gamma: float = 1.0,
    lam: float = 1.0,
    whiten: bool = True,
    epsilon: float = 1e-6,
    **_,
):
    """PPO (Schulman et al., 2017, "Proximal Policy Optimization Algorithms", Sec. 5) advantages by GAE
    (Schulman et al., 2016, Eq. 16) with a critic's per-token ``values`` [N, T].

    Per-token rewards are ``token_rewards`` (0 if not given) plus the outcome reward r_i at the last valid token
    of row i; see ``gae_advantages_and_returns``. gamma = lam = 1 are the usual LLM defaults (as in verl).
    whiten=True whitens over the valid tokens of the batch with the population std (``masked_whiten``).
    """
    if values is None:
        raise ValueError("gae needs values: a critic's per-token values [N, T] (the trainer trains a value head)")
    m = _valid(response_mask, rewards.dtype)
    token_level = outcome_token_rewards(rewards, response_mask)
    if token_rewards is not None:
        token_level = token_level + token_rewards.to(rewards.dtype) * m
    adv, _ = gae_advantages_and_returns(token_level, values.to(rewards.dtype), response_mask, gamma, lam)
    return masked_whiten(adv, response_mask, epsilon) if whiten else adv


@register("psr_nsr")
def psr_nsr(
    rewards, index, response_mask, *, pos_weight: float = 1.0, neg_weight: float = 1.0, threshold: float = 0.5, **_
):
    """Positive / Negative Sample Reinforcement (Zhu et al., 2025, "The Surprising Effectiveness of Negative
    Reinforcement in LLM Reasoning"): the RLVR objective on +1/-1 rewards split as L = L_PSR + L_NSR, and its
    weighted form W-REINFORCE, L = lambda L_PSR + L_NSR.

    A_i = +pos_weight if r_i > threshold (a correct sample) else -neg_weight; no baseline (plain REINFORCE).
    """
    adv = torch.where(
        rewards > threshold,
        torch.full_like(rewards, float(pos_weight)),
        torch.full_like(rewards, -float(neg_weight)),
    )
    return broadcast(adv, response_mask)


@register("psr")
def psr(rewards, index, response_mask, **kw):
    """PSR only (Zhu et al., 2025): ``psr_nsr`` with pos_weight=1, neg_weight=0 (explicit keywords override)."""
    kw = {"pos_weight": 1.0, "neg_weight": 0.0, **kw}
    return psr_nsr(rewards, index, response_mask, **kw)


@register("nsr")
def nsr(rewards, index, response_mask, **kw):
    """NSR only (Zhu et al., 2025): ``psr_nsr`` with pos_weight=0, neg_weight=1 (explicit keywords override)."""
    kw = {"pos_weight": 0.0, "neg_weight": 1.0, **kw}
    return psr_nsr(rewards, index, response_mask, **kw)


@register("w_reinforce")
def w_reinforce(rewards, index, response_mask, **kw):
    """W-REINFORCE (Zhu et al., 2025): lambda L_PSR + L_NSR with the paper's lambda = 0.1, i.e. ``psr_nsr`` with
    pos_weight=0.1, neg_weight=1.0 (explicit keywords override)."""
    kw = {"pos_weight": 0.1, "neg_weight": 1.0, **kw}
    return psr_nsr(rewards, index, response_mask, **kw)
