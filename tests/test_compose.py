"""Composed rewards: weights, gates, vetoes, schedules, length terms, and a composed reward in training."""

import re

import pytest

from rlvr.config import ConfigError, config_from_dict
from rlvr.train import train
from rlvr.train.metrics import read_metrics
from rlvr.verifiers.compose import RewardSpecError, compose, length_among_correct, parse_spec, soft_overlong_penalty

from conftest import one_digit_rl_config


def run(terms, scores, lengths=(1, 1), groups=(0, 0), max_len=10, step=0):
    return compose(parse_spec(terms), scores, lengths=list(lengths), max_len=max_len, groups=list(groups), step=step)


def test_weighted_sum():
    out = run([{"name": "a", "weight": 0.5}, {"name": "b", "weight": 2.0}], {"a": [1.0, 0.0], "b": [0.5, 1.0]})
    assert out.total == [1.5, 2.0]
    assert out.components == {"a": [1.0, 0.0], "b": [0.5, 1.0]}


def test_gate_zeroes_a_term_until_its_gate_passes():
    terms = [{"name": "format", "verifier": "format", "weight": 0.0},
             {"name": "correct", "weight": 1.0, "gate": "format"}]
    out = run(terms, {"format": [1.0, 0.0], "correct": [1.0, 1.0]})
    assert out.total == [1.0, 0.0]
    assert out.components["correct"] == [1.0, 0.0]


def test_hierarchy_of_gates_syntax_function_quality():
    terms = [{"name": "syntax", "weight": 0.1},
             {"name": "function", "weight": 0.5, "gate": "syntax"},
             {"name": "quality", "weight": 0.4, "gate": "function", "gate_min": 1.0}]
    scores = {"syntax": [1, 1, 0], "function": [1, 0, 1], "quality": [0.5, 0.9, 0.9]}
    out = run(terms, scores, lengths=(1, 1, 1), groups=(0, 0, 0))
    assert out.total == pytest.approx([0.1 + 0.5 + 0.2, 0.1, 0.0])


def test_veto_replaces_the_total():
    terms = [{"name": "safe", "weight": 0.0, "veto": True, "veto_value": -1.0}, {"name": "correct"}]
    out = run(terms, {"safe": [1.0, 0.0], "correct": [1.0, 1.0]})
    assert out.total == [1.0, -1.0] and out.vetoed == [False, True]


@pytest.mark.parametrize("weight, step, expected", [
    ({"start": 0.0, "end": 1.0, "steps": 100}, 0, 0.0),
    ({"start": 0.0, "end": 1.0, "steps": 100}, 50, 0.5),
    ({"start": 0.0, "end": 1.0, "steps": 100}, 500, 1.0),
    ([[0, 1.0], [10, 0.0], [20, 0.5]], 5, 0.5),
    ([[0, 1.0], [10, 0.0], [20, 0.5]], 15, 0.25),
    ([[0, 1.0], [10, 0.0], [20, 0.5]], 99, 0.5),
])
def test_scheduled_weights(weight, step, expected):
    out = run([{"name": "a", "weight": weight}], {"a": [1.0, 1.0]}, step=step)
    assert out.total == pytest.approx([expected, expected])


@pytest.mark.parametrize("length, expected", [(5, 0.0), (8, 0.0), (9, -0.5), (10, -1.0), (12, -1.0)])
def test_dapo_soft_overlong_penalty(length, expected):
    assert soft_overlong_penalty(length, max_len=10, buffer_len=2) == pytest.approx(expected)
    out = run([{"name": "len", "kind": "overlong", "buffer_frac": 0.2}], {}, lengths=(length,), groups=(0,))
    assert out.total == pytest.approx([expected])


def test_length_reward_is_compared_among_correct_answers_only():
    lengths = [10, 20, 30, 5, 40, 40]
    correct = [True, True, True, False, True, True]
    groups = [0, 0, 0, 0, 1, 1]
    assert length_among_correct(lengths, correct, groups) == [1.0, 0.5, 0.0, 0.0, 0.0, 0.0]
    terms = [{"name": "correct"}, {"name": "short", "kind": "length_among_correct", "correct": "correct", "weight": 0.2}]
    out = run(terms, {"correct": [1, 1, 1, 0, 1, 1]}, lengths=lengths, groups=groups)
    assert out.total == pytest.approx([1.2, 1.1, 1.0, 0.0, 1.0, 1.0])


def test_batch_normalisation():
    out = run([{"name": "a", "normalize": "batch"}], {"a": [0.0, 2.0]})
    assert out.components["a"] == pytest.approx([-0.7071067811865475, 0.7071067811865475])


