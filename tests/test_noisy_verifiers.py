"""Noisy verifiers: the `noisy` wrapper (flips at set rates, reproducible, order-free) and the backward / forward
corrections with the check of which advantage estimators cancel them (spec numbers in float64, abs 1e-6)."""

import random

import pytest
import torch

from rlvr.algos import advantages, noise
from rlvr.verifiers import Status, score_batch, ScoreRequest, verify
from rlvr.verifiers import calibrated as _calibrated  # noqa: F401  (registers "calibrated" and "noisy")

RHO0, RHO1 = 0.1, 0.2


# ------------------------------------------------------------------------------------------------ corrections

@pytest.mark.parametrize("observed, expected", [(1.0, 1.285714), (0.0, -0.142857)])
def test_backward_correction_spec_numbers(observed, expected):
    out = noise.backward(torch.tensor([observed], dtype=torch.float64), RHO0, RHO1)
    assert float(out) == pytest.approx(expected, abs=1e-6)


@pytest.mark.parametrize("observed, expected", [(1.0, 0.2), (0.0, -0.8)])
def test_forward_correction_spec_numbers(observed, expected):
    out = noise.forward(torch.tensor([observed], dtype=torch.float64), RHO1)
    assert float(out) == pytest.approx(expected, abs=1e-6)


def test_backward_is_unbiased_under_the_channel():
    # E[R^ | R] = R: average the map over the channel's two outcomes
    for true, p_one in ((1.0, 1 - RHO1), (0.0, RHO0)):
        one, zero = noise.backward(torch.tensor([1.0, 0.0], dtype=torch.float64), RHO0, RHO1).tolist()
        assert p_one * one + (1 - p_one) * zero == pytest.approx(true, abs=1e-12)


def test_grpo_is_invariant_to_the_backward_map():
    rewards = torch.tensor([1, 0, 0, 1, 1, 1, 0, 1, 0, 0, 0, 0], dtype=torch.float64)
    index = torch.arange(3).repeat_interleave(4)
    mask = torch.ones(12, 3, dtype=torch.long)
    plain = advantages.compute("grpo", rewards, index, mask)
    corrected = advantages.compute("grpo", noise.backward(rewards, RHO0, RHO1), index, mask)
    assert torch.allclose(corrected, plain, atol=1e-6, rtol=0)
    assert plain.abs().sum() > 0  # the test would pass trivially on all-zero advantages


def test_forward_as_psr_nsr_matches_the_forward_weights():
    rewards = torch.tensor([1.0, 0.0, 1.0, 0.0], dtype=torch.float64)
    mask = torch.ones(4, 2, dtype=torch.long)
    as_estimator = advantages.compute("psr_nsr", rewards, torch.zeros(4, dtype=torch.long), mask,
                                      **noise.forward_as_psr_nsr(RHO1))
    assert torch.allclose(as_estimator[:, 0], noise.forward(rewards, RHO1), atol=1e-12)


@pytest.mark.parametrize("kind, estimator, verdict", [
    ("backward", "grpo", "cancels"),
    ("forward", "grpo", "cancels"),
    ("forward", "dr_grpo", "cancels"),
    ("forward", "rloo", "cancels"),
    ("forward", "reinforce_pp", "cancels"),
    ("forward", "remax", "cancels"),
    ("backward", "reinforce_pp_baseline", "cancels"),
    ("backward", "psr_nsr", "cancels"),           # psr_nsr reads the reward against its 0.5 threshold
    ("backward", "dr_grpo", "rescales"),
    ("backward", "rloo", "rescales"),
    ("backward", "remax", "rescales"),
    ("forward", "psr_nsr", "no longer rank"),    # every forward weight is below the threshold
    ("forward", "w_reinforce", "no longer rank"),
    ("backward", "gae", None),                    # a critic's values: the probe cannot decide
    ("forward", "gae", None),
])
def test_which_estimator_cancels_which_correction(kind, estimator, verdict):
    problem = noise.noise_correction_problem(kind, estimator, false_positive=RHO0, false_negative=RHO1)
    if verdict is None:
        assert problem is None
    else:
        assert problem is not None and verdict in problem
        assert f"algo.advantage={estimator}" in problem and f"reward.noise.kind={kind}" in problem


def test_rescale_message_gives_the_factor():
    problem = noise.noise_correction_problem("backward", "dr_grpo", false_positive=RHO0, false_negative=RHO1)
    assert "1.42857" in problem  # 1 / (1 - 0.1 - 0.2)


def test_an_estimator_that_keeps_the_reward_scale_is_accepted():
    # a baseline-free REINFORCE estimator of one's own: the backward map changes its advantages, no problem
    @advantages.register("_plain_reinforce_for_test")
    def plain(rewards, index, response_mask, **_):
        return advantages.broadcast(rewards, response_mask)

    try:
        assert noise.noise_correction_problem("backward", "_plain_reinforce_for_test") is None
    finally:
        advantages._REGISTRY.unregister("_plain_reinforce_for_test")


