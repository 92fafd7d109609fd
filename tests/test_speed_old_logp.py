"""The old policy's log-probs are taken by a forward pass of only the rows that can have a gradient: a row whose
advantages are all zero contributes exactly zero loss, so nothing reads its old log-probs, and its forward pass
is skipped. A part or estimator that reads the old log-probs before the advantages exist (while shaping) gets them
for every row, as before. The updates themselves stay equal to the spelled-out PPO computation
(tests/test_update_matches_reference.py runs multi-update cases with all-zero groups)."""

from __future__ import annotations

import copy

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


def _first_mini_batch(batch, cfg) -> list[int]:
    return learner.mini_batch_rows(batch.size, cfg.algo.mini_batches, generator=None)[0].tolist()


@pytest.mark.parametrize("zero_groups", [(), (0, 2), (1,), (0, 1, 2, 3)])
def test_old_logp_forward_only_for_rows_with_a_gradient(zero_groups, forwarded):
    """The rows of the first update take their old log-probs from that update's own forward (the weights have not
    moved and the tiny model has no dropout); one no-grad forward before it covers the other rows with a gradient."""
    model, batch, rewards, cfg = _setup(zero_groups)
    expected = _trainer_logp(model, batch)
    exp = prepare_experience(model, batch, rewards, {}, cfg, engine_logprobs_serve=True)
    assert not exp.old_from_rollout and forwarded == []  # two updates: the trainer's own, taken by learn
    metrics = learn(model, torch.optim.SGD(model.parameters(), lr=0.1), exp, {}, cfg)
    mixed = [r for r in range(batch.size) if int(batch.group_index[r]) not in zero_groups]
    first = [r for r in _first_mini_batch(batch, cfg) if r in mixed]
    rest = [r for r in mixed if r not in first]
    assert forwarded[:-1] == ([rest] if rest else []) and forwarded[-1:] == ([mixed] if mixed else [])
    m = batch.response_mask.bool()
    for r in range(batch.size):
        want = expected[r] if r in mixed else batch.logprobs[r]  # the others are never read: the engine's stay
        torch.testing.assert_close(exp.old_logp[r][m[r]], want[m[r]], rtol=1e-5, atol=1e-6)
    assert (("rollout_kl" in metrics) and metrics["rollout_kl"] < 1e-6) == bool(mixed)


def test_rows_without_gradient_still_skip_after_the_update(forwarded):
    """learn's approx_kl forward covers the same rows as the old log-probs: those it compares are always computed."""
    model, batch, rewards, cfg = _setup((0, 2))
    exp = prepare_experience(model, batch, rewards, {}, cfg, engine_logprobs_serve=True)
    metrics = learn(model, torch.optim.SGD(model.parameters(), lr=0.1), exp, {}, cfg)
    first = [r for r in _first_mini_batch(batch, cfg) if int(batch.group_index[r]) not in (0, 2)]
    assert sorted(forwarded[0] + first) == forwarded[-1] and metrics["approx_kl"] > 0


def test_a_single_update_of_a_model_without_dropout_takes_no_old_logp_forward(forwarded):
    """Without the sampler's log-probs, a single update's old log-probs are its own forward's (ratio exactly 1, no
    clipping); the update equals the one that takes them from a separate no-grad forward."""
    model, batch, rewards, cfg = _setup((1,), mini_batches=1)
    twin = copy.deepcopy(model)
    exp = prepare_experience(model, batch, rewards, {}, cfg, engine_logprobs_serve=False)
    metrics = learn(model, torch.optim.SGD(model.parameters(), lr=0.5), exp, {}, cfg)
    assert forwarded[:-1] == [] and metrics["clip_frac"] == 0.0  # the only no-grad forward is approx_kl's
    separate = prepare_experience(twin, batch, rewards, {}, cfg, engine_logprobs_serve=False)
    forwarded.clear()
    assert separate.old_logp.shape == batch.logprobs.shape  # read before learn: one forward of every row, as before
    twin_metrics = learn(twin, torch.optim.SGD(twin.parameters(), lr=0.5), separate, {}, cfg)
    assert forwarded[0] == list(range(batch.size)) and len(forwarded) == 2
    assert abs(twin_metrics["loss"] - metrics["loss"]) < 1e-6
    for (name, a), b in zip(model.named_parameters(), twin.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=name)


@pytest.mark.parametrize("where", ["module", "config"])
def test_a_model_with_dropout_takes_its_old_logp_before_the_first_update(where, forwarded):
    """Dropout makes a training-mode forward a different function: the old log-probs come from a no-grad forward
    in evaluation mode, before the first update, as before."""
    model, batch, rewards, cfg = _setup((1,))
    if where == "module":
        model.model.layers[0].mlp = torch.nn.Sequential(model.model.layers[0].mlp, torch.nn.Dropout(0.1))
    else:
        model.config.attention_dropout = 0.1
    assert not learner.computes_the_same_in_training(model)
    exp = prepare_experience(model, batch, rewards, {}, cfg, engine_logprobs_serve=True)
    mixed = [r for r in range(batch.size) if int(batch.group_index[r]) != 1]
    assert forwarded == [mixed] and "rollout_kl" in exp.metrics


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


def test_approx_kl_off_leaves_the_metric_out_and_its_forward_untaken(forwarded):
    model, batch, rewards, cfg = _setup((1,), mini_batches=1)
    cfg.train.approx_kl = False
    exp = prepare_experience(model, batch, rewards, {}, cfg, engine_logprobs_serve=False)
    metrics = learn(model, torch.optim.SGD(model.parameters(), lr=0.5), exp, {}, cfg)
    assert forwarded == [] and "approx_kl" not in metrics and metrics["updates"] == 1
