"""Process credit against hand-computed float64 values (docs/api.md, "Algorithms"): PURE's min-form credit, its
baselines and verifiable reward, the sum form it replaces, PRIME's implicit rewards in the recipe's order, and the
PROF keep rule."""

import math

import pytest
import torch

from rlvr.algos import advantages
from rlvr.algos.collection import prof_keep
from rlvr.algos.process_credit import (
    implicit_token_rewards,
    masked_rloo,
    min_form,
    pairwise_accuracy,
    prime_norm,
    prm_ce_loss,
    pure_advantages,
    pure_baseline,
    step_token_counts,
    verifiable_reward,
)

F64 = torch.float64
TOL = 1e-6
B = torch.bool


def close(actual, expected, tol=TOL):
    torch.testing.assert_close(actual, torch.as_tensor(expected, dtype=F64), atol=tol, rtol=0)


def rcumsum(x):
    return x.flip(-1).cumsum(-1).flip(-1)


# ------------------------------------------------------------------------------------------------ PURE: min form


def test_min_form_matches_the_released_softmin_weighting():
    r = torch.tensor([0.5, -0.2, 0.8], dtype=F64)
    close(torch.softmax(-r / 0.1, -1), [0.000911, 0.999044, 0.0000454])
    rp = min_form(r, 0.1)
    close(rp, [0.000456, -0.199809, 0.0000363])
    close(rcumsum(rp), [-0.199317, -0.199772, 0.0000363])


def test_min_form_exact_is_the_papers_minimum_of_later_steps():
    r = torch.tensor([0.5, -0.2, 0.8], dtype=F64)
    close(rcumsum(min_form(r, 0.1, exact=True)), [-0.2, -0.2, 0.8])
    close(rcumsum(min_form(torch.tensor([0.3, 0.9, -0.4, 0.6], dtype=F64), exact=True)), [-0.4, -0.4, -0.4, 0.6])


def test_min_form_on_token_positions_uses_only_the_step_ends():
    """[N, T] with step_end as the mask: the same numbers as the steps alone, 0 off the steps, and a row without a
    step is all 0 (no NaN from a softmax over nothing)."""
    values = torch.tensor([[9.0, 0.5, 7.0, -0.2, 0.8], [1.0, 2.0, 3.0, 4.0, 5.0]], dtype=F64)
    ends = torch.tensor([[0, 1, 0, 1, 1], [0, 0, 0, 0, 0]], dtype=B)
    for exact in (False, True):
        out = min_form(values, 0.1, exact, mask=ends)
        close(out[0, [1, 3, 4]], min_form(torch.tensor([0.5, -0.2, 0.8], dtype=F64), 0.1, exact))
        assert out[0, [0, 2]].abs().sum() == 0 and out[1].abs().sum() == 0


def test_min_form_approaches_the_minimum_as_temperature_falls():
    r = torch.tensor([0.5, -0.2, 0.8], dtype=F64)
    close(rcumsum(min_form(r, 1e-3)), [-0.2, -0.2, 0.0])
    with pytest.raises(ValueError, match="temperature"):
        min_form(r, 0.0)


def test_padding_with_true_steps_raises_the_sum_form_return_but_not_the_min_form_one():
    """The reward hacking PURE describes: extra steps that each earn +1 add to a sum-form return; the min-form return
    of all-true steps stays 1 however many there are."""
    for n_steps in (2, 4, 8):
        r = torch.ones(n_steps, dtype=F64)
        assert rcumsum(min_form(r, 0.1))[0].item() == pytest.approx(1.0, abs=1e-12)
        assert rcumsum(r)[0].item() == n_steps


# ------------------------------------------------------------------------------------------------ PURE: baselines


def test_step_token_counts():
    ends = torch.tensor([[0, 1, 0, 0, 1, 1], [1, 0, 0, 1, 0, 0]], dtype=B)
    mask = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0]], dtype=B)
    assert step_token_counts(ends, mask).tolist() == [[0, 2, 0, 0, 3, 1], [1, 0, 0, 3, 0, 0]]


