"""The forking-token update (algo.entropy_mask_rho; Wang et al., 2025, "Beyond the 80/20 Rule", Sec. 4) is the
paper's objective J^B_HighEnt on every mini-batch B:

    1 / sum_i |o_i|  *  sum_i sum_t  I[H_t >= tau_rho^B] * -min(r A, clip(r, 1 - eps, 1 + eps) A)

the top-rho highest-entropy tokens of the mini-batch selected, the sum divided by ALL its valid tokens. Micro-batches
(train.micro_batch_size, a token budget) and skipped rows change nothing of it."""

from __future__ import annotations

import copy
import math

import pytest
import torch

from rlvr.algos import advantages
from rlvr.config import config_from_dict
from rlvr.models.tiny import build_tiny_model
from rlvr.train.learner import learn, prepare_experience
from rlvr.train.parts import PartContext, build_parts

from conftest import SMALL
from test_micro_batch import _ragged_batch

TEMPERATURE, CLIP_LOW, CLIP_HIGH, RHO = 0.7, 0.2, 0.28, 0.2


def _setup():
    """A float64 tiny model, a ragged batch of 4 groups x 4 responses, and rewards with one all-equal group
    (its rows have zero advantage: skipped by the learner, yet their tokens count in the selection and the mean)."""
    model, tokenizer = build_tiny_model(SMALL, seed=3)
    batch = _ragged_batch(model, tokenizer)
    model = model.double()
    rewards = torch.tensor([float((i * 7) % 3 == 0) for i in range(batch.size)])
    rewards[batch.group_index == 1] = 1.0
    return model, batch, rewards


def _config(micro_batch: int = 0, *, epochs: int = 1, mini_batches: int = 1, budget: int | None = None):
    return config_from_dict({
        "model": {"path": "unused"}, "data": {"train": "arithmetic:train"},
        "rollout": {"temperature": TEMPERATURE},
        "algo": {"loss": "ppo", "agg": "token-mean", "clip_low": CLIP_LOW, "clip_high": CLIP_HIGH, "kl_coef": 0.0,
                 "entropy_mask_rho": RHO, "ppo_epochs": epochs, "mini_batches": mini_batches,
                 "shuffle_mini_batches": mini_batches > 1},
        "train": {"max_grad_norm": 1e9, "micro_batch_size": micro_batch, "max_tokens_per_micro_batch": budget or 0},
    })


def _learner_updates(model, batch, rewards, cfg):
    """(loss, gradient) of every update the learner takes, read off SGD steps with lr 1, and the step's metrics."""
    parts = build_parts(cfg, PartContext(model, lambda: None, trainable=list(model.parameters())))
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    snapshots = [{n: p.detach().clone() for n, p in model.named_parameters()}]
    seen = []

    def on_update(_, metrics):
        snapshots.append({n: p.detach().clone() for n, p in model.named_parameters()})
        seen.append(metrics["loss"])

    exp = prepare_experience(model, batch, rewards, parts, cfg, engine_logprobs_serve=False)
    metrics = learn(model, optimizer, exp, parts, cfg, generator=torch.Generator().manual_seed(11), on_update=on_update)
    grads = [{n: before[n] - after[n] for n in before} for before, after in zip(snapshots, snapshots[1:])]
    return list(zip(seen, grads)), metrics


def _spelled_out(model, batch):
    """(log-probs, entropies) [N, T] of the responses from the full logits, written out."""
    ids = torch.cat([batch.prompt_ids, batch.response_ids], 1)
    mask = torch.cat([batch.prompt_mask, batch.response_mask], 1)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    logits = model(input_ids=ids, attention_mask=mask, position_ids=positions).logits / TEMPERATURE
    logits = logits[:, batch.prompt_ids.shape[1] - 1:-1, :]  # position t predicts token t + 1
    logp_all = torch.log_softmax(logits, -1)
    entropy = -(logp_all.exp() * logp_all).sum(-1)
    return logp_all.gather(-1, batch.response_ids.unsqueeze(-1)).squeeze(-1), entropy


def _top_entropy_tokens(entropy, mask):
    """1 for the ceil(rho * n) highest entropies among the n valid tokens, 0 elsewhere. Equal entropies (the first
    response token of one prompt's responses has the same entropy in each) are taken in row-major order, as the
    authors' code takes exactly k tokens (torch.topk in get_global_entropy_top_mask)."""
    valid = [(float(entropy[i, t]), i, t) for i in range(mask.shape[0]) for t in range(mask.shape[1]) if mask[i, t] > 0]
    keep = sorted(valid, key=lambda v: -v[0])[:math.ceil(RHO * len(valid))]  # sorted() is stable
    out = torch.zeros_like(mask)
    for _, i, t in keep:
        out[i, t] = 1.0
    return out


