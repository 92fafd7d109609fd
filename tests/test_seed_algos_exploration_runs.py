"""The exploration and trust-region methods in real training runs: each trains from the config and logs its own
metrics; Lp-Reg's proxy from a real model; DCPO's per-prompt statistics survive a resume exactly."""

from __future__ import annotations

import json
import math

import pytest
import torch

from rlvr.algos import entropy_control as ec
from rlvr.config import config_from_dict
from rlvr.rollout import RolloutBatch
from rlvr.train import train
from rlvr.train.metrics import read_metrics
from rlvr.train.parts_exploration import lp_reg_options, old_policy_proxy_logprobs

from conftest import one_digit_rl_config


def _cfg(model_dir, out, steps, algo, **train_keys):
    cfg = one_digit_rl_config(model_dir, out, algo=algo, steps=steps, **train_keys)
    cfg["data"]["prompts_per_step"] = 8
    cfg["rollout"]["group_size"] = 4
    return cfg


def _run(model_dir, out, steps, algo, **train_keys):
    return read_metrics(train(config_from_dict(_cfg(model_dir, out, steps, algo, **train_keys))))


RUNS = {
    "clip_cov": ({"loss": "clip_cov", "clip_high": 0.28, "loss_options": {"cov_ratio": 0.05}}, "cov_detached_frac"),
    "kl_cov": ({"loss": "kl_cov", "loss_options": {"kl_cov_ratio": 0.05}}, "kl_cov_frac"),
    "lp_reg": ({"clip_low": 1.0, "clip_high": 9.0, "loss_options": {"lp_reg": {"neg_frac": 0.2}}},
               "lpreg/selected_frac"),
    "dcpo": ({"loss": "dcpo", "advantage": "dcpo_sas", "clip_low": 0.16, "clip_high": 0.2, "dual_clip": 10.0},
             "clip_high_mean"),
    "sapo": ({"loss": "sapo"}, "gate_weight"),
    "ace": ({"advantage": "ace", "advantage_options": {"alpha": 0.5}}, "loss"),
}


@pytest.mark.parametrize("name", sorted(RUNS))
def test_method_trains_and_logs_its_metrics(warm_model_dir, tmp_path, name):
    algo, metric = RUNS[name]
    rows = _run(warm_model_dir, tmp_path, 2, algo, micro_batch_size=16)
    assert len(rows) == 2 and all(r["bad_step"] == 0 for r in rows)
    assert all(metric in r and math.isfinite(r[metric]) for r in rows), (name, sorted(rows[0]))
    assert any(r["updates"] == 1 for r in rows)


def test_lp_reg_selects_tokens_in_a_run(warm_model_dir, tmp_path):
    rows = _run(warm_model_dir, tmp_path, 2, RUNS["lp_reg"][0])
    assert all(0 <= r["lpreg/proxy_kept_frac"] <= 1 for r in rows)
    assert any(r["lpreg/selected_frac"] > 0 for r in rows), "with neg_frac 0.2 some tokens fall below the proxy"


def test_old_policy_proxy_matches_a_full_softmax_of_the_models_logits(warm_model_dir):
    from rlvr.models.loading import load_model

    model, _ = load_model(warm_model_dir, device="cpu")
    g = torch.Generator().manual_seed(0)
    vocab = model.config.vocab_size
    prompt = torch.randint(3, vocab, (3, 4), generator=g)
    response = torch.randint(3, vocab, (3, 5), generator=g)
    response_mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0], [1, 1, 1, 1, 0]])
    with torch.no_grad():  # the greedy token at even positions (always kept by min-p), random ones elsewhere
        for t in range(0, 5, 2):
            response[:, t] = model(input_ids=torch.cat([prompt, response], 1)).logits[:, 3 + t].argmax(-1)
    batch = RolloutBatch(prompt_ids=prompt, prompt_mask=torch.ones_like(prompt), response_ids=response,
                         response_mask=response_mask, logprobs=torch.zeros(3, 5),
                         truncated=torch.zeros(3, dtype=torch.bool), group_index=torch.tensor([0, 0, 1]))
    cfg = config_from_dict({"rollout": {"temperature": 0.7}, "train": {"micro_batch_size": 2}})
    proxy = old_policy_proxy_logprobs(model, batch, cfg, kappa=0.3)
    with torch.no_grad():
        logits = model(input_ids=torch.cat([prompt, response], 1)).logits[:, 3:-1].double() / 0.7
    p = torch.softmax(logits, -1)
    kept = p >= 0.3 * p.max(-1, keepdim=True).values
    p_token = p.gather(-1, response.unsqueeze(-1)).squeeze(-1)
    kept_token = kept.gather(-1, response.unsqueeze(-1)).squeeze(-1)
    expected = torch.where(kept_token, (p_token / (p * kept).sum(-1)).log(), torch.tensor(float("-inf"), dtype=p.dtype))
    m = response_mask.bool()
    assert torch.equal(torch.isinf(proxy[m]), torch.isinf(expected[m]))
    finite = m & torch.isfinite(expected)
    assert finite.any() and (~kept_token & m).any(), "the case has kept and filtered tokens"
    torch.testing.assert_close(proxy[finite].double(), expected[finite], atol=1e-5, rtol=0)


@pytest.mark.parametrize("spec, message", [
    ({"kapa": 0.1}, "unknown option"), ({"neg_frac": 2.0}, r"in \[0, 1\]"), (0.5, "expected a mapping"),
])
def test_lp_reg_options_are_checked(spec, message):
    with pytest.raises(ValueError, match=message):
        lp_reg_options(spec)
    assert lp_reg_options({}) == ec.LP_REG_DEFAULTS


def test_dcpo_statistics_resume_exactly(warm_model_dir, tmp_path):
    """Three prompts, eight per step: every prompt comes back every step, so its running statistics shape every
    advantage after the first step and a resume that lost them would train differently."""
    tasks = tmp_path / "three.jsonl"
    tasks.write_text("".join(json.dumps({"prompt": f"{a}+{b}=", "reference": str(a + b)}) + "\n"
                             for a, b in ((1, 2), (3, 4), (2, 2))))
    algo = RUNS["dcpo"][0]

    def cfg(out, steps):
        c = _cfg(warm_model_dir, tmp_path / out, steps, algo, save_every=2)
        c["data"]["train"] = str(tasks)
        return config_from_dict(c)

    full = read_metrics(train(cfg("full", 4)))
    train(cfg("cut", 2))
    resumed = read_metrics(train(cfg("cut", 4), resume=True))
    for a, b in zip(full, resumed):
        for key in ("loss", "reward_mean", "clip_frac"):
            assert a[key] == pytest.approx(b[key], rel=1e-5, abs=1e-7), (a["step"], key)
    a = torch.load(tmp_path / "full" / "checkpoint-4" / "trainer_state.pt", weights_only=False)
    b = torch.load(tmp_path / "cut" / "checkpoint-4" / "trainer_state.pt", weights_only=False)
    stats = a["parts"]["estimator_inputs"]["step_state"]["dcpo_sas"]
    assert stats and stats == b["parts"]["estimator_inputs"]["step_state"]["dcpo_sas"]
    assert sorted(n for n, _, _ in stats.values())[-1] >= 8, stats  # 32 groups over 3 prompts