def _two_responses(length_a=4):
    """A: steps ending at tokens 1 and length_a-1 with r' [0.5, -0.2]; B: 2 tokens, one step ending at 1, r' 0.3."""
    mask = torch.zeros(2, length_a, dtype=B)
    mask[0, :] = True
    mask[1, :2] = True
    ends = torch.zeros(2, length_a, dtype=B)
    ends[0, [1, length_a - 1]] = True
    ends[1, 1] = True
    step = torch.zeros(2, length_a, dtype=F64)
    step[0, 1], step[0, length_a - 1], step[1, 1] = 0.5, -0.2, 0.3
    return step, ends, mask, torch.tensor([0, 0])


def test_token_baseline_and_advantages_of_the_spec_example():
    step, ends, mask, index = _two_responses()
    adjusted = pure_baseline(step, ends, mask, index, "token")
    # b_A = 0.3 / 2 tokens = 0.15; each step counts 1 token, its end token (where its reward sits) not counted
    close(adjusted[0, [1, 3]], [0.35, -0.35])
    close(adjusted[1, 1], 0.225)  # b_B = 0.3 / 4 tokens = 0.075, 1 token before the step's end
    close(rcumsum(adjusted)[0], [0.0, 0.0, -0.35, -0.35])
    close(pure_advantages(adjusted, mask, ends)[0], [0.0, 0.0, -0.35, 0.0])


def test_step_baseline_differs_from_token_baseline_when_step_lengths_differ():
    step, ends, mask, index = _two_responses(length_a=6)  # A's steps have 2 and 4 tokens, 1 and 3 before their ends
    token = pure_baseline(step, ends, mask, index, "token")
    close(token[0, [1, 5]], [0.5 - 0.15 * 1, -0.2 - 0.15 * 3])
    close(token[1, 1], 0.3 - 0.05 * 1)  # b_B = 0.3 / 6
    per_step = pure_baseline(step, ends, mask, index, "step")
    close(per_step[0, [1, 5]], [0.2, -0.5])  # b_A = mean of B's per-step reward = 0.3
    close(per_step[1, 1], 0.15)  # b_B = (0.5 - 0.2) / 2 steps
    assert per_step[~ends].abs().sum() == 0 and token[~ends].abs().sum() == 0
    with pytest.raises(ValueError, match="baseline"):
        pure_baseline(step, ends, mask, index, "group")


def test_a_response_alone_in_its_group_keeps_its_step_rewards():
    step, ends, mask, _ = _two_responses()
    close(pure_baseline(step, ends, mask, torch.tensor([0, 1]), "token"), step)
    close(pure_baseline(step, ends, mask, torch.tensor([0, 1]), "step"), step)


@pytest.mark.parametrize(
    "solved, index, expected",
    [
        ([1, 0], [0, 0], [1.0, -1.0]),  # VR [0, -1], leave-one-out
        ([1, 1, 0], [0, 0, 0], [0.5, 0.5, -1.0]),
        ([0, 0], [0, 0], [0.0, 0.0]),
        ([0], [3], [-1.0]),  # a group of one keeps VR = solved - 1
    ],
)
def test_verifiable_reward_leave_one_out(solved, index, expected):
    close(verifiable_reward(torch.tensor(solved, dtype=F64), torch.tensor(index)), expected)


# ------------------------------------------------------------------------------------------------ PURE: estimator


def _single_step_group():
    """A: 4 tokens, one step ending at token 3 with reward 0.5; B: 2 tokens, one step at token 1 with 0.3; A solved."""
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]], dtype=B)
    ends = torch.tensor([[0, 0, 0, 1], [0, 1, 0, 0]], dtype=B)
    process = torch.tensor([[0, 0, 0, 0.5], [0, 0.3, 0, 0]], dtype=F64)
    return torch.tensor([1.0, 0.0], dtype=F64), torch.tensor([0, 0]), mask, process, ends


