"""Regression tests for three numerical faults of the RL step: TIS weighting the engine mismatch twice, Dr.GRPO's
"constant" normaliser following the padded width, and equal-reward groups getting non-zero advantages in float32."""

from __future__ import annotations

import copy

import pytest
import torch

from rlvr.algos import advantages
from rlvr.config import config_from_dict
from rlvr.models import encode_prompt
from rlvr.models.tiny import build_tiny_model
from rlvr.rollout import SamplingParams, make_engine
from rlvr.rollout.base import RolloutBatch
from rlvr.train.learner import learn, prepare_experience
from rlvr.train.parts import TruncatedImportanceSampling

from conftest import SMALL

TEMPERATURE = 1.0


def _setup(seed=5, max_new_tokens=6):
    model, tokenizer = build_tiny_model(SMALL, seed=seed)
    torch.manual_seed(seed)
    prompts = [encode_prompt(tokenizer, p) for p in ("1+2=", "3+4=", "5+1=", "2+2=")]
    batch = make_engine("hf", model, tokenizer).generate(prompts, SamplingParams(n=4, max_new_tokens=max_new_tokens))
    rewards = torch.tensor([float(i % 3 == 0) for i in range(batch.size)])
    return model, batch, rewards


def _cfg(**algo):
    return config_from_dict({"model": {"path": "unused"}, "data": {"train": "arithmetic:train"},
                             "rollout": {"temperature": TEMPERATURE, "max_new_tokens": 6},
                             "algo": {"kl_coef": 0.0, **algo}, "train": {"max_grad_norm": 1e9}})


def _gradients(model, batch, rewards, cfg, parts=None):
    model = copy.deepcopy(model)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    exp = prepare_experience(model, batch, rewards, parts or {}, cfg, engine_logprobs_serve=True)
    metrics = learn(model, optimizer, exp, parts or {}, cfg)
    return {n: before[n] - p.detach() for n, p in model.named_parameters()}, metrics


def _flat(grads):
    return torch.cat([g.flatten() for g in grads.values()])


def _trainer_logp(model, batch):
    ids = torch.cat([batch.prompt_ids, batch.response_ids], 1)
    mask = torch.cat([batch.prompt_mask, batch.response_mask], 1)
    logits = model(input_ids=ids, attention_mask=mask, position_ids=(mask.cumsum(-1) - 1).clamp(min=0)).logits.float()
    p = batch.prompt_ids.shape[1]
    return torch.log_softmax(logits[:, p - 1:-1] / TEMPERATURE, -1).gather(-1, batch.response_ids.unsqueeze(-1)).squeeze(-1)


@pytest.mark.parametrize("noise", [0.3, 0.05, 0.01])
def test_tis_weights_the_engine_mismatch_once(noise):
    """Yao et al., 2025: with rollout log-probs off by noise, the gradient is min(rho, C) * A * grad(logp) at the old
    policy (rho = pi_old_trainer / pi_rollout), never min(rho, C) * rho * A * grad(logp)."""
    cap = 2.0
    model, batch, rewards = _setup()
    gen = torch.Generator().manual_seed(1)
    noisy = batch.logprobs + noise * torch.randn(batch.logprobs.shape, generator=gen) * batch.response_mask
    batch = RolloutBatch(batch.prompt_ids, batch.prompt_mask, batch.response_ids, batch.response_mask, noisy,
                         batch.truncated, batch.group_index, batch.entropy)
    cfg = _cfg(loss="ppo", agg="token-mean", tis_cap=cap)
    ours, metrics = _gradients(model, batch, rewards, cfg, {"tis": TruncatedImportanceSampling(cap)})

    adv = advantages.compute("grpo", rewards, batch.group_index, batch.response_mask)
    m = batch.response_mask.float()

    def reference(twice: bool):
        ref = copy.deepcopy(model)
        logp = _trainer_logp(ref, batch)
        old = logp.detach()
        rho = torch.exp(old - noisy)
        weight = rho.clamp(max=cap) * (rho if twice else 1.0)
        (-(weight * adv * torch.exp(logp - old) * m).sum() / m.sum()).backward()
        return {n: p.grad.clone() for n, p in ref.named_parameters()}

    decoupled, doubled = _flat(reference(False)), _flat(reference(True))
    torch.testing.assert_close(_flat(ours), decoupled, rtol=1e-4, atol=1e-6)
    assert float((_flat(ours) - doubled).norm() / doubled.norm()) > 1e-3  # the old, double-weighted form is excluded
    assert 0.0 <= metrics["tis_clip_frac"] <= 1.0 and metrics["rollout_ratio_mean"] > 0


