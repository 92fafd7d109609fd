"""PAPO (rlvr.algos.perception, rlvr.train.parts_perception): patch masking, the implicit perception loss and the
double-entropy regulariser by hand, and the step part's forward with a masked image."""

from __future__ import annotations

import math

import pytest
import torch

from rlvr.algos import losses, perception
from rlvr.config import ConfigError, config_from_dict
from rlvr.models import TinySpec, build_tiny_model
from rlvr.train import parts_perception  # noqa: F401  (registers the "papo" part)
from rlvr.train.parts import PartContext, build_parts


def test_mask_patches_by_hand():
    pixels = torch.arange(2 * 3 * 4 * 4, dtype=torch.float).reshape(2, 3, 4, 4) + 1
    mask = torch.tensor([[[True, False], [False, True]], [[False, False], [True, False]]])
    out = perception.mask_patches(pixels, 0.5, 2, mask=mask)
    expected = pixels.clone()
    expected[0, :, :2, :2] = 0
    expected[0, :, 2:, 2:] = 0
    expected[1, :, 2:, :2] = 0
    assert torch.equal(out, expected)
    assert torch.equal(pixels[0, 0, 0, 0], torch.tensor(1.0))  # the input is left alone
    filled = perception.mask_patches(pixels, 0.5, 2, mask=mask, fill=-1.5)
    assert (filled[0, :, :2, :2] == -1.5).all() and torch.equal(filled[0, :, :2, 2:], pixels[0, :, :2, 2:])


def test_mask_patches_rows_for_flattened_patches():
    patches = torch.ones(5, 6)
    out = perception.mask_patches(patches, 0.5, 14, mask=torch.tensor([True, False, False, True, False]))
    assert out[:, 0].tolist() == [0, 1, 1, 0, 1]


def test_mask_ratio_is_the_share_of_patches_masked():
    g = torch.Generator().manual_seed(0)
    out = perception.mask_patches(torch.ones(400, 3, 32, 32), 0.6, 8, generator=g)
    per_patch = out[:, 0].reshape(400, 4, 8, 4, 8).amax((2, 4))  # 0 where the whole 8x8 patch was masked
    assert out[:, 0].reshape(400, 4, 8, 4, 8).amin((2, 4)).eq(per_patch).all()  # whole patches only
    assert (per_patch == 0).float().mean().item() == pytest.approx(0.6, abs=0.02)
    again = perception.mask_patches(torch.ones(400, 3, 32, 32), 0.6, 8, generator=torch.Generator().manual_seed(0))
    assert torch.equal(out, again)


@pytest.mark.parametrize("shape, patch", [((1, 3, 30, 32), 8), ((3, 32, 32), 8)])
def test_mask_patches_refuses_shapes_it_cannot_cut(shape, patch):
    with pytest.raises(ValueError):
        perception.mask_patches(torch.ones(shape), 0.5, patch)


def test_perception_kl_by_hand():
    logp = torch.log(torch.tensor([[0.5, 0.2, 0.9]]))
    masked = torch.log(torch.tensor([[0.25, 0.2, 0.3]]))
    # r = log(q/p): log 0.5, 0, log(1/3) -> e^r - r - 1
    expected = [0.5 - math.log(0.5) - 1, 0.0, 1 / 3 - math.log(1 / 3) - 1]
    assert perception.perception_kl(logp, masked)[0].tolist() == pytest.approx(expected)
    assert expected[0] == pytest.approx(0.193147, abs=1e-6) and expected[2] == pytest.approx(0.431946, abs=1e-6)
    # the estimate is clamped at 10, as the released code clamps it
    assert perception.perception_kl(torch.tensor([[-8.0]]), torch.tensor([[0.0]])).item() == 10.0


def test_papo_terms_by_hand():
    logp = torch.log(torch.tensor([[0.5, 0.2], [0.9, 0.4]]))
    masked = torch.log(torch.tensor([[0.25, 0.2], [0.3, 0.1]]))
    mask = torch.tensor([[1, 1], [1, 0]])
    agg = lambda x: losses.aggregate(x, mask, "token-mean")  # noqa: E731
    kl = [0.5 - math.log(0.5) - 1, 0.0, 1 / 3 - math.log(1 / 3) - 1]  # the three valid tokens
    h = -(math.log(0.5) + math.log(0.2) + math.log(0.9)) / 3
    h_mask = -(math.log(0.25) + math.log(0.2) + math.log(0.3)) / 3
    term, parts = perception.papo_terms(logp, masked, agg, gamma=0.02, eta=0.03)
    assert parts["kl_prcp"].item() == pytest.approx(sum(kl) / 3)
    assert parts["entropy"].item() == pytest.approx(h) and parts["masked_entropy"].item() == pytest.approx(h_mask)
    assert term.item() == pytest.approx(-0.02 * sum(kl) / 3 + 0.03 * (h + h_mask))
    off, _ = perception.papo_terms(logp, masked, agg, gamma=0.02, eta=0.0)
    assert off.item() == pytest.approx(-0.02 * sum(kl) / 3)


def test_descending_the_term_pulls_the_two_views_apart():
    """A gradient step on -gamma * KL_prcp makes the masked view's distribution less like the original's."""
    logits = torch.tensor([[2.0, 0.0, -1.0]], requires_grad=True)  # with the image
    masked_logits = torch.tensor([[1.5, 0.2, -0.8]], requires_grad=True)  # with the masked image
    sampled = torch.tensor([0])

    def kl():
        logp = torch.log_softmax(logits, -1)[:, sampled]
        masked = torch.log_softmax(masked_logits, -1)[:, sampled]
        return logp, masked

    before = perception.perception_kl(*kl()).sum().item()
    term, _ = perception.papo_terms(*kl(), lambda x: x.mean(), gamma=1.0, eta=0.0)
    term.backward()
    with torch.no_grad():
        logits -= 0.5 * logits.grad
        masked_logits -= 0.5 * masked_logits.grad
    assert perception.perception_kl(*kl()).sum().item() > before


def _cfg(**algo):
    return config_from_dict({"model": {"path": "tiny-text"}, "algo": algo})


def test_text_model_with_papo_is_a_config_error_naming_the_key():
    model, _ = build_tiny_model(TinySpec(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64))
    with pytest.raises(ConfigError, match=r"algo\.papo_coef: .*text-only model"):
        build_parts(_cfg(papo_coef=0.01), PartContext(model, lambda: model))
    with pytest.raises(ConfigError, match=r"algo\.papo_entropy_coef"):
        build_parts(_cfg(papo_entropy_coef=0.03), PartContext(model, lambda: model))
    assert "papo" not in build_parts(_cfg(), PartContext(model, lambda: model))  # off by default
