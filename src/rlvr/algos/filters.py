"""Sample and token filters from DAPO.

Yu et al., 2025, "DAPO: An Open-Source LLM Reinforcement Learning System at Scale".

Pure tensor functions: dynamic-sampling group filter, overlong filtering, soft overlong punishment.
Tensors: N responses, T = padded response length; ``index`` [N] is a long group id per response.
"""

from __future__ import annotations

import torch


def informative(rewards: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """Bool [N]: True where the response's group has rewards that are not all equal.

    DAPO dynamic sampling (Yu et al., 2025, Eq. 11, constraint 0 < |{o_i | is_equivalent(a, o_i)}| < G): groups whose
    responses are all correct or all wrong give zero advantage and are dropped. Generalised here to "group reward std
    > 0", tested with exact equality (group max != group min). A group of size 1 is never informative. Groups may be
    non-contiguous and of any size.
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


def soft_overlong_penalty(lengths: torch.Tensor, max_len: int, buffer_len: int, factor: float = 1.0) -> torch.Tensor:
    """Length-aware reward penalty [N] (float) added to the task reward.

    DAPO Soft Overlong Punishment (Yu et al., 2025, Sec. 3.4, Eq. 13), with L_max = max_len, L_cache = buffer_len:
        R(y) = 0                                    if |y| <= L_max - L_cache
               ((L_max - L_cache) - |y|) / L_cache  if L_max - L_cache < |y| <= L_max
               -1                                   if L_max < |y|
    multiplied by ``factor``. buffer_len = 0 disables the penalty (all zeros).
    """
    if buffer_len < 0 or max_len < 0:
        raise ValueError(f"max_len and buffer_len must be >= 0, got max_len={max_len}, buffer_len={buffer_len}")
    if buffer_len > max_len:
        raise ValueError(f"buffer_len ({buffer_len}) must be <= max_len ({max_len})")
    dtype = lengths.dtype if lengths.is_floating_point() else torch.get_default_dtype()
    y = lengths.to(dtype)
    if buffer_len == 0:
        return torch.zeros_like(y)
    start = float(max_len - buffer_len)
    inside = (start - y) / float(buffer_len)
    pen = torch.where(y <= start, torch.zeros_like(y), torch.where(y <= max_len, inside, torch.full_like(y, -1.0)))
    return pen * factor
