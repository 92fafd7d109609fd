"""A deadline is a promise: a pooled call's verdict reaches the caller by its timeout plus the runner's stated
grace (``pool.DEADLINE_GRACE_S``), measured from the call (a worker's start-up counts), whatever the callee does
and however loaded the machine is. Every test here runs beside two busy loops it starts itself."""

from __future__ import annotations

import subprocess
import time

import pytest
import reward_fns as rf
from procs import still_works, warm

from rlvr.verifiers import CallableRequest, RewardRunner, ScoreRequest, Status
from rlvr.verifiers.runner.pool import DEADLINE_GRACE_S

TIMEOUT_S = 2.0
# What this test machine (2 shared cores, the busy loops below, other jobs) may add to the promised bound: the
# caller's own wake-up after the verdict is set, and the Python work around the call.
MARGIN_S = 0.75
BOUND_S = TIMEOUT_S + DEADLINE_GRACE_S + MARGIN_S


@pytest.fixture(autouse=True)
def load():
    """Two busy loops beside the test, for its whole duration."""
    loops = [subprocess.Popen(["sh", "-c", "while :; do :; done"]) for _ in range(2)]
    try:
        yield
    finally:
        for p in loops:
            p.kill()
            p.wait()


_SQL_REF = {"gold": "SELECT 1", "schema": "CREATE TABLE t(x INT);"}
_COUNT_FOREVER = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c"
_QUADRATIC = ("WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 200000) "
              "SELECT count(*) FROM c AS a, c AS b WHERE a.x + b.x = -1")
_NO_STEP_CAP = {"max_steps": 10**15}

# name -> (request without its timeout, the status it must get, the reason or None)
CASES = {
    "sleeps ignoring SIGTERM/SIGINT/SIGHUP": (CallableRequest(rf.ignores_sigterm_and_sleeps, "x", None),
                                              Status.TIMEOUT, "timeout"),
    "blocks every signal": (CallableRequest(rf.blocks_signals_and_sleeps, "x", None), Status.TIMEOUT, "timeout"),
    "waits for a child that ignores signals and left the group": (
        CallableRequest(rf.forks_stubborn_child_and_waits, "x", None), Status.TIMEOUT, "timeout"),
    "busy loop": (CallableRequest(rf.busy_loop, "x", None), Status.TIMEOUT, "timeout"),
    "honest answer 0.4 s past the budget": (CallableRequest(rf.just_too_late, "x", 0.4), Status.TIMEOUT, "timeout"),
    "verdict whose repr sleeps": (CallableRequest(rf.slow_to_encode, "x", "repr"), Status.TIMEOUT, "timeout"),
    "verdict whose score property sleeps": (CallableRequest(rf.slow_to_encode, "x", "score"), Status.TIMEOUT,
                                            "timeout"),
    # never unpickled by the caller: its sleeping __reduce__/__setstate__ never run, so it is credited in time
    "verdict whose pickling hooks sleep": (CallableRequest(rf.slow_to_encode, "x", "state"), Status.CORRECT, None),
    "verdict of 64 MiB": (CallableRequest(rf.huge_result, "x", 64), Status.ERROR, "result_too_large"),
    "verdict of half a MiB": (CallableRequest(rf.big_result, "x", 0.5), Status.CORRECT, "big"),
    "catastrophic regex (fullmatch)": (ScoreRequest("regex", "a" * 40 + "!", "(a+)+$"), Status.TIMEOUT, "timeout"),
    "catastrophic regex (search)": (ScoreRequest("regex", "x" * 36 + "y", {"pattern": "(x|x)*z", "mode": "search"}),
                                    Status.TIMEOUT, "timeout"),
    "SQL that never ends": (ScoreRequest("sql", _COUNT_FOREVER, _SQL_REF, _NO_STEP_CAP), Status.TIMEOUT, "timeout"),
    "quadratic SQL join": (ScoreRequest("sql", _QUADRATIC, _SQL_REF, _NO_STEP_CAP), Status.TIMEOUT, "timeout"),
}


def _with_timeout(request, timeout_s):
    options = {**(request.options or {}), "timeout_s": timeout_s}
    if isinstance(request, ScoreRequest):
        return ScoreRequest(request.verifier, request.response, request.reference, options)
    return CallableRequest(request.fn, request.response, request.reference, options, cache=False)


def _timed(runner, requests):
    t0 = time.monotonic()
    verdicts = runner.score(requests)
    return verdicts, time.monotonic() - t0


@pytest.mark.parametrize("name", CASES)
def test_a_warm_runner_answers_by_the_deadline(name):
    request, status, reason = CASES[name]
    with RewardRunner(workers=1, timeout_s=TIMEOUT_S, cache_size=0) as runner:
        warm(runner)
        (v,), took = _timed(runner, [_with_timeout(request, TIMEOUT_S)])
        assert took <= BOUND_S, (name, took, v)
        assert (v.status, v.reason if reason else None) == (status, reason), (name, v)
        if status == Status.TIMEOUT:
            assert v.score == 0.0
            still_works(runner)


@pytest.mark.parametrize("name", [name for name, case in CASES.items() if case[1] != Status.CORRECT])
def test_a_cold_runner_answers_by_the_deadline_measured_from_the_call(name):
    """The worker starts for this call, on a loaded machine: its start counts against the budget, so the
    verdict is due by the same bound (a start slower than the budget is a timeout, never a late answer)."""
    request, status, reason = CASES[name]
    with RewardRunner(workers=1, timeout_s=TIMEOUT_S, cache_size=0) as runner:
        (v,), took = _timed(runner, [_with_timeout(request, TIMEOUT_S)])
        assert took <= BOUND_S, (name, took, v)
        assert v.score == 0.0 and v.status in (status, Status.TIMEOUT), (name, v)


def test_calls_queued_behind_a_timeout_get_their_clock_when_a_slot_frees():
    """One worker, three calls that never end: each is cut at its own budget, the next one's clock starting
    when the slot frees (its replacement worker's start counts against it)."""
    with RewardRunner(workers=1, timeout_s=1.0, cache_size=0) as runner:
        requests = [CallableRequest(rf.ignores_sigterm_and_sleeps, str(i), None, {"timeout_s": 1.0}, cache=False)
                    for i in range(3)]
        verdicts, took = _timed(runner, requests)
        assert [v.status for v in verdicts] == [Status.TIMEOUT] * 3
        assert took <= 3 * (1.0 + DEADLINE_GRACE_S) + MARGIN_S, took


def test_honest_calls_beside_a_timeout_keep_their_credit():
    with RewardRunner(workers=2, timeout_s=TIMEOUT_S, cache_size=0) as runner:
        warm(runner)
        requests = [CallableRequest(rf.busy_loop, "x", None, cache=False)] + [
            CallableRequest(rf.match, str(i), str(i), cache=False) for i in range(6)]
        verdicts, took = _timed(runner, requests)
        assert verdicts[0].status == Status.TIMEOUT
        assert [v.status for v in verdicts[1:]] == [Status.CORRECT] * 6
        assert took <= BOUND_S, took