def test_pure_estimator_end_to_end():
    """One step each: min form keeps r; token baselines 0.3/2 and 0.5/4 per token before the step's end (3 and 1
    tokens) -> A 0.5 - 0.45 = 0.05, B 0.3 - 0.125 = 0.175; VR [1, -1] x 1.0 on the last token; returns [1.05] x 4 and
    [-0.825] x 2; the step ends (here the last tokens) get 0."""
    rewards, index, mask, process, ends = _single_step_group()
    adv = advantages.compute("pure", rewards, index, mask, process_rewards=process, step_end=ends, whiten=False)
    close(adv, [[1.05, 1.05, 1.05, 0.0], [-0.825, 0.0, 0.0, 0.0]])
    # the released replay buffer whitens the advantages over the tokens that are not step ends: 3 x 1.05, -0.825
    whitened = advantages.compute("pure", rewards, index, mask, process_rewards=process, step_end=ends)
    std = math.sqrt((3 * 0.46875**2 + 1.40625**2) / 4)  # mean 0.58125, population std 0.811899 (+ epsilon 1e-6)
    close(whitened, [[0.46875 / (std + 1e-6)] * 3 + [0.0], [-1.40625 / (std + 1e-6), 0.0, 0.0, 0.0]])
    assert whitened[0, 0].item() == pytest.approx(1 / math.sqrt(3), abs=1e-5)


def test_pure_step_baseline_and_exact_form_through_the_estimator():
    """Step baseline: b_A = B's 0.3 per step, b_B = A's 0.5 -> A 0.2, B -0.2; plus VR [1, -1] on the last tokens."""
    rewards, index, mask, process, ends = _single_step_group()
    for exact in (False, True):  # a single step is its own minimum in both forms
        adv = advantages.compute("pure", rewards, index, mask, process_rewards=process, step_end=ends, whiten=False,
                                 baseline="step", exact=exact)
        close(adv, [[1.2, 1.2, 1.2, 0.0], [-1.2, 0.0, 0.0, 0.0]])


def test_pure_temperature_reaches_the_min_form():
    mask = torch.ones(1, 4, dtype=B)
    ends = torch.tensor([[0, 1, 0, 1]], dtype=B)
    process = torch.tensor([[0, 0.5, 0, -0.2]], dtype=F64)
    kw = dict(process_rewards=process, step_end=ends, whiten=False, vr_coef=0.0)
    one = torch.tensor([1.0], dtype=F64)
    sharp = advantages.compute("pure", one, torch.tensor([0]), mask, temperature=1e-3, **kw)
    close(sharp, [[-0.2, 0.0, -0.2, 0.0]])  # a group of one: no baseline; the worst step's reward up to it
    soft = advantages.compute("pure", one, torch.tensor([0]), mask, temperature=10.0, **kw)
    assert soft[0, 0].item() > -0.2 + 0.05, "a high temperature averages the steps instead"


def test_pure_options_vr_coef_threshold_and_token_rewards():
    rewards, index, mask, process, ends = _single_step_group()
    kw = dict(process_rewards=process, step_end=ends, whiten=False)
    close(advantages.compute("pure", rewards, index, mask, vr_coef=0.0, **kw)[0, :3], [0.05] * 3)
    scored = torch.tensor([0.9, 0.4], dtype=F64)  # solved is reward > 0.5
    close(advantages.compute("pure", scored, index, mask, **kw), advantages.compute("pure", rewards, index, mask, **kw))
    kl = torch.tensor([[-0.01, -0.02, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]], dtype=F64)
    close(advantages.compute("pure", rewards, index, mask, token_rewards=kl, **kw)[0, :3], [1.02, 1.03, 1.05])


