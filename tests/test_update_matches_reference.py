"""The learner computes what the papers write: for every update of a multi-epoch, multi-mini-batch PPO step
(Schulman et al., 2017, Algorithm 1), the loss and every gradient equal a spelled-out computation on the same batch:
old log-probs from one plain forward before the first update, then per mini-batch one plain forward of every row
through the Hugging Face model, PPO's clipped surrogate per token (Eq. 7) and a token mean over the mini-batch. The
speedups (skipping rows whose advantages are all zero, micro-batching, the sampler's log-probs serving as the old
policy for a single update, the sampler's entropy) change nothing of it."""

from __future__ import annotations

import copy

import pytest
import torch

from rlvr.algos import advantages
from rlvr.config import config_from_dict
from rlvr.models import encode_prompt
from rlvr.models.tiny import build_tiny_model
from rlvr.rollout import SamplingParams, make_engine
from rlvr.train.learner import learn, mini_batch_rows, prepare_experience

from conftest import SMALL


def _batch(model, tokenizer, temperature):
    torch.manual_seed(0)
    engine = make_engine("hf", model, tokenizer)
    prompts = [encode_prompt(tokenizer, p) for p in ("1+2=", "3+4=", "5+1=", "2+2=")]
    return engine.generate(prompts, SamplingParams(n=4, max_new_tokens=6, temperature=temperature))


def _logp(model, batch):
    """Everything spelled out: full sequences, full logits, log-softmax, gather."""
    ids = torch.cat([batch.prompt_ids, batch.response_ids], 1)
    mask = torch.cat([batch.prompt_mask, batch.response_mask], 1)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    logits = model(input_ids=ids, attention_mask=mask, position_ids=positions).logits.float() / TEMPERATURE
    p = batch.prompt_ids.shape[1]
    predicting = logits[:, p - 1:-1, :]  # position t predicts token t + 1
    return torch.log_softmax(predicting, -1).gather(-1, batch.response_ids.unsqueeze(-1)).squeeze(-1)


def _reference_updates(model, batch, adv, *, epochs, mini_batches, single_update_uses_sampler, generator):
    """(loss, gradients) of each update of plain minibatch PPO with SGD(lr=1), written out step by step."""
    with torch.no_grad():
        old = batch.logprobs if single_update_uses_sampler else _logp(model, batch)
    m = batch.response_mask.float()
    updates = []
    for _ in range(epochs):
        order = torch.randperm(batch.size, generator=generator) if generator is not None else torch.arange(batch.size)
        for rows in torch.tensor_split(order, mini_batches):
            model.zero_grad()
            logp = _logp(model, batch)[rows]
            ratio = torch.exp(logp - old[rows])
            a = adv[rows]
            per_token = -torch.minimum(a * ratio, a * ratio.clamp(1 - CLIP, 1 + CLIP))
            loss = (per_token * m[rows]).sum() / m[rows].sum()
            loss.backward()
            grads = {n: (p.grad.clone() if p.grad is not None else torch.zeros_like(p)) for n, p in model.named_parameters()}
            with torch.no_grad():
                for p in model.parameters():
                    if p.grad is not None:
                        p -= p.grad
            updates.append((loss.item(), grads))
    return updates


TEMPERATURE, CLIP = 0.7, 0.2


def _config(micro_batch, epochs, mini_batches, shuffle):
    return config_from_dict({
        "model": {"path": "unused"}, "data": {"train": "arithmetic:train"},
        "rollout": {"temperature": TEMPERATURE},
        "algo": {"loss": "ppo", "clip_low": CLIP, "clip_high": CLIP, "kl_coef": 0.0, "ppo_epochs": epochs,
                 "mini_batches": mini_batches, "shuffle_mini_batches": shuffle},
        "train": {"max_grad_norm": 1e9, "micro_batch_size": micro_batch},
    })


