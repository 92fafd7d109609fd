"""float16 training scales the loss: gradients that float16 would round to zero keep their digits, an overflowed
backward pass is redone with a smaller scale (never counted as a bad step), and the scale resumes with the run."""

from __future__ import annotations

import copy

import pytest
import torch

from rlvr.models.tiny import build_tiny_model
from rlvr.train.loss_scale import LossScale, backward_with_retries, clip_scaled_grad_norm, unscale_gradients
from rlvr.train.master_weights import MasterWeightAdamW

from conftest import SMALL


@pytest.mark.parametrize("dtype, enabled, value", [("float16", True, 2.0**16), ("bfloat16", False, 1.0),
                                                    ("float32", False, 1.0)])
def test_only_float16_is_scaled(dtype, enabled, value):
    scale = LossScale.for_dtype(dtype)
    assert (scale.enabled, scale.value, scale.can_retry()) == (enabled, value, enabled)


@pytest.mark.parametrize("outcomes, value, finite_in_a_row", [
    ([False], 2.0**15, 0),                      # an overflow halves it
    ([True, True, True], 2.0**17, 0),           # growth_interval finite passes in a row double it
    ([True, True, False, True, True], 2.0**15, 2),  # an overflow restarts the count
    ([False] * 40, 1.0, 0),                     # never below 1
])
def test_the_scale_halves_on_overflow_and_grows_after_finite_passes(outcomes, value, finite_in_a_row):
    scale = LossScale(enabled=True, value=2.0**16, growth_interval=3)
    for finite in outcomes:
        scale.update(finite)
    assert (scale.value, scale.finite_in_a_row) == (value, finite_in_a_row)
    restored = LossScale.for_dtype("float16")
    restored.load_state_dict(scale.state_dict())
    assert (restored.value, restored.finite_in_a_row) == (value, finite_in_a_row)


def _token_mean_loss(model, ids, advantages, factor):
    logits = model(ids).logits.float()
    logp = torch.log_softmax(logits[:, :-1], -1).gather(-1, ids[:, 1:, None])[..., 0]
    return -(logp * advantages).mean() * factor


def _gradients(model, ids, advantages, factor, loss_scale):
    """The true (unscaled, float32) gradients of one backward pass of ``model`` through backward_with_retries."""
    params = list(model.parameters())
    model.zero_grad(set_to_none=True)
    discarded = []

    def run_backward(scale):
        loss = _token_mean_loss(model, ids, advantages, factor)
        (loss * scale).backward()
        return float(loss.detach())

    done = backward_with_retries(run_backward, params, max_norm=1e9, loss_scale=loss_scale,
                                 discard=lambda: (discarded.append(1), model.zero_grad(set_to_none=True)))
    assert len(discarded) == done.retries
    return torch.cat([p.grad.float().flatten() for p in params]) / done.scale, done


@pytest.fixture(scope="module")
def models():
    reference, _ = build_tiny_model(SMALL, seed=0)
    low = copy.deepcopy(reference).to(torch.float16)
    with torch.no_grad():  # the same (float16-representable) weights in both
        for r, lp in zip(reference.parameters(), low.parameters()):
            r.copy_(lp.float())
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, 60, (8, 32), generator=g)
    advantages = torch.randn(8, 1, generator=g)
    return reference, low, ids, advantages


def test_gradients_float16_would_round_to_zero_keep_their_digits(models):
    """A token-mean loss divided by a long constant length (as Dr.GRPO's normaliser of 8192 tokens does) gives
    gradients around 1e-8: unscaled float16 loses most of them, scaled float16 matches float32."""
    reference, low, ids, advantages = models
    factor = 1 / 8192
    expected, _ = _gradients(reference, ids, advantages, factor, LossScale())
    nonzero = expected != 0
    unscaled, _ = _gradients(low, ids, advantages, factor, LossScale())
    scaled, done = _gradients(low, ids, advantages, factor, LossScale.for_dtype("float16"))
    assert done.finite and done.scale == 2.0**16
    assert float(((unscaled == 0) & nonzero).sum() / nonzero.sum()) > 0.3
    assert float(((scaled == 0) & nonzero).sum() / nonzero.sum()) < 0.01
    assert float((scaled - expected).norm() / expected.norm()) < 0.01 < float((unscaled - expected).norm() / expected.norm())


def test_an_overflowed_pass_is_redone_with_a_smaller_scale(models):
    """A loss large enough that 2**16 times its gradients exceed float16's range: the pass is discarded and redone
    at half the scale until it fits; the gradients are then float32's."""
    reference, low, ids, advantages = models
    expected, _ = _gradients(reference, ids, advantages, 100.0, LossScale())
    scale = LossScale.for_dtype("float16")
    got, done = _gradients(low, ids, advantages, 100.0, scale)
    assert done.finite and done.retries >= 1 and done.scale == 2.0**16 / 2**done.retries == scale.value
    assert float((got - expected).norm() / expected.norm()) < 0.01


def test_a_non_finite_loss_is_not_retried(models):
    _, low, ids, advantages = models
    _, done = _gradients(low, ids, advantages, float("nan"), LossScale.for_dtype("float16"))
    assert not done.finite and done.retries == 0


def test_master_weight_adamw_divides_the_scale_out_in_float32():
    """The optimizer reads scaled float16 gradients and divides in float32: float32 AdamW's update from the true
    gradients, even where a true gradient is below float16's smallest number."""
    true = torch.tensor([2e-8, -2.5e-8, 1e-3, 0.0])
    reference = torch.nn.Parameter(torch.zeros(4))
    reference.grad = true.clone()
    torch.optim.AdamW([reference], lr=1e-3, weight_decay=0.0).step()
    masters = []
    for scale in (1.0, 2.0**16):
        param = torch.nn.Parameter(torch.zeros(4, dtype=torch.float16))
        optimizer = MasterWeightAdamW([param], lr=1e-3, weight_decay=0.0)
        param.grad = (true * scale).to(torch.float16)
        unscale_gradients(optimizer, [param], scale)
        optimizer.step()
        assert optimizer.grad_scale == 1.0  # for that step only
        masters.append(optimizer.state[param]["master"])
    unscaled, scaled = masters
    assert unscaled[0] == 0 and unscaled[1] == 0  # float16 had rounded those gradients to zero
    torch.testing.assert_close(scaled, reference.detach(), rtol=1e-3, atol=0)


def test_a_scaled_norm_beyond_float16s_range_is_no_overflow():
    """Every scaled gradient fits float16 but their norm (128000) does not: the norm is measured in float32, so the
    pass counts as finite (torch's own measure, in float16, reads inf), and clipping divides the scale out."""
    param = torch.nn.Parameter(torch.zeros(4096, dtype=torch.float16))
    param.grad = torch.full((4096,), 2000.0, dtype=torch.float16)
    assert not torch.isfinite(torch.linalg.vector_norm(param.grad))
    norm = clip_scaled_grad_norm([param], max_norm=1.0, scale=2.0**10)
    assert norm == pytest.approx(128000 / 2**10)
    torch.testing.assert_close(param.grad.float().norm() / 2**10, torch.tensor(1.0), rtol=1e-3, atol=0)
