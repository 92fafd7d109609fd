"""Advantage estimators: rewards of N responses in groups -> per-token advantages [N, T] (CONTRACTS.md C2).

Outcome rewards give one advantage per response, broadcast to every valid response token.
"""

from __future__ import annotations

import torch

from rlvr.algos.registry import Registry

_REGISTRY = Registry("advantage estimator")
names = _REGISTRY.names


def register(name: str, *, needs: tuple[str, ...] = ()):
    """Register fn(rewards, index, response_mask, **kw) -> advantages [N, T].

    ``needs`` names the extra inputs the trainer must pass as keywords: "values" (a critic's per-token values,
    which makes the trainer train a value head) or "baseline_rewards" (the reward of a greedy response to the
    same prompt, which makes the trainer sample one). Every estimator may also receive ``token_rewards``
    [N, T] (per-token reward terms such as a KL penalty) and ``epsilon``, and must accept unknown keywords.
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
    count, _, mean = group_stats(rewards, index)
    adv = (rewards - mean) / (group_std(rewards, index) + epsilon)
    return broadcast(torch.where(count > 1, adv, torch.zeros_like(adv)), response_mask)


@register("dr_grpo")
def dr_grpo(rewards, index, response_mask, **_):
    """Dr. GRPO (Liu et al., 2025, "Understanding R1-Zero-Like Training", Eq. 3): A_i = r_i - mean_g, no std scaling."""
    _, _, mean = group_stats(rewards, index)
    return broadcast(rewards - mean, response_mask)


@register("rloo")
def rloo(rewards, index, response_mask, **_):
    """RLOO (Ahmadian et al., 2024, "Back to Basics", Eq. 6): A_i = r_i - mean of the other responses in the group.

    A group of size 1 has no other response and gets advantage 0.
    """
    count, total, _ = group_stats(rewards, index)
    baseline = (total - rewards) / (count - 1).clamp(min=1)
    adv = torch.where(count > 1, rewards - baseline, torch.zeros_like(rewards))
    return broadcast(adv, response_mask)