def _our_updates(model, batch, rewards, cfg, generator):
    """Loss and gradients of each update the learner takes, read off SGD steps with lr 1 (delta = -grad)."""
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    snapshots = [{n: p.detach().clone() for n, p in model.named_parameters()}]
    losses_seen = []

    def on_update(_, metrics):
        snapshots.append({n: p.detach().clone() for n, p in model.named_parameters()})
        losses_seen.append(metrics["loss"])

    exp = prepare_experience(model, batch, rewards, {}, cfg, engine_logprobs_serve=True)
    metrics = learn(model, optimizer, exp, {}, cfg, generator=generator, on_update=on_update)
    grads = [{n: before[n] - after[n] for n in before} for before, after in zip(snapshots, snapshots[1:])]
    return list(zip(losses_seen, grads)), metrics, exp


@pytest.mark.parametrize("zero_groups, micro_batch, epochs, mini_batches, shuffle", [
    ((), 0, 1, 1, False), ((0, 2), 0, 1, 1, False), ((1,), 3, 1, 1, False), ((0, 1, 2, 3), 0, 1, 1, False),
    ((), 0, 2, 2, False), ((1,), 3, 2, 4, False), ((0, 2), 0, 3, 2, True), ((), 5, 2, 3, True),
])
def test_learner_matches_spelled_out_ppo(zero_groups, micro_batch, epochs, mini_batches, shuffle):
    model, tokenizer = build_tiny_model(SMALL, seed=3)
    batch = _batch(model, tokenizer, TEMPERATURE)
    rewards = torch.tensor([float((i * 7) % 3 == 0) for i in range(batch.size)])
    for g in zero_groups:  # every member of these groups gets the same reward: GRPO advantages are exactly 0
        rewards[batch.group_index == g] = 1.0
    adv = advantages.compute("grpo", rewards, batch.group_index, batch.response_mask)
    cfg = _config(micro_batch, epochs, mini_batches, shuffle)
    single = epochs * mini_batches == 1

    reference = _reference_updates(copy.deepcopy(model), batch, adv, epochs=epochs, mini_batches=mini_batches,
                                   single_update_uses_sampler=single,
                                   generator=torch.Generator().manual_seed(7) if shuffle and mini_batches > 1 else None)
    ours, metrics, exp = _our_updates(model, batch, rewards, cfg, torch.Generator().manual_seed(7))

    assert metrics["updates"] == epochs * mini_batches == len(ours) == len(reference)
    assert exp.old_from_rollout == single
    for i, ((loss, grads), (ref_loss, ref_grads)) in enumerate(zip(ours, reference)):
        assert loss == pytest.approx(ref_loss, rel=1e-5, abs=1e-6), f"update {i}"
        for name, expected in ref_grads.items():
            torch.testing.assert_close(grads[name], expected, rtol=1e-4, atol=1e-6, msg=f"update {i}: {name}")
    skipped = sum(int((batch.group_index == g).sum()) for g in zero_groups)
    assert metrics["rows_backpropagated"] == batch.size - skipped
    if len(zero_groups) == 4:
        assert all(float(g.abs().max()) == 0.0 for _, grads in ours for g in grads.values())
    if not single and len(zero_groups) < 4:
        assert metrics["approx_kl"] > 0


def test_mini_batches_partition_the_batch_each_pass():
    g = torch.Generator().manual_seed(0)
    for n, k in [(16, 4), (10, 3), (5, 5)]:
        parts = mini_batch_rows(n, k, generator=g)
        assert len(parts) == k and sorted(torch.cat(parts).tolist()) == list(range(n))
        assert max(len(p) for p in parts) - min(len(p) for p in parts) <= 1


def test_logged_entropy_is_the_policy_entropy():
    """The entropy the trainer logs without a forward pass (from the sampler) equals the policy's entropy."""
    from rlvr.train.policy import policy_forward

    temperature = TEMPERATURE
    model, tokenizer = build_tiny_model(SMALL, seed=4)
    batch = _batch(model, tokenizer, temperature)
    out = policy_forward(model, batch.prompt_ids, batch.prompt_mask, batch.response_ids, batch.response_mask,
                         temperature=temperature, with_entropy=True)
    m = batch.response_mask.bool()
    torch.testing.assert_close(batch.entropy[m], out.entropy[m].detach(), rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(batch.logprobs[m], out.logp[m].detach(), rtol=1e-4, atol=1e-5)
