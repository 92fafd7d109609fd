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


# ------------------------------------------------------------------------------------------- the part, on a VLM


def _vlm_batch():
    """A tiny LLaVA (weights scaled up so images matter) and a sampled batch of 2 image prompts x 3 rows."""
    from rlvr.models import encode_multimodal, tiny_vlm
    from rlvr.rollout.base import SamplingParams
    from rlvr.rollout.hf import HFEngine
    from rlvr.tasks import load_tasks

    model, processor = tiny_vlm("llava", seed=1)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() >= 2:
                p.normal_(0, 0.3)
    tok = processor.tokenizer
    encoded = [encode_multimodal(processor, t.prompt, t.images) for t in load_tasks("vision:count:n=2")]
    engine = HFEngine(model.eval(), pad_id=tok.pad_token_id, eos_ids=tok.eos_token_id)
    torch.manual_seed(0)
    batch = engine.generate([ids for ids, _ in encoded], SamplingParams(n=3, max_new_tokens=5, temperature=1.0),
                            images=[inputs for _, inputs in encoded])
    return model.train(), batch


def _vlm_cfg(**algo):
    return config_from_dict({"model": {"path": "tiny-vlm"}, "algo": {"papo_coef": 0.02, **algo},
                             "train": {"seed": 3}})


def test_part_runs_the_masked_forward_and_adds_the_papo_term():
    from types import SimpleNamespace

    from rlvr.train.learner import rows_forward
    from rlvr.train.parts_perception import PerceptionLoss
    from rlvr.train.policy import policy_forward

    model, batch = _vlm_batch()
    cfg = _vlm_cfg(papo_entropy_coef=0.03)
    part = build_parts(cfg, PartContext(model, lambda: model))["papo"]
    assert isinstance(part, PerceptionLoss) and part.patch_size == 8
    rows = torch.tensor([0, 2, 3, 5])
    out = rows_forward(model, batch, rows, cfg)
    mask = batch.response_mask[rows]
    term, metrics = part.loss(SimpleNamespace(batch=batch), rows, out, mask, "token-mean", None)

    # the same mask drawn by hand: generator seeded with train.seed and the part's first call
    pixels = batch.image_inputs(rows)["pixel_values"]
    masked = perception.mask_patches(pixels, 0.6, 8, generator=torch.Generator().manual_seed(3 * 1_000_003))
    assert not torch.equal(masked, pixels)
    by_hand = policy_forward(model, batch.prompt_ids[rows], batch.prompt_mask[rows], batch.response_ids[rows], mask,
                             pixel_values=masked)
    agg = lambda x: losses.aggregate(x, mask, "token-mean")  # noqa: E731
    expected, parts = perception.papo_terms(out.logp, by_hand.logp, agg, gamma=0.02, eta=0.03)
    torch.testing.assert_close(term, expected)
    assert metrics["papo/kl_prcp"] == pytest.approx(parts["kl_prcp"].item()) and metrics["papo/kl_prcp"] > 0

    # the masked forward is in the graph: with the unmasked log-probs detached the vision tower still gets a gradient
    detached, _ = part.loss(SimpleNamespace(batch=batch), rows, SimpleNamespace(logp=out.logp.detach()), mask,
                            "token-mean", None)
    detached.backward()
    patch = next(p for n, p in model.named_parameters() if n.endswith("patch_embedding.weight"))
    assert patch.grad is not None and patch.grad.abs().sum() > 0

    assert part.state_dict() == {"calls": 2}
    again = PerceptionLoss(cfg, model, 8)
    again.load_state_dict(part.state_dict())
    assert torch.equal(again.masked_inputs({"pixel_values": pixels})["pixel_values"],
                       part.masked_inputs({"pixel_values": pixels})["pixel_values"])  # a resumed run masks alike


def test_part_leaves_rows_without_images_alone():
    from types import SimpleNamespace

    model, batch = _vlm_batch()
    part = build_parts(_vlm_cfg(), PartContext(model, lambda: model))["papo"]
    text_only = SimpleNamespace(batch=SimpleNamespace(image_inputs=lambda rows: {}))
    assert part.loss(text_only, torch.tensor([0]), None, None, "token-mean", None) == (None, {})
    assert part.calls == 0
