"""AdamW with float32 master weights, for parameters held in bfloat16 or float16 (``model.dtype``).

An update much smaller than a weight's rounding step is lost when it is added to the weight in its own low
precision: bfloat16 keeps 8 significant bits, so with RL's usual learning rates (1e-6 to 1e-5, AdamW steps of about
``lr``) most weights would never change. Mixed-precision training (Micikevicius et al., 2018, "Mixed Precision
Training", Sec. 3.1) therefore keeps a float32 copy of every weight, applies the update to the copy and rounds the
copy into the model's weight after each step. The moments are float32 too. Memory per parameter: 2 (weight) +
4 (master) + 8 (moments) bytes instead of 2 + 4 (moments in bfloat16), and the update is the float32 AdamW's.

The master copy lives in the optimizer's per-parameter state, so ``state_dict`` / ``load_state_dict`` (and
torch.distributed's sharded optimizer state) carry it and a resumed run continues exactly. A weight written from
outside the optimizer (loaded from a checkpoint, for instance) is noticed at the next step and its master copy is
taken from it again.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch


def adamw_step(param: torch.Tensor, grad: torch.Tensor, exp_avg: torch.Tensor, exp_avg_sq: torch.Tensor, step: int, *,
               lr: float, beta1: float, beta2: float, eps: float, weight_decay: float) -> None:
    """One AdamW update of ``param`` in place (Loshchilov & Hutter, 2019, "Decoupled Weight Decay Regularization",
    Algorithm 2, with Adam's bias correction, Kingma & Ba, 2015, Algorithm 1), ``step`` counting from 1."""
    param.mul_(1 - lr * weight_decay)
    exp_avg.lerp_(grad, 1 - beta1)
    exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
    denom = (exp_avg_sq.sqrt() / math.sqrt(1 - beta2 ** step)).add_(eps)
    param.addcdiv_(exp_avg, denom, value=-lr / (1 - beta1 ** step))


class MasterWeightAdamW(torch.optim.Optimizer):
    """AdamW whose update is computed on float32 master copies of low-precision parameters (see the module)."""

    def __init__(self, params: Iterable[torch.nn.Parameter], lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 1e-2):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))

    FLOAT32_STATE = ("master", "exp_avg", "exp_avg_sq")
    grad_scale = 1.0  # the next step's gradients are this many times the true ones (rlvr.train.loss_scale)

    def load_state_dict(self, state_dict: dict) -> None:
        """torch's loading, then this optimizer's float32 state restored: torch casts floating state to each
        parameter's dtype, which would round the master weights and the moments to bfloat16."""
        super().load_state_dict(state_dict)
        # saved parameters are known by their position (or name) in the saved groups, as torch matches them
        saved_ids = [i for group in state_dict["param_groups"] for i in group["params"]]
        params = dict(zip(saved_ids, (p for group in self.param_groups for p in group["params"])))
        for key, saved in state_dict["state"].items():
            state = self.state[params[key]]
            for key in self.FLOAT32_STATE:
                if key in saved:
                    state[key] = saved[key].to(dtype=torch.float32, device=state[key].device, copy=True)

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["step"] = torch.tensor(0.0)
                    state["exp_avg"] = torch.zeros_like(p, dtype=torch.float32)
                    state["exp_avg_sq"] = torch.zeros_like(p, dtype=torch.float32)
                    state["master"] = p.detach().to(torch.float32).clone()
                weight, master = _local(p), _local(state["master"])  # elementwise: each rank's shard alone
                if not torch.equal(master.to(weight.dtype), weight):  # written from outside: start from it
                    master.copy_(weight)
                state["step"] += 1
                grad = _local(p.grad).to(torch.float32)
                if self.grad_scale != 1.0:
                    grad = grad / self.grad_scale
                adamw_step(master, grad, _local(state["exp_avg"]),
                           _local(state["exp_avg_sq"]), int(state["step"].item()), lr=group["lr"], beta1=beta1,
                           beta2=beta2, eps=group["eps"], weight_decay=group["weight_decay"])
                weight.copy_(master)
        self.grad_scale = 1.0
        return loss


def _local(t: torch.Tensor) -> torch.Tensor:
    """A sharded (DTensor) parameter's or state's local shard, sharing its storage; a plain tensor as it is."""
    return t.to_local() if hasattr(t, "to_local") else t


def needs_master_weights(params: Iterable[torch.Tensor]) -> bool:
    return any(p.dtype in (torch.bfloat16, torch.float16) for p in params)


def adamw(params: Iterable[torch.nn.Parameter], *, lr: float, weight_decay: float) -> torch.optim.Optimizer:
    """AdamW for these parameters: with float32 master weights when any is in low precision; else torch's, with
    its fused kernel (one pass over all parameters instead of a dozen ops per tensor) where the device has one."""
    params = list(params)
    if needs_master_weights(params):
        return MasterWeightAdamW(params, lr=lr, weight_decay=weight_decay)
    try:
        return torch.optim.AdamW(params, fused=True, lr=lr, weight_decay=weight_decay)
    except (RuntimeError, ValueError, TypeError):
        return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)
