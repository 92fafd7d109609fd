"""The lean sampling forward (rollout/llama_decoder.py) computes what LlamaForCausalLM computes: logits at
every decoding step, with left padding, grouped-query attention and rows leaving the batch; and the engine's
sampling log-probs through it match the trainer's forward."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from rlvr.models import encode_prompt
from rlvr.models.tiny import build_tiny_model
from rlvr.rollout import SamplingParams, make_engine
from rlvr.rollout.llama_decoder import LlamaDecoder
from rlvr.train.policy import policy_forward

from conftest import SMALL


def _llama(kv_heads: int, seed: int = 0) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=50, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=kv_heads, max_position_embeddings=64,
                         tie_word_embeddings=kv_heads == 4)
    return LlamaForCausalLM(config).eval()


@pytest.mark.parametrize("kv_heads", [4, 2, 1])
def test_decoder_logits_match_the_model_step_by_step(kv_heads):
    model = _llama(kv_heads)
    assert LlamaDecoder.supports(model)
    ids = torch.randint(3, 50, (5, 6))
    attn = torch.ones_like(ids)
    attn[1, :2] = 0  # left padding
    attn[3, :5] = 0
    positions = (attn.cumsum(-1) - 1).clamp(min=0)
    decoder = LlamaDecoder(model, 5, 6 + 8)
    with torch.inference_mode():
        got = decoder.forward(ids, positions, attn.bool())
        seq, mask = ids, attn
        for step in range(8):
            expected = model(input_ids=seq, attention_mask=mask, position_ids=(mask.cumsum(-1) - 1).clamp(min=0)).logits[:, -1]
            torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5, msg=f"step {step}")
            token = torch.randint(3, 50, (seq.shape[0], 1))
            if step == 3:  # rows 0 and 2 finish and leave the batch
                keep = torch.tensor([1, 3, 4])
                decoder.select(keep)
                seq, mask, token = seq[keep], mask[keep], token[keep]
            next_pos = (mask.sum(-1, keepdim=True) - 1) + 1
            got = decoder.forward(token, next_pos, torch.ones_like(token, dtype=torch.bool))
            seq, mask = torch.cat([seq, token], 1), torch.cat([mask, torch.ones_like(token)], 1)


def test_unsupported_models_use_their_own_forward():
    model = _llama(4)
    model.config.mlp_bias = True
    assert not LlamaDecoder.supports(model)
    assert not LlamaDecoder.supports(torch.nn.Linear(2, 2))


def test_sampling_logprobs_match_the_trainer_forward_and_both_paths_agree():
    model, tokenizer = build_tiny_model(SMALL, seed=5)
    prompts = [encode_prompt(tokenizer, p) for p in ("1+2=", "13+4=", "5+1=")]
    engine = make_engine("hf", model, tokenizer)
    params = SamplingParams(n=4, max_new_tokens=8, temperature=0.8)
    batches = {}
    for fast in (True, False):
        engine.fast = fast
        torch.manual_seed(0)
        batches[fast] = engine.generate(prompts, params)
    batch = batches[True]
    out = policy_forward(model, batch.prompt_ids, batch.prompt_mask, batch.response_ids, batch.response_mask,
                         temperature=0.8)
    m = batch.response_mask.bool()
    torch.testing.assert_close(batch.logprobs[m], out.logp[m].detach(), rtol=1e-4, atol=1e-5)
    # greedy decoding is deterministic: both forwards choose the same tokens
    engine.fast = True
    greedy_fast = engine.generate(prompts, SamplingParams(n=2, max_new_tokens=8, temperature=0.0))
    engine.fast = False
    greedy_hf = engine.generate(prompts, SamplingParams(n=2, max_new_tokens=8, temperature=0.0))
    assert torch.equal(greedy_fast.response_ids, greedy_hf.response_ids)
    torch.testing.assert_close(greedy_fast.logprobs, greedy_hf.logprobs, rtol=1e-4, atol=1e-5)
