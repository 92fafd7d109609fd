"""The optional parts of the step, each pinned in a real run: a separate critic with warm-up, the learning-rate
schedules, the adaptive KL controller, the periodic reference reset, and resume with part state."""

from __future__ import annotations

import math

import pytest
import torch

from rlvr.config import config_from_dict
from rlvr.train import train
from rlvr.train.metrics import read_metrics
from rlvr.train.run import lr_factor

from conftest import one_digit_rl_config


def _run(model_dir, out, steps, algo, **train_keys):
    cfg = one_digit_rl_config(model_dir, out, algo=algo, steps=steps, **train_keys)
    cfg["data"]["prompts_per_step"] = 8
    cfg["rollout"]["group_size"] = 4
    return read_metrics(train(config_from_dict(cfg)))


def test_separate_critic_trains_alone_during_its_warm_up(warm_model_dir, tmp_path):
    rows = _run(warm_model_dir, tmp_path, 3, {"recipe": "ppo", "critic": "model", "critic_warmup_steps": 2,
                                              "critic_lr": 1e-3, "ppo_epochs": 1, "mini_batches": 2})
    assert [r["updates"] for r in rows] == [0, 0, 2]  # the policy is frozen for two steps, then takes its 2 updates
    assert all(r["vf_loss"] > 0 and math.isfinite(r["critic_grad_norm"]) for r in rows)
    assert rows[2]["vf_loss"] < rows[0]["vf_loss"]  # the critic learned the returns of this task family


def test_a_float16_separate_critic_steps_on_its_true_gradients(warm_model_dir, tmp_path):
    """In float16 the critic's loss term is scaled with the policy's (rlvr.train.loss_scale): the critic measures,
    clips and steps on its gradient with the scale divided out, as in float32."""
    norms = {}
    for dtype in ("float32", "float16"):
        cfg = one_digit_rl_config(warm_model_dir, tmp_path / dtype, steps=2,
                                  algo={"recipe": "ppo", "critic": "model", "critic_warmup_steps": 1, "critic_lr": 1e-3})
        cfg["data"]["prompts_per_step"], cfg["rollout"]["group_size"] = 8, 4
        cfg["model"]["dtype"] = dtype
        rows = read_metrics(train(config_from_dict(cfg)))
        assert all(math.isfinite(r["vf_loss"]) and r["bad_step"] == 0 for r in rows)
        norms[dtype] = rows[0]["critic_grad_norm"]
    # the two runs sample different batches (float16 logits), so the norms agree in size, not in digits; a scale
    # left in would make float16's 2**16 times larger (or an overflow)
    assert 0.5 < norms["float16"] / norms["float32"] < 2


@pytest.mark.parametrize("schedule, warmup, expected", [
    ("constant", 0, [1.0, 1.0, 1.0, 1.0]),
    ("constant", 2, [0.5, 1.0, 1.0, 1.0]),
    ("linear", 0, [1.0, 0.75, 0.5, 0.25]),
    ("cosine", 0, [1.0, (1 + math.cos(math.pi / 4)) / 2, 0.5, (1 + math.cos(3 * math.pi / 4)) / 2]),
    ("linear", 2, [0.5, 1.0, 1.0, 0.5]),
])
def test_learning_rate_schedules(schedule, warmup, expected):
    cfg = config_from_dict({"train": {"steps": 4, "lr_schedule": schedule, "warmup_steps": warmup}})
    assert [lr_factor(s, cfg) for s in range(4)] == pytest.approx(expected)


def test_cosine_ends_at_its_floor():
    cfg = config_from_dict({"train": {"steps": 10, "lr_schedule": "cosine", "lr_min_ratio": 0.1}})
    assert lr_factor(10, cfg) == pytest.approx(0.1)


def test_logged_lr_follows_the_schedule(tiny_model_dir, tmp_path):
    rows = _run(tiny_model_dir, tmp_path, 4, {}, lr_schedule="linear")
    assert [r["lr"] for r in rows] == pytest.approx([1e-3 * f for f in (0.75, 0.5, 0.25, 0.0)])


def test_adaptive_kl_moves_the_coefficient_toward_its_target(warm_model_dir, tmp_path):
    """Ziegler et al. (2019): KL far below the target lowers beta by the clipped error x samples / horizon."""
    rows = _run(warm_model_dir, tmp_path, 3, {"kl_coef": 0.1, "kl_target": 10.0, "kl_horizon": 64})
    coefs = [r["kl_coef"] for r in rows]
    # each step: e = clip(kl/10 - 1, -0.2, 0.2) = -0.2 (kl is tiny), beta *= 1 - 0.2 * 32 / 64
    assert coefs == pytest.approx([0.1 * 0.9 ** k for k in (1, 2, 3)])


def test_reference_reset_makes_the_next_kl_zero(warm_model_dir, tmp_path):
    """With the reference reset to the policy after every step, the single update of the next step starts at
    the reference, so the KL in its loss is exactly 0; without resets it grows from 0."""
    reset = _run(warm_model_dir, tmp_path / "a", 3, {"kl_coef": 0.1, "ref_update_every": 1})
    kept = _run(warm_model_dir, tmp_path / "b", 3, {"kl_coef": 0.1})
    assert [r["kl"] for r in reset[1:]] == [0.0, 0.0]
    assert kept[2]["kl"] > 0


def test_resume_restores_part_state(warm_model_dir, tmp_path):
    """Adaptive KL coefficient, reference resets and the critic resume exactly."""
    algo = {"recipe": "ppo", "critic": "model", "kl_target": 10.0, "kl_horizon": 64, "ref_update_every": 2,
            "ppo_epochs": 1, "mini_batches": 2}
    full = _run(warm_model_dir, tmp_path / "full", 4, algo, save_every=2)
    _run(warm_model_dir, tmp_path / "cut", 2, algo, save_every=2)
    cfg = one_digit_rl_config(warm_model_dir, tmp_path / "cut", algo=algo, steps=4, save_every=2)
    cfg["data"]["prompts_per_step"] = 8
    cfg["rollout"]["group_size"] = 4
    resumed = read_metrics(train(config_from_dict(cfg), resume=True))
    for a, b in zip(full, resumed):
        for key in ("kl_coef", "vf_loss", "loss", "reward_mean"):
            assert a[key] == pytest.approx(b[key], rel=1e-5, abs=1e-7), (a["step"], key)
    a = torch.load(tmp_path / "full" / "checkpoint-4" / "trainer_state.pt", weights_only=False)
    b = torch.load(tmp_path / "cut" / "checkpoint-4" / "trainer_state.pt", weights_only=False)
    for name, tensor in a["parts"]["critic"]["model"].items():
        assert torch.equal(tensor, b["parts"]["critic"]["model"][name]), name
