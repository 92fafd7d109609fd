"""Entropy and exploration control (Clip-Cov, KL-Cov, Lp-Reg) and confidence-shaped credit (ACE, EMPG) against the
hand-computed numbers of their papers' equations, in float64 to 1e-6; gradients by autograd."""

import math

import pytest
import torch

from rlvr.algos import advantages, losses
from rlvr.algos import credit_shaping as cs
from rlvr.algos import entropy_control as ec

F64 = torch.float64
R = 1.1051709180756477  # exp(0.1)


def close(actual, expected, tol=1e-6):
    torch.testing.assert_close(torch.as_tensor(actual, dtype=F64), torch.as_tensor(expected, dtype=F64),
                               atol=tol, rtol=0)


def per_token_loss(name, *args, **kw):
    """The registered loss's per-token losses [N, T] and metrics, before aggregation."""
    return losses._REGISTRY.get(name)(*args, **kw)


def cov_batch():
    """adv [[2,2,2],[-1,-1,-1]], logp [[-0.1,-2,-0.5],[-0.2,-3,-1]], old = logp - 0.1 (r = exp(0.1)), all valid."""
    adv = torch.tensor([[2.0, 2, 2], [-1, -1, -1]], dtype=F64)
    logp = torch.tensor([[-0.1, -2, -0.5], [-0.2, -3, -1]], dtype=F64, requires_grad=True)
    return logp, logp.detach() - 0.1, adv, torch.ones(2, 3, dtype=F64)


# ------------------------------------------------------------------------------------------ Clip-Cov / KL-Cov


def test_token_covariance_matches_hand_computed_values():
    logp, _, adv, mask = cov_batch()
    close(ec.token_covariance(logp, adv, mask), [[1.55, -1.3, 0.95], [-1.4, 2.8, -0.2]])


def test_kl_cov_penalises_the_top_covariance_token_and_leaves_the_rest_unclipped():
    logp, old, adv, mask = cov_batch()
    per_token, metrics = per_token_loss("kl_cov", logp, old, adv, mask, kl_cov_ratio=0.2)
    close(per_token, [[-2 * R] * 3, [R, R + 0.1, R]])  # k = max(1, floor(0.2 * 6)) = 1 -> token (1, 1)
    loss, _ = losses.compute("kl_cov", logp, old, adv, mask, kl_cov_ratio=0.2)
    close(loss, -0.535919)
    assert metrics["kl_cov_frac"] == pytest.approx(1 / 6)
    loss.backward()
    # d/dlogp of -A r + |logp - old| is -A r + 1 at the penalised token, -A r elsewhere; token-mean divides by 6
    close(logp.grad, [[-2 * R / 6] * 3, [R / 6, (R + 1) / 6, R / 6]])


def test_kl_cov_has_no_ppo_clipping():
    logp, old, adv, mask = cov_batch()
    far = old + 2.0  # r = e^2, far outside any clip range
    per_token, _ = per_token_loss("kl_cov", far, old, adv, mask, kl_cov_ratio=1e-9, clip_low=0.2, clip_high=0.2)
    expected = -adv * math.exp(2.0)
    expected[1, 1] += 2.0  # the one selected token (k = max(1, 0) = 1) adds kl_coef * |2|
    close(per_token, expected)


def test_clip_cov_detaches_the_candidates_and_their_gradient_is_exactly_zero():
    logp, old, adv, mask = cov_batch()
    loss, metrics = losses.compute("clip_cov", logp, old, adv, mask, cov_ratio=0.5, cov_lb=1.0, cov_ub=5.0)
    close(loss, -0.368390)  # (0,0) (Cov 1.55) and (1,1) (Cov 2.8) are the only ones in (1, 5): both zeroed
    assert metrics["cov_detached_frac"] == pytest.approx(2 / 6)
    loss.backward()
    assert logp.grad[0, 0].item() == 0.0 and logp.grad[1, 1].item() == 0.0
    close(logp.grad, [[0.0, -2 * R / 6, -2 * R / 6], [R / 6, 0.0, R / 6]])


