"""Adaptive trust regions: DCPO's probability-dependent clipping and smooth advantage standardisation, and SAPO's
soft gate, against hand-computed numbers (float64, 1e-6); gradients by autograd."""

import copy
import math

import pytest
import torch

from rlvr.algos import advantages, losses
from rlvr.algos import trust_region as tr

F64 = torch.float64


def close(actual, expected, tol=1e-6):
    torch.testing.assert_close(torch.as_tensor(actual, dtype=F64), torch.as_tensor(expected, dtype=F64),
                               atol=tol, rtol=0)


def per_token_loss(name, *args, **kw):
    return losses._REGISTRY.get(name)(*args, **kw)


# ------------------------------------------------------------------------------------------------ DCPO bounds


@pytest.mark.parametrize("q, low, high", [(0.9, 0.768742, 1.187184), (0.01, 0.5, 5.0)])
def test_dcpo_bounds_match_the_papers_table(q, low, high):
    lo, hi = tr.dcpo_bounds(torch.tensor([math.log(q)], dtype=F64), 0.16, 0.2)
    close(lo, [low])
    close(hi, [high])


def test_dcpo_bounds_on_the_new_probability():
    lo, hi = tr.dcpo_bounds(torch.log(torch.tensor([0.9, 0.01], dtype=F64)), 0.16, 0.2)
    q = torch.tensor([0.9, 0.01], dtype=F64)
    close(lo * q, [0.691868, 0.005])  # the paper's table: p in [0.69, 1.06] and [0.005, 0.05]
    close(hi * q, [1.068466, 0.05])


def test_dcpo_upper_bound_is_capped_like_the_released_code():
    _, hi = tr.dcpo_bounds(torch.tensor([math.log(1e-4)], dtype=F64), 0.16, 0.2)
    close(hi, [10.0])  # 0.5 + 0.5 sqrt(1 + 8000) = 45.2 uncapped
    _, hi = tr.dcpo_bounds(torch.tensor([math.log(1e-4)], dtype=F64), 0.16, 0.2, max_ratio=float("inf"))
    close(hi, [0.5 + 0.5 * math.sqrt(1 + 0.8 / 1e-4)])


# -------------------------------------------------------------------------------------------------- DCPO loss


def test_dcpo_loss_clips_at_the_dynamic_bounds_and_stops_the_gradient_there():
    q = torch.tensor([[0.9, 0.9, 0.01, 0.01]], dtype=F64)
    old = q.log()
    r = torch.tensor([[1.1, 1.3, 4.0, 0.4]], dtype=F64)  # inside; above 1.187184; inside [0.5, 5]; below 0.5
    logp = (old + r.log()).requires_grad_()
    adv = torch.tensor([[1.0, 1.0, 1.0, -2.0]], dtype=F64)
    per_token, metrics = per_token_loss("dcpo", logp, old, adv, torch.ones(1, 4), clip_low=0.16, clip_high=0.2)
    close(per_token, [[-1.1, -1.187184, -4.0, 2.0 * 0.5]])
    assert metrics["clip_frac"] == pytest.approx(0.5)
    per_token.sum().backward()
    close(logp.grad, [[-1.1, 0.0, -4.0, 0.0]])  # d(-A r)/dlogp = -A r where unclipped, 0 where clipped


def test_dcpo_eps_options_and_dual_clip():
    old = torch.tensor([[math.log(0.9)]], dtype=F64)
    logp = old + math.log(1.3)
    adv = torch.ones(1, 1, dtype=F64)
    # eps given as loss options win over the clip range: eps_high = 0.5 -> high = 0.5 + 0.5 sqrt(1 + 2/0.9)
    per_token, _ = per_token_loss("dcpo", logp, old, adv, torch.ones(1, 1), clip_low=0.16, clip_high=0.2, eps_high=0.5)
    close(per_token, [[-min(1.3, 0.5 + 0.5 * math.sqrt(1 + 2 / 0.9))]])
    big = old + math.log(20.0)  # A < 0 with r = 20: -A * min(r, high) = 20 * ... bounded by dual clip -A * 3 = 3
    per_token, _ = per_token_loss("dcpo", big, old, -adv, torch.ones(1, 1), clip_low=0.16, clip_high=0.2, dual_clip=3.0)
    close(per_token, [[3.0]])


def test_dcpo_registration():
    assert losses.default_agg("dcpo") == "seq-mean-token-sum"  # the paper's OTM loss: (1/G) sum_i sum_t
    assert losses.zero_at_zero_advantage("dcpo")


# ----------------------------------------------------------------------------------------------------- DCPO SAS


