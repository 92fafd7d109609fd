"""rlvr.algos against docs/api.md ("Algorithms"): hand-computed values, gradients, registries."""

import math

import pytest
import torch

from rlvr.algos import UnknownNameError, advantages, entropy, kl, losses

F64 = torch.float64


def test_grpo_matches_hand_computed_values():
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 0.5], dtype=F64)
    index = torch.tensor([0, 0, 0, 1, 1, 2])
    mask = torch.tensor([[1, 1], [1, 0], [1, 1], [1, 1], [0, 0], [1, 0]])
    adv = advantages.compute("grpo", rewards, index, mask)
    std0 = math.sqrt(((2 / 3) ** 2 + 2 * (1 / 3) ** 2) / 2)  # unbiased std of [1, 0, 0]
    expected = [(2 / 3) / (std0 + 1e-6), (-1 / 3) / (std0 + 1e-6), (-1 / 3) / (std0 + 1e-6), 0.0, 0.0, 0.0]
    torch.testing.assert_close(adv[:, 0] * mask[:, 0], torch.tensor(expected, dtype=F64) * mask[:, 0])
    assert adv[1, 1] == 0 and adv[4].abs().sum() == 0, "masked positions are 0"
    assert adv[5, 0] == 0, "a group of size 1 gets advantage 0"


def test_dr_grpo_and_rloo():
    rewards = torch.tensor([1.0, 0.0, 0.0, 3.0], dtype=F64)
    index = torch.tensor([7, 7, 7, 9])
    mask = torch.ones(4, 3)
    torch.testing.assert_close(advantages.compute("dr_grpo", rewards, index, mask)[:, 0], torch.tensor([2 / 3, -1 / 3, -1 / 3, 0.0], dtype=F64))
    torch.testing.assert_close(advantages.compute("rloo", rewards, index, mask)[:, 0], torch.tensor([1.0, -0.5, -0.5, 0.0], dtype=F64))


def _batch(seed=0, n=5, t=4):
    g = torch.Generator().manual_seed(seed)
    logp = (-torch.rand(n, t, generator=g, dtype=F64)).requires_grad_()
    old = logp.detach() + 0.3 * torch.randn(n, t, generator=g, dtype=F64)
    adv = torch.randn(n, 1, generator=g, dtype=F64).expand(n, t)
    mask = (torch.rand(n, t, generator=g) > 0.3).to(F64)
    mask[-1] = 0  # a row with no valid token
    return logp, old, adv, mask


def test_ppo_token_mean_value():
    logp, old, adv, mask = _batch()
    r = torch.exp(logp - old)
    expected_tok = torch.maximum(-adv * r, -adv * r.clamp(0.8, 1.28))
    expected = (expected_tok * mask).sum() / mask.sum()
    loss, metrics = losses.compute("ppo", logp, old, adv, mask, clip_low=0.2, clip_high=0.28)
    torch.testing.assert_close(loss, expected)
    assert 0.0 <= metrics["clip_frac"] <= 1.0


def test_ppo_dual_clip_bounds_negative_advantage_loss():
    logp = torch.tensor([[2.0]], dtype=F64)  # ratio e^2 ~ 7.39
    old = torch.zeros(1, 1, dtype=F64)
    adv = torch.tensor([[-1.0]], dtype=F64)
    mask = torch.ones(1, 1)
    plain, _ = losses.compute("ppo", logp, old, adv, mask)
    dual, _ = losses.compute("ppo", logp, old, adv, mask, dual_clip=3.0)
    assert plain.item() == pytest.approx(math.exp(2.0))
    assert dual.item() == pytest.approx(3.0)


def test_gspo_sequence_ratio_value_and_gradient():
    logp, old, adv, mask = _batch(1)
    loss, _ = losses.compute("gspo", logp, old, adv, mask)
    valid = mask.sum(-1) > 0
    s = torch.exp(((logp - old) * mask).sum(-1) / mask.sum(-1).clamp(min=1))
    a = adv[:, 0]
    seq = torch.maximum(-a * s, -a * s.clamp(0.8, 1.2))
    torch.testing.assert_close(loss, seq[valid].mean())
    # gradient equals that of the sequence-level form
    (g_token,) = torch.autograd.grad(loss, logp)
    logp2 = logp.detach().clone().requires_grad_()
    s2 = torch.exp(((logp2 - old) * mask).sum(-1) / mask.sum(-1).clamp(min=1))
    seq2 = torch.maximum(-a * s2, -a * s2.clamp(0.8, 1.2))
    (g_seq,) = torch.autograd.grad(seq2[valid].mean(), logp2)
    torch.testing.assert_close(g_token, g_seq)


