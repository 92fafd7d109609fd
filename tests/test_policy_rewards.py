"""Policy-based rewards against hand computations on a bigram "model" whose next-token probabilities are a
fixed table, so every probability in a reward can be read off by eye."""

from __future__ import annotations

import math

import pytest
import torch

from rlvr.rewards import PolicyBatch, StdThreshold, compute, register_reward_source, reward_source_names, std_filter

# P[a] = next-token distribution after token a (vocabulary of 4)
P = torch.tensor([[0.5, 0.25, 0.125, 0.125],
                  [0.25, 0.5, 0.125, 0.125],
                  [0.7, 0.1, 0.1, 0.1],
                  [0.25, 0.25, 0.25, 0.25]])


def bigram(ids, mask):
    return P.log()[ids]  # logits[b, l] = log P[ids[b, l]]: a softmax gives P back


def batch(**extra):
    # row A: prompt [3] (left-padded), response [1, 2] with reasoning [1], reference [2, 3]
    # row B: prompt [0, 3], response [2, 1] (reasoning: both tokens), reference [1]
    return PolicyBatch(
        prompt_ids=torch.tensor([[0, 3], [0, 3]]), prompt_mask=torch.tensor([[0, 1], [1, 1]]),
        response_ids=torch.tensor([[1, 2], [2, 1]]), response_mask=torch.tensor([[1, 1], [1, 1]]),
        reasoning_mask=torch.tensor([[1, 0], [1, 1]]),
        reference_ids=torch.tensor([[2, 3], [1, 0]]), reference_mask=torch.tensor([[1, 1], [1, 0]]),
        index=torch.tensor([0, 0]), **extra)


def test_rlpr_by_hand():
    # A: sequence 3,1 | 2,3 -> p(2|1) = 0.125, p(3|2) = 0.1; without reasoning 3 | 2,3 -> p(2|3) = 0.25, p(3|2) = 0.1
    # B: sequence 0,3,2,1 | 1 -> p(1|1) = 0.5; without reasoning 0,3 | 1 -> p(1|3) = 0.25
    raw = compute("rlpr", batch(), bigram, debias=False)
    assert raw.tolist() == pytest.approx([(0.125 + 0.1) / 2, 0.5])
    debiased = compute("rlpr", batch(), bigram)
    assert debiased.tolist() == pytest.approx([0.0, 0.5 - 0.25])  # A: 0.1125 - 0.175 < 0 is clipped to 0


def test_verifree_by_hand():
    assert compute("verifree", batch(), bigram).tolist() == pytest.approx([0.125 * 0.1, 0.5])


def kl_uniform(p):
    return -math.log(len(p)) - sum(math.log(x) for x in p) / len(p)


def entropy(p):
    return -sum(x * math.log(x) for x in p)


def test_self_certainty_and_negative_entropy_by_hand():
    # A predicts its response tokens from P[3] (after the prompt) then P[1]; B from P[3] then P[2]
    p1, p2, p3 = P[1].tolist(), P[2].tolist(), P[3].tolist()
    sc = compute("self_certainty", batch(), bigram)
    assert sc.tolist() == pytest.approx([(kl_uniform(p3) + kl_uniform(p1)) / 2, (0.0 + kl_uniform(p2)) / 2])
    assert kl_uniform(p3) == pytest.approx(0.0)
    ne = compute("negative_entropy", batch(), bigram)
    assert ne.tolist() == pytest.approx([-(entropy(p3) + entropy(p1)) / 2, -(entropy(p3) + entropy(p2)) / 2])
    # the response mask counts: only B's first token
    b = batch()
    b.response_mask = torch.tensor([[1, 1], [1, 0]])
    assert compute("self_certainty", b, bigram)[1].item() == pytest.approx(0.0)


def test_logits_in_the_batch_are_used_without_the_model():
    logits = P.log()[torch.tensor([[3, 1], [3, 2]])]
    with_logits = compute("self_certainty", batch(logits=logits))
    assert torch.allclose(with_logits, compute("self_certainty", batch(), bigram))


def test_majority_vote_and_semantic_entropy_by_hand():
    b = PolicyBatch(answers=["4", "4", "5", None, "7", "8", "8", "7"], index=torch.tensor([0, 0, 0, 0, 1, 1, 1, 1]))
    # group 0: "4" has 2 votes; group 1: a 2-2 tie goes to "7", seen first
    assert compute("majority_vote", b).tolist() == [1, 1, 0, 0, 1, 0, 0, 1]
    assert compute("majority_vote", b, min_share=0.6).tolist() == [0] * 8  # no majority holds 60% of a group
    assert compute("semantic_entropy", b).tolist() == pytest.approx([0.5, 0.5, 0.25, 0.0, 0.5, 0.5, 0.5, 0.5])
    none = PolicyBatch(answers=[None, None], index=torch.tensor([0, 0]))
    assert compute("majority_vote", none).tolist() == [0, 0]


def test_std_filter_and_adaptive_threshold_by_hand():
    rewards = torch.tensor([0.0, 1.0, 0.5, 0.5, 0.2, 0.4])
    index = torch.tensor([0, 0, 1, 1, 2, 2])
    # population stds: group 0 -> 0.5, group 1 -> 0, group 2 -> 0.1
    assert std_filter(rewards, index, 0.1).tolist() == [True, True, False, False, True, True]
    assert std_filter(rewards, index, 0.2).tolist() == [True, True, False, False, False, False]
    threshold = StdThreshold(beta=0.0, momentum=0.5)
    assert threshold.update(rewards, index).tolist() == [True] * 6  # beta 0 keeps all, then...
    assert threshold.beta == pytest.approx(0.5 * 0.0 + 0.5 * (0.5 + 0.0 + 0.1) / 3)  # ...moves to 0.1


def test_needs_are_checked_and_names_listed():
    assert {"rlpr", "verifree", "self_certainty", "negative_entropy", "majority_vote",
            "semantic_entropy"} <= set(reward_source_names())
    with pytest.raises(ValueError, match="needs forward"):
        compute("rlpr", batch())
    with pytest.raises(ValueError, match="needs answers"):
        compute("majority_vote", PolicyBatch(index=torch.tensor([0])))
    with pytest.raises(KeyError, match="did you mean 'rlpr'"):
        compute("rlrp", batch(), bigram)
    with pytest.raises(ValueError, match="unknown needs"):
        register_reward_source("bad", needs=("model_weights",))


def test_a_real_tiny_model_gives_probabilities(tiny):
    model, tokenizer = tiny
    model.eval()
    enc = lambda s: torch.tensor([tokenizer(s, add_special_tokens=False)["input_ids"]])  # noqa: E731
    prompt, response, ref = enc("2+2="), enc("so"), enc("4")
    b = PolicyBatch(prompt_ids=prompt, prompt_mask=torch.ones_like(prompt), response_ids=response,
                    response_mask=torch.ones_like(response), reference_ids=ref, reference_mask=torch.ones_like(ref),
                    index=torch.tensor([0]))
    forward = lambda ids, mask: model(input_ids=ids, attention_mask=mask).logits  # noqa: E731
    full = torch.cat([prompt, response, ref], dim=1)
    expected = torch.softmax(model(input_ids=full).logits[0, -2], -1)[ref[0, 0]].item()
    assert compute("verifree", b, forward).item() == pytest.approx(expected, rel=1e-5)
    assert 0.0 <= compute("rlpr", b, forward).item() <= 1.0
