"""PAPO's perception terms: the implicit perception loss and the double-entropy regulariser (Wang et al., 2025,
"Perception-Aware Policy Optimization for Multimodal Reasoning", arXiv 2507.06448).

The PAPO objective (their Eq. for J_PAPO) adds to GRPO's

    + gamma * KL_prcp,   KL_prcp = KL( pi_theta(o | q, I) || pi_theta(o | q, I_mask) )
    - eta1 * H[pi_theta(o | q, I_mask)] - eta2 * H[pi_theta(o | q, I)]        (their Double Entropy Loss)

so a policy whose answer changes when the image is masked is rewarded (it looked at the image), while the two
entropy terms stop it "hacking" that reward by making the masked-image distribution diffuse. As in their released
code (EasyR1-based ``dp_actor.update_policy``; ``core_algos.compute_kl(..., "low_var_kl")``) the KL is the
per-token k3 estimate on the sampled tokens, exp(r) - r - 1 with r = log pi(o_t | I_mask) - log pi(o_t | I),
clamped to [-10, 10], and each entropy is its sampled-token estimate -log pi(o_t). Their defaults: gamma = 0.01
(0.02 for the "high" variant), each patch of 14 pixels blackened with probability 0.6, eta1 = eta2 = 0.03
(0.05 in their 7B high-gamma runs), the entropy terms off unless asked for.

Masking (``mask_patches``): every vision patch of every image is set to ``fill`` independently with probability
``ratio`` (their ``random_patch_blackening``, which works on the PIL image before the processor; here it works on
``pixel_values`` after it, so ``fill=0`` is the processor's mean colour rather than black, which is what the
processor turns a black pixel into only when the mean is 0).
"""

from __future__ import annotations

import torch

KL_CLAMP = 10.0


def patch_mask(n_images: int, grid_h: int, grid_w: int, ratio: float, generator: torch.Generator | None = None,
               device: torch.device | str = "cpu") -> torch.Tensor:
    """[n_images, grid_h, grid_w] bool, True where a patch is masked: each patch independently with
    probability ``ratio``."""
    return torch.rand(n_images, grid_h, grid_w, generator=generator).to(device) < ratio


def mask_patches(pixel_values: torch.Tensor, ratio: float, patch_size: int, *, fill: float = 0.0,
                 generator: torch.Generator | None = None, mask: torch.Tensor | None = None) -> torch.Tensor:
    """A copy of ``pixel_values`` with a random share ``ratio`` of its vision patches set to ``fill``.

    ``pixel_values`` [N, C, H, W] (CLIP/SigLIP-style processors): patches are ``patch_size`` x ``patch_size``
    squares on the grid the vision tower cuts (H and W divisible by ``patch_size``); [P, D] (Qwen2-VL-style
    processors, one flattened patch per row): every row is a patch and ``patch_size`` is unused. ``mask`` (the
    shape ``patch_mask`` returns, or [P] for rows) fixes which patches go instead of drawing them."""
    out = pixel_values.clone()
    if pixel_values.dim() == 2:
        chosen = mask if mask is not None else torch.rand(pixel_values.shape[0], generator=generator) < ratio
        out[chosen.to(pixel_values.device)] = fill
        return out
    if pixel_values.dim() != 4:
        raise ValueError(f"pixel_values must be [N, C, H, W] or [P, D], got shape {tuple(pixel_values.shape)}")
    n, _, height, width = pixel_values.shape
    if height % patch_size or width % patch_size:
        raise ValueError(f"image {height}x{width} is not a whole number of {patch_size}-pixel patches")
    grid_h, grid_w = height // patch_size, width // patch_size
    chosen = mask if mask is not None else patch_mask(n, grid_h, grid_w, ratio, generator)
    pixels = chosen.to(pixel_values.device).repeat_interleave(patch_size, 1).repeat_interleave(patch_size, 2)
    return out.masked_fill(pixels.unsqueeze(1), fill)


def perception_kl(logp: torch.Tensor, masked_logp: torch.Tensor) -> torch.Tensor:
    """[N, T] per-token estimate of KL(pi(.|I) || pi(.|I_mask)) on tokens sampled from pi(.|I): the k3 estimator
    exp(r) - r - 1, r = masked_logp - logp, clamped to [-KL_CLAMP, KL_CLAMP] (PAPO's released code). Gradients
    flow through both arguments."""
    r = masked_logp - logp
    return (torch.exp(r) - r - 1.0).clamp(-KL_CLAMP, KL_CLAMP)


def papo_terms(logp: torch.Tensor, masked_logp: torch.Tensor, aggregate, *, gamma: float, eta: float
               ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """PAPO's addition to the loss: -gamma * KL_prcp + eta * (H_mask + H), with ``aggregate`` ([N, T] -> scalar,
    the policy loss's own aggregation over the loss mask) applied to each per-token term and the entropies
    estimated on the sampled tokens (-log pi). Returns (the term, its parts: kl_prcp, entropy, masked_entropy)."""
    kl_prcp = aggregate(perception_kl(logp, masked_logp))
    entropy = aggregate(-logp)
    masked_entropy = aggregate(-masked_logp)
    term = -gamma * kl_prcp
    if eta:
        term = term + eta * (masked_entropy + entropy)
    return term, {"kl_prcp": kl_prcp, "entropy": entropy, "masked_entropy": masked_entropy}
