"""Advantage estimators beyond GRPO (REINFORCE++, ReMax, GAE, PSR/NSR) and the PPO value loss, against
hand-computed values (docs/api.md "Algorithms" conventions: rewards [N], index [N], response_mask [N, T])."""

import math

import pytest
import torch

from rlvr.algos import advantages, losses

F64 = torch.float64


def t(rows):
    return torch.tensor(rows, dtype=F64)


# A ragged batch: groups 5 = rows {0, 2} and 9 = rows {1, 4} are non-contiguous, group 7 = row 3 has size 1,
# row 4 has no valid token.
REWARDS = t([1.0, 0.0, 0.5, 2.0, 3.0])
INDEX = torch.tensor([5, 9, 5, 7, 9])
MASK = torch.tensor([[1, 1, 1], [1, 1, 0], [1, 0, 0], [1, 1, 0], [0, 0, 0]], dtype=torch.bool)
# group means: g5 = 0.75, g9 = 1.5, g7 = 2.0 -> scores 0.25, -1.5, -0.25, 0 (size 1), 1.5 (no tokens)


def expand(per_token_rows):
    """Rows of valid-token values -> [N, 3] padded with 0."""
    out = torch.zeros(len(per_token_rows), 3, dtype=F64)
    for i, row in enumerate(per_token_rows):
        if row:
            out[i, : len(row)] = t(row)
    return out


def whitened(valid_values, eps=1e-6):
    """Population-std whitening of a flat list of valid-token values, by hand."""
    n = len(valid_values)
    mean = sum(valid_values) / n
    std = math.sqrt(sum((x - mean) ** 2 for x in valid_values) / n)
    return [(x - mean) / (std + eps) for x in valid_values]


def regroup(flat, lengths):
    out, k = [], 0
    for n in lengths:
        out.append(flat[k : k + n])
        k += n
    return out


LENGTHS = [3, 2, 1, 2, 0]


# ---------------------------------------------------------------- REINFORCE++ (baseline variant)


def test_reinforce_pp_baseline_group_baseline_then_batch_whitening():
    adv = advantages.compute("reinforce_pp_baseline", REWARDS, INDEX, MASK)
    # scores on valid tokens: 0.25 x3, -1.5 x2, -0.25 x1, 0 x2 -> mean -0.3125, centred 0.5625 / -1.1875 / 0.0625 / 0.3125
    std = math.sqrt((3 * 0.5625**2 + 2 * 1.1875**2 + 0.0625**2 + 2 * 0.3125**2) / 8)  # population std, 8 tokens
    assert std == pytest.approx(math.sqrt(0.49609375))
    e = 1e-6
    expected = expand(
        [[0.5625 / (std + e)] * 3, [-1.1875 / (std + e)] * 2, [0.0625 / (std + e)], [0.0] * 2, []],
    )  # the singleton group (row 3) has equal rewards: exactly 0, not 0.3125 / std
    torch.testing.assert_close(adv, expected)
    assert adv.dtype == F64


def test_reinforce_pp_is_a_global_baseline_then_batch_whitening():
    """Plain REINFORCE++ (Hu et al., 2025): no group baseline; r - mean over the batch, whitened over valid tokens."""
    adv = advantages.compute("reinforce_pp", REWARDS, INDEX, MASK)
    mean = (1.0 + 0.0 + 0.5 + 2.0 + 3.0) / 5
    scores = [[1.0 - mean] * 3, [0.0 - mean] * 2, [0.5 - mean], [2.0 - mean] * 2, []]
    flat = [x for row in scores for x in row]
    mu = sum(flat) / 8
    std = math.sqrt(sum((x - mu) ** 2 for x in flat) / 8)
    torch.testing.assert_close(adv, expand([[(x - mu) / (std + 1e-6) for x in row] for row in scores]))


