"""Step parts for exploration: Lp-Reg's regulariser that keeps low-probability "reasoning sparks" alive
("Low-probability Tokens Sustain Exploration in Reinforcement Learning with Verifiable Reward", arXiv 2510.03222;
the math in rlvr.algos.entropy_control).

Switched on by ``algo.loss_options.lp_reg`` (a mapping of its options, {} for the defaults):
``kappa`` (min-p threshold of the proxy, 0.02), ``neg_frac`` (share of the negative-advantage tokens with the lowest
log-prob considered, 0.01), ``pos_frac`` (the same on the positive side, 0 = off) and ``coef`` (beta, 1.0).
"""

from __future__ import annotations

from typing import Any, Mapping

import torch

from rlvr.algos import entropy_control as ec
from rlvr.algos import losses
from rlvr.config import Config
from rlvr.models.multimodal import model_positions, placeholder_ids, suppress_placeholders
from rlvr.train.parts import PartContext, StepPart, register_part

# exp.loss_inputs key: [N, T] log-prob of each sampled token under the old policy's min-p proxy
PROXY_INPUT = "minp_proxy_logp"


def lp_reg_options(spec: Any) -> dict[str, float]:
    """The part's options from ``algo.loss_options.lp_reg``; unknown keys and out-of-range values are errors."""
    if spec is True:
        spec = {}
    if not isinstance(spec, Mapping):
        raise ValueError(f"algo.loss_options.lp_reg: expected a mapping of options "
                         f"({', '.join(ec.LP_REG_DEFAULTS)}) or {{}} for the defaults, got {spec!r}")
    unknown = set(spec) - set(ec.LP_REG_DEFAULTS)
    if unknown:
        raise ValueError(f"algo.loss_options.lp_reg: unknown option(s) {', '.join(sorted(map(str, unknown)))}; "
                         f"known: {', '.join(ec.LP_REG_DEFAULTS)}")
    options = {**ec.LP_REG_DEFAULTS, **{k: float(v) for k, v in spec.items()}}
    for key in ("kappa", "neg_frac", "pos_frac"):
        if not 0.0 <= options[key] <= 1.0:
            raise ValueError(f"algo.loss_options.lp_reg.{key}: expected a number in [0, 1], got {options[key]}")
    return options


@torch.no_grad()
def old_policy_proxy_logprobs(model, batch, cfg: Config, kappa: float) -> torch.Tensor:
    """[N, T] log pi_proxy of each sampled response token, the proxy being the min-p filtered old policy at the
    sampling temperature, in the context the rows were sampled in (``behaviour_prompt_ids`` where set).
    One no-grad forward pass over the batch, ``train.micro_batch_size`` rows at a time."""
    prompt_ids = batch.behaviour_prompt_ids if batch.behaviour_prompt_ids is not None else batch.prompt_ids
    prompt_mask = batch.behaviour_prompt_mask if batch.behaviour_prompt_ids is not None else batch.prompt_mask
    micro = cfg.train.micro_batch_size or batch.size
    width = batch.response_ids.shape[1]
    temperature = cfg.rollout.temperature
    was_training = model.training
    model.eval()
    pieces = []
    every = torch.arange(batch.size, device=batch.response_ids.device)
    for i in range(0, batch.size, micro):
        rows = slice(i, i + micro)
        input_ids = torch.cat([prompt_ids[rows], batch.response_ids[rows]], dim=1)
        attention = torch.cat([prompt_mask[rows], batch.response_mask[rows].to(prompt_mask.dtype)], dim=1)
        images = batch.image_inputs(every[rows])
        logits = model(input_ids=input_ids, attention_mask=attention, logits_to_keep=width + 1,
                       position_ids=model_positions(model, input_ids, attention, images), **images).logits
        logits = suppress_placeholders(logits[:, :-1, :].float(), placeholder_ids(model))
        if temperature not in (0.0, 1.0):
            logits = logits / temperature
        pieces.append(ec.minp_proxy_logprobs(logits, batch.response_ids[rows], kappa))
    model.train(was_training)
    return torch.cat(pieces) if pieces else batch.logprobs[:0]


@register_part("lp_reg")
def _lp_reg(cfg: Config, ctx: PartContext):
    spec = cfg.algo.loss_options.get("lp_reg")
    return LpReg(lp_reg_options(spec), ctx.model, cfg) if spec is not None else None


class LpReg(StepPart):
    """Lp-Reg (arXiv 2510.03222; CarlanLark/Lp-Reg-dev ``compute_policy_loss_lp_reg`` with
    ``minp_old_log_prob=True``): the proxy log-probs come from the old policy once per batch (``shape``); in each
    micro-batch, among the negative-advantage tokens the ``neg_frac`` with the lowest current log-prob whose
    log-prob fell below the proxy's get coef * KL(pi_proxy || pi_theta) (k3 on the sampled token) added to their
    loss (``loss``), aggregated like the policy loss. The released code also drops PPO's clipping on those tokens;
    here they keep the policy loss's clipping, which is the same within the recipe's clip range (0, 10).
    metrics: lpreg/selected_frac (share of valid tokens regularised), lpreg/penalty (the aggregated term),
    lpreg/proxy_kept_frac (share of valid tokens min-p keeps).

    The proxy takes a no-grad forward pass of its own (``old_policy_proxy_logprobs``); it declares no "old_logp"
    need, so where the engine's log-probs serve as the old policy's no second pass runs for them."""

    def __init__(self, options: dict[str, float], model: torch.nn.Module, cfg: Config):
        self.options, self.model, self.cfg = options, model, cfg

    def shape(self, exp) -> dict[str, float]:
        proxy = old_policy_proxy_logprobs(self.model, exp.batch, self.cfg, self.options["kappa"])
        exp.loss_inputs[PROXY_INPUT] = proxy
        m = exp.loss_mask.to(torch.bool)
        kept = torch.isfinite(proxy) & m
        return {"lpreg/proxy_kept_frac": float(kept.sum()) / max(int(m.sum()), 1)}

    def loss(self, exp, rows, out, mask, agg, norm_length):
        proxy = exp.loss_inputs[PROXY_INPUT][rows]
        selected = ec.lp_reg_selection(out.logp, proxy, exp.advantages[rows], mask,
                                       neg_frac=self.options["neg_frac"], pos_frac=self.options["pos_frac"])
        penalty = ec.lp_reg_penalty(out.logp, proxy, selected, self.options["coef"])
        term = losses.aggregate(penalty, mask, agg, norm_length)
        valid = int((mask != 0).sum())
        return term, {"lpreg/selected_frac": int(selected.sum()) / valid if valid else 0.0,
                      "lpreg/penalty": term.item()}
