"""Every scoring request carries the task's prompt and meta: rewards that need them (judges, tool-state rewards)
get them in training, evaluation and the adapters, through the one generate-and-score path."""

from __future__ import annotations

import pytest

from rlvr.config import config_from_dict
from rlvr.rollout.episodes import Scoring, score_requests
from rlvr.tasks import Task
from rlvr.train import train
from rlvr.train.metrics import read_metrics
from rlvr.verifiers import Verdict, register_verifier

SEEN: list[tuple] = []


@register_verifier("test.context", isolation="inline")
def _context(response, reference, *, prompt=None, meta=None, **_):
    SEEN.append((prompt, meta))
    ok = isinstance(prompt, str) and prompt.endswith("=") and (meta or {}).get("source") == "unit"
    return Verdict(1.0 if ok else 0.0, "correct" if ok else "incorrect", "context_seen" if ok else "context_missing")


def test_score_requests_carry_prompt_and_meta():
    task = Task("2+2=", "4", "t1", meta={"source": "unit"})
    [request] = score_requests([task], ["4"], Scoring("exact"))
    assert request.prompt == "2+2=" and request.meta == {"source": "unit"}


def test_training_rewards_see_the_prompt_and_meta(tiny_model_dir, tmp_path):
    data = tmp_path / "tasks.jsonl"
    data.write_text("".join(f'{{"prompt": "{a}+1=", "reference": "{a + 1}", "meta": {{"source": "unit"}}}}\n'
                            for a in range(5)))
    cfg = config_from_dict({"model": {"path": str(tiny_model_dir)},
                            "data": {"train": str(data), "verifier": "test.context", "prompts_per_step": 2},
                            "rollout": {"group_size": 2, "max_new_tokens": 3},
                            "train": {"steps": 1, "out": str(tmp_path / "run"), "progress": False}})
    SEEN.clear()
    rows = read_metrics(train(cfg))
    assert len(SEEN) == 4 and rows[0]["verifier_score_mean"] == 1.0


def test_policy_rewards_are_added_in_training(tiny_model_dir, tmp_path):
    """reward.policy adds rewards computed from the policy (here RLPR's reference probability and
    self-certainty) to the verifier's, each logged as reward/<name>; the total is their weighted sum."""
    cfg = config_from_dict({"model": {"path": str(tiny_model_dir)},
                            "data": {"train": "arithmetic:train:digits=1", "prompts_per_step": 2},
                            "rollout": {"group_size": 2, "max_new_tokens": 3},
                            "reward": {"policy": [{"source": "rlpr", "weight": 0.5},
                                                  {"source": "self_certainty", "weight": 0.1, "name": "certainty"}]},
                            "train": {"steps": 2, "out": str(tmp_path / "run"), "progress": False}})
    rows = read_metrics(train(cfg))
    for r in rows:
        expected = r["verifier_score_mean"] + 0.5 * r["reward/rlpr"] + 0.1 * r["reward/certainty"]
        assert r["reward_mean"] == pytest.approx(expected, abs=1e-5)
        assert 0.0 <= r["reward/rlpr"] <= 1.0 and r["reward/certainty"] > 0


def test_an_unknown_policy_reward_source_is_a_config_error():
    from rlvr.config import ConfigError

    with pytest.raises(ConfigError, match="unknown reward source 'rlrp'; known: .*rlpr"):
        config_from_dict({"reward": {"policy": [{"source": "rlrp"}]}})