def test_reinforce_pp_token_rewards_return_to_go_then_whitening():
    token_rewards = t(
        [
            [0.1, -0.2, 0.3],
            [0.5, 0.5, 9.0],  # 9.0 is on padding: ignored
            [-1.0, 7.0, 7.0],
            [0.2, 0.0, 4.0],
            [1.0, 1.0, 1.0],
        ]
    )
    adv = advantages.compute("reinforce_pp_baseline", REWARDS, INDEX, MASK, token_rewards=token_rewards)
    # return-to-go (gamma = 1) plus score:
    returns = [
        [0.25 + 0.2, 0.25 + 0.1, 0.25 + 0.3],  # 0.45, 0.35, 0.55
        [-1.5 + 1.0, -1.5 + 0.5],  # -0.5, -1.0
        [-0.25 - 1.0],  # -1.25
        [0.0 + 0.2, 0.0 + 0.0],  # 0.2, 0.0
        [],
    ]
    flat = [x for row in returns for x in row]
    assert sum(flat) / 8 == pytest.approx(-0.15)
    assert sum((x + 0.15) ** 2 for x in flat) / 8 == pytest.approx(0.4125)
    torch.testing.assert_close(adv, expand(regroup(whitened(flat), LENGTHS)))


def test_reinforce_pp_degenerate_whitening_gives_zeros_not_nan():
    one_token = torch.tensor([[1, 0], [0, 0]])
    adv = advantages.compute("reinforce_pp", t([1.0, 0.0]), torch.tensor([0, 0]), one_token)
    assert torch.isfinite(adv).all() and adv.abs().sum() == 0
    equal = advantages.compute("reinforce_pp", t([1.0, 1.0, 1.0]), torch.tensor([0, 0, 1]), torch.ones(3, 2))
    assert torch.isfinite(equal).all() and equal.abs().sum() == 0
    empty = advantages.compute("reinforce_pp", t([1.0, 0.0]), torch.tensor([0, 0]), torch.zeros(2, 2))
    assert torch.isfinite(empty).all() and empty.abs().sum() == 0


def test_masked_whiten_uses_population_std():
    x = t([[1.0, 2.0, 3.0, 100.0]])
    m = torch.tensor([[1, 1, 1, 0]])
    std = math.sqrt(2 / 3)  # population std of [1, 2, 3]
    torch.testing.assert_close(advantages.masked_whiten(x, m, 0.0), t([[-1 / std, 0.0, 1 / std, 0.0]]))


# ---------------------------------------------------------------- ReMax


def test_remax_subtracts_greedy_reward():
    baseline = t([0.5, 0.5, 0.5, 2.5, 0.5])
    adv = advantages.compute("remax", REWARDS, INDEX, MASK, baseline_rewards=baseline)
    torch.testing.assert_close(adv, expand([[0.5] * 3, [-0.5] * 2, [0.0], [-0.5] * 2, []]))


def test_remax_without_baseline_raises_helpful_error():
    with pytest.raises(ValueError, match="remax needs baseline_rewards.*greedy"):
        advantages.compute("remax", REWARDS, INDEX, MASK)


def test_needs():
    assert advantages.needs("remax") == ("baseline_rewards",)
    assert advantages.needs("gae") == ("values", "token_rewards")
    assert advantages.needs("reinforce_pp") == ("token_rewards",)
    for name in ("grpo", "dr_grpo", "rloo", "psr_nsr", "psr", "nsr", "w_reinforce"):
        assert advantages.needs(name) == ()


# ---------------------------------------------------------------- GAE

GAE_REWARDS = t([1.0, 0.0, 2.0, -1.0])
GAE_MASK = torch.tensor([[1, 1, 1], [1, 1, 0], [0, 0, 0], [1, 0, 0]])
GAE_VALUES = t([[0.5, 0.4, 0.3], [0.2, 0.1, 9.0], [7.0, 7.0, 7.0], [0.6, 5.0, 5.0]])  # padding values ignored
GAE_TOKEN_REWARDS = t([[0.0, -0.1, -0.2], [0.1, -0.1, 100.0], [1.0, 1.0, 1.0], [-0.3, 50.0, 50.0]])


def _hand_gae():
    g, gl = 0.9, 0.9 * 0.8
    # row 0: per-token rewards [0, -0.1, -0.2 + 1.0]; V = [0.5, 0.4, 0.3], V after the end = 0
    a02 = 0.8 + g * 0.0 - 0.3  # 0.5
    a01 = (-0.1 + g * 0.3 - 0.4) + gl * a02  # -0.23 + 0.36 = 0.13
    a00 = (0.0 + g * 0.4 - 0.5) + gl * a01  # -0.14 + 0.0936 = -0.0464
    # row 1: per-token rewards [0.1, -0.1 + 0.0]; V = [0.2, 0.1]
    a11 = -0.1 + g * 0.0 - 0.1  # -0.2
    a10 = (0.1 + g * 0.1 - 0.2) + gl * a11  # -0.01 - 0.144 = -0.154
    # row 3: per-token rewards [-0.3 + -1.0]; V = [0.6]
    a30 = -1.3 - 0.6  # -1.9
    adv = [[a00, a01, a02], [a10, a11], [], [a30]]
    ret = [[a00 + 0.5, a01 + 0.4, a02 + 0.3], [a10 + 0.2, a11 + 0.1], [], [a30 + 0.6]]
    assert (a00, a01, a10) == pytest.approx((-0.0464, 0.13, -0.154))
    return adv, ret