def test_pure_needs_step_rewards_of_the_response_shape():
    rewards, index, mask, process, ends = _single_step_group()
    assert set(advantages.needs("pure")) == {"process_rewards", "token_rewards"}
    with pytest.raises(ValueError, match="process_rewards"):
        advantages.compute("pure", rewards, index, mask)
    with pytest.raises(ValueError, match="shape"):
        advantages.compute("pure", rewards, index, mask, process_rewards=process[:, :3], step_end=ends)


def test_process_sum_returns_grow_with_every_rewarded_step():
    mask = torch.ones(2, 4, dtype=B)
    ends = torch.tensor([[0, 1, 0, 1], [0, 0, 0, 1]], dtype=B)
    process = torch.tensor([[0, 1.0, 0, 1.0], [0, 0, 0, 1.0]], dtype=F64)
    rewards = torch.tensor([1.0, 1.0], dtype=F64)
    kw = dict(process_rewards=process, step_end=ends, whiten=False)
    adv = advantages.compute("process_sum", rewards, torch.tensor([0, 0]), mask, **kw)
    close(adv, [[3.0, 3.0, 2.0, 2.0], [2.0, 2.0, 2.0, 2.0]])  # two true lines beat one, same outcome
    whitened = advantages.compute("process_sum", rewards, torch.tensor([0, 0]), mask, process_rewards=process,
                                  step_end=ends)
    close(whitened, advantages.masked_whiten(adv, mask))


# ------------------------------------------------------------------------------------------------ PRIME


def test_implicit_token_rewards_leave_the_last_token_to_the_outcome():
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]], dtype=B)
    prm = torch.tensor([[2.0, -1.0, 0.0], [4.0, 1.0, 7.0]], dtype=F64)
    close(implicit_token_rewards(prm, torch.zeros(2, 3, dtype=F64), mask, 0.05), [[0.1, -0.05, 0.0], [0.2, 0.0, 0.0]])


@pytest.mark.parametrize("acc, loss", [(1.0, 0.668460), (0.0, 0.718460)])
def test_prm_cross_entropy(acc, loss):
    prm = torch.tensor([[0.5, 0.5, 7.0]], dtype=F64, requires_grad=True)  # sum q over the mask = 1
    mask = torch.tensor([[1, 1, 0]], dtype=B)
    value = prm_ce_loss(prm, torch.zeros(1, 3, dtype=F64), mask, torch.tensor([acc], dtype=F64), 0.05)
    assert torch.sigmoid(torch.tensor(0.05, dtype=F64)).item() == pytest.approx(0.512497, abs=TOL)
    assert value.item() == pytest.approx(loss, abs=TOL)
    value.backward()
    # d/dq_t = beta (sigmoid(beta sum q) - acc) on valid tokens, 0 on padding
    expected = 0.05 * (torch.sigmoid(torch.tensor(0.05, dtype=F64)).item() - acc)
    close(prm.grad, [[expected, expected, 0.0]])


def test_masked_rloo_is_the_recipes_form():
    values = torch.tensor([[0.1, -0.05, 0.0], [0.2, 0.0, 0.0]], dtype=F64)
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]], dtype=B)
    out = masked_rloo(values, mask, torch.tensor([0, 0]))
    # row means 0.016667 and 0.1; baseline (0.016667 + 0.1) / 1 = 0.116667; r * 2 - baseline
    close(out, [[0.083333, -0.216667, -0.116667], [0.283333, -0.116667, 0.0]])


def test_masked_rloo_of_one_token_per_row_is_plain_rloo():
    acc = torch.tensor([1.0, 0.0, 0.0, 1.0, 0.3], dtype=F64)
    index = torch.tensor([0, 0, 0, 0, 1])
    mask = torch.ones(5, 4, dtype=B)
    last = advantages.outcome_token_rewards(torch.ones(5, dtype=F64), mask).to(B)
    out = masked_rloo(advantages.outcome_token_rewards(acc, mask), last, index)
    close(out[:, -1], advantages.compute("rloo", acc, index, torch.ones(5, 1))[:, 0])
    assert out[:, :-1].abs().sum() == 0