@pytest.mark.parametrize("terms, message", [
    ([{"name": "a", "wieght": 1}], "unknown key 'wieght' (did you mean 'weight'?)"),
    ([{"weight": 1}], "'name' is required"),
    ([{"name": "a", "gate": "b"}], "unknown term 'b'"),
    ([{"name": "a", "gate": "b"}, {"name": "b", "gate": "a"}], "cycle"),
    ([{"name": "a"}, {"name": "a"}], "used twice"),
    ([{"name": "a", "kind": "lenght"}], "kind: expected one of"),
    ([{"name": "a", "weight": {"start": 0, "stop": 1}}], "unknown schedule key"),
    ([{"name": "s", "kind": "length_among_correct"}], "name the term that marks a correct answer"),
])
def test_bad_specs_name_the_term_and_key(terms, message):
    with pytest.raises(RewardSpecError, match=re.escape(message)):
        parse_spec(terms)


def test_bad_terms_fail_at_config_time():
    with pytest.raises(ConfigError, match=r"reward.terms\[0\] \(x\).kind"):
        config_from_dict({"reward": {"terms": [{"name": "x", "kind": "nope"}]}})


def test_composed_reward_trains_and_logs_components(warm_model_dir, tmp_path):
    """Format gate (the answer must be digits only) + correctness + DAPO overlong penalty, in a real run: every
    step logs each term, and the logged total is the weighted sum of the logged (gated) terms."""
    cfg = one_digit_rl_config(warm_model_dir, tmp_path, steps=4)
    cfg["reward"] = {"terms": [
        {"name": "digits", "verifier": "regex", "reference": {"pattern": r"\d+"}, "weight": 0.1},
        {"name": "correct", "verifier": "task", "weight": 1.0, "gate": "digits"},
        {"name": "overlong", "kind": "overlong", "buffer_frac": 0.5, "weight": 1.0},
    ]}
    rows = read_metrics(train(config_from_dict(cfg)))
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    for r in rows:
        digits, correct, overlong = r["reward/digits"], r["reward/correct"], r["reward/overlong"]
        assert 0.0 <= correct <= digits <= 1.0  # the gate zeroes "correct" wherever "digits" failed
        assert -1.0 <= overlong <= 0.0
        assert r["reward_mean"] == pytest.approx(0.1 * digits + correct + overlong, abs=1e-6)
    assert any(r["reward/correct"] > 0 for r in rows)  # the warm model answers some tasks: the gate is not stuck shut


# L_max = 20, L_cache = 4: penalty zone (16, 20]
SOFT_CASES = [
    # (name, length, max_len, buffer_len, factor, expected)
    ("below", 10, 20, 4, 1.0, 0.0),
    ("at_boundary", 16, 20, 4, 1.0, 0.0),
    ("inside_buffer", 17, 20, 4, 1.0, -0.25),
    ("inside_buffer_2", 18, 20, 4, 1.0, -0.5),
    ("at_max", 20, 20, 4, 1.0, -1.0),
    ("beyond", 25, 20, 4, 1.0, -1.0),
    ("factor", 18, 20, 4, 0.5, -0.25),
    ("factor_beyond", 30, 20, 4, 2.0, -2.0),
    ("buffer_zero_below", 10, 20, 0, 1.0, 0.0),
    ("buffer_zero_beyond", 30, 20, 0, 1.0, 0.0),
    ("buffer_is_max", 5, 20, 20, 1.0, -0.25),
    ("float_length", 17.0, 20, 4, 1.0, -0.25),
]


@pytest.mark.parametrize("name,length,max_len,buffer_len,factor,expected", SOFT_CASES, ids=[c[0] for c in SOFT_CASES])
def test_soft_overlong_penalty_table(name, length, max_len, buffer_len, factor, expected):
    assert soft_overlong_penalty(length, max_len, buffer_len, factor) == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize("max_len,buffer_len", [(10, 11), (10, -1), (-1, 0)])
def test_soft_overlong_penalty_bad_args(max_len, buffer_len):
    with pytest.raises(ValueError, match="buffer_len"):
        soft_overlong_penalty(5, max_len, buffer_len)


def test_algo_overlong_keys_and_an_overlong_term_cannot_both_be_on():
    with pytest.raises(ConfigError, match="overlong term"):
        config_from_dict({"algo": {"overlong_buffer_frac": 0.2},
                          "reward": {"terms": [{"name": "c", "verifier": "task"}, {"name": "o", "kind": "overlong"}]}})


def test_algo_overlong_keys_become_the_overlong_term():
    from rlvr.train.run import reward_spec

    spec = reward_spec(config_from_dict({"algo": {"overlong_buffer_frac": 0.25, "overlong_penalty_factor": 0.5}}))
    overlong = next(t for t in spec.terms if t.kind == "overlong")
    assert (overlong.buffer_frac, overlong.penalty_factor) == (0.25, 0.5)
    assert any(t.uses_task_verifier for t in spec.verifier_terms())
