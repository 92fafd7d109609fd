"""PAPO as a step part: one extra forward per micro-batch with the images partly masked, and the implicit
perception loss plus the double-entropy regulariser on its log-probs (the math, and what the paper and its released
code set, in rlvr.algos.perception).

Switched on by ``algo.papo_coef`` (gamma > 0) or ``algo.papo_entropy_coef`` (eta > 0); ``algo.papo_mask_ratio`` is
the probability each vision patch is masked. The masked forward runs under the current weights with gradients, as
the paper's objective and TRL's PAPOTrainer have it (the authors' EasyR1 code computes the masked log-probs once per
batch under the old policy instead). Each row's image gets its own mask, drawn from a generator seeded by
``train.seed`` and a call counter kept in the checkpoint, so a resumed run masks exactly as an unbroken one.
Metrics: papo/kl_prcp, papo/entropy, papo/masked_entropy (each aggregated like the policy loss).
"""

from __future__ import annotations

from typing import Any

import torch

from rlvr.algos import losses, perception
from rlvr.config import Config, ConfigError
from rlvr.train.parts import PartContext, StepPart, register_part


def vision_patch_size(model) -> int | None:
    """The vision tower's patch size, or None when ``model`` is not a vision-language model."""
    config = getattr(model, "config", None)
    vision = getattr(config, "vision_config", None)
    if vision is None:
        return None
    return int(getattr(vision, "patch_size", 14))


@register_part("papo")
def _papo(cfg: Config, ctx: PartContext):
    algo = cfg.algo
    if algo.papo_coef <= 0 and algo.papo_entropy_coef <= 0:
        return None
    patch_size = vision_patch_size(ctx.model)
    if patch_size is None:
        key = "algo.papo_coef" if algo.papo_coef > 0 else "algo.papo_entropy_coef"
        raise ConfigError(f"{key}: PAPO masks the image, but model.path={cfg.model.path!r} is a text-only model (its "
                          "config has no vision_config); set it to 0 or train a vision-language model")
    return PerceptionLoss(cfg, ctx.model, patch_size)


class _MaskedView:
    """The rollout batch as the masked forward sees it: the same rows, with ``image_inputs`` replaced."""

    def __init__(self, batch, inputs: dict[str, torch.Tensor]):
        self._batch, self._inputs = batch, inputs

    def __getattr__(self, name: str):
        return getattr(self._batch, name)

    def image_inputs(self, rows: torch.Tensor) -> dict[str, torch.Tensor]:
        return self._inputs


class PerceptionLoss(StepPart):
    """PAPO (Wang et al., 2025, arXiv 2507.06448): -gamma * KL(pi(.|I) || pi(.|I_mask)) + eta * (H_mask + H)."""

    def __init__(self, cfg: Config, model: torch.nn.Module, patch_size: int):
        self.cfg, self.model, self.patch_size = cfg, model, patch_size
        self.gamma, self.eta, self.ratio = cfg.algo.papo_coef, cfg.algo.papo_entropy_coef, cfg.algo.papo_mask_ratio
        self.calls = 0

    def masked_inputs(self, inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """``inputs`` with a share of the patches of ``pixel_values`` masked (a fresh draw on each call)."""
        generator = torch.Generator().manual_seed(int(self.cfg.train.seed) * 1_000_003 + self.calls)
        self.calls += 1
        masked = perception.mask_patches(inputs["pixel_values"], self.ratio, self.patch_size, generator=generator)
        return {**inputs, "pixel_values": masked}

    def loss(self, exp, rows, out, mask, agg, norm_length):
        inputs = exp.batch.image_inputs(rows)
        if "pixel_values" not in inputs:  # rows without images: nothing to mask
            return None, {}
        from rlvr.train.learner import rows_forward  # the learner imports the parts

        masked_out = rows_forward(self.model, _MaskedView(exp.batch, self.masked_inputs(inputs)), rows, self.cfg)
        term, parts = perception.papo_terms(
            out.logp, masked_out.logp, lambda x: losses.aggregate(x, mask, agg, norm_length),
            gamma=self.gamma, eta=self.eta)
        return term, {f"papo/{k}": v.item() for k, v in parts.items()}

    def state_dict(self) -> dict[str, Any]:
        return {"calls": self.calls}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.calls = state.get("calls", self.calls)
