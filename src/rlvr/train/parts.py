"""The optional parts of an RL step, each switched on by its own config keys and plugged into the step through
hooks, so the step never branches on a part's name.

A part declares what it needs computed once per rollout batch (``needs``: "old_logp", "ref_logp", "values"), and
may then:
- ``shape(exp)``: change the experience before advantages (per-token rewards, the loss mask);
- ``begin_update(exp, rows, entropy)``: look at a whole mini-batch before its update (with ``mini_batch_entropy``,
  the entropy of each of its rows under the current weights), e.g. to select the tokens the gradient flows through;
- ``token_weights(exp, rows, out)``: multiply each token's policy loss (importance weights, a 0/1 token selection);
  the loss is still averaged over every token of the loss mask, so a selection never changes the normaliser;
- ``loss(exp, rows, out, mask, agg, norm_length)``: add a loss term (KL, entropy bonus, value loss);
- ``after_update(grad_scale)`` / ``discard_update()``: step its own optimizer after each policy update, or drop
  the gradients of a backward pass that overflowed (float16) and is redone;
- ``after_step(step, metrics)``: update its own state once per step (adaptive KL, reference reset);
- ``state_dict()`` / ``load_state_dict()``: carry that state through checkpoints.

``register_part(name)`` adds a builder ``fn(cfg, ctx) -> StepPart | None`` (None when its keys leave it off);
``build_parts`` calls them in registration order.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from rlvr.algos import advantages, filters, kl, losses, noise, offpolicy
from rlvr.algos import entropy as entropy_mod
from rlvr.config import Config
from rlvr.train.group import SINGLE, LearnerGroup
from rlvr.train.loss_scale import clip_scaled_grad_norm, unscale_gradients
from rlvr.train.master_weights import adamw
from rlvr.train.policy import ValueHead, policy_forward


class StepPart:
    needs: frozenset[str] = frozenset()
    keeps_every_row = False  # its loss can be non-zero on rows whose advantages are all zero
    wants_entropy = False  # needs the per-token entropy of the training forward pass
    entropy_grad = False  # ... with its gradient
    value_head: torch.nn.Module | None = None  # a critic head on the policy's trunk, run in the same forward
    mini_batch_entropy = False  # begin_update needs the entropy of every row of the mini-batch
    step_state: dict[str, Any] | None = None  # state the advantage estimator keeps across steps ("step_state" need)

    def shape(self, exp) -> dict[str, float]:
        return {}

    def begin_update(self, exp, rows: torch.Tensor, entropy: torch.Tensor | None) -> dict[str, float]:
        """Called once per mini-batch ``rows`` before its forward and backward passes; ``entropy`` [len(rows), T]
        (no gradient) when ``mini_batch_entropy``, else None."""
        return {}

    def token_weights(self, exp, rows: torch.Tensor, out) -> tuple[torch.Tensor | None, dict[str, float]]:
        return None, {}

    def loss(self, exp, rows, out, mask, agg: str, norm_length: int) -> tuple[torch.Tensor | None, dict[str, float]]:
        return None, {}

    def after_update(self, grad_scale: float = 1.0) -> dict[str, float]:
        """Called after each optimizer step of the policy (a part with its own optimizer steps it here); the
        gradients of its loss term are ``grad_scale`` times the true ones (rlvr.train.loss_scale)."""
        return {}

    def discard_update(self) -> None:
        """The mini-batch's backward pass overflowed and is redone: drop the gradients it left (own optimizer)."""

    @property
    def policy_frozen(self) -> bool:
        """True while the policy must not be updated (e.g. a critic's warm-up)."""
        return False

    def old_values(self, model, batch, cfg: Config) -> torch.Tensor | None:
        """Values of the batch before any update, for parts that need "values"."""
        return None

    def after_step(self, step: int, metrics: dict[str, float]) -> dict[str, float]:
        return {}

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass

    def checkpoint_folders(self) -> dict[str, Any]:
        """Models the part trains that are saved as their own Hugging Face folders in each checkpoint:
        {folder name: object with save_pretrained(path)}."""
        return {}