@pytest.mark.parametrize("kind, estimator, fp, fn, message", [
    ("sideways", "grpo", 0.1, 0.2, "reward.noise.kind: expected one of backward, forward"),
    ("backward", "no_such_estimator", 0.1, 0.2, "algo.advantage: unknown advantage estimator"),
    ("backward", "gae", 0.6, 0.5, "must be below 1"),
    ("forward", "gae", -0.1, 0.2, "false_positive: expected a rate"),
    ("forward", "gae", 0.1, float("nan"), "false_negative: expected a rate"),
    ("backward", "gae", 0.0, 0.0, "backward correction is the identity"),
])
def test_bad_settings_are_reported(kind, estimator, fp, fn, message):
    problem = noise.noise_correction_problem(kind, estimator, false_positive=fp, false_negative=fn)
    assert problem is not None and message in problem


def test_maps_refuse_rates_without_information():
    with pytest.raises(ValueError, match="below 1"):
        noise.backward(torch.tensor([1.0]), 0.5, 0.5)


# ------------------------------------------------------------------------------------------------ the wrapper

def _noisy(response, reference, **options):
    return verify("noisy", response, reference, **options)


def test_no_noise_passes_the_inner_verdict_through():
    v = _noisy("42", "42")
    assert (v.score, v.status) == (1.0, Status.CORRECT) and v.details["noisy"]["flipped"] is False
    v = _noisy("41", "42")
    assert (v.score, v.status) == (0.0, Status.INCORRECT)


def test_full_noise_flips_every_verdict():
    v = _noisy("42", "42", false_negative=1.0)
    assert (v.score, v.status, v.reason) == (0.0, Status.INCORRECT, "noisy_false_negative")
    v = _noisy("41", "42", false_positive=1.0)
    assert (v.score, v.status, v.reason) == (1.0, Status.CORRECT, "noisy_false_positive")
    assert v.details["noisy"]["inner"]["status"] == "incorrect"


def test_flip_rates_match_the_options():
    n = 2000
    right = [_noisy(f"{i} ", f"{i}", false_negative=0.3, seed=7) for i in range(n)]
    wrong = [_noisy(f"{i}x", f"{i}", false_positive=0.1, seed=7) for i in range(n)]
    fn_rate = sum(v.status is Status.INCORRECT for v in right) / n
    fp_rate = sum(v.status is Status.CORRECT for v in wrong) / n
    assert fn_rate == pytest.approx(0.3, abs=0.035)  # ~3.5 standard errors
    assert fp_rate == pytest.approx(0.1, abs=0.025)


def test_flips_are_reproducible_and_independent_of_order():
    items = [(f"{i}", f"{i % 3}") for i in range(60)]
    requests = [ScoreRequest("noisy", r, ref, {"false_negative": 0.5, "false_positive": 0.5, "seed": 3})
                for r, ref in items]
    first = {(r.response, r.reference): v.score for r, v in zip(requests, score_batch(requests))}
    shuffled = requests[:]
    random.Random(1).shuffle(shuffled)
    second = {(r.response, r.reference): v.score for r, v in zip(shuffled, score_batch(shuffled))}
    assert first == second
    assert 0 < sum(first.values()) < len(first)  # some flipped, some not


def test_the_seed_changes_which_verdicts_flip():
    a = [_noisy(f"{i}", f"{i}", false_negative=0.5, seed=1).score for i in range(64)]
    b = [_noisy(f"{i}", f"{i}", false_negative=0.5, seed=2).score for i in range(64)]
    assert a != b


def test_undecided_inner_verdicts_pass_unchanged():
    v = _noisy("42", None, false_negative=1.0, false_positive=1.0)  # exact: a null reference is an error verdict
    assert v.status is Status.ERROR and v.reason != "noisy_false_positive"


@pytest.mark.parametrize("options, message", [
    ({"false_negative": 1.5}, "false_negative: expected a rate in [0, 1]"),
    ({"false_positive": "high"}, "false_positive: expected a rate"),
    ({"inner": "no_such_verifier"}, "unknown verifier"),
    ({"inner_options": [1]}, "inner_options: expected a mapping"),
    ({"seed": 1.5}, "seed: expected an integer"),
])
def test_bad_options_are_error_verdicts(options, message):
    v = _noisy("42", "42", **options)
    assert v.status is Status.ERROR and message in v.details["error"]


@pytest.mark.parametrize("response", ["", "\x00" * 10, "42" * 50_000, "<confidence>", "\ud800"])
def test_odd_responses_never_raise(response):
    v = _noisy(response, "42", false_negative=0.5, false_positive=0.5)
    assert v.status in (Status.CORRECT, Status.INCORRECT, Status.ERROR)


def test_inner_options_reach_the_inner_verifier():
    assert _noisy("ABC", "abc", inner_options={"case_sensitive": True}).status is Status.INCORRECT
    assert _noisy("ABC", "abc").status is Status.CORRECT


def test_noisy_over_a_process_isolated_verifier():
    # "regex" runs in the runner's supervised workers: the wrapper goes through the runner for it
    v = _noisy("the answer is 42", {"pattern": "4+2", "mode": "search"}, inner="regex", false_negative=1.0)
    assert v.reason == "noisy_false_negative" and v.details["noisy"]["inner"]["status"] == "correct"


def test_calibrated_over_noisy_scores_the_flipped_correctness():
    v = verify("calibrated", "42 <confidence>0.8</confidence>", "42", inner="noisy",
               inner_options={"false_negative": 1.0})
    assert v.score == pytest.approx(-0.64) and v.details["correct"] is False
    assert v.details["inner"]["reason"] == "noisy_false_negative"