def test_gae_advantages_and_returns_match_hand_unrolled_recursion():
    adv_rows, ret_rows = _hand_gae()
    token_level = advantages.outcome_token_rewards(GAE_REWARDS, GAE_MASK) + GAE_TOKEN_REWARDS * GAE_MASK
    torch.testing.assert_close(token_level[:, :2], t([[0.0, -0.1], [0.1, -0.1], [0.0, 0.0], [-1.3, 0.0]]))
    adv, ret = advantages.gae_advantages_and_returns(token_level, GAE_VALUES, GAE_MASK, 0.9, 0.8)
    torch.testing.assert_close(adv, expand(adv_rows))
    torch.testing.assert_close(ret, expand(ret_rows))


def test_gae_estimator_unwhitened_and_whitened():
    adv_rows, _ = _hand_gae()
    kw = dict(values=GAE_VALUES, token_rewards=GAE_TOKEN_REWARDS, gamma=0.9, lam=0.8)
    raw = advantages.compute("gae", GAE_REWARDS, torch.arange(4), GAE_MASK, whiten=False, **kw)
    torch.testing.assert_close(raw, expand(adv_rows))
    white = advantages.compute("gae", GAE_REWARDS, torch.arange(4), GAE_MASK, **kw)
    flat = [x for row in adv_rows for x in row]
    torch.testing.assert_close(white, expand(regroup(whitened(flat), [3, 2, 0, 1])))


def test_gae_defaults_gamma_lam_one_give_return_minus_value():
    adv = advantages.compute("gae", GAE_REWARDS, torch.arange(4), GAE_MASK, values=GAE_VALUES, whiten=False)
    # no token rewards: return of every token is the outcome reward
    torch.testing.assert_close(adv, expand([[0.5, 0.6, 0.7], [-0.2, -0.1], [], [-1.6]]))


def test_gae_skips_padding_inside_a_row():
    mask = torch.tensor([[1, 0, 1]])
    adv, ret = advantages.gae_advantages_and_returns(t([[0.0, 0.0, 1.0]]), t([[0.5, 99.0, 0.3]]), mask, 0.9, 0.8)
    a2 = 1.0 - 0.3
    a0 = (0.9 * 0.3 - 0.5) + 0.72 * a2  # the next valid token after t=0 is t=2
    torch.testing.assert_close(adv, t([[a0, 0.0, a2]]))
    torch.testing.assert_close(ret, t([[a0 + 0.5, 0.0, 1.0]]))


def test_gae_requires_values_and_carries_no_gradient():
    with pytest.raises(ValueError, match="gae needs values"):
        advantages.compute("gae", GAE_REWARDS, torch.arange(4), GAE_MASK)
    values = GAE_VALUES.clone().requires_grad_()
    adv = advantages.compute("gae", GAE_REWARDS, torch.arange(4), GAE_MASK, values=values)
    assert not adv.requires_grad


# ---------------------------------------------------------------- PSR / NSR / W-REINFORCE

PSR_REWARDS = t([1.0, 0.0, 0.7, 0.5, -1.0])  # > 0.5 is correct: rows 0 and 2 (0.5 itself is not)
PSR_MASK = torch.tensor([[1, 1], [1, 0], [0, 0], [1, 1], [1, 1]])