def test_cispo_value_and_stop_gradient():
    logp, old, adv, mask = _batch(2)
    loss, _ = losses.compute("cispo", logp, old, adv, mask, clip_low=1.0, clip_high=0.28)
    w = torch.exp(logp - old).clamp(0.0, 1.28).detach()
    torch.testing.assert_close(loss, (-(w * adv * logp) * mask).sum() / mask.sum())
    (grad,) = torch.autograd.grad(loss, logp)
    torch.testing.assert_close(grad, -(w * adv) * mask / mask.sum())


@pytest.mark.parametrize(
    "mode, expected",
    [
        ("token-mean", lambda L, m: (L * m).sum() / m.sum()),
        ("seq-mean-token-mean", lambda L, m: ((L * m).sum(-1)[:-1] / m.sum(-1)[:-1]).mean()),
        ("seq-mean-token-sum", lambda L, m: (L * m).sum(-1)[:-1].mean()),
        ("seq-mean-token-sum-norm", lambda L, m: (L * m).sum() / (m.shape[0] * m.shape[1])),
    ],
)
def test_aggregation_modes(mode, expected):
    L = torch.arange(12, dtype=F64).reshape(3, 4)
    m = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1], [0, 0, 0, 0]], dtype=F64)
    torch.testing.assert_close(losses.aggregate(L, m, mode), expected(L, m))


def test_aggregation_units_split_micro_batches_exactly():
    L = torch.rand(6, 5, dtype=F64)
    m = (torch.rand(6, 5) > 0.4).to(F64)
    for mode in losses.AGG_MODES:
        whole = losses.aggregate(L, m, mode)
        total = losses.aggregation_units(m, mode)
        parts = sum(
            losses.aggregate(L[i:i + 2], m[i:i + 2], mode, norm_length=5) * losses.aggregation_units(m[i:i + 2], mode) / total
            for i in range(0, 6, 2)
        )
        torch.testing.assert_close(parts, whole)


@pytest.mark.parametrize("kind, fn", [("k1", lambda d: d), ("k2", lambda d: 0.5 * d**2), ("k3", lambda d: torch.exp(-d) - 1 + d)])
def test_kl_estimators(kind, fn):
    logp = torch.tensor([-1.0, -0.5, -2.0], dtype=F64)
    ref = torch.tensor([-1.5, -0.5, -1.0], dtype=F64)
    torch.testing.assert_close(kl.estimate(logp, ref, kind), fn(logp - ref))


def test_entropy_and_logprobs_from_logits():
    logits = torch.randn(3, 4, 7, dtype=F64)
    tokens = torch.randint(7, (3, 4))
    full = torch.log_softmax(logits, -1)
    torch.testing.assert_close(entropy.token_logprobs(logits, tokens), full.gather(-1, tokens[..., None]).squeeze(-1))
    torch.testing.assert_close(entropy.entropy_from_logits(logits), -(full.exp() * full).sum(-1))


def test_unknown_names_list_the_known_ones():
    with pytest.raises(UnknownNameError, match="grpo"):
        advantages.compute("nope", torch.zeros(1), torch.zeros(1, dtype=torch.long), torch.ones(1, 1))
    with pytest.raises(UnknownNameError, match="ppo"):
        losses.compute("nope", *[torch.zeros(1, 1)] * 4)


def test_registering_new_estimator_and_loss():
    @advantages.register("test_constant_one")
    def constant(rewards, index, response_mask, **_):
        return advantages.broadcast(torch.ones_like(rewards), response_mask)

    @losses.register("test_neg_logp", default_agg="seq-mean-token-sum")
    def neg_logp(logp, old_logp, adv, response_mask, **_):
        return -adv * logp, {}

    assert "test_constant_one" in advantages.names() and "test_neg_logp" in losses.names()
    mask = torch.ones(2, 3)
    adv = advantages.compute("test_constant_one", torch.zeros(2), torch.tensor([0, 0]), mask)
    loss, _ = losses.compute("test_neg_logp", -torch.ones(2, 3), torch.zeros(2, 3), adv, mask)
    assert loss.item() == pytest.approx(3.0)


# ---- random ragged batches against straightforward per-element reference implementations ----

def ragged_batch(seed):
    g = torch.Generator().manual_seed(seed)
    sizes = [1, 2, 3, 5, 1, 4][: 3 + seed % 4]
    index = torch.tensor([gid for gid, n in enumerate(sizes) for _ in range(n)])
    index = index[torch.randperm(len(index), generator=g)]  # groups need not be contiguous
    n, t = len(index), 6
    rewards = torch.randint(0, 3, (n,), generator=g).to(F64) / 2
    lengths = torch.randint(0, t + 1, (n,), generator=g)
    lengths[0] = 0  # a row with no valid token
    mask = (torch.arange(t)[None] < lengths[:, None]).to(F64)
    logp = (-2 * torch.rand(n, t, generator=g, dtype=F64)).requires_grad_()
    old = logp.detach() + 0.4 * torch.randn(n, t, generator=g, dtype=F64)
    adv = torch.randn(n, t, generator=g, dtype=F64) * mask
    return rewards, index, mask, logp, old, adv


