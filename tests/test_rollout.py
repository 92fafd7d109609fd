"""The hf rollout engine: masks, EOS handling, grouping, and sampling log-probs that match the trainer's."""

import pytest
import torch

from rlvr.models import encode_prompt
from rlvr.rollout import HFEngine, SamplingParams, make_engine
from rlvr.train.policy import response_logprobs

PROMPTS = ["1+2=", "10+25=", "7+", "99+99=", "abc"]


def many_eos_engine(model, tokenizer):
    """An engine that treats a third of the vocabulary as end-of-sequence, so rows finish at ragged lengths."""
    eos = list(range(4, len(tokenizer), 3))
    return HFEngine(model, pad_id=tokenizer.pad_token_id, eos_ids=eos), set(eos)


def test_masks_cover_tokens_up_to_and_including_eos(tiny):
    model, tokenizer = tiny
    torch.manual_seed(0)
    engine, eos = many_eos_engine(model, tokenizer)
    batch = engine.generate([encode_prompt(tokenizer, p) for p in PROMPTS], SamplingParams(n=4, max_new_tokens=6))
    assert batch.response_ids.shape == batch.response_mask.shape == batch.logprobs.shape
    assert batch.response_ids.shape[0] == len(PROMPTS) * 4
    lengths = batch.response_mask.sum(-1)
    assert len(set(lengths.tolist())) > 1, "expected ragged lengths"
    for row in range(batch.size):
        n = int(lengths[row])
        ids = batch.response_ids[row].tolist()
        assert batch.response_mask[row, :n].all() and not batch.response_mask[row, n:].any()
        assert all(t == tokenizer.pad_token_id for t in ids[n:])
        assert (batch.logprobs[row, n:] == 0).all() and (batch.logprobs[row, :n] < 0).all()
        ended = ids[n - 1] in eos
        assert not any(t in eos for t in ids[: n - 1]), "no EOS before the last valid token"
        assert bool(batch.truncated[row]) == (not ended)
        if not ended:
            assert n == 6


def test_group_index_is_contiguous_per_prompt(tiny):
    model, tokenizer = tiny
    batch = make_engine("hf", model, tokenizer).generate(
        [encode_prompt(tokenizer, p) for p in PROMPTS[:3]], SamplingParams(n=3, max_new_tokens=2)
    )
    assert batch.group_index.tolist() == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    # prompts are left-padded: the last prompt column is real text in every row
    assert batch.prompt_mask[:, -1].all()


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_sampling_logprobs_match_the_trainer_forward(tiny, temperature):
    model, tokenizer = tiny
    torch.manual_seed(1)
    engine, _ = many_eos_engine(model, tokenizer)
    batch = engine.generate([encode_prompt(tokenizer, p) for p in PROMPTS], SamplingParams(n=3, max_new_tokens=7, temperature=temperature))
    with torch.no_grad():
        logp, _ = response_logprobs(
            model, batch.prompt_ids, batch.prompt_mask, batch.response_ids, batch.response_mask, temperature=temperature
        )
    mask = batch.response_mask.bool()
    torch.testing.assert_close(logp[mask], batch.logprobs[mask], atol=1e-5, rtol=1e-5)


def test_greedy_batched_equals_one_prompt_at_a_time(tiny):
    """Rows that finish early drop out of the batch; that must not change the other rows."""
    model, tokenizer = tiny
    engine, _ = many_eos_engine(model, tokenizer)
    params = SamplingParams(n=1, max_new_tokens=8, temperature=0.0)
    encoded = [encode_prompt(tokenizer, p) for p in PROMPTS]
    together = engine.generate(encoded, params)
    for row, prompt in enumerate(encoded):
        alone = engine.generate([prompt], params)
        n = int(alone.response_mask.sum())
        assert together.response_ids[row, :n].tolist() == alone.response_ids[0, :n].tolist()
        assert int(together.response_mask[row].sum()) == n


def test_greedy_matches_transformers_generate(tiny):
    model, tokenizer = tiny
    prompt = encode_prompt(tokenizer, "12+34=")
    ours = make_engine("hf", model, tokenizer).generate([prompt], SamplingParams(max_new_tokens=6, temperature=0.0))
    ref = model.generate(torch.tensor([prompt]), max_new_tokens=6, do_sample=False, eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id)
    assert ours.response_ids[0].tolist() == ref[0, len(prompt):].tolist()[: ours.response_ids.shape[1]]


def test_batch_size_splits_generation_without_changing_shapes(tiny):
    model, tokenizer = tiny
    encoded = [encode_prompt(tokenizer, p) for p in PROMPTS]
    params = SamplingParams(n=2, max_new_tokens=5, temperature=0.0)
    whole = HFEngine(model, pad_id=tokenizer.pad_token_id, eos_ids=tokenizer.eos_token_id).generate(encoded, params)
    split = HFEngine(model, pad_id=tokenizer.pad_token_id, eos_ids=tokenizer.eos_token_id, batch_size=3).generate(encoded, params)
    assert torch.equal(whole.response_ids, split.response_ids)
    assert torch.equal(whole.response_mask, split.response_mask)


def test_chat_prompts_use_the_chat_template(tiny):
    _, tokenizer = tiny
    ids = encode_prompt(tokenizer, [{"role": "user", "content": "2+2="}])
    assert tokenizer.decode(ids) == "<s>user: 2+2=\nassistant: "
