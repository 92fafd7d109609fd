"""bfloat16 parameters train with float32 master weights: the update is float32 AdamW's, small updates are not
rounded away, and the master copy resumes with the optimizer state."""

from __future__ import annotations

import copy

import pytest
import torch

from rlvr.config import config_from_dict
from rlvr.train.master_weights import MasterWeightAdamW
from rlvr.train.run import make_optimizer


def _params(seed=0, shapes=((16, 8), (8,))):
    g = torch.Generator().manual_seed(seed)
    return [torch.nn.Parameter(torch.randn(s, generator=g) * 0.02) for s in shapes]


def _grads(step, params):
    g = torch.Generator().manual_seed(100 + step)
    return [torch.randn(p.shape, generator=g) for p in params]


@pytest.mark.parametrize("weight_decay", [0.0, 0.1])
def test_master_weights_follow_float32_adamw_exactly(weight_decay):
    """Same starting weights and gradients: the master copies are torch's float32 AdamW's weights, and the bfloat16
    weights are those rounded."""
    reference = _params()
    low = [torch.nn.Parameter(p.detach().to(torch.bfloat16)) for p in reference]
    with torch.no_grad():  # start both from the same (bfloat16-representable) values
        for r, lp in zip(reference, low):
            r.copy_(lp.float())
    ours = MasterWeightAdamW(low, lr=1e-3, weight_decay=weight_decay)
    theirs = torch.optim.AdamW(reference, lr=1e-3, weight_decay=weight_decay, foreach=False)
    for step in range(5):
        # the model gives bfloat16 gradients; float32 AdamW is fed the same values
        for r, lp, g in zip(reference, low, _grads(step, reference)):
            lp.grad = g.to(torch.bfloat16)
            r.grad = lp.grad.float()
        ours.step()
        theirs.step()
    for r, lp in zip(reference, low):
        master = ours.state[lp]["master"]
        assert torch.allclose(master, r.detach(), rtol=0, atol=1e-7)
        assert torch.equal(lp.detach(), master.to(torch.bfloat16))


def test_small_updates_are_not_rounded_away():
    """At lr 1e-6 plain AdamW on bfloat16 weights leaves almost every weight where it was; with master weights the
    weights move as float32 AdamW's would (after enough steps to cross a rounding step)."""
    start = [p.detach().to(torch.bfloat16) for p in _params()]

    def train(optimizer_class):
        params = [torch.nn.Parameter(s.clone()) for s in start]
        optimizer = optimizer_class(params, lr=1e-6, weight_decay=0.0)
        for step in range(200):
            for p, g in zip(params, _grads(0, params)):  # the same direction every step
                p.grad = g.to(torch.bfloat16)
            optimizer.step()
        return sum(int((p.detach() != s).sum()) for p, s in zip(params, start)), sum(s.numel() for s in start)

    moved_plain, total = train(torch.optim.AdamW)
    moved_master, _ = train(MasterWeightAdamW)
    assert moved_plain < 0.05 * total
    assert moved_master > 0.5 * total


def test_master_weights_resume_exactly_and_notice_outside_writes():
    params = [torch.nn.Parameter(p.detach().to(torch.bfloat16)) for p in _params()]
    optimizer = MasterWeightAdamW(params, lr=1e-4, weight_decay=0.0)

    def step(opt, ps, i):
        for p, g in zip(ps, _grads(i, ps)):
            p.grad = g.to(torch.bfloat16)
        opt.step()

    for i in range(3):
        step(optimizer, params, i)
    saved_params, saved_state = [p.detach().clone() for p in params], copy.deepcopy(optimizer.state_dict())
    for i in range(3, 6):
        step(optimizer, params, i)
    resumed = [torch.nn.Parameter(p.clone()) for p in saved_params]
    again = MasterWeightAdamW(resumed, lr=1e-4, weight_decay=0.0)
    again.load_state_dict(saved_state)
    for i in range(3, 6):
        step(again, resumed, i)
    assert all(torch.equal(a, b) for a, b in zip(params, resumed))
    assert all(torch.equal(optimizer.state[a]["master"], again.state[b]["master"]) for a, b in zip(params, resumed))

    with torch.no_grad():  # a weight written from outside (a reload): the next step starts from it
        params[0].fill_(0.5)
    step(optimizer, params, 6)
    assert float((optimizer.state[params[0]]["master"] - 0.5).abs().max()) < 1e-3


@pytest.mark.parametrize("dtype, expected", [("float32", torch.optim.AdamW), ("bfloat16", MasterWeightAdamW)])
def test_the_trainer_gives_low_precision_weights_master_copies(dtype, expected):
    cfg = config_from_dict({"model": {"dtype": dtype}})
    params = [torch.nn.Parameter(torch.zeros(4, dtype=getattr(torch, dtype)))]
    assert type(make_optimizer(params, cfg)) is expected


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_a_low_precision_run_learns_at_a_small_lr_and_resumes_exactly(tiny_model_dir, tmp_path, dtype):
    """`rlvr train` with model.dtype=bfloat16 or float16 and lr 1e-5: the weights move, and a run stopped at step 2
    and resumed ends with the uninterrupted run's weights (the master copies are in the checkpoint's optimizer
    state; float16's loss scale, logged every step, in the trainer state)."""
    from safetensors.torch import load_file

    from rlvr.train import train
    from rlvr.train.metrics import read_metrics

    from conftest import one_digit_rl_config

    def run(out, steps, resume=False):
        raw = one_digit_rl_config(tiny_model_dir, out, algo={"entropy_coef": 0.1}, steps=steps, lr=1e-5, save_every=2)
        raw["model"]["dtype"] = dtype
        raw["data"]["prompts_per_step"], raw["rollout"]["group_size"] = 4, 4
        return train(config_from_dict(raw), resume=resume)

    whole = run(tmp_path / "whole", 4)
    run(tmp_path / "cut", 2)
    cut = run(tmp_path / "cut", 4, resume=True)
    a, b = (load_file(d / "checkpoint-4" / "model.safetensors") for d in (whole, cut))
    start = load_file(tiny_model_dir / "model.safetensors")
    assert all(torch.equal(a[k], b[k]) for k in a)
    moved = sum(int((a[k] != start[k].to(a[k].dtype)).sum()) for k in start if k in a)
    assert moved > 0.3 * sum(t.numel() for t in start.values())
    rows = read_metrics(whole)
    assert all(r["bad_step"] == 0 for r in rows)
    assert all(("loss_scale" in r) == (dtype == "float16") for r in rows)
    assert [r.get("loss_scale") for r in read_metrics(cut)] == [r.get("loss_scale") for r in rows]
