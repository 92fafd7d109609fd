"""Sample and token filters from DAPO.

Yu et al., 2025, "DAPO: An Open-Source LLM Reinforcement Learning System at Scale".

Pure tensor functions: dynamic-sampling group filter and overlong filtering (the soft overlong punishment is
a reward term: rlvr.verifiers.compose.soft_overlong_penalty).
Tensors: N responses, T = padded response length; ``index`` [N] is a long group id per response.
"""

from __future__ import annotations

import torch


def informative(rewards: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """Bool [N]: True where the response's group has values that are not all equal.

    DAPO dynamic sampling (Yu et al., 2025, Eq. 11, constraint 0 < |{o_i | is_equivalent(a, o_i)}| < G): groups whose
    responses are all correct or all wrong are dropped. The trainer passes the verifier's scores (correctness, as
    DAPO and verl's filter_groups metric "acc"), not the shaped reward, so a length penalty alone does not make an
    all-wrong group informative. Generalised here to "group std > 0" (partial credit), tested with exact equality
    (group max != group min). A group of size 1 is never informative. Groups may be non-contiguous and of any size.
    """
    if rewards.shape != index.shape or rewards.dim() != 1:
        raise ValueError(
            "rewards and index must both be 1-D of the same length, "
            f"got {tuple(rewards.shape)} and {tuple(index.shape)}"
        )
    if rewards.numel() == 0:
        return torch.zeros(0, dtype=torch.bool, device=rewards.device)
    _, group = torch.unique(index, return_inverse=True)
    n_groups = int(group.max()) + 1
    lo = torch.full((n_groups,), float("inf"), dtype=torch.float64, device=rewards.device)
    hi = torch.full((n_groups,), float("-inf"), dtype=torch.float64, device=rewards.device)
    r = rewards.detach().to(torch.float64)
    lo = lo.scatter_reduce(0, group, r, reduce="amin", include_self=True)
    hi = hi.scatter_reduce(0, group, r, reduce="amax", include_self=True)
    return (hi != lo)[group]


def overlong_filter(response_mask: torch.Tensor, truncated: torch.Tensor) -> torch.Tensor:
    """Zero the whole mask row of every response that hit the length limit without finishing.

    DAPO Overlong Filtering (Yu et al., 2025, Sec. 3.3): the loss of truncated samples is masked out so that a
    sound but unfinished reasoning chain is not punished for its length. Returns a mask of response_mask's dtype.
    """
    if truncated.dim() != 1 or truncated.shape[0] != response_mask.shape[0]:
        raise ValueError(f"truncated must be [N] with N={response_mask.shape[0]}, got {tuple(truncated.shape)}")
    keep = ~truncated.to(device=response_mask.device, dtype=torch.bool)
    if response_mask.dtype == torch.bool:
        return response_mask & keep.unsqueeze(-1)
    return response_mask * keep.unsqueeze(-1).to(response_mask.dtype)