def test_clip_cov_never_picks_a_token_ppo_already_clipped():
    logp, old, adv, mask = cov_batch()
    old = old.clone()
    old[1, 1] = logp[1, 1].detach() + 1.0  # r = e^-1 < 0.8 with A < 0: PPO clips it
    per_token, _ = per_token_loss("clip_cov", logp, old, adv, mask, cov_ratio=0.5, cov_lb=1.0, cov_ub=5.0)
    assert per_token[1, 1].item() == pytest.approx(1.0 * 0.8)  # the clipped PPO loss -A * 0.8, not zeroed
    assert per_token[0, 0].item() == 0.0  # the other candidate still is


def test_clip_cov_picks_at_random_among_more_candidates_reproducibly():
    g = torch.Generator().manual_seed(3)
    logp = -torch.rand(6, 50, generator=g, dtype=F64) * 4
    adv = torch.randn(6, 1, generator=g, dtype=F64).expand(6, 50) * 3
    old, mask = logp.clone(), torch.ones(6, 50, dtype=F64)
    fn = lambda *a, **k: per_token_loss("clip_cov", *a, **k)  # noqa: E731
    cov = ec.token_covariance(logp, adv, mask)
    eligible = int(((cov > 1) & (cov < 5)).sum())
    assert eligible > 3
    a, _ = fn(logp, old, adv, mask, cov_ratio=0.01)  # k = max(1, floor(3)) = 3
    b, _ = fn(logp, old, adv, mask, cov_ratio=0.01)
    zeroed = (a == 0) & (adv != 0)
    assert int(zeroed.sum()) == 3 and torch.equal(a, b), "3 picks, the same for the same batch and seed"
    c, _ = fn(logp, old, adv, mask, cov_ratio=0.01, seed=1)
    picks = {tuple(map(tuple, ((x == 0) & (adv != 0)).nonzero().tolist())) for x in (a, c)}
    assert len(picks) == 2, "another seed picks other tokens"
    d, _ = fn(logp, old, adv, mask, cov_ratio=0.01, generator=torch.Generator().manual_seed(5))
    assert int(((d == 0) & (adv != 0)).sum()) == 3


def test_covariance_losses_see_rows_with_zero_advantage():
    assert not losses.zero_at_zero_advantage("clip_cov") and not losses.zero_at_zero_advantage("kl_cov")
    logp, old, adv, mask = cov_batch()
    zero_row = torch.tensor([[-4.0, -4.0, -4.0]], dtype=F64)
    with_zero = ec.token_covariance(torch.cat([logp.detach(), zero_row]),
                                    torch.cat([adv, torch.zeros(1, 3, dtype=F64)]), torch.ones(3, 3))
    # mean A = 1/3, mean logp = -2.0889 once the zero-advantage row counts: every Cov of the other rows changes
    close(with_zero[0, 0], (2 - 1 / 3) * (-0.1 - (-6.8 - 12) / 9))
    assert not torch.allclose(with_zero[:2], ec.token_covariance(logp, adv, torch.ones(2, 3)))


def test_selection_counts_and_padding():
    assert ec.selection_count(2e-4, 6) == 1 and ec.selection_count(0.5, 6) == 3 and ec.selection_count(0.5, 0) == 0
    logp, old, adv, mask = cov_batch()
    mask = mask.clone()
    mask[1, 1] = 0  # the top-covariance token is padding now: never selected
    per_token, _ = per_token_loss("kl_cov", logp, old, adv, mask, kl_cov_ratio=0.2)
    assert per_token[1, 1].item() == pytest.approx(R)


# ---------------------------------------------------------------------------------------------------- Lp-Reg