@pytest.mark.parametrize(
    "name, kw, per_response",
    [
        ("psr_nsr", {}, [1.0, -1.0, 1.0, -1.0, -1.0]),
        ("psr_nsr", {"pos_weight": 2.0, "neg_weight": 0.5}, [2.0, -0.5, 2.0, -0.5, -0.5]),
        ("psr_nsr", {"threshold": -0.5}, [1.0, 1.0, 1.0, 1.0, -1.0]),
        ("psr", {}, [1.0, 0.0, 1.0, 0.0, 0.0]),
        ("nsr", {}, [0.0, -1.0, 0.0, -1.0, -1.0]),
        ("w_reinforce", {}, [0.1, -1.0, 0.1, -1.0, -1.0]),
        ("w_reinforce", {"pos_weight": 0.5}, [0.5, -1.0, 0.5, -1.0, -1.0]),
        ("nsr", {"neg_weight": 2.0}, [0.0, -2.0, 0.0, -2.0, -2.0]),
        ("psr", {"neg_weight": 0.3}, [1.0, -0.3, 1.0, -0.3, -0.3]),
    ],
)
def test_psr_nsr_family(name, kw, per_response):
    adv = advantages.compute(name, PSR_REWARDS, torch.arange(5), PSR_MASK, **kw)
    torch.testing.assert_close(adv, t(per_response)[:, None] * PSR_MASK)


# ---------------------------------------------------------------- all new estimators


@pytest.mark.parametrize(
    "name, extra",
    [
        ("reinforce_pp", {}),
        ("reinforce_pp", {"token_rewards": torch.rand(5, 3, dtype=F64)}),
        ("remax", {"baseline_rewards": t([0.1, 0.2, 0.3, 0.4, 0.5])}),
        ("gae", {"values": torch.rand(5, 3, dtype=F64)}),
        ("gae", {"values": torch.rand(5, 3), "token_rewards": torch.rand(5, 3), "gamma": 0.9, "lam": 0.95}),
        ("psr_nsr", {}),
        ("psr", {}),
        ("nsr", {}),
        ("w_reinforce", {}),
    ],
)
@pytest.mark.parametrize("mask_dtype", [torch.bool, F64])
def test_masked_positions_are_zero_and_unknown_kw_ignored(name, extra, mask_dtype):
    mask = MASK.to(mask_dtype)
    adv = advantages.compute(name, REWARDS, INDEX, mask, unknown_keyword=123, epsilon=1e-6, **extra)
    assert adv.shape == (5, 3) and adv.dtype == F64
    assert torch.isfinite(adv).all()
    assert (adv[~MASK] == 0).all()


# ---------------------------------------------------------------- value loss

V = t([[1.0, 0.5, 2.0], [0.0, -0.3, 7.0]])
OLD_V = t([[0.7, 0.5, 2.1], [0.0, 0.0, 0.0]])
RET = t([[1.2, 0.0, 1.0], [0.5, 0.3, 0.0]])
V_MASK = torch.tensor([[1, 1, 1], [1, 1, 0]])


def test_value_loss_clipped_value_and_gradient():
    v = V.clone().requires_grad_()
    loss, metrics = losses.value_loss(v, OLD_V, RET, V_MASK, clip=0.2)
    # per token max((v-R)^2, (old + clip(v-old) - R)^2):
    #   (0,0): v-old = 0.3 -> clipped to 0.2, v_clip = 0.9: max(0.04, 0.09) = 0.09 (clipped term wins)
    #   (0,1): 0.25   (0,2): v-old = -0.1 inside: 1.0   (1,0): 0.25
    #   (1,1): v-old = -0.3 -> -0.2, v_clip = -0.2: max(0.36, 0.25) = 0.36   (1,2): padding
    assert loss.item() == pytest.approx(0.5 * (0.09 + 0.25 + 1.0 + 0.25 + 0.36) / 5)
    assert metrics["vf_clip_frac"] == pytest.approx(1 / 5)
    (grad,) = torch.autograd.grad(loss, v)
    # d/dv = (v - R) / 5 where the unclipped term is used; 0 where the saturated clipped term wins
    torch.testing.assert_close(grad, t([[0.0, 0.5 / 5, 1.0 / 5], [-0.5 / 5, -0.6 / 5, 0.0]]))


def test_value_loss_without_clipping():
    v = V.clone().requires_grad_()
    loss, metrics = losses.value_loss(v, OLD_V, RET, V_MASK, clip=None)
    assert loss.item() == pytest.approx(0.5 * (0.04 + 0.25 + 1.0 + 0.25 + 0.36) / 5)
    assert metrics["vf_clip_frac"] == 0.0
    (grad,) = torch.autograd.grad(loss, v)
    torch.testing.assert_close(grad, ((V - RET) * V_MASK) / 5)