def _paper_updates(model, batch, rewards, *, epochs: int, mini_batches: int):
    """(loss, gradient) of each update of J^B_HighEnt with SGD(lr=1): the mini-batches drawn as the learner draws
    them, the top ceil(rho * n) entropies of each mini-batch's n valid tokens kept, divided by all n."""
    adv = advantages.compute("grpo", rewards, batch.group_index, batch.response_mask).double()
    m = batch.loss_mask.double()
    with torch.no_grad():
        old, _ = _spelled_out(model, batch)
    generator = torch.Generator().manual_seed(11) if mini_batches > 1 else None
    updates = []
    for _ in range(epochs):
        order = torch.randperm(batch.size, generator=generator) if generator is not None else torch.arange(batch.size)
        for rows in torch.tensor_split(order, mini_batches):
            model.zero_grad()
            logp, entropy = _spelled_out(model, batch)
            logp, entropy, mb_mask, a = logp[rows], entropy[rows].detach(), m[rows], adv[rows]
            forking = _top_entropy_tokens(entropy, mb_mask)
            ratio = torch.exp(logp - old[rows])
            surrogate = -torch.minimum(a * ratio, a * ratio.clamp(1 - CLIP_LOW, 1 + CLIP_HIGH))
            loss = (forking * surrogate).sum() / mb_mask.sum()
            loss.backward()
            updates.append((loss.item(), {n: p.grad.clone() if p.grad is not None else torch.zeros_like(p)
                                          for n, p in model.named_parameters()}))
            with torch.no_grad():
                for p in model.parameters():
                    if p.grad is not None:
                        p -= p.grad
    return updates


def _delta(before, after):
    return torch.cat([(before[n] - after[n]).flatten() for n in before])


@pytest.mark.parametrize("epochs, mini_batches", [(1, 1), (2, 2)])
def test_update_does_not_depend_on_micro_batching(epochs, mini_batches):
    """Micro-batches of 1 and 2 rows, and a token budget, give the update of the whole mini-batch, to 1e-6."""
    model, batch, rewards = _setup()
    start = {n: p.detach().clone() for n, p in model.named_parameters()}
    results = {}
    for name, micro, budget in [("all", 0, None), ("1", 1, None), ("2", 2, None), ("budget", 0, 40)]:
        m = copy.deepcopy(model)
        _, metrics = _learner_updates(m, batch, rewards, _config(micro, epochs=epochs, mini_batches=mini_batches,
                                                                  budget=budget))
        assert metrics["updates"] == epochs * mini_batches
        results[name] = _delta(start, {n: p.detach() for n, p in m.named_parameters()})
    assert results["all"].abs().max() > 1e-3  # a real update
    for name in ("1", "2", "budget"):
        torch.testing.assert_close(results[name], results["all"], rtol=0, atol=1e-6, msg=f"micro-batches {name}")


@pytest.mark.parametrize("micro_batch, epochs, mini_batches", [(0, 1, 1), (2, 1, 1), (3, 2, 2)])
def test_loss_and_gradient_are_the_papers_objective(micro_batch, epochs, mini_batches):
    model, batch, rewards = _setup()
    reference = _paper_updates(copy.deepcopy(model), batch, rewards, epochs=epochs, mini_batches=mini_batches)
    ours, metrics = _learner_updates(model, batch, rewards, _config(micro_batch, epochs=epochs,
                                                                     mini_batches=mini_batches))
    assert len(ours) == len(reference) == epochs * mini_batches
    assert 0 < metrics["forking_kept_frac"] <= RHO + 0.1
    for i, ((loss, grads), (ref_loss, ref_grads)) in enumerate(zip(ours, reference)):
        assert loss == pytest.approx(ref_loss, rel=1e-5, abs=1e-7), f"update {i}"
        for name, expected in ref_grads.items():
            torch.testing.assert_close(grads[name], expected, rtol=1e-4, atol=1e-6, msg=f"update {i}: {name}")


def test_selection_normalised_by_selected_tokens_would_differ():
    """The reference above can tell the two normalisers apart: dividing by the selected tokens scales the gradient
    by about n / ceil(rho * n), far beyond the tolerance."""
    model, batch, rewards = _setup()
    ours, _ = _learner_updates(copy.deepcopy(model), batch, rewards, _config())
    n = int(batch.loss_mask.sum())
    kept = math.ceil(RHO * n)
    flat = torch.cat([g.flatten() for g in ours[0][1].values()])
    reference = _paper_updates(model, batch, rewards, epochs=1, mini_batches=1)
    ref = torch.cat([g.flatten() for g in reference[0][1].values()])
    assert not torch.allclose(flat * n / kept, ref, rtol=1e-2, atol=1e-6)
    torch.testing.assert_close(flat, ref, rtol=1e-4, atol=1e-6)