def test_minp_proxy_matches_hand_computed_values():
    logits = torch.tensor([2.0, 1.0, -3.0], dtype=F64)
    close(torch.softmax(logits, -1), [0.727475, 0.267623, 0.004902])
    mass, threshold = ec.minp_kept_logmass(logits, 0.02)
    close(threshold.exp(), 0.014550)  # 0.02 * 0.727475: token 2 (0.004902) falls below
    close(mass.exp(), 0.727475 + 0.267623)
    proxy = ec.minp_proxy_logprobs(logits.expand(1, 3, 3), torch.tensor([[0, 1, 2]]), 0.02)
    close(proxy[0, :2].exp(), [0.731059, 0.268941])
    assert proxy[0, 2].item() == float("-inf")
    close(torch.log_softmax(logits, -1)[1], -1.318175)
    close(proxy[0, 1], -1.313262)


def test_lp_reg_penalty_value_and_gradient():
    logp = torch.tensor([[-1.318175, -1.3, -0.5]], dtype=F64, requires_grad=True)
    proxy = torch.tensor([[-1.313262, float("-inf"), -0.2]], dtype=F64)
    selected = torch.tensor([[True, False, False]])
    penalty = ec.lp_reg_penalty(logp, proxy, selected, coef=1.0)
    close(penalty, [[1.2092e-5, 0.0, 0.0]], tol=1e-8)
    penalty.sum().backward()
    d = -1.313262 + 1.318175
    close(logp.grad, [[1 - math.exp(d), 0.0, 0.0]], tol=1e-12)  # d/dlogp (e^d - d - 1) = 1 - e^d
    assert torch.isfinite(logp.grad).all()


def test_lp_reg_selects_the_lowest_logp_negative_tokens_below_their_proxy():
    n = 200
    logp = -torch.arange(1, n + 1, dtype=F64).reshape(1, n) / 10  # token n-1 has the lowest log-prob
    adv = -torch.ones(1, n, dtype=F64)
    proxy = logp + 0.5  # every token below its proxy
    chosen = ec.lp_reg_selection(logp, proxy, adv, torch.ones(1, n), neg_frac=0.01)
    assert chosen.sum() == 2 and chosen[0, -1] and chosen[0, -2]  # k = floor(0.01 * 200) = 2
    proxy[0, -1] = float("-inf")  # filtered by min-p: never regularised
    chosen = ec.lp_reg_selection(logp, proxy, adv, torch.ones(1, n), neg_frac=0.01)
    assert chosen.sum() == 1 and chosen[0, -2]
    few = ec.lp_reg_selection(logp[:, :150], proxy[:, :150], adv[:, :150], torch.ones(1, 150), neg_frac=0.01)
    assert not few.any(), "k = max(1, floor(1.5)) = 1 is not > 1: the released code then regularises nothing"
    positive = ec.lp_reg_selection(logp, proxy, -adv, torch.ones(1, n), neg_frac=0.01)
    assert not positive.any(), "the positive side is off by default (pos_frac = 0)"


# ---------------------------------------------------------------------------------------------------------- ACE


def test_ace_penalty_matches_hand_computed_values():
    close(torch.nn.functional.softplus(torch.tensor(math.log(3), dtype=F64)), 1.386294)  # ln 4
    out = cs.ace_penalty(torch.tensor([-1.0, 0.5], dtype=F64), torch.tensor([math.log(3), 2.0], dtype=F64), alpha=0.5)
    close(out, [-1.693147, 0.5])
    far = cs.ace_penalty(torch.tensor([-1.0], dtype=F64), torch.tensor([-1e4], dtype=F64), alpha=0.5)
    close(far, [-1.0])  # c -> -inf: factor -> 1


