"""An update whose loss or gradient is not finite is skipped (the weights stay), and the step's logged metrics stay
finite: "loss" and "grad_norm" are the means over the updates that were applied; when every update was skipped they
are left out of the step's metrics, and "bad_step" / "skipped_updates" say what happened."""

from __future__ import annotations

import math

import pytest
import torch

from rlvr.algos import losses
from rlvr.config import config_from_dict
from rlvr.models import encode_prompt
from rlvr.models.tiny import build_tiny_model
from rlvr.rollout import SamplingParams, make_engine
from rlvr.train.learner import learn, prepare_experience

from conftest import SMALL

POISONED: set[int] = set()  # the calls of the loss below (0, 1, ...) that return NaN
CALLS = [0]


@losses.register("test_nan_on_chosen_calls", zero_at_zero_advantage=True)
def _nan_on_chosen_calls(logp, old_logp, advantages, response_mask, **kw):
    per_token, metrics = losses.ppo(logp, old_logp, advantages, response_mask, **kw)
    call, CALLS[0] = CALLS[0], CALLS[0] + 1
    return (per_token * float("nan") if call in POISONED else per_token), metrics


def _run(poisoned: set[int], mini_batches: int = 3):
    POISONED.clear()
    POISONED.update(poisoned)
    CALLS[0] = 0
    model, tokenizer = build_tiny_model(SMALL, seed=3)
    torch.manual_seed(0)
    prompts = [encode_prompt(tokenizer, p) for p in ("1+2=", "3+4=", "5+1=")]
    batch = make_engine("hf", model, tokenizer).generate(prompts, SamplingParams(n=4, max_new_tokens=5, temperature=1.0))
    rewards = torch.tensor([float(i % 2) for i in range(batch.size)])
    cfg = config_from_dict({
        "model": {"path": "unused"}, "data": {"train": "arithmetic:train"},
        "algo": {"loss": "test_nan_on_chosen_calls", "mini_batches": mini_batches, "shuffle_mini_batches": False},
        "train": {"max_grad_norm": 1.0},
    })
    applied = []
    exp = prepare_experience(model, batch, rewards, {}, cfg, engine_logprobs_serve=True)
    before = [p.detach().clone() for p in model.parameters()]
    metrics = learn(model, torch.optim.SGD(model.parameters(), lr=0.1), exp, {}, cfg,
                    on_update=lambda _, m: applied.append(dict(m)))
    moved = any(not torch.equal(a, p) for a, p in zip(before, model.parameters()))
    return metrics, applied, moved


@pytest.mark.parametrize("poisoned", [{0}, {1}, {0, 2}])
def test_logged_loss_and_grad_norm_are_means_over_the_applied_updates(poisoned):
    metrics, applied, moved = _run(poisoned)
    assert moved and metrics["updates"] == len(applied) == 3 - len(poisoned)
    assert metrics["bad_step"] == 1 and metrics["skipped_updates"] == len(poisoned)
    for key in ("loss", "grad_norm"):
        assert math.isfinite(metrics[key])
        assert metrics[key] == pytest.approx(sum(m[key] for m in applied) / len(applied), rel=1e-12)
    assert all(math.isfinite(v) for v in metrics.values())


def test_every_update_skipped_leaves_loss_and_grad_norm_out():
    metrics, applied, moved = _run({0, 1, 2})
    assert not moved and applied == [] and metrics["updates"] == 0
    assert metrics["bad_step"] == 1 and metrics["skipped_updates"] == 3
    assert "loss" not in metrics and "grad_norm" not in metrics
    assert all(math.isfinite(v) for v in metrics.values())


def test_no_skipped_update():
    metrics, applied, moved = _run(set())
    assert moved and metrics["updates"] == 3 and metrics["bad_step"] == 0 and metrics["skipped_updates"] == 0
    assert metrics["loss"] == pytest.approx(sum(m["loss"] for m in applied) / 3, rel=1e-12)
