"""The lean decoder (rollout/llama_decoder.py, families in rollout/decoder_families.py) computes each registered
family's own forward: Qwen2 (q/k/v biases), Qwen3 (per-head q/k norms), Mistral (a sliding window that covers the
call), Llama with attention biases, Gemma ((1 + w) norms, scaled embeddings, GeGLU) and Gemma2 (four norms per layer,
soft-capped scores and logits). Logits match the model's forward to 1e-5 at every step with left padding;
greedy tokens of the hf engine match ``model.generate(do_sample=False)``; what is not implemented is refused and
then samples through the model's forward with the same greedy parity; the run's manifest records the path."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import GemmaConfig, Gemma2Config, LlamaConfig, MistralConfig, Qwen2Config, Qwen3Config

from rlvr.models.tiny import char_tokenizer
from rlvr.rollout import SamplingParams
from rlvr.rollout.hf import HFEngine
from rlvr.rollout.llama_decoder import LlamaDecoder

VOCAB = 60
SHAPE = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
             max_position_embeddings=64, initializer_range=0.2)

# name -> (config class, its options); every one of these is sampled by the lean decoder
FAMILIES = {
    "qwen2": (Qwen2Config, dict(num_key_value_heads=2)),
    "qwen2-tied": (Qwen2Config, dict(num_key_value_heads=4, tie_word_embeddings=True)),
    "qwen3": (Qwen3Config, dict(num_key_value_heads=2, head_dim=24)),
    "qwen3-bias": (Qwen3Config, dict(num_key_value_heads=1, attention_bias=True)),
    "mistral": (MistralConfig, dict(num_key_value_heads=2, sliding_window=64)),
    "mistral-no-window": (MistralConfig, dict(num_key_value_heads=4, sliding_window=None)),
    "qwen2-window-covers": (Qwen2Config, dict(num_key_value_heads=2, use_sliding_window=True, sliding_window=40,
                                             max_window_layers=1)),
    "llama-attention-bias": (LlamaConfig, dict(num_key_value_heads=2, attention_bias=True)),
    # Gemma scales embeddings by sqrt(hidden) = 8: smaller weights keep its logits near the others' magnitude
    "gemma": (GemmaConfig, dict(num_key_value_heads=1, head_dim=32, initializer_range=0.05)),
    "gemma2": (Gemma2Config, dict(num_key_value_heads=2, head_dim=16, query_pre_attn_scalar=24, sliding_window=32,
                                  attn_logit_softcapping=2.0, final_logit_softcapping=3.0)),
}

# name -> (config class, options, reach of the call): refused, so sampled through the model's forward
REFUSED = {
    "mistral-short-window": (MistralConfig, dict(num_key_value_heads=2, sliding_window=6), 6 + 10),
    "qwen3-short-window": (Qwen3Config, dict(num_key_value_heads=2, use_sliding_window=True, sliding_window=5,
                                             max_window_layers=0), 6 + 10),
    "gemma2-short-window": (Gemma2Config, dict(num_key_value_heads=2, head_dim=16, sliding_window=4), 6 + 10),
    "qwen2-linear-rope": (Qwen2Config, dict(num_key_value_heads=2, rope_parameters={
        "rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0}), 16),
    "llama-dynamic-rope": (LlamaConfig, dict(num_key_value_heads=2, rope_parameters={
        "rope_type": "dynamic", "factor": 2.0, "rope_theta": 10000.0}), 16),
}


def _model(config_class, options, seed=0):
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    config = config_class(**{**SHAPE, **options})
    model = AutoModelForCausalLM.from_config(config).eval()
    # random biases and norm weights, so that a decoder ignoring them would not match
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias") or "norm" in name:
                p.normal_(1.0 if "norm" in name else 0.0, 0.3)
    return model


def _prompts():
    """Five rows of lengths 6, 4, 6, 1, 3: left padding of different widths."""
    torch.manual_seed(1)
    ids = torch.randint(3, VOCAB, (5, 6))
    attn = torch.ones_like(ids)
    for row, pad in ((1, 2), (3, 5), (4, 3)):
        attn[row, :pad] = 0
    return ids, attn


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_lean_logits_match_the_model_forward_step_by_step(name):
    model = _model(*FAMILIES[name])
    steps = 8
    ids, attn = _prompts()
    assert LlamaDecoder.supports(model, reach=ids.shape[1] + steps), LlamaDecoder.refusal(model, ids.shape[1] + steps)
    decoder = LlamaDecoder(model, ids.shape[0], ids.shape[1] + steps)
    positions = (attn.cumsum(-1) - 1).clamp(min=0)
    with torch.inference_mode():
        got = decoder.forward(ids, positions, attn.bool())
        seq, mask = ids, attn
        for step in range(steps):
            expected = model(input_ids=seq, attention_mask=mask,
                             position_ids=(mask.cumsum(-1) - 1).clamp(min=0)).logits[:, -1]
            torch.testing.assert_close(got, expected, rtol=1e-6, atol=1e-5, msg=f"{name}, step {step}")
            token = expected.argmax(-1, keepdim=True)
            if step == 3:  # rows 0 and 2 leave the batch
                keep = torch.tensor([1, 3, 4])
                decoder.select(keep)
                seq, mask, token = seq[keep], mask[keep], token[keep]
            got = decoder.forward(token, mask.sum(-1, keepdim=True), torch.ones_like(token, dtype=torch.bool))
            seq, mask = torch.cat([seq, token], 1), torch.cat([mask, torch.ones_like(token)], 1)


def _greedy_parity(model, *, lean: bool):
    """The hf engine's greedy tokens equal model.generate(do_sample=False)'s, through the path ``lean`` says."""
    ids, attn = _prompts()
    prompts = [row[m.bool()].tolist() for row, m in zip(ids, attn)]
    new = 10
    assert LlamaDecoder.supports(model, reach=ids.shape[1] + new) is lean
    engine = HFEngine(model, pad_id=0, eos_ids=[VOCAB + 1])  # an id never sampled: every row runs to the limit
    used = []
    original = LlamaDecoder.forward
    LlamaDecoder.forward = lambda self, *a, **k: used.append(1) or original(self, *a, **k)
    try:
        batch = engine.generate(prompts, SamplingParams(n=1, max_new_tokens=new, temperature=0.0))
    finally:
        LlamaDecoder.forward = original
    assert bool(used) is lean
    with torch.inference_mode():
        expected = model.generate(input_ids=ids, attention_mask=attn, do_sample=False, max_new_tokens=new,
                                  min_new_tokens=new, pad_token_id=0, eos_token_id=None)[:, ids.shape[1]:]
    assert torch.equal(batch.response_ids, expected)


@pytest.mark.parametrize("name", ["qwen2", "qwen3", "qwen3-bias", "mistral", "qwen2-window-covers", "gemma", "gemma2"])
def test_engine_greedy_tokens_match_generate_through_the_lean_path(name):
    _greedy_parity(_model(*FAMILIES[name]), lean=True)


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_unimplemented_features_are_refused_and_sample_through_the_model(name):
    config_class, options, reach = REFUSED[name]
    model = _model(config_class, options)
    reason = LlamaDecoder.refusal(model, reach)
    assert reason and ("sliding window" in reason or "rope type" in reason), reason
    _greedy_parity(model, lean=False)


def test_a_window_is_judged_against_the_reach_of_the_call():
    model = _model(MistralConfig, dict(num_key_value_heads=2, sliding_window=16))
    assert LlamaDecoder.supports(model, reach=16)
    assert not LlamaDecoder.supports(model, reach=17)
    assert not LlamaDecoder.supports(model)  # reach unknown


def test_unregistered_families_use_their_own_forward():
    from transformers import Phi3Config

    phi3 = _model(Phi3Config, dict(num_key_value_heads=2, pad_token_id=0))
    assert "model_type 'phi3'" in LlamaDecoder.refusal(phi3, 16)
    _greedy_parity(phi3, lean=False)


def _save(model, path):
    tokenizer = char_tokenizer()
    model.config.pad_token_id, model.config.eos_token_id = tokenizer.pad_token_id, tokenizer.eos_token_id
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.mark.parametrize("config_class, options, sampler", [
    (Qwen3Config, dict(num_key_value_heads=2), "lean"),
    (MistralConfig, dict(num_key_value_heads=2, sliding_window=8), "model"),
])
def test_the_run_records_which_path_sampled(tmp_path, config_class, options, sampler):
    from transformers import AutoModelForCausalLM

    from rlvr.config import config_from_dict
    from rlvr.train import train

    from conftest import one_digit_rl_config

    torch.manual_seed(0)
    config = config_class(**{**SHAPE, "vocab_size": len(char_tokenizer()), "hidden_size": 32, "num_hidden_layers": 1,
                             "intermediate_size": 32}, **options)
    folder = _save(AutoModelForCausalLM.from_config(config), tmp_path / "model")
    cfg = one_digit_rl_config(folder, tmp_path / "run", steps=1)
    cfg["data"]["prompts_per_step"] = 2
    cfg["rollout"]["group_size"] = 2
    run_dir = train(config_from_dict(cfg))
    assert json.loads((run_dir / "manifest.json").read_text())["sampler"] == sampler


@pytest.mark.parametrize("rollout, sampler", [
    ({}, "lean"),
    ({"engine_options": {"fast": False}}, "model"),
])
def test_the_manifest_says_model_where_the_engine_does_not_use_the_lean_path(tmp_path, rollout, sampler):
    from rlvr.config import config_from_dict
    from rlvr.train.manifest import build_manifest

    from conftest import one_digit_rl_config

    model = _model(Qwen3Config, dict(num_key_value_heads=2, vocab_size=len(char_tokenizer())))
    folder = _save(model, tmp_path / "model")
    cfg = one_digit_rl_config(folder, tmp_path / "run", steps=1)
    cfg["rollout"].update(rollout)
    assert build_manifest(config_from_dict(cfg))["sampler"] == sampler