def test_ace_estimator_scales_only_negative_grpo_advantages_by_the_rollout_confidence():
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0], dtype=F64)
    index = torch.tensor([0, 0, 1, 1])
    mask = torch.tensor([[1, 1, 0], [1, 1, 1], [1, 0, 0], [1, 1, 1]], dtype=F64)
    old = torch.full((4, 3), -1.0, dtype=F64)
    ref = old - torch.tensor([[0.5], [math.log(3) / 3], [0.2], [0.0]], dtype=F64)  # c = [1, ln 3, 0.2, 0]
    got = advantages.compute("ace", rewards, index, mask, old_logp=old, ref_logp=ref, alpha=0.5, epsilon=1e-6)
    grpo = advantages.compute("grpo", rewards, index, mask, epsilon=1e-6)
    a = 0.5 / (math.sqrt(0.5) + 1e-6)  # GRPO: (1 - 0.5) / unbiased std of [1, 0]
    close(got[:, 0], [a, -a * (1 + 0.5 * math.log(4)), -a * (1 + 0.5 * math.log(1 + math.exp(0.2))), a])
    assert torch.equal(got[mask == 0], torch.zeros(int((mask == 0).sum()), dtype=F64))
    assert torch.equal(got[grpo > 0], grpo[grpo > 0])


def test_ace_refuses_missing_inputs_and_recursive_bases():
    rewards, index, mask = torch.tensor([1.0, 0.0]), torch.tensor([0, 0]), torch.ones(2, 1)
    assert set(advantages.needs("ace")) == {"old_logp", "ref_logp"}
    with pytest.raises(ValueError, match="old_logp and ref_logp"):
        advantages.compute("ace", rewards, index, mask)
    with pytest.raises(ValueError, match="base='ace'"):
        advantages.compute("ace", rewards, index, mask, old_logp=torch.zeros(2, 1), ref_logp=torch.zeros(2, 1),
                           base="ace")


# --------------------------------------------------------------------------------------------------------- EMPG


def test_empg_modulation_matches_hand_computed_values():
    g, bonus = cs.empg_modulation(torch.tensor([0.2, 1.0, 0.6], dtype=F64), torch.tensor([False, False, True]))
    close(g, [1.519441, 0.558971, 0.921588])
    close(g * 1.0 + bonus, [1.556229, 0.619624, 0.921588])  # one trajectory, A = 1


def test_step_ids_number_runs_of_model_turns():
    ids, rows = cs.step_ids(torch.tensor([[1, 1, 0, 1, 0, 1], [0, 1, 1, 1, 0, 0], [0, 0, 0, 0, 0, 0]]))
    assert ids.tolist() == [[0, 0, -1, 1, -1, 2], [-1, 3, 3, 3, -1, -1], [-1] * 6]
    assert rows.tolist() == [0, 0, 0, 1]


def test_empg_estimator_modulates_each_turn_of_each_episode():
    # row 0: three model turns (mean entropies 0.2, 1.0, 0.6) around tool tokens; row 1: one turn (0.6).
    loss_mask = torch.tensor([[1, 1, 0, 1, 0, 1, 1], [1, 1, 0, 0, 0, 0, 0]], dtype=F64)
    response_mask = torch.tensor([[1, 1, 1, 1, 1, 1, 1], [1, 1, 1, 0, 0, 0, 0]], dtype=F64)
    entropy = torch.tensor([[0.1, 0.3, 9.0, 1.0, 9.0, 0.5, 0.7], [0.6, 0.6, 9.0, 0, 0, 0, 0]], dtype=F64)
    rewards, index = torch.tensor([1.0, -1.0], dtype=F64), torch.tensor([0, 0])  # dr_grpo: A = [1, -1]
    got = advantages.compute("empg", rewards, index, response_mask, entropy=entropy, loss_mask=loss_mask,
                             base="dr_grpo", epsilon=1e-6)
    h_norm = [0.0, 1.0, 0.5, 0.5]
    e = [math.exp(-h) for h in h_norm]
    g = [x / (sum(e) / 4 + 1e-8) for x in e]
    row0 = [g[0] + 0.1 * e[1], g[1] + 0.1 * e[2], g[2]]
    close(got[0], [row0[0], row0[0], 1.0, row0[1], 1.0, row0[2], row0[2]])  # tool tokens keep A
    close(got[1, :2], [-g[3], -g[3]])
    assert torch.equal(got[1, 3:], torch.zeros(4, dtype=F64))
    assert advantages.needs("empg") == ("entropy",)
    with pytest.raises(ValueError, match="entropy"):
        advantages.compute("empg", rewards, index, response_mask)