def test_prime_norm_divides_by_the_largest_return():
    values = torch.tensor([[0.1, -0.05, 0.0], [0.2, 0.0, 0.0]], dtype=F64)
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]], dtype=B)
    out = prime_norm(values, mask)
    close(out, [[0.4999975, -0.2499988, 0.0], [0.999995, 0.0, 0.0]])  # 0.5 and -0.25 up to the divisor's 1e-6
    assert out[0, 0].item() == pytest.approx(0.1 / 0.200001, abs=1e-12)


def _prime_reference(q_rows, acc, beta=0.05, gt_coef=5.0, dpo_coef=5.0):
    """The recipe's order in plain Python: r = beta q (last token 0), prime_norm, masked RLOO x dpo_coef + outcome
    RLOO x gt_coef, sum, reverse cumsum, whitening with the unbiased variance (one group)."""
    r = [[beta * q for q in row[:-1]] + [0.0] for row in q_rows]
    divisor = max(abs(sum(row[t:])) for row in r for t in range(len(row))) + 1e-6
    r = [[x / divisor for x in row] for row in r]
    n = len(r)
    means = [sum(row) / len(row) for row in r]
    process = [[x * n / (n - 1) - sum(means) / (n - 1) for x in row] for row in r]
    outcome = [a * n / (n - 1) - sum(acc) / (n - 1) for a in acc]
    total = [[dpo_coef * x for x in row] for row in process]
    for i, row in enumerate(total):
        row[-1] += gt_coef * outcome[i]
    returns = [[sum(row[t:]) for t in range(len(row))] for row in total]
    flat = [x for row in returns for x in row]
    mean = sum(flat) / len(flat)
    var = sum((x - mean) ** 2 for x in flat) / (len(flat) - 1)
    return [[(x - mean) / math.sqrt(var + 1e-8) for x in row] for row in returns]


def test_prime_estimator_follows_the_recipes_order():
    q_rows = [[2.0, -1.0, 0.0], [4.0, 1.0]]
    acc = [1.0, 0.0]
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]], dtype=B)
    prm = torch.tensor([[2.0, -1.0, 0.0], [4.0, 1.0, 0.0]], dtype=F64)
    process = implicit_token_rewards(prm, torch.zeros(2, 3, dtype=F64), mask, 0.05)
    rewards = torch.tensor(acc, dtype=F64)
    adv = advantages.compute("prime", rewards, torch.tensor([0, 0]), mask, process_rewards=process, step_end=None)
    expected = _prime_reference(q_rows, acc)
    close(adv[0], expected[0])
    close(adv[1, :2], expected[1])
    assert adv[1, 2] == 0
    # the returns before whitening, by hand: A [-1.249969, -3.333292, 2.083348], B [-0.833354, -7.916652]
    reference_returns = torch.tensor([[-1.249969, -3.333292, 2.083348], [-0.833354, -7.916652, 0.0]], dtype=F64)
    m = mask.to(F64)
    mean = (reference_returns * m).sum() / m.sum()
    std = (((reference_returns - mean) * m) ** 2).sum().div(m.sum() - 1).sqrt()
    close(adv, (reference_returns - mean) / std * m, tol=1e-5)
    # normalising after the leave-one-out step instead gives other advantages: the order is pinned
    unnormalised = advantages.compute("prime", rewards, torch.tensor([0, 0]), mask, process_rewards=process,
                                      normalize=False)
    assert (unnormalised - adv).abs().max() > 1e-3


def test_prime_constant_groups_get_zero():
    mask = torch.ones(2, 3, dtype=B)
    adv = advantages.compute("prime", torch.tensor([1.0, 1.0], dtype=F64), torch.tensor([0, 0]), mask,
                             process_rewards=torch.zeros(2, 3, dtype=F64))
    assert adv.abs().max().item() == 0.0
    with pytest.raises(ValueError, match="process_rewards"):
        advantages.compute("prime", torch.ones(2, dtype=F64), torch.tensor([0, 0]), mask)