def test_dr_grpo_normaliser_is_max_new_tokens_not_the_padded_width():
    model, batch, rewards = _setup()
    cfg = _cfg(advantage="dr_grpo", loss="ppo", agg="seq-mean-token-sum-norm")
    pad = 5

    def widen(t, value):
        return torch.nn.functional.pad(t, (0, pad), value=value)

    wide = RolloutBatch(batch.prompt_ids, batch.prompt_mask, widen(batch.response_ids, 0), widen(batch.response_mask, 0),
                        widen(batch.logprobs, 0.0), batch.truncated, batch.group_index, widen(batch.entropy, 0.0))
    narrow_grads, narrow = _gradients(model, batch, rewards, cfg)
    wide_grads, wide_metrics = _gradients(model, wide, rewards, cfg)
    torch.testing.assert_close(_flat(narrow_grads), _flat(wide_grads), rtol=1e-5, atol=1e-7)
    assert narrow["loss"] == pytest.approx(wide_metrics["loss"], abs=1e-7)
    # and the constant is rollout.max_new_tokens (6), overridable by algo.norm_length
    doubled_grads, _ = _gradients(model, batch, rewards, _cfg(advantage="dr_grpo", loss="ppo",
                                                              agg="seq-mean-token-sum-norm", norm_length=12))
    torch.testing.assert_close(_flat(doubled_grads) * 2, _flat(narrow_grads), rtol=1e-4, atol=1e-6)


GROUP_BASELINES = ["grpo", "dr_grpo", "rloo", "reinforce_pp_baseline"]


@pytest.mark.parametrize("name", GROUP_BASELINES + ["reinforce_pp"])  # plain REINFORCE++: the batch is one group
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64])
@pytest.mark.parametrize("size, value", [(8, 0.7), (16, 0.7), (3, 0.1), (5, 1 / 3), (7, -2.9)])
def test_a_group_with_equal_rewards_gets_exactly_zero(name, dtype, size, value):
    adv = advantages.compute(name, torch.full((size,), value, dtype=dtype), torch.zeros(size, dtype=torch.long),
                             torch.ones(size, 3))
    assert float(adv.abs().max()) == 0.0


@pytest.mark.parametrize("name", GROUP_BASELINES)
def test_equal_groups_stay_zero_beside_informative_ones(name):
    gen = torch.Generator().manual_seed(0)
    rewards = torch.rand(24, generator=gen)
    index = torch.arange(6).repeat_interleave(4)
    rewards[4:8] = 0.7  # group 1: all equal
    rewards[16:20] = 0.3  # group 4: all equal
    mask = (torch.rand(24, 5, generator=gen) > 0.2).float()
    mask[:, 0] = 1
    adv = advantages.compute(name, rewards, index, mask)
    for g in (1, 4):
        assert float(adv[index == g].abs().max()) == 0.0
    assert float(adv[index == 0].abs().max()) > 0


def test_mismatch_metrics_count_only_trained_positions():
    """Tool and environment tokens are attended to but were not sampled (their rollout log-prob is 0): the engine /
    trainer mismatch is measured on the loss mask only, so it stays ~0 when the engine's log-probs are exact."""
    model, batch, rewards = _setup()
    env = batch.response_mask.clone()
    env[:, 1:3] = 0  # positions 1-2 of every row stand in for an observation written by the environment
    logprobs = batch.logprobs.clone()
    logprobs[env == 0] = 0.0
    batch = RolloutBatch(**{**batch.__dict__, "logprobs": logprobs, "loss_mask": env & batch.response_mask})
    cfg = _cfg(mini_batches=2)
    exp = prepare_experience(model, batch, rewards, {}, cfg, engine_logprobs_serve=True)
    metrics = learn(model, torch.optim.SGD(model.parameters(), lr=0.0), exp, {}, cfg)  # it takes the old log-probs
    assert metrics["rollout_kl"] < 1e-5, metrics