@dataclass
class PartContext:
    """What builders may use: the policy, the frozen reference model (when a part needs it), the parameters
    the optimizer trains (a part may add its own), the learner group (rlvr.train.group) whose ranks share each
    update."""

    model: torch.nn.Module
    load_reference: Callable[[], torch.nn.Module]
    trainable: list[torch.nn.Parameter] = field(default_factory=list)
    group: LearnerGroup = SINGLE


PartBuilder = Callable[[Config, PartContext], "StepPart | None"]
_BUILDERS: dict[str, PartBuilder] = {}


def register_part(name: str) -> Callable[[PartBuilder], PartBuilder]:
    def decorator(fn: PartBuilder) -> PartBuilder:
        _BUILDERS[name] = fn
        return fn

    return decorator


def build_parts(cfg: Config, ctx: PartContext) -> dict[str, StepPart]:
    parts = {}
    for name, build in _BUILDERS.items():
        part = build(cfg, ctx)
        if part is not None:
            parts[name] = part
    return parts


# ------------------------------------------------------------------------------------------------------ parts


@register_part("overlong_filter")
def _overlong_filter(cfg: Config, ctx: PartContext):
    return OverlongFilter() if cfg.algo.overlong_filter else None


class OverlongFilter(StepPart):
    """DAPO overlong filtering (Yu et al., 2025, Sec. 3.3): truncated responses carry no loss."""

    def shape(self, exp) -> dict[str, float]:
        exp.loss_mask = filters.overlong_filter(exp.loss_mask, exp.batch.truncated)
        return {}


@register_part("kl")
def _kl(cfg: Config, ctx: PartContext):
    if cfg.algo.kl_coef <= 0:
        return None  # no reference model is loaded and no reference forward pass runs
    return KLPenalty(cfg, ctx.load_reference(), ctx.model)


class KLPenalty(StepPart):
    """KL(pi || pi_ref) with estimator k1/k2/k3 (kl.estimate), as a loss term (GRPO, Shao et al., 2024, Eq. 3) or a
    per-token reward penalty (Ouyang et al., 2022, Eq. 2). With ``algo.kl_target`` the coefficient follows the
    adaptive controller of Ziegler et al., 2019 ("Fine-Tuning Language Models from Human Preferences", Sec. 2.2):
    e = clip(KL / target - 1, -0.2, 0.2), beta <- beta (1 + e n / horizon) for n samples. ``algo.ref_update_every``
    resets the reference to the current policy every N steps (DeepSeekMath's iterative GRPO, Shao et al., Sec. 4.1.3).
    """

    needs = frozenset({"ref_logp"})

    def __init__(self, cfg: Config, reference: torch.nn.Module, policy: torch.nn.Module):
        self.algo, self.reference, self.policy = cfg.algo, reference, policy
        self.coef = cfg.algo.kl_coef
        self.in_loss = cfg.algo.kl_placement == "loss"
        self.keeps_every_row = self.in_loss
        self.samples_per_step = cfg.data.prompts_per_step * cfg.rollout.group_size

    def shape(self, exp) -> dict[str, float]:
        if self.in_loss:
            return {}
        m = exp.batch.response_mask
        token_kl = kl.estimate(exp.old_logp, exp.ref_logp, self.algo.kl_kind) * m
        exp.token_rewards = exp.token_rewards - self.coef * token_kl
        return {"kl": float(token_kl.sum() / m.sum().clamp(min=1))}

    def loss(self, exp, rows, out, mask, agg, norm_length):
        if not self.in_loss:
            return None, {}
        term = losses.aggregate(kl.estimate(out.logp, exp.ref_logp[rows], self.algo.kl_kind), mask, agg, norm_length)
        return self.coef * term, {"kl": term.item()}

    def after_step(self, step: int, metrics: dict[str, float]) -> dict[str, float]:
        if self.algo.kl_target is not None and math.isfinite(metrics.get("kl", math.nan)):
            error = min(max(metrics["kl"] / self.algo.kl_target - 1.0, -0.2), 0.2)
            self.coef *= 1.0 + error * self.samples_per_step / self.algo.kl_horizon
        if self.algo.ref_update_every and step % self.algo.ref_update_every == 0:
            self.reference.load_state_dict(self.policy.state_dict())
        return {"kl_coef": self.coef}

    def state_dict(self) -> dict[str, Any]:
        state: dict[str, Any] = {"coef": self.coef}
        if self.algo.ref_update_every:
            state["reference"] = self.reference.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.coef = state.get("coef", self.coef)
        if "reference" in state:
            self.reference.load_state_dict(state["reference"])