def test_sas_update_third_visit():
    n, mean, std = tr.sas_update(2, 0.25, 0.5, 0.75, 0.5)
    assert n == 3
    close(mean, 0.416667)
    close(std, 0.552771)
    assert tr.sas_update(0, 0.0, 0.0, 0.75, 0.5) == (1, 0.75, 0.5), "the first visit takes the new values"


def test_sas_advantages_third_visit_hand_computed():
    rewards = torch.tensor([1.0, 0.0, 1.0, 1.0], dtype=F64)
    adv, stats = tr.sas_group_advantages(rewards, 2, 0.25, 0.5)
    # R = 1: A_new 0.5, A_tot 1.055290, SA_new 0.685097, SA_tot 0.870193 -> 0.685097
    # R = 0: A_new -1.5, A_tot -0.753778, SA_new -1.251259, SA_tot -1.002519 -> -1.002519
    close(adv, [0.685097, -1.002519, 0.685097, 0.685097])
    assert stats[0] == 3
    close(stats[1:], [0.416667, 0.552771])


def test_sas_gives_an_all_equal_group_a_nonzero_advantage():
    adv, (n, mean, std) = tr.sas_group_advantages(torch.ones(4, dtype=F64), 2, 0.25, 0.5)
    close([mean, std], [0.5, 0.540062])
    close(adv, [0.308607] * 4)  # A_tot 0.925820 / 3, A_new = 0 (sigma_new = 0)


def test_dcpo_sas_estimator_keeps_per_prompt_statistics_in_step_state():
    state = {"dcpo_sas": {"t1": (2, 0.25, 0.5)}}
    rewards = torch.tensor([1.0, 0.0, 1.0, 1.0, 1.0, 0.0], dtype=F64)
    index = torch.tensor([0, 0, 0, 0, 1, 1])
    ids = ["t1"] * 4 + ["t2"] * 2
    mask = torch.tensor([[1, 1]] * 5 + [[1, 0]], dtype=F64)
    adv = advantages.compute("dcpo_sas", rewards, index, mask, step_state=state, task_ids=ids, epsilon=1e-6)
    close(adv[:4, 0], [0.685097, -1.002519, 0.685097, 0.685097])
    std_new = math.sqrt(0.5)  # t2's first visit: plain (R - mean) / unbiased std
    close(adv[4:, 0], [0.5 / std_new, -0.5 / std_new])
    assert adv[5, 1] == 0
    assert state["dcpo_sas"]["t1"][0] == 3 and state["dcpo_sas"]["t2"] == (1, 0.5, pytest.approx(std_new))
    assert advantages.needs("dcpo_sas") == ("step_state",)


def test_dcpo_sas_resume_from_a_copied_state_continues_exactly():
    g = torch.Generator().manual_seed(0)
    batches = [(torch.randint(0, 2, (6,), generator=g).to(F64), ["a", "a", "a", "b", "b", "b"]) for _ in range(4)]
    index, mask = torch.tensor([0, 0, 0, 1, 1, 1]), torch.ones(6, 2)
    straight, outs = {}, []
    for rewards, ids in batches:
        outs.append(advantages.compute("dcpo_sas", rewards, index, mask, step_state=straight, task_ids=ids))
    resumed = {}
    for rewards, ids in batches[:2]:
        advantages.compute("dcpo_sas", rewards, index, mask, step_state=resumed, task_ids=ids)
    resumed = copy.deepcopy(resumed)  # what a checkpoint keeps
    for k, (rewards, ids) in enumerate(batches[2:], start=2):
        again = advantages.compute("dcpo_sas", rewards, index, mask, step_state=resumed, task_ids=ids)
        assert torch.equal(again, outs[k])
    assert resumed == straight


def test_dcpo_sas_two_groups_of_one_task_are_two_visits():
    state: dict = {}
    rewards = torch.tensor([1.0, 0.0, 1.0, 1.0], dtype=F64)
    advantages.compute("dcpo_sas", rewards, torch.tensor([0, 0, 1, 1]), torch.ones(4, 1), step_state=state,
                       task_ids=["x"] * 4)
    n, mean, std = state["dcpo_sas"]["x"]
    assert n == 2
    close([mean, std], [0.75, math.sqrt((0.5 + 0.0 + 0.5 * 0.25) / 2)])


def test_dcpo_sas_errors_name_what_is_missing():
    rewards, index, mask = torch.tensor([1.0, 0.0]), torch.tensor([0, 0]), torch.ones(2, 1)
    with pytest.raises(ValueError, match="step_state"):
        advantages.compute("dcpo_sas", rewards, index, mask)
    with pytest.raises(ValueError, match="1 task ids for 2 rows"):
        advantages.compute("dcpo_sas", rewards, index, mask, step_state={}, task_ids=["a"])


