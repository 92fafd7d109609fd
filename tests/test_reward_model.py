"""A local sequence-classification reward model as the task verifier (data.verifier=reward_model)."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig, LlamaForSequenceClassification

from rlvr.config import config_from_dict
from rlvr.models.tiny import char_tokenizer
from rlvr.train import train
from rlvr.train.metrics import read_metrics
from rlvr.verifiers import verify

from conftest import one_digit_rl_config


def _reward_model(path, num_labels=1):
    tokenizer = char_tokenizer()
    torch.manual_seed(0)
    model = LlamaForSequenceClassification(LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=2, max_position_embeddings=64, num_labels=num_labels, pad_token_id=tokenizer.pad_token_id))
    with torch.no_grad():
        model.score.weight.mul_(20)  # spread the scores so that responses differ visibly
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path, model, tokenizer


@pytest.fixture(scope="module")
def rm(tmp_path_factory):
    return _reward_model(tmp_path_factory.mktemp("rm") / "rm")


@pytest.mark.parametrize("prompt, text", [
    ("12+30=", "12+30=42"),
    ([{"role": "user", "content": "12+30="}], None),  # rendered with the tokenizer's chat template
])
def test_the_score_is_the_models_probability_of_good(rm, prompt, text):
    path, model, tokenizer = rm
    if text is None:
        text = tokenizer.apply_chat_template([*prompt, {"role": "assistant", "content": "42"}], tokenize=False)
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    with torch.no_grad():
        expected = torch.sigmoid(model(input_ids=torch.tensor([ids])).logits[0, 0]).item()
    from rlvr.verifiers import ScoreRequest, score_batch

    verdict = score_batch([ScoreRequest("reward_model", "42", None, {"path": str(path)}, prompt=prompt)])[0]
    assert verdict.score == pytest.approx(expected, abs=1e-6)
    assert verdict.status.value == ("correct" if expected >= 0.5 else "incorrect") and verdict.reason == "reward_model"


def test_a_several_label_head_scores_the_last_label(tmp_path):
    path, model, tokenizer = _reward_model(tmp_path / "rm2", num_labels=2)
    ids = tokenizer("x=1", add_special_tokens=False)["input_ids"]
    with torch.no_grad():
        expected = torch.softmax(model(input_ids=torch.tensor([ids])).logits[0], -1)[1].item()
    assert verify("reward_model", "1", None, path=str(path), prompt="x=").score == pytest.approx(expected, abs=1e-6)


def test_a_folder_that_is_not_a_reward_model_is_one_error(tiny_model_dir):
    verdict = verify("reward_model", "1", None, path=str(tiny_model_dir))
    assert verdict.status.value == "error" and "not a sequence-classification reward model" in str(verdict.details)


def test_the_reward_model_rewards_a_training_run(rm, tiny_model_dir, tmp_path):
    path, _, _ = rm
    cfg = one_digit_rl_config(tiny_model_dir, tmp_path / "run", steps=2)
    cfg["data"].update(verifier="reward_model", verifier_options={"path": str(path)}, prompts_per_step=4)
    cfg["rollout"].update(group_size=4, max_new_tokens=4)
    rows = read_metrics(train(config_from_dict(cfg)))
    assert len(rows) == 2
    # continuous scores from the model: the random policy's answers are never exactly right, yet they are rewarded
    assert all(0.0 < r["reward_mean"] < 1.0 and r["reward_std"] > 0.0 for r in rows)
