"""The old policy's log-probs are taken by a forward pass of only the rows that can have a gradient: a row whose
advantages are all zero contributes exactly zero loss, so nothing reads its old log-probs, and its forward pass
is skipped. A part or estimator that reads the old log-probs before the advantages exist (while shaping) gets them
for every row, as before. The updates themselves stay equal to the spelled-out PPO computation
(tests/test_update_matches_reference.py runs multi-update cases with all-zero groups)."""

from __future__ import annotations

import pytest
import torch

from rlvr.config import config_from_dict
from rlvr.models import encode_prompt
from rlvr.models.tiny import build_tiny_model
from rlvr.rollout import SamplingParams, make_engine
from rlvr.train import learner
from rlvr.train.learner import learn, prepare_experience
from rlvr.train.parts import StepPart
from rlvr.train.policy import policy_forward

from conftest import SMALL

TEMPERATURE = 0.7


def _setup(zero_groups, mini_batches=2):
    model, tokenizer = build_tiny_model(SMALL, seed=5)
    torch.manual_seed(0)
    engine = make_engine("hf", model, tokenizer)
    prompts = [encode_prompt(tokenizer, p) for p in ("1+2=", "3+4=", "5+1=", "2+2=")]
    batch = engine.generate(prompts, SamplingParams(n=4, max_new_tokens=6, temperature=TEMPERATURE))
    rewards = torch.tensor([float(i % 2) for i in range(batch.size)])
    for g in zero_groups:
        rewards[batch.group_index == g] = 1.0
    cfg = config_from_dict({
        "model": {"path": "unused"}, "data": {"train": "arithmetic:train"}, "rollout": {"temperature": TEMPERATURE},
        "algo": {"loss": "ppo", "kl_coef": 0.0, "mini_batches": mini_batches},
    })
    return model, batch, rewards, cfg


def _trainer_logp(model, batch):
    model.eval()
    with torch.no_grad():
        out = policy_forward(model, batch.prompt_ids, batch.prompt_mask, batch.response_ids, batch.response_mask,
                             temperature=TEMPERATURE)
    model.train()
    return out.logp


@pytest.fixture
def forwarded(monkeypatch):
    """The rows of every no-grad forward the learner takes, in call order."""
    calls: list[list[int]] = []
    original = learner.forward_rows

    def spy(model, batch, rows, cfg, *args, **kwargs):
        calls.append(rows.tolist())
        return original(model, batch, rows, cfg, *args, **kwargs)

    monkeypatch.setattr(learner, "forward_rows", spy)
    return calls


@pytest.mark.parametrize("zero_groups", [(), (0, 2), (1,), (0, 1, 2, 3)])
def test_old_logp_forward_only_for_rows_with_a_gradient(zero_groups, forwarded):
    model, batch, rewards, cfg = _setup(zero_groups)
    exp = prepare_experience(model, batch, rewards, {}, cfg, engine_logprobs_serve=True)
    assert not exp.old_from_rollout  # two updates: the trainer's own old log-probs
    mixed = [r for r in range(batch.size) if int(batch.group_index[r]) not in zero_groups]
    assert forwarded == ([mixed] if mixed else [])  # one forward, of exactly the rows that can have a gradient
    expected = _trainer_logp(model, batch)
    m = batch.response_mask.bool()
    for r in range(batch.size):
        want = expected[r] if r in mixed else batch.logprobs[r]  # the others are never read: the engine's stay
        torch.testing.assert_close(exp.old_logp[r][m[r]], want[m[r]], rtol=1e-5, atol=1e-6)
    assert ("rollout_kl" in exp.metrics) and exp.metrics["rollout_kl"] < 1e-6


def test_rows_without_gradient_still_skip_after_the_update(forwarded):
    """learn's approx_kl forward covers the same rows as the old log-probs: those it compares are always computed."""
    model, batch, rewards, cfg = _setup((0, 2))
    exp = prepare_experience(model, batch, rewards, {}, cfg, engine_logprobs_serve=True)
    metrics = learn(model, torch.optim.SGD(model.parameters(), lr=0.1), exp, {}, cfg)
    assert forwarded[0] == forwarded[-1] and metrics["approx_kl"] > 0


class _ReadsOldWhileShaping(StepPart):
    """Reads the old log-probs in ``shape`` without declaring it (as a reward-placed KL penalty does)."""

    def __init__(self):
        self.seen: torch.Tensor | None = None

    def shape(self, exp):
        self.seen = exp.old_logp.clone()
        return {}


def test_a_part_reading_old_logp_while_shaping_gets_every_row(forwarded):
    model, batch, rewards, cfg = _setup((0, 2))
    part = _ReadsOldWhileShaping()
    exp = prepare_experience(model, batch, rewards, {"reads": part}, cfg, engine_logprobs_serve=True)
    assert forwarded == [list(range(batch.size))]  # computed once, for every row, when the part read it
    m = batch.response_mask.bool()
    torch.testing.assert_close(part.seen[m], _trainer_logp(model, batch)[m], rtol=1e-5, atol=1e-6)
    assert torch.equal(exp.old_logp, part.seen)


def test_single_update_takes_no_old_logp_forward(forwarded):
    model, batch, rewards, cfg = _setup((), mini_batches=1)
    exp = prepare_experience(model, batch, rewards, {}, cfg, engine_logprobs_serve=True)
    assert exp.old_from_rollout and forwarded == [] and exp.old_logp is batch.logprobs


def test_updates_without_trained_rows_step_adam_on_zeros_allocated_once(monkeypatch):
    """Every advantage zero: each of the 4 updates is an AdamW step on a zero gradient (weight decay and momentum still
    move the weights), exactly as 4 steps on fresh zero gradients; the zeros are allocated once, not per update."""
    model, batch, rewards, cfg = _setup((0, 1, 2, 3), mini_batches=4)
    reference = {n: p.detach().clone().requires_grad_(True) for n, p in model.named_parameters()}
    with torch.no_grad():  # momentum from an earlier step, so that zero-gradient steps move the weights
        for p in list(model.parameters()) + list(reference.values()):
            p.grad = torch.full_like(p, 0.01)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01, weight_decay=0.1)
    expected_opt = torch.optim.AdamW(list(reference.values()), lr=0.01, weight_decay=0.1)
    optimizer.step(), expected_opt.step()
    for _ in range(4):
        for p in reference.values():
            p.grad = torch.zeros_like(p)
        expected_opt.step()
    exp = prepare_experience(model, batch, rewards, {}, cfg, engine_logprobs_serve=True)
    allocated = []
    zeros_like = torch.zeros_like
    monkeypatch.setattr(torch, "zeros_like", lambda t, *a, **k: allocated.append(t.shape) or zeros_like(t, *a, **k))
    metrics = learn(model, optimizer, exp, {}, cfg)
    assert metrics["updates"] == 4 and metrics["rows_backpropagated"] == 0
    for name, p in model.named_parameters():
        torch.testing.assert_close(p.detach(), reference[name].detach(), rtol=0, atol=0, msg=name)
    assert len(allocated) <= len(list(model.parameters())) + 4  # once per parameter (+ a few per-update scalars)
