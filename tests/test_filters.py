"""Tests for rlvr.algos.filters, rlvr.algos.offpolicy and rlvr.algos.entropy.forking_token_mask."""

from __future__ import annotations

import math

import pytest
import torch

from rlvr.algos import entropy as ent
from rlvr.algos import filters, offpolicy

# ---------------------------------------------------------------- informative (DAPO dynamic sampling)

INFORMATIVE_CASES = [
    # (name, rewards, index, expected)
    ("all_equal_group", [1.0, 1.0, 1.0], [0, 0, 0], [False, False, False]),
    ("all_zero_group", [0.0, 0.0], [3, 3], [False, False]),
    ("mixed_group", [1.0, 0.0, 1.0], [0, 0, 0], [True, True, True]),
    ("size_one_group", [0.7], [5], [False]),
    (
        "ragged_groups",  # sizes 3 (mixed), 1, 2 (equal), 4 (mixed)
        [1.0, 0.0, 0.0, 0.3, 0.5, 0.5, 0.0, 0.0, 0.0, 0.2],
        [0, 0, 0, 1, 2, 2, 3, 3, 3, 3],
        [True, True, True, False, False, False, True, True, True, True],
    ),
    (
        "non_contiguous_index",  # groups 7: [1, 1] equal; 2: [0, 1] mixed; 9: size 1
        [1.0, 0.0, 1.0, 0.25, 1.0],
        [7, 2, 7, 9, 2],
        [False, True, False, False, True],
    ),
    ("tiny_difference_counts", [0.5, 0.5 + 1e-6], [0, 0], [True, True]),
    ("empty", [], [], []),
]


@pytest.mark.parametrize("name,rewards,index,expected", INFORMATIVE_CASES, ids=[c[0] for c in INFORMATIVE_CASES])
def test_informative(name, rewards, index, expected):
    out = filters.informative(torch.tensor(rewards, dtype=torch.float32), torch.tensor(index, dtype=torch.long))
    assert out.dtype == torch.bool
    assert out.tolist() == expected


def test_informative_int_rewards():
    out = filters.informative(torch.tensor([1, 1, 0, 2]), torch.tensor([0, 0, 1, 1]))
    assert out.tolist() == [False, False, True, True]


def test_informative_shape_mismatch():
    with pytest.raises(ValueError):
        filters.informative(torch.zeros(3), torch.zeros(2, dtype=torch.long))


# ---------------------------------------------------------------- overlong_filter

@pytest.mark.parametrize("dtype", [torch.bool, torch.float32])
def test_overlong_filter(dtype):
    mask = torch.tensor([[1, 1, 1], [1, 1, 0], [1, 1, 1], [1, 0, 0]]).to(dtype)
    truncated = torch.tensor([True, False, True, False])
    out = filters.overlong_filter(mask, truncated)
    assert out.dtype == dtype
    assert out.to(torch.int64).tolist() == [[0, 0, 0], [1, 1, 0], [0, 0, 0], [1, 0, 0]]
    # input untouched
    assert mask.to(torch.int64).tolist() == [[1, 1, 1], [1, 1, 0], [1, 1, 1], [1, 0, 0]]


def test_overlong_filter_int_truncated_and_none_truncated():
    mask = torch.ones(2, 2, dtype=torch.bool)
    assert filters.overlong_filter(mask, torch.tensor([0, 1])).tolist() == [[True, True], [False, False]]
    assert filters.overlong_filter(mask, torch.tensor([False, False])).tolist() == [[True, True], [True, True]]


def test_overlong_filter_bad_shape():
    with pytest.raises(ValueError):
        filters.overlong_filter(torch.ones(2, 3), torch.tensor([True, False, True]))


# ---------------------------------------------------------------- TIS (Yao et al., 2025)

def _tis_batch(mask_dtype):
    ratios = torch.tensor([[0.5, 1.5, 3.0], [1.0, 4.0, 9.0]])
    rollout = torch.tensor([[-1.0, -2.0, -0.5], [-3.0, -1.0, -0.2]])
    trainer = (rollout + ratios.log()).requires_grad_(True)
    mask = torch.tensor([[1, 1, 1], [1, 0, 0]]).to(mask_dtype)
    return trainer, rollout, mask


