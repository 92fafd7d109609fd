"""Process credit as step parts: PRIME's implicit process reward model, a second model trained beside the policy.

PRIME (Cui et al., 2025, "Process Reinforcement through Implicit Rewards", arXiv 2502.01456) trains a causal LM
pi_phi, initialised from the initial policy, on outcome labels alone, and reads dense token rewards off it, its
implicit process rewards r_t = beta * (log pi_phi(y_t | y_<t) - log pi_ref(y_t | y_<t)). The step runs as the
authors' verl recipe (``recipe/prime``) does with ``update: before``: ``prime_ray_trainer.py``,
``RayPRIMETrainer.compute_reward``, calls ``update_rm`` (the cross-entropy update,
``prime_core_algos.compute_ce_dpo_loss_rm``) and then ``compute_rm_score`` (a second forward with the updated
weights, ``prime_dp_rm._forward_micro_batch`` with ``prime_granularity: token``). The estimator ``prime``
(rlvr.algos.process_credit) then normalises those rewards and forms its leave-one-out advantages.
"""

from __future__ import annotations

import copy
import math
from typing import Any

import torch

from rlvr.algos import advantages
from rlvr.config import Config, ConfigError
from rlvr.train.group import SINGLE, LearnerGroup
from rlvr.train.loss_scale import clip_scaled_grad_norm
from rlvr.train.parts import PartContext, StepPart, register_part

# verl recipe/prime: the PRM optimizer's grad_clip. The first recipe config (prime_trainer.yaml at verl 15510e8)
# set 1.0, as the paper's setup does; later revisions of the yaml raised it to 10.0.
PRM_GRAD_CLIP = 1.0
SOLVED = 1.0 - 1e-9  # a reward at least this high counts as solved (acc = 1) in the PRM's labels


@register_part("implicit_prm")
def _implicit_prm(cfg: Config, ctx: PartContext):
    if not cfg.algo.implicit_prm:
        return None
    if "process_rewards" not in advantages.needs(cfg.algo.advantage):
        raise ConfigError(
            f"algo.implicit_prm=true: the implicit PRM's token rewards reach the policy through an advantage estimator "
            f"that reads process rewards, and algo.advantage={cfg.algo.advantage} does not (use algo.advantage=prime; "
            "an algo.advantage set in the config file or on the command line wins over algo.recipe's)")
    return ImplicitPRM(cfg, ctx.load_reference(), _initial_policy_copy(cfg, ctx), ctx.group)


def _initial_policy_copy(cfg: Config, ctx: PartContext) -> torch.nn.Module:
    """A trainable copy of the initial policy: the reference's weights (the initial policy, also on resume), or
    with LoRA, whose reference is the policy with its adapter off, the base model loaded afresh."""
    from rlvr.models import load_model
    from rlvr.models.lora import AdapterDisabled

    reference = ctx.load_reference()
    if isinstance(reference, AdapterDisabled):
        model = load_model(cfg.model.path, dtype=cfg.model.dtype, device=cfg.model.device)[0]
    else:
        model = copy.deepcopy(reference)
    return model.requires_grad_(True).train()


def acc_labels(rewards: torch.Tensor) -> torch.Tensor:
    """The PRM's outcome labels: 1.0 where a response's reward is at least 1 - 1e-9 (solved), else 0.0. These are
    the rewards the advantage estimator sees (``exp.rewards``: the verifier's score, or the composed reward where
    ``reward.terms`` are set); the recipe's ``acc`` is the verifier's 0/1 score."""
    return (rewards >= SOLVED).to(torch.float32)


def all_but_last_token(response_mask: torch.Tensor) -> torch.Tensor:
    """Float [N, T]: 1 on every response token except each response's last (the recipe's ``token`` granularity,
    ``token_level_score[i, : max_positions[i] - 1]``; the last token carries the outcome)."""
    mask = response_mask.to(torch.float32)
    length = mask.sum(-1).long()
    last = (length - 1).clamp(min=0)
    out = mask.clone()
    rows = torch.arange(mask.shape[0], device=mask.device)
    out[rows[length > 0], last[length > 0]] = 0.0
    return out