def reference_advantage(name, rewards, index):
    out = []
    for i in range(len(rewards)):
        group = [rewards[j].item() for j in range(len(rewards)) if index[j] == index[i]]
        mean = sum(group) / len(group)
        if name == "dr_grpo":
            out.append(rewards[i].item() - mean)
        elif len(group) == 1:
            out.append(0.0)
        elif name == "grpo":
            std = math.sqrt(sum((x - mean) ** 2 for x in group) / (len(group) - 1))
            out.append((rewards[i].item() - mean) / (std + 1e-6))
        else:  # rloo
            out.append(rewards[i].item() - (sum(group) - rewards[i].item()) / (len(group) - 1))
    return torch.tensor(out, dtype=F64)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("name", ["grpo", "dr_grpo", "rloo"])
def test_outcome_advantages_on_random_ragged_batches(name, seed):
    rewards, index, mask, *_ = ragged_batch(seed)
    got = advantages.compute(name, rewards, index, mask)
    torch.testing.assert_close(got, reference_advantage(name, rewards, index)[:, None] * mask)


def reference_token_losses(name, logp, old, adv, mask, clip_low, clip_high, dual_clip):
    n, t = logp.shape
    rows = []
    for i in range(n):
        valid = [j for j in range(t) if mask[i, j] > 0]
        if name == "gspo" and valid:
            s_i = torch.exp(sum(logp[i, j] - old[i, j] for j in valid) / len(valid))
        row = []
        for j in range(t):
            a = adv[i, j]
            if name == "ppo":
                r = torch.exp(logp[i, j] - old[i, j])
                loss = torch.maximum(-a * r, -a * r.clamp(1 - clip_low, 1 + clip_high))
                if dual_clip is not None and a < 0:
                    loss = torch.minimum(loss, -a * dual_clip)
            elif name == "gspo":
                s = s_i.detach() * torch.exp(logp[i, j] - logp[i, j].detach()) if valid else torch.exp(logp[i, j] - logp[i, j].detach())
                loss = torch.maximum(-a * s, -a * s.clamp(1 - clip_low, 1 + clip_high))
            else:  # cispo
                w = torch.exp(logp[i, j] - old[i, j]).clamp(1 - clip_low, 1 + clip_high).detach()
                loss = -w * a * logp[i, j]
            row.append(loss)
        rows.append(torch.stack(row))
    return torch.stack(rows)


def reference_aggregate(per_token, mask, mode):
    n, t = mask.shape
    valid_rows = [i for i in range(n) if mask[i].sum() > 0]
    if mode == "token-mean":
        return (per_token * mask).sum() / mask.sum()
    if mode == "seq-mean-token-sum-norm":
        return (per_token * mask).sum() / (n * t)
    per_seq = [(per_token[i] * mask[i]).sum() / (mask[i].sum() if mode == "seq-mean-token-mean" else 1) for i in valid_rows]
    return torch.stack(per_seq).mean()


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("mode", losses.AGG_MODES)
@pytest.mark.parametrize("name, clip_low, clip_high, dual_clip", [
    ("ppo", 0.2, 0.2, None), ("ppo", 0.2, 0.28, 3.0), ("gspo", 0.05, 0.08, None), ("cispo", 1.0, 0.28, None),
])
def test_losses_values_and_gradients_on_random_ragged_batches(name, clip_low, clip_high, dual_clip, mode, seed):
    _, _, mask, logp, old, adv = ragged_batch(seed)
    if name == "gspo":  # GSPO's advantages are one per response
        adv = adv[:, :1].expand_as(adv) * mask
    got, _ = losses.compute(name, logp, old, adv, mask, clip_low=clip_low, clip_high=clip_high, dual_clip=dual_clip, agg=mode)
    (g_got,) = torch.autograd.grad(got, logp)
    ref = reference_aggregate(reference_token_losses(name, logp, old, adv, mask, clip_low, clip_high, dual_clip), mask, mode)
    (g_ref,) = torch.autograd.grad(ref, logp)
    torch.testing.assert_close(got, ref)
    torch.testing.assert_close(g_got, g_ref)


def test_chunked_entropy_equals_the_direct_formula():
    logits = torch.randn(3, 50, 11, dtype=F64)
    direct = -(torch.softmax(logits, -1) * torch.log_softmax(logits, -1)).sum(-1)
    torch.testing.assert_close(entropy.entropy_from_logits(logits, chunk_rows=7), direct)
    with_grad = logits.clone().requires_grad_()
    torch.testing.assert_close(entropy.entropy_from_logits(with_grad), direct)