def _close(t, expected):
    torch.testing.assert_close(t, torch.tensor(expected, dtype=t.dtype), atol=1e-6, rtol=1e-6)


def _k3(r):
    return r - 1 - math.log(r)


@pytest.mark.parametrize("mask_dtype", [torch.bool, torch.float32])
def test_tis_weights_values_and_metrics(mask_dtype):
    trainer, rollout, mask = _tis_batch(mask_dtype)
    w, m = offpolicy.tis_weights(trainer, rollout, mask, cap=2.0)
    assert w.shape == (2, 3)
    _close(w, [[0.5, 1.5, 2.0], [1.0, 0.0, 0.0]])
    assert not w.requires_grad and w.grad_fn is None
    assert set(m) >= {"rollout_ratio_mean", "rollout_ratio_max", "rollout_kl", "tis_clip_frac"}
    assert all(type(v) is float for v in m.values())
    valid = [0.5, 1.5, 3.0, 1.0]  # 4.0 and 9.0 are masked out
    assert m["rollout_ratio_mean"] == pytest.approx(1.5, abs=1e-6)
    assert m["rollout_ratio_max"] == pytest.approx(3.0, abs=1e-6)
    assert m["rollout_kl"] == pytest.approx(sum(_k3(r) for r in valid) / 4, abs=1e-6)
    assert m["tis_clip_frac"] == pytest.approx(0.25)


def test_tis_weights_cap_changes_weights_and_clip_frac():
    trainer, rollout, mask = _tis_batch(torch.bool)
    w, m = offpolicy.tis_weights(trainer, rollout, mask, cap=1.2)
    _close(w, [[0.5, 1.2, 1.2], [1.0, 0.0, 0.0]])
    assert m["tis_clip_frac"] == pytest.approx(0.5)
    w, m = offpolicy.tis_weights(trainer, rollout, mask, cap=10.0)
    _close(w, [[0.5, 1.5, 3.0], [1.0, 0.0, 0.0]])
    assert m["tis_clip_frac"] == 0.0


def test_tis_weights_no_gradient_through_loss():
    trainer, rollout, mask = _tis_batch(torch.bool)
    w, _ = offpolicy.tis_weights(trainer, rollout, mask)
    (w * trainer).sum().backward()
    # d/dtrainer of sg(w) * trainer is w itself: the weights are constants
    _close(trainer.grad, w.tolist())


def test_tis_weights_masked_garbage_ignored():
    trainer, rollout, mask = _tis_batch(torch.bool)
    trainer = trainer.detach().clone()
    trainer[1, 1:] = float("-inf")
    rollout = rollout.clone()
    rollout[1, 1:] = float("-inf")  # -inf - -inf = nan on padding
    w, m = offpolicy.tis_weights(trainer, rollout, mask)
    assert not torch.isnan(w).any()
    assert w[1, 1:].tolist() == [0.0, 0.0]
    assert all(math.isfinite(v) for v in m.values())


@pytest.mark.parametrize("mask_dtype", [torch.bool, torch.float32])
def test_all_masked_batch_metrics_zero(mask_dtype):
    trainer, rollout, _ = _tis_batch(mask_dtype)
    mask = torch.zeros(2, 3).to(mask_dtype)
    w, m = offpolicy.tis_weights(trainer, rollout, mask)
    assert w.tolist() == [[0.0] * 3] * 2
    assert m == {"rollout_ratio_mean": 0.0, "rollout_ratio_max": 0.0, "rollout_kl": 0.0, "tis_clip_frac": 0.0}
    mm = offpolicy.mismatch_metrics(trainer, rollout, mask)
    assert mm == {"rollout_ratio_mean": 0.0, "rollout_ratio_max": 0.0, "rollout_kl": 0.0}


def test_mismatch_metrics_matches_tis_and_is_kl_rollout_trainer():
    trainer, rollout, mask = _tis_batch(torch.bool)
    mm = offpolicy.mismatch_metrics(trainer, rollout, mask)
    _, m = offpolicy.tis_weights(trainer, rollout, mask)
    assert set(mm) == {"rollout_ratio_mean", "rollout_ratio_max", "rollout_kl"}
    for k in mm:
        assert mm[k] == m[k]
    # identical log-probs: ratio 1, KL 0
    same = offpolicy.mismatch_metrics(rollout, rollout, mask)
    assert same == pytest.approx({"rollout_ratio_mean": 1.0, "rollout_ratio_max": 1.0, "rollout_kl": 0.0})


