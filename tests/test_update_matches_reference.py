"""The speedups of one RL step change nothing it computes: the loss and gradients of ``policy_update`` (which
reuses the sampling log-probs as the old log-probs, skips rows whose advantages are all zero, takes the
logged entropy from the sampler, and splits micro-batches) equal a straightforward computation on the same
batch: one plain forward of every row through the Hugging Face model, PPO's clipped surrogate per token
(Schulman et al., 2017, Eq. 7) and a token mean."""

from __future__ import annotations

import copy

import pytest
import torch

from rlvr.algos import advantages
from rlvr.config import config_from_dict
from rlvr.models import encode_prompt
from rlvr.models.tiny import build_tiny_model
from rlvr.rollout import SamplingParams, make_engine
from rlvr.train.loop import policy_update

from conftest import SMALL


def _batch(model, tokenizer, temperature):
    torch.manual_seed(0)
    engine = make_engine("hf", model, tokenizer)
    prompts = [encode_prompt(tokenizer, p) for p in ("1+2=", "3+4=", "5+1=", "2+2=")]
    return engine.generate(prompts, SamplingParams(n=4, max_new_tokens=6, temperature=temperature))


def _reference_loss(model, batch, adv, temperature, clip):
    """Everything spelled out: full sequences, full logits, log-softmax, gather, clipped surrogate, token mean."""
    ids = torch.cat([batch.prompt_ids, batch.response_ids], 1)
    mask = torch.cat([batch.prompt_mask, batch.response_mask], 1)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    logits = model(input_ids=ids, attention_mask=mask, position_ids=positions).logits.float() / temperature
    p = batch.prompt_ids.shape[1]
    predicting = logits[:, p - 1:-1, :]  # position t predicts token t + 1
    logp = torch.log_softmax(predicting, -1).gather(-1, batch.response_ids.unsqueeze(-1)).squeeze(-1)
    ratio = torch.exp(logp - batch.logprobs)
    per_token = -torch.minimum(adv * ratio, adv * ratio.clamp(1 - clip, 1 + clip))
    m = batch.response_mask.float()
    return (per_token * m).sum() / m.sum()


def _our_gradients(model, batch, adv, cfg):
    """Gradients and metrics of policy_update, read off an SGD step with lr 1 (delta = -grad)."""
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    metrics = policy_update(model, None, None, optimizer, batch, adv, batch.response_mask, cfg)
    grads = {n: before[n] - p.detach() for n, p in model.named_parameters()}
    return grads, metrics


@pytest.mark.parametrize("zero_groups, micro_batch", [((), 0), ((0, 2), 0), ((1,), 3), ((0, 1, 2, 3), 0)])
def test_policy_update_matches_the_reference(zero_groups, micro_batch):
    temperature, clip = 0.7, 0.2
    model, tokenizer = build_tiny_model(SMALL, seed=3)
    batch = _batch(model, tokenizer, temperature)
    rewards = torch.tensor([float((i * 7) % 3 == 0) for i in range(batch.size)])
    for g in zero_groups:  # every member of these groups gets the same reward: GRPO advantages are exactly 0
        rewards[batch.group_index == g] = 1.0
    adv = advantages.compute("grpo", rewards, batch.group_index, batch.response_mask)
    cfg = config_from_dict({
        "model": {"path": "unused"}, "data": {"train": "arithmetic:train"},
        "rollout": {"temperature": temperature},
        "algo": {"loss": "ppo", "clip_low": clip, "clip_high": clip, "kl_coef": 0.0},
        "train": {"max_grad_norm": 1e9, "micro_batch_size": micro_batch},
    })

    reference_model = copy.deepcopy(model)
    reference = _reference_loss(reference_model, batch, adv, temperature, clip)
    reference.backward()
    grads, metrics = _our_gradients(model, batch, adv, cfg)

    assert metrics["loss"] == pytest.approx(reference.item(), abs=1e-6)
    for name, p in reference_model.named_parameters():
        expected = p.grad if p.grad is not None else torch.zeros_like(p)
        torch.testing.assert_close(grads[name], expected, rtol=1e-4, atol=1e-6, msg=name)
    skipped = sum(int((batch.group_index == g).sum()) for g in zero_groups)
    assert metrics["rows_backpropagated"] == batch.size - skipped
    if len(zero_groups) == 4:
        assert all(float(g.abs().max()) == 0.0 for g in grads.values())


def test_logged_entropy_is_the_policy_entropy():
    """The entropy the trainer logs without a forward pass (from the sampler) equals the policy's entropy."""
    from rlvr.train.policy import policy_forward

    temperature = 0.7
    model, tokenizer = build_tiny_model(SMALL, seed=4)
    batch = _batch(model, tokenizer, temperature)
    out = policy_forward(model, batch.prompt_ids, batch.prompt_mask, batch.response_ids, batch.response_mask,
                         temperature=temperature, with_entropy=True)
    m = batch.response_mask.bool()
    torch.testing.assert_close(batch.entropy[m], out.entropy[m].detach(), rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(batch.logprobs[m], out.logp[m].detach(), rtol=1e-4, atol=1e-5)