@pytest.mark.parametrize(
    "scores, acc, index, expected",
    [
        ([0.5, 0.1, -0.2, 0.3, -1.0, 2.0], [1, 0, 1, 0, 0, 1], [0, 0, 0, 0, 1, 1], 0.75),  # groups 2/4 and 1/1
        ([1.0, 2.0], [1, 1], [0, 0], 0.5),  # no pair with different outcomes
        ([1.0, 1.0], [0, 1], [0, 0], 1.0),  # a tie counts as right when acc_i < acc_j (the recipe's comparison)
        ([1.0, 1.0], [1, 0], [0, 0], 0.0),
    ],
)
def test_pairwise_accuracy(scores, acc, index, expected):
    value = pairwise_accuracy(torch.tensor(scores, dtype=F64), torch.tensor(acc, dtype=F64), torch.tensor(index))
    assert value == pytest.approx(expected, abs=TOL)


# ------------------------------------------------------------------------------------------------ PROF


@pytest.mark.parametrize(
    "correct, means, kwargs, kept",
    [
        # the spec's group: 4 correct [0.9, 0.2, 0.7, 0.8], 2 incorrect [-0.5, 0.6]; remove 3 (half):
        # k+ = min(3, round((2 + 3) / 2) = round(2.5) = 2); the two weakest correct go, then the incorrect with the
        # highest mean step value
        ([1, 1, 1, 1, 0, 0], [0.9, 0.2, 0.7, 0.8, -0.5, 0.6], {}, [0, 3, 4]),
        # the paper's figure: 5 correct, 3 incorrect, n = 8 -> m = 4: k+ = 3, k- = 1
        ([1, 0, 1, 0, 0, 1, 1, 1], [0.9, -0.1, 0.3, 0.4, 0.8, 0.5, 0.7, 0.2], {}, [0, 1, 3, 6]),
        ([1, 1, 1, 1], [0.1, 0.4, 0.3, 0.2], {}, [1, 2]),  # all correct
        ([0, 0, 0, 0], [0.1, 0.4, 0.3, 0.2], {}, [0, 3]),  # all incorrect: the highest step means go
        ([1, 0], [0.5, 0.5], {"remove": 1}, [0]),  # delta 0, remove 1: round(0.5) = 0 -> an incorrect goes
        ([1, 1, 0], [0.5, 0.6, 0.1], {"remove": 1}, [1, 2]),  # round(1) = 1 correct goes
        ([1, 1, 0, 0], [0.9, 0.1, 0.2, 0.3], {"remove": 0}, [0, 1, 2, 3]),
        ([1, 1, 0, 0], [0.5, 0.5, 0.2, 0.2], {}, [1, 3]),  # ties: the earlier rollout goes first
    ],
)
def test_prof_keep(correct, means, kwargs, kept):
    assert prof_keep([bool(c) for c in correct], means, **kwargs) == kept


def test_prof_step_count_penalty_removes_degenerate_rollouts_first():
    correct = [True, True, True, False]
    means = [0.95, 0.3, 0.4, 0.1]
    assert prof_keep(correct, means, remove=2) == [0, 3]
    # the best-scored correct rollout has a single step: the released penalty (10, below 2 or above 30) drops it
    assert prof_keep(correct, means, remove=2, step_counts=[1, 5, 5, 5]) == [2, 3]
    # k+ = 1 here; among the incorrect, the one with 40 steps goes before the one with the higher step mean
    assert prof_keep([True, True, False, False], [0.9, 0.8, 0.1, 0.6], remove=2) == [0, 2]
    assert prof_keep([True, True, False, False], [0.9, 0.8, 0.1, 0.6], remove=2, step_counts=[5, 5, 40, 5]) == [0, 3]


def test_prof_rejects_mismatched_lengths():
    with pytest.raises(ValueError, match="step means"):
        prof_keep([True, False], [0.1])
    with pytest.raises(ValueError, match="remove"):
        prof_keep([True, False], [0.1, 0.2], remove=-1)