def test_tis_bad_cap():
    trainer, rollout, mask = _tis_batch(torch.bool)
    with pytest.raises(ValueError):
        offpolicy.tis_weights(trainer, rollout, mask, cap=0.0)


# ---------------------------------------------------------------- forking_token_mask (Wang et al., 2025)

ENTROPY = torch.tensor([[0.1, 0.9, 0.5, 0.7], [0.9, 0.3, 5.0, 0.2]])  # [1, 2] is padding with a huge entropy
MASK = [[1, 1, 1, 1], [1, 1, 0, 1]]  # 7 valid tokens

FORKING_CASES = [
    # (name, rho, expected kept positions)
    ("rho_0.2", 0.2, [[0, 1, 0, 0], [1, 0, 0, 0]]),  # ceil(1.4) = 2: the two 0.9s
    ("rho_0.5", 0.5, [[0, 1, 1, 1], [1, 0, 0, 0]]),  # ceil(3.5) = 4: 0.9, 0.9, 0.7, 0.5
    ("rho_0.1", 0.1, [[0, 1, 0, 0], [0, 0, 0, 0]]),  # ceil(0.7) = 1: tie of 0.9s -> the earlier position
    ("rho_0.99", 0.99, [[1, 1, 1, 1], [1, 1, 0, 1]]),  # ceil(6.93) = 7: all valid, never the padding
]


@pytest.mark.parametrize("name,rho,expected", FORKING_CASES, ids=[c[0] for c in FORKING_CASES])
@pytest.mark.parametrize("dtype", [torch.bool, torch.float32])
def test_forking_token_mask(name, rho, expected, dtype):
    mask = torch.tensor(MASK).to(dtype)
    out = ent.forking_token_mask(ENTROPY, mask, rho)
    assert out.dtype == dtype
    assert out.shape == mask.shape
    assert out.to(torch.int64).tolist() == expected
    assert int(out.sum()) == math.ceil(rho * 7)


@pytest.mark.parametrize("dtype", [torch.bool, torch.float32])
def test_forking_rho_one_identity(dtype):
    mask = torch.tensor(MASK).to(dtype)
    out = ent.forking_token_mask(ENTROPY, mask, 1.0)
    assert out.dtype == dtype
    assert torch.equal(out, mask)


def test_forking_ties_by_position_order():
    entropy = torch.ones(3, 4)
    mask = torch.tensor([[0, 1, 1, 0], [1, 1, 1, 1], [1, 0, 0, 0]], dtype=torch.bool)  # 7 valid
    out = ent.forking_token_mask(entropy, mask, 0.5)  # keep 4: the first four valid in row-major order
    assert out.to(torch.int64).tolist() == [[0, 1, 1, 0], [1, 1, 0, 0], [0, 0, 0, 0]]
    assert torch.equal(out, ent.forking_token_mask(entropy, mask, 0.5))


def test_forking_count_no_float_overshoot():
    # 0.1 * 30 = 3.0000000000000004 in floating point; keep exactly 3
    out = ent.forking_token_mask(torch.arange(30.0).reshape(3, 10), torch.ones(3, 10), 0.1)
    assert int(out.sum()) == 3
    assert out.reshape(-1)[-3:].tolist() == [1.0, 1.0, 1.0]


def test_forking_detaches_entropy_and_handles_empty_mask():
    entropy = ENTROPY.clone().requires_grad_(True)
    out = ent.forking_token_mask(entropy, torch.tensor(MASK, dtype=torch.float32), 0.2)
    assert not out.requires_grad
    empty = ent.forking_token_mask(ENTROPY, torch.zeros(2, 4, dtype=torch.bool), 0.2)
    assert not empty.any()


@pytest.mark.parametrize("rho", [0.0, -0.1, 1.5])
def test_forking_bad_rho(rho):
    with pytest.raises(ValueError, match="rho"):
        ent.forking_token_mask(ENTROPY, torch.tensor(MASK, dtype=torch.bool), rho)
