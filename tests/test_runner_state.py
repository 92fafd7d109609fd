"""Nothing one reward call changes in its worker reaches the next call on the same worker: for each kind of
process-wide state, a call changes it, then a normal call on the same worker (one worker, so both land there) sees
the state a fresh worker has and gets its right verdict. Real worker processes."""

from __future__ import annotations

import platform
import time

import pytest
import runner_state_fns as sf

from rlvr.verifiers import CallableRequest, RewardRunner, Status


def call(runner, fn, reference=None):
    return runner.score([CallableRequest(fn, "x", reference, cache=False)])[0]


@pytest.fixture(scope="module")
def runner():
    with RewardRunner(workers=1, timeout_s=10.0, memory_mb=1024, cache_size=0) as r:
        yield r


@pytest.fixture(scope="module")
def fresh_state(runner):
    return call(runner, sf.probe).details["state"]


def after(runner, change, reference=None):
    """The state the next call sees after ``change`` ran on the same worker, and the change's own verdict."""
    v = call(runner, change, reference)
    return call(runner, sf.probe).details["state"], v


CHANGES = [  # (change, what it touches in the probe)
    (sf.change_decimal, ["decimal", "decimal_default"]),
    (sf.change_numpy, ["numpy"]),
    (sf.change_mpmath_and_sympy, ["mpmath", "sympy.core.parameters"]),
    (sf.change_leak_fds, ["open_fds"]),
    (sf.change_signals, ["signals", "sigterm"]),
    (sf.change_signals_below_python, ["signals", "sigterm"]),
    (sf.change_environment, ["env", "c_env", "c_env_only", "tz"]),
    (sf.change_streams, ["stdout", "stderr", "fds"]),
    (sf.change_interpreter, ["sys_path", "meta_path", "json", "len", "recursion", "int_digits", "warnings", "locale",
                             "gc", "trace"]),
]


@pytest.mark.parametrize("change, touched", CHANGES, ids=[c.__name__ for c, _ in CHANGES])
def test_the_next_call_sees_a_fresh_worker(runner, fresh_state, change, touched):
    seen, v = after(runner, change)
    assert v.score == 1.0, v
    for key in touched:
        assert key in fresh_state
        if fresh_state[key] == "not imported":  # the change imported it: the next call sees a fresh import's mode
            continue
        assert seen[key] == fresh_state[key], (key, seen[key], fresh_state[key])
    assert seen == {**fresh_state, **{k: seen[k] for k in fresh_state if fresh_state[k] == "not imported"}}


def test_library_modes_are_back_to_a_fresh_imports(runner):
    call(runner, sf.change_numpy)
    call(runner, sf.change_mpmath_and_sympy)
    seen = call(runner, sf.probe).details["state"]
    # put back in the same worker, or a fresh worker (one that retired after a change): either way, fresh modes
    assert seen["numpy"] in ("not imported",
                             repr(({"divide": "warn", "over": "warn", "under": "ignore", "invalid": "warn"}, 8)))
    assert seen["mpmath"] in ("not imported", "15")
    assert seen["sympy.core.parameters"] in ("not imported", "True")


@pytest.mark.parametrize("change, check, reference", [
    (sf.change_decimal, sf.check_decimal, "0.3333333333333333333333333333"),
    (sf.change_numpy, sf.check_numpy, "[0.33333333]"),
    (sf.change_mpmath_and_sympy, sf.check_sympy, "0.333333333333333"),
    (sf.change_signals, sf.check_alarm, None),
    (sf.change_signals_below_python, sf.check_alarm, None),
    (sf.change_environment, sf.check_child_environment, None),
    (sf.change_interpreter, sf.check_interpreter, None),
    (sf.change_plant_module, sf.check_planted, None),
], ids=lambda x: getattr(x, "__name__", "")[:30])
def test_a_changed_state_does_not_change_the_next_verdict(runner, change, check, reference):
    assert call(runner, change).score == 1.0
    v = call(runner, check, reference)
    assert (v.score, v.status) == (1.0, Status.CORRECT), v


def test_standard_descriptors_redirected_or_closed_are_put_back(runner, fresh_state, tmp_path):
    target = str(tmp_path / "captured.txt")
    assert call(runner, sf.change_std_fds, target).score == 1.0
    v = call(runner, sf.check_print, target)
    assert (v.score, v.status) == (1.0, Status.CORRECT), v
    assert call(runner, sf.probe).details["state"]["fds"] == fresh_state["fds"]
    assert open(target).read() == ""  # nothing of the next call went to the first call's file


def test_a_call_that_overwrites_the_channel_still_answers_and_the_next_is_scored(runner):
    v = call(runner, sf.change_channel)
    assert (v.score, v.status) == (1.0, Status.CORRECT), v  # the channel was put back from its copy
    assert call(runner, sf.check_print, "/nonexistent").score == 1.0


def test_a_call_that_closes_every_descriptor_costs_only_itself(runner):
    v = call(runner, sf.change_close_all_fds)
    assert v.status is Status.ERROR or v.score == 1.0, v  # it may not be able to answer at all
    for _ in range(3):
        assert call(runner, sf.check_print, "/nonexistent").score == 1.0


def test_an_added_audit_hook_retires_the_worker(runner, tmp_path):
    assert call(runner, sf.change_audit_hook).score == 1.0
    v = call(runner, sf.check_audit, str(tmp_path))
    assert (v.score, v.status) == (1.0, Status.CORRECT), v


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="FE_UPWARD's value is x86's")
def test_a_changed_rounding_mode_is_put_back(runner):
    nearest = (1.0 / 3.0).hex()
    assert call(runner, sf.change_rounding, "2048").score == 1.0  # FE_UPWARD
    assert call(runner, sf.check_rounding, nearest).score == 1.0
    assert call(runner, sf.probe).details["state"]["rounding"] == 0


def test_directory_and_umask_are_put_back(runner, fresh_state, tmp_path):
    seen, v = after(runner, sf.change_directory, str(tmp_path))
    assert v.score == 1.0 and seen["cwd"] == fresh_state["cwd"] and seen["umask"] == fresh_state["umask"]


def test_restoring_costs_little(runner):
    import reward_fns as rf

    call(runner, rf.match)
    t0 = time.perf_counter()
    for _ in range(50):
        assert runner.score([CallableRequest(rf.match, "a", "a", cache=False)])[0].score == 1.0
    per_call_ms = (time.perf_counter() - t0) / 50 * 1000
    assert per_call_ms < 20, per_call_ms


@pytest.mark.skipif(not hasattr(__import__("sys"), "monitoring"), reason="sys.monitoring is Python 3.12+")
def test_a_monitoring_tool_is_removed(runner):
    call(runner, sf.change_monitoring)
    v = call(runner, sf.check_monitoring)
    assert (v.score, v.status) == (1.0, Status.CORRECT), v


def test_a_seed_set_by_one_call_does_not_decide_the_next_calls_draws(runner):
    import random

    import numpy as np

    seeded = (random.Random(1234).random(), float(np.random.RandomState(1234).rand()))
    call(runner, sf.change_seeds)
    first = call(runner, sf.draws).details
    call(runner, sf.change_seeds)
    second = call(runner, sf.draws).details
    assert (first["random"], first["numpy"]) != seeded and first["random"] != seeded[0]
    assert first["numpy"] != seeded[1] and first != second