# ------------------------------------------------------------------------------------------------ edge cases


def test_padding_never_shifts_the_covariance_means():
    logp, _, adv, mask = cov_batch()
    padded_logp = torch.cat([logp.detach(), torch.tensor([[-50.0], [-50.0]], dtype=F64)], 1)
    padded_adv = torch.cat([adv, torch.tensor([[9.0], [9.0]], dtype=F64)], 1)
    padded_mask = torch.cat([mask, torch.zeros(2, 1, dtype=F64)], 1)
    cov = ec.token_covariance(padded_logp, padded_adv, padded_mask)
    close(cov[:, :3], [[1.55, -1.3, 0.95], [-1.4, 2.8, -0.2]])
    assert torch.equal(cov[:, 3], torch.zeros(2, dtype=F64))


def test_clip_cov_without_candidates_is_the_ppo_loss():
    logp, old, adv, mask = cov_batch()
    clip_cov, _ = losses.compute("clip_cov", logp, old, adv, mask, cov_lb=10.0, cov_ub=20.0)
    ppo, _ = losses.compute("ppo", logp, old, adv, mask)
    assert clip_cov.item() == ppo.item()


def test_empg_with_equal_step_entropies_keeps_the_advantage_and_adds_the_bonus():
    g, bonus = cs.empg_modulation(torch.full((3,), 0.7, dtype=F64), torch.tensor([False, False, True]))
    close(g, [1 / (1 + 1e-8)] * 3)  # H~ = 0 everywhere: exp(0) / (mean + 1e-8)
    close(bonus, [0.1, 0.1, 0.0])


def test_ace_leaves_zero_and_positive_advantages_alone_whatever_the_confidence():
    adv = torch.tensor([[0.0, 0.0], [0.3, 0.3]], dtype=F64)
    assert torch.equal(cs.ace_penalty(adv, torch.tensor([50.0, 50.0], dtype=F64), alpha=2.0), adv)


@pytest.mark.parametrize("log_ratio, adv, clip, dual_clip", [
    (2.0, -1.0, 0.2, 3.0),  # r = 7.39, A < 0: a dual clip at 3 would cap -A r at 3
    (1.5, -2.0, 1.0, 1.5),  # the recipe's clip 1.0/1.0: r = 4.48 beyond 2 and beyond c
    (0.9, -0.5, 0.28, 2.0),
    (3.0, 1.0, 0.2, 3.0),  # A > 0: no dual clip either way, PPO's clip
])
def test_clip_cov_ignores_dual_clip_as_verl_does(log_ratio, adv, clip, dual_clip):
    """verl's compute_policy_loss_clip_cov takes max(-A r, -A clip(r, 1 - lo, 1 + hi)) and has no dual clip."""
    logp = torch.tensor([[-1.0, -2.0]], dtype=F64)
    old = logp - log_ratio
    a = torch.full_like(logp, adv)
    mask = torch.ones_like(logp)
    per_token, _ = per_token_loss("clip_cov", logp, old, a, mask, clip_low=clip, clip_high=clip, dual_clip=dual_clip,
                                  cov_lb=10.0, cov_ub=20.0)  # no token in the covariance band: none detached
    r = math.exp(log_ratio)
    expected = max(-adv * r, -adv * min(max(r, 1 - clip), 1 + clip))
    close(per_token, [[expected, expected]])
    ppo, _ = per_token_loss("ppo", logp, old, a, mask, clip_low=clip, clip_high=clip, dual_clip=dual_clip)
    if adv < 0 and expected > -adv * dual_clip:
        assert ppo.max().item() == pytest.approx(-adv * dual_clip)  # ppo does apply it