class ImplicitPRM(StepPart):
    """PRIME's implicit PRM pi_phi: its own copy of the initial policy and its own AdamW (``algo.prm_lr``, default
    train.lr; gradient norm clipped at 1.0), trained once per step on the rollout batch before the policy's
    advantages are formed. In ``shape``:

    1. the PRM's log-probs of the batch, with gradient, give the CE loss of the recipe
       (``compute_ce_dpo_loss_rm``: BCE(sigmoid(beta * sum_t q_t), acc), q = log pi_phi - log pi_ref summed over
       the whole response); one optimizer step per ``algo.mini_batches`` part of the batch, rows in order, as
       ``update_rm`` splits the batch by the actor's mini-batch size. ``prm/pairwise_acc`` is the recipe's
       ``dpo_acc_before`` (``compute_dpo_accuracy`` on the token rewards of these forwards, before the step);
    2. a second forward with the updated PRM gives r = beta * (log pi_phi - log pi_ref) on every response token
       but the last: ``exp.process_rewards`` (raw: the estimator normalises them) with ``exp.step_end`` = the
       response mask (every token is a step). Step rewards from ``reward.process`` are replaced (a collection
       stage may have used them already).

    Log-probs are taken at ``rollout.temperature``, as the reference's are (the recipe samples and scores at 1).
    With several learner ranks (``cluster.learners``, ddp or fsdp2) every rank holds the whole PRM and its
    optimizer, as a separate critic does: each rank runs the forward and backward passes of its shard of every
    mini-batch, the gradients are summed across ranks, and every rank takes the same step, the one a single
    process takes.
    """

    needs = frozenset({"ref_logp"})

    def __init__(self, cfg: Config, reference: torch.nn.Module, model: torch.nn.Module,
                 group: LearnerGroup = SINGLE):
        self.cfg, self.beta, self.group = cfg, cfg.algo.prm_beta, group
        self.reference = reference  # the run's frozen initial policy: its log-probs are exp.ref_logp
        self.model = model
        self.params = [p for p in model.parameters() if p.requires_grad]
        from rlvr.train.master_weights import adamw

        self.optimizer = adamw(self.params, lr=cfg.algo.prm_lr or cfg.train.lr, weight_decay=cfg.train.weight_decay)

    def shape(self, exp) -> dict[str, float]:
        from rlvr.algos import process_credit

        metrics = self.update(exp)
        logp = self.logprobs(exp)
        rewarded = all_but_last_token(exp.batch.response_mask)
        r = process_credit.implicit_token_rewards(logp, exp.ref_logp, exp.batch.response_mask, self.beta) * rewarded
        exp.process_rewards = r.to(torch.float32)
        exp.step_end = exp.batch.response_mask.bool()
        metrics["prm/token_reward_mean"] = float(r.sum() / rewarded.sum().clamp(min=1))
        return metrics

    def update(self, exp) -> dict[str, float]:
        """The CE update on ``exp`` (one optimizer step per mini-batch); returns the loss, gradient norm and the
        pairwise accuracy of the scores the update started from."""
        from rlvr.algos import process_credit
        from rlvr.train.learner import micro_batches, rows_forward, updates_per_batch

        batch, cfg, group = exp.batch, self.cfg, self.group
        acc = acc_labels(exp.rewards)
        rewarded = all_but_last_token(batch.response_mask)
        scores = torch.zeros(batch.size, dtype=torch.float64)  # each response's summed token rewards (this rank's rows)
        losses, norms = [], []
        self.model.train()
        _, parts = updates_per_batch(cfg, batch.size)
        for mini in torch.tensor_split(torch.arange(batch.size, device=acc.device), parts):
            if not mini.numel():
                continue
            self.optimizer.zero_grad(set_to_none=True)
            loss_sum = 0.0
            mine = group.shard(mini.tolist())
            for rows in micro_batches(batch, mine, cfg) if mine else []:
                r = torch.tensor(rows, device=acc.device)
                with torch.enable_grad():
                    logp = rows_forward(self.model, batch, r, cfg).logp
                    loss = process_credit.prm_ce_loss(logp, exp.ref_logp[r], batch.response_mask[r], acc[r], self.beta)
                    (loss * (len(rows) / len(mini))).backward()
                loss_sum += float(loss.detach()) * len(rows)
                q = logp.detach().double() - exp.ref_logp[r].double()
                scores[r.cpu()] = (self.beta * q * rewarded[r]).sum(-1).cpu()
            group.reduce_gradients(self.params)  # the sum over ranks: the gradient of the whole mini-batch
            norm = clip_scaled_grad_norm(self.params, PRM_GRAD_CLIP, 1.0)  # measured in float32 for low precision
            if math.isfinite(norm):  # a non-finite gradient is dropped: the PRM stays as it was
                self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
            losses.append(group.sum([loss_sum])[0] / len(mini))
            norms.append(norm)
        scores = torch.tensor(group.sum(scores.tolist()), dtype=torch.float64)  # each row was scored on one rank
        return {"prm/loss": sum(losses) / len(losses), "prm/grad_norm": sum(norms) / len(norms),
                "prm/pairwise_acc": float(process_credit.pairwise_accuracy(scores, acc.double().cpu(),
                                                                           batch.group_index.cpu()))}

    @torch.no_grad()
    def logprobs(self, exp) -> torch.Tensor:
        """log pi_phi of every response token of the batch [N, T] (no gradient, eval mode)."""
        from rlvr.train.learner import forward_rows

        self.model.eval()
        every = torch.arange(exp.size, device=exp.batch.response_ids.device)
        out = forward_rows(self.model, exp.batch, every, self.cfg, self.group).logp
        self.model.train()
        return out

    def state_dict(self) -> dict[str, Any]:
        return {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state:
            self.model.load_state_dict(state["model"])
            self.optimizer.load_state_dict(state["optimizer"])

    def checkpoint_folders(self) -> dict[str, Any]:
        return {"prm": self.model}
