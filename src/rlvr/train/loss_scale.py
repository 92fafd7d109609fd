"""Dynamic loss scaling for float16 training (``model.dtype=float16``).

float16 keeps 5 exponent bits: gradients below about 6e-8 round to zero in the backward pass, and RL's losses,
averaged over many tokens (or divided by a constant length, as Dr.GRPO's), have many such gradients. Mixed-precision
training (Micikevicius et al., 2018, "Mixed Precision Training", Sec. 3.2) multiplies the loss by a factor S before
the backward pass, so that the gradients are S times larger and keep their digits, and divides S out again, in
float32, before the update. S is dynamic: an overflow (a gradient beyond float16's range) halves it and the
mini-batch's backward pass is redone, and ``growth_interval`` steps without one double it. bfloat16 has float32's
range and needs no scaling; float32 takes S = 1 and none of this costs anything.

The scale is part of the trainer state, so a resumed run continues with the scale it had.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import torch

from rlvr.train.master_weights import MasterWeightAdamW

MAX_OVERFLOW_RETRIES = 24  # from 2**16, enough halvings to reach S = 1 with room to spare


@dataclass
class LossScale:
    """The factor S the loss is multiplied by before backward; ``enabled`` False keeps S = 1."""

    enabled: bool = False
    value: float = 1.0
    growth_interval: int = 1000
    finite_in_a_row: int = 0

    @classmethod
    def for_dtype(cls, dtype: str) -> LossScale:
        """Dynamic scaling from 2**16 for float16 parameters; none for float32 and bfloat16."""
        return cls(enabled=True, value=2.0**16) if dtype == "float16" else cls()

    def can_retry(self) -> bool:
        """Whether an overflowed backward pass is worth redoing with a smaller scale."""
        return self.enabled and self.value > 1.0

    def update(self, finite: bool) -> None:
        """After a backward pass: halve S on overflow; double it after ``growth_interval`` finite ones in a row."""
        if not self.enabled:
            return
        if not finite:
            self.value, self.finite_in_a_row = max(self.value / 2, 1.0), 0
            return
        self.finite_in_a_row += 1
        if self.finite_in_a_row >= self.growth_interval:
            self.value, self.finite_in_a_row = min(self.value * 2, 2.0**24), 0

    def metrics(self, done: ScaledBackward) -> dict[str, float]:
        """What a step logs of its scaled backward passes: the scale they carried and the overflowed ones redone
        (nothing when scaling is off)."""
        return {"loss_scale": done.scale, "overflow_retries": float(done.retries)} if self.enabled else {}

    def state_dict(self) -> dict[str, Any]:
        return {"value": self.value, "finite_in_a_row": self.finite_in_a_row}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if self.enabled and state:
            self.value, self.finite_in_a_row = float(state["value"]), int(state["finite_in_a_row"])


@dataclass
class ScaledBackward:
    """How a mini-batch's backward pass went: its unscaled loss, the factor its gradients carry, the true gradient
    norm (as clipping measured it), whether both loss and norm were finite, and how many overflowed passes were
    redone."""

    loss: float
    scale: float
    grad_norm: float
    finite: bool
    retries: int


def backward_with_retries(backward: Callable[[float], float], params: list[torch.Tensor], max_norm: float,
                          loss_scale: LossScale, discard: Callable[[], None]) -> ScaledBackward:
    """``backward(S)`` runs the backward pass of the loss times S (gradients reduced across ranks, if any) and
    returns the unscaled loss; the gradients are then clipped to ``max_norm``. A pass whose loss is finite but whose
    gradients overflowed is discarded (``discard()`` drops its gradients) and redone with the scale halved; a
    non-finite loss is not retried (the caller skips the step)."""
    for attempt in range(MAX_OVERFLOW_RETRIES + 1):
        used = loss_scale.value
        loss = backward(used)
        grad_norm = clip_scaled_grad_norm(params, max_norm, used)
        finite = math.isfinite(loss) and math.isfinite(grad_norm)
        overflow = math.isfinite(loss) and not finite and loss_scale.can_retry()
        loss_scale.update(finite)
        if not overflow or attempt == MAX_OVERFLOW_RETRIES:
            break
        discard()
    return ScaledBackward(loss, used, grad_norm, finite, attempt)


def clip_scaled_grad_norm(params: list[torch.Tensor], max_norm: float, scale: float) -> float:
    """Clip gradients that are ``scale`` times the true ones so that the true gradient's norm is at most
    ``max_norm``; returns the true norm (inf or nan when the scaled gradients overflowed)."""
    grads = [p.grad for p in params if p.grad is not None]
    if any(g.dtype in (torch.float16, torch.bfloat16) for g in grads):
        # measured in float32: torch measures a float16 gradient in float16, where a norm above 65504 (or, summed
        # over FSDP2 shards, a squared norm above it) would read as an overflow
        norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g, dtype=torch.float32) for g in grads]))
        torch.nn.utils.clip_grads_with_norm_(params, max_norm * scale, norm)
    else:
        norm = torch.nn.utils.clip_grad_norm_(params, max_norm * scale)
    norm = float(norm.full_tensor() if hasattr(norm, "full_tensor") else norm)  # a sharded (FSDP2) norm
    return norm / scale  # inf and nan stay what they are


def unscale_gradients(optimizer: torch.optim.Optimizer, params: Iterable[torch.Tensor], scale: float) -> None:
    """Divide ``scale`` out of the gradients the next ``optimizer.step()`` reads: a MasterWeightAdamW divides in
    float32 as it reads them (a float16 gradient divided in place would lose the digits S kept); other optimizers
    train float32 parameters, whose gradients are divided in place."""
    if scale == 1.0:
        return
    if isinstance(optimizer, MasterWeightAdamW):
        optimizer.grad_scale = scale
        return
    for p in params:
        if p.grad is not None:
            p.grad.div_(scale)
