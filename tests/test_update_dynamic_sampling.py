"""DAPO's dynamic sampling keeps a group when its answers' correctness differs (Yu et al., 2025, Eq. 11:
0 < |{o_i | is_equivalent(a, o_i)}| < G; verl's filter_groups on metric "acc"): the task verifier's scores, not the
composed reward, whose soft overlong penalty differs between responses of different lengths. A group of all-wrong
(or all-right) answers of different lengths is dropped; ``metric="reward"`` (algo.dynamic_sampling_metric) keeps the
old behaviour for whoever wants it."""

from __future__ import annotations

import pytest
import torch

from rlvr.rollout import SamplingParams
from rlvr.rollout.base import RolloutBatch
from rlvr.rollout.episodes import Scoring, ScoredSamples
from rlvr.tasks import PromptSampler
from rlvr.tasks.base import Task
from rlvr.train import rollouts
from rlvr.verifiers import Verdict
from rlvr.verifiers.base import Status
from rlvr.verifiers.compose import soft_overlong_penalty

N, MAX_LEN, BUFFER = 4, 16, 8

# per task: each response's verifier score and length; lengths beyond MAX_LEN - BUFFER = 8 are penalised
SCRIPT = {
    "all_wrong_lengths": ([0, 0, 0, 0], [4, 10, 13, 16]),
    "all_right_lengths": ([1, 1, 1, 1], [9, 11, 12, 16]),
    "mixed": ([1, 0, 0, 0], [5, 5, 5, 5]),
    "all_wrong_short": ([0, 0, 0, 0], [3, 4, 5, 6]),
    "mixed_long": ([0, 1, 1, 0], [15, 16, 9, 12]),
    "partial_credit_equal": ([0.5, 0.5, 0.5, 0.5], [2, 12, 14, 16]),
}


class _Tokenizer:
    pad_token_id = 0


def _scored(tasks: list[Task]) -> ScoredSamples:
    """What the generate-and-score path returns for SCRIPT: reward = verifier score + DAPO's soft overlong penalty."""
    rows = [(t, score, length) for t in tasks for score, length in zip(*SCRIPT[t.id])]
    width = max(length for _, _, length in rows)
    response_mask = torch.tensor([[1] * length + [0] * (width - length) for _, _, length in rows])
    batch = RolloutBatch(
        prompt_ids=torch.ones(len(rows), 2, dtype=torch.long), prompt_mask=torch.ones(len(rows), 2, dtype=torch.long),
        response_ids=response_mask.clone(), response_mask=response_mask, logprobs=torch.zeros(len(rows), width),
        truncated=torch.tensor([length >= MAX_LEN for _, _, length in rows]),
        group_index=torch.arange(len(tasks)).repeat_interleave(N),
    )
    verdicts = [Verdict(float(s), Status.CORRECT if s == 1 else Status.INCORRECT, "scripted") for _, s, _ in rows]
    penalty = [soft_overlong_penalty(length, MAX_LEN, BUFFER) for _, _, length in rows]
    return ScoredSamples(batch, [t for t, _, _ in rows], ["x"] * len(rows), verdicts,
                         [float(s) + p for (_, s, _), p in zip(rows, penalty)], {"overlong": penalty})


@pytest.fixture
def scripted(monkeypatch):
    monkeypatch.setattr(rollouts, "generate_and_score", lambda engine, tokenizer, tasks, *a, **kw: _scored(tasks))


def _collect(order: list[str], metric: str | None, prompts: int = 2, max_rounds: int = 3):
    sampler = PromptSampler([Task("q", 0, name) for name in order], seed=0, shuffle=False)
    kw = {} if metric is None else {"metric": metric}
    samples, metrics = rollouts.collect_rollouts(
        None, _Tokenizer(), sampler, SamplingParams(n=N, max_new_tokens=MAX_LEN), Scoring(), prompts=prompts,
        dynamic_sampling=True, max_rounds=max_rounds, **kw)
    return list(dict.fromkeys(t.id for t in samples.tasks)), metrics


@pytest.mark.parametrize("order, kept, rounds", [
    (["all_wrong_lengths", "all_right_lengths", "mixed", "all_wrong_short", "mixed_long", "mixed"],
     ["mixed", "mixed_long"], 3),
    (["partial_credit_equal", "mixed_long", "all_wrong_lengths", "mixed"], ["mixed_long", "mixed"], 2),
])
@pytest.mark.parametrize("metric", [None, "score"])  # None: the default
def test_groups_whose_scores_are_equal_are_dropped_whatever_their_lengths(scripted, order, kept, rounds, metric):
    tasks, metrics = _collect(order, metric)
    assert tasks == kept
    assert metrics["sampling_rounds"] == rounds and metrics["informative_groups"] == 2
    assert metrics["dynamic_sampling_cap_hit"] == 0


def test_penalties_alone_keep_no_group(scripted):
    """Only all-wrong and all-right groups: no group is informative, the cap is hit, and the first round is
    trained on (its advantages are zero)."""
    tasks, metrics = _collect(["all_wrong_lengths", "all_right_lengths", "partial_credit_equal", "all_wrong_short"],
                              None, max_rounds=2)
    assert metrics["informative_groups"] == 0 and metrics["dynamic_sampling_cap_hit"] == 1
    assert tasks == ["all_wrong_lengths", "all_right_lengths"]


def test_reward_metric_counts_the_overlong_penalty(scripted):
    tasks, metrics = _collect(["all_wrong_lengths", "all_right_lengths", "mixed"], "reward")
    assert tasks == ["all_wrong_lengths", "all_right_lengths"] and metrics["sampling_rounds"] == 1


def test_unknown_metric_is_one_clear_error(scripted):
    with pytest.raises(ValueError, match=r"algo.dynamic_sampling_metric: expected one of score, reward, got 'acc'"):
        _collect(["mixed"], "acc")


@pytest.mark.parametrize("metric, kept", [(None, ["mixed", "mixed_long"]),
                                           ("reward", ["all_wrong_lengths", "all_right_lengths"])])
def test_the_step_filters_on_the_configured_metric(scripted, metric, kept):
    """collect_step reads algo.dynamic_sampling_metric, and scores when the config has no such key."""
    from types import SimpleNamespace

    from rlvr.train.reward_errors import RewardErrorLog

    from rlvr.config import config_from_dict
    from rlvr.train.collector import collect_step

    cfg = config_from_dict({"model": {"path": "unused"}, "data": {"train": "arithmetic:train", "prompts_per_step": 2},
                            "algo": {"recipe": "dapo", "dynamic_sampling_max_batches": 3}})
    if metric is not None:
        object.__setattr__(cfg.algo, "dynamic_sampling_metric", metric)
    order = ["all_wrong_lengths", "all_right_lengths", "mixed", "all_wrong_short", "mixed_long", "mixed"]
    run = SimpleNamespace(cfg=cfg, engine=None, tokenizer=_Tokenizer(), scoring=Scoring(), prompt_policy=None, stages={},
                          sampler=PromptSampler([Task("q", 0, name) for name in order], seed=0, shuffle=False),
                          params=SamplingParams(n=N, max_new_tokens=MAX_LEN),
                          reward_errors=RewardErrorLog(None, "exact"))
    run.params_at = lambda step: run.params
    samples, collected, _ = collect_step(run, 1)
    assert list(dict.fromkeys(t.id for t in samples.tasks)) == kept
