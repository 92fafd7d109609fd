"""EAD (exploratory annealed decoding): the per-position temperature table of spec 4.9 (float64, abs 1e-6), the
step-aware decay, the config mapping, and the hf engine sampling and logging its log-probs at tau_t."""

import math

import pytest
import torch

from rlvr.algos.offpolicy import tis_weights
from rlvr.errors import UserError
from rlvr.models import encode_prompt
from rlvr.rollout import HFEngine, SamplingParams
from rlvr.rollout.temperature import TemperatureSchedule, ead_temperature, step_decay

SPEC_TAUS = [1, 1, 0.978597, 0.850141, 0.708175, 0.551279, 0.377881, 0.186247, 0.1, 0.1, 0.1, 0.1]
# the spec's illustration, with the paper's formula as printed (length_scale 1)
SPEC = TemperatureSchedule(start=2, tau_max=1.2, tau_min=0.1, decay=10, length_scale=1)


@pytest.mark.parametrize("t, expected", list(enumerate(SPEC_TAUS)))
def test_spec_temperature_table(t, expected):
    assert ead_temperature(t, start=2, tau_max=1.2, tau_min=0.1, decay=10) == pytest.approx(expected, abs=1e-6)
    assert SPEC.tau(t) == pytest.approx(expected, abs=1e-6)


@pytest.mark.parametrize("d0, step, expected", [(25, 0, 25), (25, 10, 75), (10, 3, 25), (25, 10**6, 40000),
                                                (39990, 1, 39995), (39990, 3, 40000), (25, -4, 25)])
def test_step_aware_decay(d0, step, expected):
    assert step_decay(d0, step) == expected


def test_schedule_at_a_step_uses_the_authors_length_scale():
    schedule = TemperatureSchedule.from_config({"start": 10, "tau_max": 1.2, "tau_min": 0.1, "decay": 25})
    assert schedule.effective_decay == 20 * 25
    later = schedule.at_step(100)
    assert later.effective_decay == 20 * (25 + 500) and schedule.step == 0
    t = 300
    assert later.tau(t) == pytest.approx(max(1 + 1.2 - math.exp(t / (20 * 525)), 0.1), abs=1e-12)
    assert later.tau(t) > schedule.tau(t)  # a longer decay anneals more slowly later in training
    assert later.tau(9) == 1.0 and later.tau(10) < 1.2


def test_far_positions_reach_the_floor_without_overflow():
    assert ead_temperature(10**9, start=0, tau_max=1.2, tau_min=0.1, decay=1.0) == 0.1


@pytest.mark.parametrize("raw, message", [
    ([1, 2], "expected a mapping"),
    ({"start": 1, "speed": 3}, "unknown key(s) speed"),
    ({"start": -1}, "start: expected an integer >= 0"),
    ({"start": 1.5}, "start: expected an integer"),
    ({"tau_min": 0}, "tau_min: expected a temperature > 0"),
    ({"tau_max": 0.05, "tau_min": 0.1}, "tau_max: expected a temperature >= tau_min"),
    ({"decay": 0}, "decay: expected a number > 0"),
    ({"decay": "fast"}, "decay: expected a number"),
    ({"tau_max": float("nan")}, "tau_max: expected a number"),
    ({"length_scale": -1}, "length_scale: expected a number > 0"),
])
def test_bad_schedules_name_the_key(raw, message):
    with pytest.raises(UserError, match="rollout.temperature_schedule") as err:
        TemperatureSchedule.from_config(raw)
    assert message in str(err.value)


def test_no_schedule_is_none():
    assert TemperatureSchedule.from_config(None) is None


def _logits_of_responses(model, batch):
    ids = torch.cat([batch.prompt_ids, batch.response_ids], dim=1)
    mask = torch.cat([batch.prompt_mask, batch.response_mask], dim=1)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=mask, position_ids=positions).logits.float()
    width = batch.response_ids.shape[1]
    return logits[:, -width - 1:-1, :]