@register_part("critic")
def _critic(cfg: Config, ctx: PartContext):
    if "values" not in advantages.needs(cfg.algo.advantage):
        return None
    if cfg.algo.critic == "model":
        return SeparateCritic(cfg, ctx.model, ctx.group)
    part = SharedValueHead(cfg, ctx.model)
    ctx.trainable.extend(part.value_head.parameters())
    return part


class SharedValueHead(StepPart):
    """PPO's critic (Schulman et al., 2017) as a value head on the policy's trunk: old values once per batch, GAE
    returns as its targets, and the clipped value loss (losses.value_loss) weighted by ``algo.value_coef``."""

    needs = frozenset({"values"})
    keeps_every_row = True

    def __init__(self, cfg: Config, model: torch.nn.Module):
        self.algo = cfg.algo
        self.value_head = ValueHead(model.config.get_text_config().hidden_size).to(next(model.parameters()).device)

    def old_values(self, model, batch, cfg: Config) -> torch.Tensor:
        return _values(model, self.value_head, batch, cfg)

    def shape(self, exp) -> dict[str, float]:
        exp.returns = _gae_returns(exp, self.algo)
        return {}

    def loss(self, exp, rows, out, mask, agg, norm_length):
        vf_loss, parts = losses.value_loss(out.values, exp.old_values[rows], exp.returns[rows], mask, clip=self.algo.value_clip)
        return self.algo.value_coef * vf_loss, {**parts, "vf_loss": vf_loss.item()}

    def state_dict(self) -> dict[str, Any]:
        return {"value_head": self.value_head.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.value_head.load_state_dict(state["value_head"])


def _gae_returns(exp, algo) -> torch.Tensor:
    """GAE returns (advantages + old values), the critic's regression targets."""
    options = algo.advantage_options
    _, returns = advantages.gae_advantages_and_returns(
        advantages.outcome_token_rewards(exp.rewards, exp.batch.response_mask) + exp.token_rewards,
        exp.old_values, exp.batch.response_mask, options.get("gamma", 1.0), options.get("lam", 1.0),
    )
    return returns


@torch.no_grad()
def _values(model, head, batch, cfg: Config) -> torch.Tensor:
    micro = cfg.train.micro_batch_size or batch.size
    was_training = model.training
    model.eval()
    every = torch.arange(batch.size, device=batch.response_ids.device)
    out = [policy_forward(model, batch.prompt_ids[i:i + micro], batch.prompt_mask[i:i + micro],
                          batch.response_ids[i:i + micro], batch.response_mask[i:i + micro],
                          temperature=cfg.rollout.temperature, value_head=head,
                          **batch.image_inputs(every[i:i + micro])).values
           for i in range(0, batch.size, micro)]
    model.train(was_training)
    return torch.cat(out)


class SeparateCritic(StepPart):
    """PPO's critic as its own model (a copy of the initial policy with a value head), trained by its own AdamW
    (``algo.critic_lr``, default train.lr) on the clipped value loss at every policy update, as verl's critic
    worker does; for the first ``algo.critic_warmup_steps`` steps only the critic learns (verl's critic_warmup)."""

    needs = frozenset({"values"})
    keeps_every_row = True

    def __init__(self, cfg: Config, policy: torch.nn.Module, group: LearnerGroup = SINGLE):
        self.cfg, self.algo, self.group = cfg, cfg.algo, group
        self.model = copy.deepcopy(policy).train()
        self.head = ValueHead(policy.config.get_text_config().hidden_size).to(next(policy.parameters()).device)
        self.params = list(self.model.parameters()) + list(self.head.parameters())
        self.optimizer = adamw(self.params, lr=cfg.algo.critic_lr or cfg.train.lr, weight_decay=cfg.train.weight_decay)
        self.steps_done = 0

    @property
    def policy_frozen(self) -> bool:
        return self.steps_done < self.algo.critic_warmup_steps

    def old_values(self, model, batch, cfg: Config) -> torch.Tensor:
        return _values(self.model, self.head, batch, cfg)

    def shape(self, exp) -> dict[str, float]:
        exp.returns = _gae_returns(exp, self.algo)
        return {}

    def loss(self, exp, rows, out, mask, agg, norm_length):
        b = exp.batch
        values = policy_forward(self.model, b.prompt_ids[rows], b.prompt_mask[rows], b.response_ids[rows],
                                b.response_mask[rows], temperature=self.cfg.rollout.temperature, value_head=self.head,
                                **b.image_inputs(torch.as_tensor(rows, device=b.response_ids.device))).values
        vf_loss, parts = losses.value_loss(values, exp.old_values[rows], exp.returns[rows], mask, clip=self.algo.value_clip)
        return vf_loss, {**parts, "vf_loss": vf_loss.item()}

    def after_update(self, grad_scale: float = 1.0) -> dict[str, float]:
        self.group.reduce_gradients(self.params)
        norm = clip_scaled_grad_norm(self.params, self.cfg.train.max_grad_norm, grad_scale)
        if math.isfinite(norm):
            unscale_gradients(self.optimizer, self.params, grad_scale)
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return {"critic_grad_norm": norm}

    def discard_update(self) -> None:
        self.optimizer.zero_grad(set_to_none=True)

    def after_step(self, step: int, metrics: dict[str, float]) -> dict[str, float]:
        self.steps_done += 1
        return {}

    def state_dict(self) -> dict[str, Any]:
        return {"model": self.model.state_dict(), "head": self.head.state_dict(),
                "optimizer": self.optimizer.state_dict(), "steps_done": self.steps_done}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state:
            self.model.load_state_dict(state["model"])
            self.head.load_state_dict(state["head"])
            self.optimizer.load_state_dict(state["optimizer"])
            self.steps_done = state["steps_done"]


@register_part("noise_correction")
def _noise_correction(cfg: Config, ctx: PartContext):
    spec = cfg.reward.noise
    return NoiseCorrection(spec["kind"], float(spec.get("false_positive", 0.0)),
                           float(spec.get("false_negative", 0.0))) if spec else None


class NoiseCorrection(StepPart):
    """Noisy-verifier correction of the rewards before advantages (arXiv 2510.00915: backward (R - rho0) / (1 - rho0
    - rho1), or the forward weights); config validation refuses estimators that cancel it (rlvr.algos.noise)."""

    def __init__(self, kind: str, false_positive: float, false_negative: float):
        self.kind, self.false_positive, self.false_negative = kind, false_positive, false_negative

    def shape(self, exp) -> dict[str, float]:
        exp.rewards = noise.apply(self.kind, exp.rewards, self.false_positive, self.false_negative)
        return {"reward_corrected_mean": float(exp.rewards.mean())}


@register_part("estimator_inputs")
def _estimator_inputs(cfg: Config, ctx: PartContext):
    wanted = set(advantages.needs(cfg.algo.advantage)) & {"old_logp", "ref_logp", "step_state"}
    return EstimatorInputs(wanted, ctx.load_reference() if "ref_logp" in wanted else None) if wanted else None


class EstimatorInputs(StepPart):
    """What an advantage estimator declares it needs beyond the rewards: the trainer's old log-probs, the reference
    model's log-probs (loaded for the estimator when no KL term loads it) and ``step_state``, a dict the estimator keeps
    across steps (e.g. per-prompt running statistics), saved with every checkpoint."""

    def __init__(self, wanted: set[str], reference: torch.nn.Module | None):
        self.needs = frozenset(wanted - {"step_state"})
        self.reference = reference
        self.step_state = {} if "step_state" in wanted else None

    def state_dict(self) -> dict[str, Any]:
        return {"step_state": copy.deepcopy(self.step_state)} if self.step_state is not None else {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if self.step_state is not None and "step_state" in state:
            self.step_state.clear()
            self.step_state.update(copy.deepcopy(state["step_state"]))


@register_part("tis")
def _tis(cfg: Config, ctx: PartContext):
    if cfg.algo.tis_cap is None or cfg.algo.is_correction not in (None, "tis"):
        return None  # the other corrections are parts of their own (rlvr.train.mismatch)
    return TruncatedImportanceSampling(cfg.algo.tis_cap)


class TruncatedImportanceSampling(StepPart):
    """Decoupled TIS (Yao et al., 2025, "Your Efficient RL Framework Secretly Brings You Off-Policy RL Training"):
    the PPO ratio is taken against the trainer's own old log-probs, and each token's loss is weighted by
    min(pi_old_trainer / pi_rollout, C), a stop-gradient correction for the engine's different probabilities.
    The gradient is then min(rho, C) * A * grad(logp) at the old policy, never rho twice."""

    needs = frozenset({"old_logp"})

    def __init__(self, cap: float):
        self.cap = cap

    def token_weights(self, exp, rows, out):
        return offpolicy.tis_weights(exp.old_logp[rows], exp.batch.logprobs[rows], exp.batch.loss_mask[rows], cap=self.cap)


@register_part("entropy_mask")
def _entropy_mask(cfg: Config, ctx: PartContext):
    return ForkingTokenMask(cfg.algo.entropy_mask_rho) if cfg.algo.entropy_mask_rho is not None else None


class ForkingTokenMask(StepPart):
    """Wang et al., 2025, "Beyond the 80/20 Rule", Sec. 4, the objective J^B_HighEnt: the policy loss of each token
    is multiplied by I[H_t >= tau_rho^B], 1 for the top-rho highest-entropy tokens of the batch B, while the
    average still divides by every valid token of B (1 / sum_i |o_i|), so the selection removes gradient and
    never rescales what is left. B is the mini-batch of each update: its tokens are selected once, from the
    entropy of all its rows under the weights about to be updated, before any micro-batch runs; the update is
    then the same for every ``train.micro_batch_size`` and every number of learner ranks.

    The authors' released code (Beyond-the-80-20-Rule-RLVR, verl/workers/actor/dp_actor.py and
    ``get_global_entropy_top_mask`` in verl/trainer/ppo/core_algos.py) selects within each micro-batch and divides
    by the selected tokens (loss_mask = response_mask * entropy_top_mask); TRL's GRPOTrainer (top_entropy_quantile)
    multiplies the per-token loss by the mask and divides by all valid tokens, as the paper's equation does and as
    this part does."""

    mini_batch_entropy = True

    def __init__(self, rho: float):
        self.rho = rho
        self.selected: torch.Tensor | None = None  # [N, T] 1 where a token of the current mini-batch is kept

    def begin_update(self, exp, rows, entropy):
        mask = exp.loss_mask[rows]
        chosen = entropy_mod.forking_token_mask(entropy, mask, self.rho)
        self.selected = torch.zeros(exp.loss_mask.shape, dtype=torch.bool, device=exp.loss_mask.device)
        self.selected[rows] = chosen != 0
        valid = int((mask != 0).sum())
        return {"forking_kept_frac": int(self.selected.sum()) / valid if valid else 0.0}

    def token_weights(self, exp, rows, out):
        return self.selected[rows].to(out.logp.dtype), {}


@register_part("entropy_bonus")
def _entropy_bonus(cfg: Config, ctx: PartContext):
    return EntropyBonus(cfg.algo.entropy_coef) if cfg.algo.entropy_coef != 0 else None


class EntropyBonus(StepPart):
    """-coef * mean token entropy added to the loss (an exploration bonus; Mnih et al., 2016, Eq. 7 for A3C)."""

    wants_entropy = True
    entropy_grad = True
    keeps_every_row = True

    def __init__(self, coef: float):
        self.coef = coef

    def loss(self, exp, rows, out, mask, agg, norm_length):
        term = losses.aggregate(out.entropy, mask, agg, norm_length)
        return -self.coef * term, {}


# parts of their own modules, registered after the ones above (build order = registration order)
from rlvr.train import (  # noqa: E402,F401
    mismatch, parts_distill, parts_exploration, parts_perception, parts_process, parts_verifier,
)
