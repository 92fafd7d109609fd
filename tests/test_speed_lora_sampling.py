"""model.lora.sampling=merged: the lean decoder samples a LoRA policy from a fused, packed copy of W0 + (alpha/r) B A
built per generate call. It computes the adapted model's function (logits to float32 rounding), its log-probs serve
as the trainer's old policy as the in-place adapters' do, it follows the current adapter after an update, it holds
copies (not the model's tensors), and where merging would round the adapter away (bfloat16 weights) it samples
from the adapters in place."""

from __future__ import annotations

import pytest
import torch

peft = pytest.importorskip("peft")

from rlvr.config import ConfigError, config_from_dict  # noqa: E402
from rlvr.models import load_model  # noqa: E402
from rlvr.models.lora import apply_lora, lora_sampling  # noqa: E402
from rlvr.rollout import SamplingParams, build_engine  # noqa: E402
from rlvr.rollout.llama_decoder import LlamaDecoder, _LowRank, _Packed, _Split  # noqa: E402
from rlvr.train.policy import policy_forward  # noqa: E402

LORA = {"r": 4, "alpha": 8, "dropout": 0.0, "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj",
                                                                 "up_proj", "down_proj"]}


def _adapted(model_dir, sampling="merged", dtype="float32", seed=1):
    model, tokenizer = load_model(model_dir, device="cpu", dtype=dtype)
    model = apply_lora(model, {**LORA, "sampling": sampling}, model_dir)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.3)
    return model.eval(), tokenizer


def _held(decoder):
    return [w for layer in decoder.layers for w in layer]


@pytest.mark.parametrize("sampling", ["merged", "adapters"])
def test_decoder_logits_equal_the_adapted_model(tiny_model_dir, sampling):
    model, tokenizer = _adapted(tiny_model_dir, sampling)
    assert lora_sampling(model) == sampling
    ids = torch.tensor([tokenizer.encode("12+34=46"), tokenizer.encode("7+8=15xx")])
    with torch.inference_mode():
        decoder = LlamaDecoder(model, 2, ids.shape[1] + 2)
        lean = decoder.forward(ids, torch.arange(ids.shape[1]).expand(2, -1), torch.ones_like(ids, dtype=torch.bool))
        step = decoder.forward(lean.argmax(-1, keepdim=True), torch.full((2, 1), ids.shape[1]),
                               torch.ones((2, 1), dtype=torch.bool))
        full = model(input_ids=torch.cat([ids, lean.argmax(-1, keepdim=True)], 1)).logits
    torch.testing.assert_close(lean, full[:, -2], atol=1e-5, rtol=0)
    torch.testing.assert_close(step, full[:, -1], atol=1e-5, rtol=0)
    merged = not any(isinstance(w, (_LowRank, _Split)) for w in _held(decoder))
    assert merged == (sampling == "merged")
    if merged:  # copies: none of the matrices the decoder multiplies by is one of the model's tensors
        own = {p.data_ptr() for p in model.parameters()}
        assert all(isinstance(w, _Packed) or w.data_ptr() not in own for w in _held(decoder) if w is not None
                   and (isinstance(w, _Packed) or w.dim() == 2))


def test_merged_sampling_logprobs_serve_as_the_trainers_after_an_update(tiny_model_dir):
    """The engine's log-probs under merged sampling equal the trainer's forward through PEFT, with top-k/top-p and a
    temperature, before and after an optimizer step changes the adapter (the copy is rebuilt per call)."""
    model, tokenizer = _adapted(tiny_model_dir)
    engine = build_engine("hf", model, tokenizer)
    prompts = [tokenizer.encode("3+4="), tokenizer.encode("12+9=")]
    params = SamplingParams(n=3, max_new_tokens=6, temperature=0.8, top_k=20, top_p=0.9)
    optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.5)
    for update in range(2):
        torch.manual_seed(update)
        batch = engine.generate(prompts, params)
        args = (batch.prompt_ids, batch.prompt_mask, batch.response_ids, batch.response_mask)
        m = batch.response_mask.bool()
        model.eval()
        with torch.no_grad():
            trainer = policy_forward(model, *args, temperature=0.8).logp
        torch.testing.assert_close(batch.logprobs[m], trainer[m], atol=1e-5, rtol=0, msg=f"after {update} updates")
        model.train()
        loss = -policy_forward(model, *args, temperature=0.8).logp[m].mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()


def test_bfloat16_weights_sample_from_the_adapters(tiny_model_dir):
    model, _ = _adapted(tiny_model_dir, dtype="bfloat16")
    decoder = LlamaDecoder(model, 1, 8)
    assert any(isinstance(w, (_LowRank, _Split)) for w in _held(decoder))


def test_sampling_choice_is_checked():
    assert config_from_dict({"model": {"lora": {"sampling": "merged"}}}).model.lora["sampling"] == "merged"
    with pytest.raises(ConfigError, match="model.lora: sampling: expected one of merged, adapters, got 'fused'"):
        config_from_dict({"model": {"lora": {"sampling": "fused"}}})
    with pytest.raises(ConfigError, match="model.lora: sampling: expected one of merged, adapters"):
        config_from_dict({"model": {"lora": {"sampling": 1}}})


@pytest.mark.parametrize("dtype, rows, shape", [
    (torch.float32, 8, (64, 48)),      # a decoding step: oneDNN on the weight as it is
    (torch.float32, 96, (48, 160)),    # a prefill
    (torch.bfloat16, 8, (64, 48)),     # not float32: F.linear itself
])
def test_dense_products_equal_f_linear(dtype, rows, shape):
    """The adapters path multiplies by the frozen W0 with no copy (_dense_linear); it computes F.linear's product."""
    from rlvr.rollout.llama_decoder import _dense_linear

    g = torch.Generator().manual_seed(0)
    weight = torch.randn(*shape, generator=g).to(dtype)
    x = torch.randn(rows, 1, shape[1], generator=g).to(dtype)
    expected = torch.nn.functional.linear(x, weight)
    got = _dense_linear(x, weight)
    assert got.shape == expected.shape and got.dtype == dtype
    exact = dtype != torch.float32  # the same call as F.linear's, bit for bit
    torch.testing.assert_close(got, expected, rtol=0 if exact else 1e-5, atol=0 if exact else 1e-5)