@pytest.mark.parametrize("fast", [True, False])
def test_engine_logs_log_probs_at_the_annealed_temperature(tiny, fast):
    model, tokenizer = tiny
    torch.manual_seed(0)
    engine = HFEngine(model, pad_id=tokenizer.pad_token_id, eos_ids=tokenizer.eos_token_id, fast=fast)
    prompts = [encode_prompt(tokenizer, p) for p in ("1+2=", "10+25=", "abc")]
    batch = engine.generate(prompts, SamplingParams(n=2, max_new_tokens=12, temperature_schedule=SPEC))
    width = batch.response_ids.shape[1]
    assert width >= 9, "the responses must reach the annealed positions"
    logits = _logits_of_responses(model, batch)
    taus = torch.tensor(SPEC.taus(width)).view(1, -1, 1)
    log_dist = torch.log_softmax(logits / taus, dim=-1)
    expected = log_dist.gather(-1, batch.response_ids.unsqueeze(-1)).squeeze(-1)
    m = batch.response_mask.bool()
    torch.testing.assert_close(batch.logprobs[m], expected[m], atol=1e-4, rtol=1e-4)
    entropy = -(log_dist.exp() * log_dist).sum(-1)
    torch.testing.assert_close(batch.entropy[m], entropy[m], atol=1e-4, rtol=1e-4)
    # the logged log-probs are the behaviour policy's, not the tau = 1 policy's, wherever tau_t != 1
    at_one = torch.log_softmax(logits, -1).gather(-1, batch.response_ids.unsqueeze(-1)).squeeze(-1)
    annealed = m.clone()
    annealed[:, :3] = False  # tau_0, tau_1 = 1 and tau_2 = 0.98 is close to it
    assert (batch.logprobs[annealed] - at_one[annealed]).abs().min() > 1e-3


def test_tis_weights_against_the_annealed_behaviour(tiny):
    model, tokenizer = tiny
    torch.manual_seed(1)
    engine = HFEngine(model, pad_id=tokenizer.pad_token_id, eos_ids=tokenizer.eos_token_id)
    batch = engine.generate([encode_prompt(tokenizer, "7+8=")], SamplingParams(n=4, max_new_tokens=10,
                                                                                  temperature_schedule=SPEC))
    logits = _logits_of_responses(model, batch)
    old = torch.log_softmax(logits, -1).gather(-1, batch.response_ids.unsqueeze(-1)).squeeze(-1)  # target: tau = 1
    weights, _ = tis_weights(old, batch.logprobs, batch.response_mask, cap=2.0)
    m = batch.response_mask.bool()
    torch.testing.assert_close(weights[m], torch.exp(old - batch.logprobs).clamp(max=2.0)[m], atol=1e-5, rtol=1e-5)
    assert bool((weights[m] < 2.0).any()) and bool((weights[m] == 2.0).any())  # both sides of the cap occur


def test_greedy_sampling_ignores_the_schedule(tiny):
    model, tokenizer = tiny
    engine = HFEngine(model, pad_id=tokenizer.pad_token_id, eos_ids=tokenizer.eos_token_id)
    prompts = [encode_prompt(tokenizer, "3+4=")]
    plain = engine.generate(prompts, SamplingParams(max_new_tokens=8, temperature=0.0))
    annealed = engine.generate(prompts, SamplingParams(max_new_tokens=8, temperature=0.0, temperature_schedule=SPEC))
    assert torch.equal(plain.response_ids, annealed.response_ids)
    torch.testing.assert_close(plain.logprobs, annealed.logprobs)


def test_the_schedule_multiplies_the_base_temperature(tiny):
    model, tokenizer = tiny
    torch.manual_seed(2)
    engine = HFEngine(model, pad_id=tokenizer.pad_token_id, eos_ids=tokenizer.eos_token_id)
    batch = engine.generate([encode_prompt(tokenizer, "5+5=")], SamplingParams(n=2, max_new_tokens=6, temperature=0.5,
                                                                                  temperature_schedule=SPEC))
    logits = _logits_of_responses(model, batch)
    taus = 0.5 * torch.tensor(SPEC.taus(batch.response_ids.shape[1])).view(1, -1, 1)
    expected = torch.log_softmax(logits / taus, -1).gather(-1, batch.response_ids.unsqueeze(-1)).squeeze(-1)
    m = batch.response_mask.bool()
    torch.testing.assert_close(batch.logprobs[m], expected[m], atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("raw, engine, tis_cap, message", [
    (None, "vllm", None, None),
    ({"start": 2}, "hf", 2.0, None),
    ({"start": 2}, "vllm", 2.0, "not supported by rollout.engine=vllm"),
    ({"start": 2}, "hf", None, "needs algo.tis_cap"),
    ({"tau_min": -1}, "hf", 2.0, "tau_min: expected a temperature > 0"),
])
def test_config_problems(raw, engine, tis_cap, message):
    from rlvr.rollout.temperature import temperature_schedule_problem

    problem = temperature_schedule_problem(raw, engine=engine, tis_cap=tis_cap)
    assert problem is None if message is None else message in problem
