"""Train/inference mismatch corrections as step parts (``algo.is_correction``, options in ``algo.is_options``).

The rollout engine's log-probs of the sampled tokens (``batch.logprobs``) differ from the trainer's under the same
weights (kernels, precision, a stale engine). Each correction turns the two into stop-gradient token weights on
the policy loss (rlvr.algos.offpolicy: ``seq_tis``, ``seq_mask``, ``token_mask``, ``geo_mask``, and ``tis``);
the weights are computed once per rollout batch, from the trainer's old log-probs, before the first update, and
stay fixed through the batch's epochs and mini-batches. Whatever is chosen, each step logs the token and sequence
log-ratio statistics (``mismatch/token_log_ratio_*``, ``mismatch/seq_log_ratio_*``, ``mismatch/geo_log_ratio_*``)
and what the correction did (``mismatch/masked_token_frac``, ``mismatch/masked_seq_frac`` for the masks,
``mismatch/truncated_seq_frac`` for seq_tis, ``mismatch/weight_mean`` for all).

``algo.tis_cap`` with no ``is_correction`` (or ``is_correction=tis``) keeps today's token TIS part (rlvr.train.parts);
this module then only logs the statistics. ``is_correction=tis`` without ``tis_cap`` takes its cap from
``algo.is_options.cap`` (default 2.0).
"""

from __future__ import annotations

import torch

from rlvr.algos import offpolicy
from rlvr.config import Config
from rlvr.errors import UserError
from rlvr.train.parts import PartContext, StepPart, register_part


class MismatchCorrection(StepPart):
    """The correction ``name`` with ``options``; with ``apply=False`` it only logs (another part weights)."""

    needs = frozenset({"old_logp"})

    def __init__(self, name: str, options: dict, apply: bool = True):
        self.name, self.options, self.apply = name, options, apply
        self.weights: torch.Tensor | None = None  # [N, T] of the current rollout batch

    def shape(self, exp) -> dict[str, float]:
        batch = exp.batch
        metrics = offpolicy.log_ratio_metrics(exp.old_logp, batch.logprobs, exp.loss_mask)
        if not self.apply:
            return metrics
        self.weights, own = offpolicy.correction_weights(self.name, exp.old_logp, batch.logprobs, exp.loss_mask,
                                                         **self.options)
        valid = exp.loss_mask.bool()
        metrics.update(own)
        metrics["mismatch/weight_mean"] = float(self.weights[valid].double().mean()) if valid.any() else 0.0
        return metrics

    def token_weights(self, exp, rows, out):
        if not self.apply:
            return None, {}
        return self.weights[rows].to(out.logp.dtype), {}


def correction_options(name: str, options: dict) -> dict:
    """``algo.is_options`` checked against the options ``name`` has: an unknown key or a bad value is a UserError
    naming the key and what was expected."""
    defaults = offpolicy.correction_defaults(name)
    unknown = sorted(set(options) - set(defaults))
    if unknown:
        raise UserError(f"algo.is_options: {', '.join(unknown)} is not an option of algo.is_correction={name} "
                        f"(its options: {', '.join(sorted(defaults))})")
    for key, value in options.items():
        expected_text = isinstance(defaults[key], str)
        if expected_text != isinstance(value, str) or isinstance(value, bool) or (value is None and key != "low"):
            raise UserError(f"algo.is_options.{key}={value!r}: expected "
                            f"{'one of ratio, mask' if expected_text else 'a number'}")
    probe = torch.zeros(1, 1)
    try:  # the correction's own checks (bounds, cap) on the values given, before any model loads
        offpolicy.correction_weights(name, probe, probe, torch.ones(1, 1), **options)
    except ValueError as exc:
        raise UserError(f"algo.is_options for algo.is_correction={name}: {exc}") from None
    return dict(options)


@register_part("mismatch_correction")
def _mismatch_correction(cfg: Config, ctx: PartContext):
    algo = cfg.algo
    name = algo.is_correction or ("tis" if algo.tis_cap is not None else None)
    if name is None:
        if algo.is_options:
            raise UserError("algo.is_options is set but algo.is_correction is not: set algo.is_correction to one of "
                            + ", ".join(offpolicy.correction_names()))
        return None
    options = correction_options(name, dict(algo.is_options))
    if name == "tis" and algo.tis_cap is not None:
        if "cap" in options and options["cap"] != algo.tis_cap:
            raise UserError(f"algo.is_options.cap={options['cap']} disagrees with algo.tis_cap={algo.tis_cap}; "
                            "set one of them")
        return MismatchCorrection(name, options, apply=False)  # the tis part of rlvr.train.parts weights
    return MismatchCorrection(name, options)