def _released_token_baseline(step, ends, mask, index):
    """The released token baseline spelled out per row as the authors' code builds it (CJReinforce/PURE 41f9363,
    experience_maker.py): score_ids = step end column + 1 (the last step ends at the eos), num_tokens_per_step =
    j - 1 for the first step and j - j_prev - 1 after it, minus (the others' reward sum / their total length) x that."""
    out = step.clone()
    totals = [float(step[i][ends[i]].sum()) for i in range(len(step))]
    lengths = [int(mask[i].sum()) for i in range(len(step))]
    for i in range(len(step)):
        others = [k for k in range(len(step)) if k != i and index[k] == index[i]]
        b = sum(totals[k] for k in others) / sum(lengths[k] for k in others) if others else 0.0
        score_ids = [c + 1 for c in ends[i].nonzero().flatten().tolist()]
        for idx, j in enumerate(score_ids):
            tokens = j - 1 if idx == 0 else j - score_ids[idx - 1] - 1
            out[i, j - 1] -= b * tokens
    return out


@pytest.mark.parametrize("ends, lengths, index", [
    ([[1, 4], [0, 2]], [5, 3], [0, 0]),  # a one-token first step of B: nothing before its end
    ([[2, 3, 6], [6], [1, 3]], [7, 7, 4], [0, 0, 0]),  # a step of one token after another step
    ([[0], [3], [1, 5], [4]], [1, 4, 6, 5], [0, 0, 1, 1]),  # two groups; a one-token response
    ([[2, 5, 8, 9], [9], [4, 9]], [10, 10, 10], [0, 0, 0]),
])
def test_token_baseline_counts_steps_as_the_released_code(ends, lengths, index):
    width = max(lengths)
    n = len(lengths)
    mask = torch.zeros(n, width, dtype=B)
    end_mask = torch.zeros(n, width, dtype=B)
    step = torch.zeros(n, width, dtype=F64)
    values = torch.linspace(-0.7, 0.9, sum(len(e) for e in ends), dtype=F64).tolist()
    for i, (row_ends, length) in enumerate(zip(ends, lengths)):
        mask[i, :length] = True
        for c in row_ends:
            end_mask[i, c] = True
            step[i, c] = values.pop()
    index = torch.tensor(index)
    close(pure_baseline(step, end_mask, mask, index, "token"), _released_token_baseline(step, end_mask, mask, index))


@pytest.mark.parametrize("correct, means, counts, penalty, kept", [
    # released score 2 (m - 0.5) - penalty: the one-step correct rollout at 0.9 scores -0.2, the one at 0.3 -0.4
    ([1, 1, 0, 0], [0.9, 0.3, 0.1, 0.2], [1, 5, 5, 5], 1.0, [0, 2]),
    # incorrect: -2 (m - 0.5) - penalty; the 40-step one at 0.1 scores 0.8 - 0.8 = 0.0, the one at 0.6 -0.2 goes
    ([1, 1, 0, 0], [0.9, 0.8, 0.1, 0.6], [5, 5, 40, 5], 0.8, [0, 2]),
    # a penalty above twice the gap always decides: 0.9 - 0.3 = 0.6, x 2 = 1.2 < 1.3
    ([1, 1, 0, 0], [0.9, 0.3, 0.1, 0.2], [1, 5, 5, 5], 1.3, [1, 2]),
    # step values need not lie in [0, 1] (arith_steps gives -1 / 1): the centring shifts, the order stays
    ([1, 1, 1, 0], [1.0, -1.0, 0.0, -1.0], [40, 5, 5, 5], 3.0, [2, 3]),
])
def test_prof_penalty_weighs_against_the_doubled_centred_score(correct, means, counts, penalty, kept):
    assert prof_keep([bool(c) for c in correct], means, remove=2, step_counts=counts, step_penalty=penalty) == kept