def test_nonzero_advantage_fraction():
    adv = torch.tensor([[0.5, 0.5], [0.0, 0.0], [0.3, 0.0], [0.0, 0.0]])
    mask = torch.tensor([[1, 1], [1, 1], [1, 0], [0, 0]])
    assert tr.nonzero_advantage_fraction(adv, mask) == pytest.approx(2 / 3)
    assert tr.nonzero_advantage_fraction(adv, torch.zeros(4, 2)) == 0.0


# --------------------------------------------------------------------------------------------------------- SAPO


def sigmoid(x):
    return 1 / (1 + math.exp(-x))


def test_sapo_matches_hand_computed_values_and_gradients():
    # r = e^0.1 = 1.105171 on every token; A = 2 (tau_pos = 1) and A = -1 (tau_neg = 1.05)
    old = torch.tensor([[-0.5, -1.0], [-2.0, -0.3]], dtype=F64)
    logp = (old + 0.1).requires_grad_()
    adv = torch.tensor([[2.0, 2.0], [-1.0, -1.0]], dtype=F64)
    per_token, metrics = per_token_loss("sapo", logp, old, adv, torch.ones(2, 2))
    r = math.exp(0.1)
    s_pos, s_neg = sigmoid(1.0 * (r - 1)), sigmoid(1.05 * (r - 1))
    gate_pos, gate_neg = 4 * s_pos, 4 * s_neg / 1.05
    close(gate_pos, 2.105074)  # 4 sigmoid(0.105171) = 4 * 0.526269
    close(gate_neg, 2.009826)  # 4 sigmoid(1.05 * 0.105171) / 1.05 = 4 * 0.527579 / 1.05
    close(per_token, [[-2 * gate_pos] * 2, [gate_neg] * 2])
    per_token.sum().backward()
    # dL/dlogp = -A f'(r) r with f'(r) = 4 s (1 - s)
    close(logp.grad, [[-2 * 4 * s_pos * (1 - s_pos) * r] * 2, [4 * s_neg * (1 - s_neg) * r] * 2])
    close(metrics["gate_weight"], (4 * s_pos * (1 - s_pos) + 4 * s_neg * (1 - s_neg)) / 2)


def test_sapo_on_policy_gradient_is_the_policy_gradient():
    old = torch.tensor([[-0.7, -1.2, -0.1]], dtype=F64)
    logp = old.clone().requires_grad_()
    adv = torch.tensor([[1.5, -0.5, 0.0]], dtype=F64)
    per_token, _ = per_token_loss("sapo", logp, old, adv, torch.ones(1, 3))
    close(per_token, [[-1.5 * 2.0, 0.5 * 2 / 1.05, 0.0]])  # f(1) = 2 / tau
    per_token.sum().backward()
    close(logp.grad, -adv)  # f'(1) = 1: on-policy SAPO is the plain policy gradient


def test_sapo_gate_decays_smoothly_off_policy_and_ignores_the_clip_range():
    old = torch.zeros(1, 3, dtype=F64)
    logp = torch.log(torch.tensor([[1.0, 2.0, 4.0]], dtype=F64)).requires_grad_()
    adv = torch.ones(1, 3, dtype=F64)
    per_token, _ = per_token_loss("sapo", logp, old, adv, torch.ones(1, 3), clip_low=0.0, clip_high=0.0,
                                  tau_pos=2.0)
    per_token.sum().backward()
    weights = [4 * sigmoid(2 * (x - 1)) * (1 - sigmoid(2 * (x - 1))) * x for x in (1.0, 2.0, 4.0)]
    close(logp.grad, [[-w for w in weights]])
    assert all(g < 0 for g in logp.grad[0].tolist()), "never exactly zero, unlike a hard clip"
    assert losses.default_agg("sapo") == "seq-mean-token-mean" and losses.zero_at_zero_advantage("sapo")


# ------------------------------------------------------------------------------------------------ edge cases


def test_dcpo_bounds_at_certainty_and_a_lone_response():
    lo, hi = tr.dcpo_bounds(torch.zeros(1, dtype=F64), 0.16, 0.2)  # q = 1
    close([lo.item(), hi.item()], [0.5 + 0.5 * math.sqrt(0.36), 0.5 + 0.5 * math.sqrt(1.8)])  # [0.8, 1.170820]
    adv, (n, mean, std) = tr.sas_group_advantages(torch.tensor([1.0], dtype=F64), 0, 0.0, 0.0)
    assert adv.tolist() == [0.0] and (n, mean, std) == (1, 1.0, 0.0), "one response: no std, advantage 0"
