"""The EAD and RLCR recipes train 3 steps from the command line on examples/arithmetic.yaml and log their own metrics:
`rlvr train examples/arithmetic.yaml algo.recipe=ead|rlcr` (OPD, which needs a teacher: tests/test_distill.py)."""

import pytest

from rlvr.algos import recipes
from rlvr.cli import main
from rlvr.train.metrics import read_metrics
from rlvr.verifiers.registry import get_verifier


def run(model, out, *extra):
    assert main(["train", "examples/arithmetic.yaml", f"model.path={model}", f"train.out={out}", "train.steps=3",
                 "data.prompts_per_step=4", "rollout.group_size=4", "rollout.max_new_tokens=5",
                 "train.progress=false", *extra]) == 0
    rows = read_metrics(out)
    assert [r["step"] for r in rows] == [1, 2, 3]
    return rows


EAD_METRICS = ["rollout_kl", "rollout_ratio_mean", "rollout_ratio_max", "mismatch/token_log_ratio_abs_max"]


def test_ead_recipe_logs_the_annealed_samplers_mismatch(tiny_model_dir, tmp_path):
    """The authors' schedule keeps the first 10 positions at temperature 1: on 5-token answers the behaviour policy
    is the trained one, and the TIS correction sees (almost) no mismatch."""
    rows = run(tiny_model_dir, tmp_path, "algo.recipe=ead")
    assert all(k in r for r in rows for k in EAD_METRICS)
    assert all(r["rollout_kl"] < 1e-6 for r in rows)


def test_ead_annealing_from_the_first_position_is_corrected(tiny_model_dir, tmp_path):
    """start=0: every position is sampled at tau_t ~ 1.2 (the other keys the schedule's defaults, the authors'), so
    the logged behaviour log-probs differ from the trainer's at temperature 1 and TIS weights them."""
    rows = run(tiny_model_dir, tmp_path, "algo.recipe=ead", "rollout.temperature_schedule.start=0")
    assert all(r["rollout_kl"] > 1e-4 for r in rows), [r["rollout_kl"] for r in rows]
    assert all(r["rollout_ratio_mean"] != 1.0 for r in rows)


def test_rlcr_recipe_logs_the_calibration_reward(tiny_model_dir, tmp_path):
    """An untrained model states no confidence: every answer is a format failure, scored -2 by the rlcr term, which
    replaces the task verifier's reward; the verifier's own accuracy is still logged beside it."""
    rows = run(tiny_model_dir, tmp_path, "algo.recipe=rlcr")
    for r in rows:
        assert r["reward/rlcr"] == -2.0 and r["reward_mean"] == -2.0
        assert "verifier_score_mean" in r


@pytest.mark.parametrize("response, reference, expected", [
    ("42 <confidence>0.8</confidence>", "42", 0.96),   # the spec's numbers: correct, q = 0.8
    ("41 <confidence>0.8</confidence>", "42", -0.64),  # wrong, q = 0.8
    ("41 <confidence>0</confidence>", "42", 0.0),      # wrong, q = 0
    ("42 <confidence>1</confidence>", "42", 1.0),      # correct, q = 1
    ("42", "42", -2.0),                                # no stated confidence: a format failure
])
def test_rlcr_recipes_term_scores_the_spec_numbers(response, reference, expected):
    (term,) = recipes.get("rlcr").settings["reward.terms"]
    verdict = get_verifier(term["verifier"])(response, reference, **term["options"])
    assert verdict.score == pytest.approx(expected, abs=1e-9)
