"""A reward function is untrusted: what it returns, starts or changes never hangs, kills, interrupts or bloats the
caller, and never reaches a later call. Real worker processes, real signals, real process trees."""

import os
import time

import pytest
import reward_fns as rf
from procs import alive, rss_mib, still_works, wait_dead, warm

from rlvr.verifiers import CallableRequest, RewardRunner, Status

C = CallableRequest


@pytest.fixture(scope="module")
def runner():
    with RewardRunner(workers=2, timeout_s=5.0, memory_mb=1024) as r:
        warm(r)
        yield r










# ------------------------------------------------------------------------------------ results


def test_payloads_that_act_when_unpickled_do_nothing_to_the_caller(runner):
    t0 = time.monotonic()
    verdicts = runner.score([
        C(rf.sleeps_when_unpickled, "x", None, {"timeout_s": 2}),
        C(rf.exits_when_unpickled, "x", None),
        C(rf.interrupts_when_unpickled, "x", None),   # a KeyboardInterrupt here would fail the test
    ])
    assert time.monotonic() - t0 < 5  # before: the 20 s sleep ran in the caller, after the 2 s timeout
    for v in verdicts:
        assert (v.score, v.status, v.reason) == (1.0, Status.CORRECT, "payload"), v
        assert isinstance(v.details["x"], str) and "_OnUnpickle" in v.details["x"]  # its repr, inert
    still_works(runner)


def test_details_arrive_as_plain_data(runner):
    v = runner.score([C(rf.odd_details, "x", None)])[0]
    assert (v.score, v.status, v.reason, v.extracted) == (0.5, Status.PARTIAL, "odd", "ex")
    assert v.details["1"] == [1, 2] and v.details["s"] == [3] and v.details["n"] is None
    assert v.details["o"].startswith("<object object at") and v.details["b"] == repr(b"\x00")


def test_a_huge_result_is_refused_and_does_not_grow_the_caller(runner):
    runner.score([C(rf.match, "warm", "warm")])
    before = rss_mib()
    v = runner.score([C(rf.huge_result, "x", "200", {"timeout_s": 20})])[0]
    assert (v.status, v.reason) == (Status.ERROR, "result_too_large"), v
    assert rss_mib() - before < 50, (before, rss_mib())  # before: a 400 MiB result doubled the caller
    with RewardRunner(workers=1, max_result_bytes=4096) as small:
        ok, big = small.score([C(rf.huge_result, "x", "0"), C(rf.odd_details, "y", None)])
        assert ok.status == Status.CORRECT
        v = small.score([C(rf.sleeps_when_unpickled, "x", None)])[0]
        assert v.status == Status.CORRECT
        v = small.score([C(rf.echo, "x", "y" * 5000)])[0]
        assert (v.status, v.reason) == (Status.ERROR, "bad_verifier_return")  # a str return, not a verdict
        v = small.score([C(rf.huge_result, "z", "1")])[0]
        assert (v.status, v.reason) == (Status.ERROR, "result_too_large")
    still_works(runner)


@pytest.mark.parametrize("score", ["nan", "inf", "-inf"])
def test_a_verdict_with_a_non_finite_score_is_an_error(runner, score):
    v = runner.score([C(rf.non_finite_verdict, "x", score)])[0]
    assert (v.score, v.status, v.reason) == (0.0, Status.ERROR, "non_finite_score"), v


def test_forged_frames_kill_only_their_worker(runner):
    t0 = time.monotonic()
    garbage, oversized = runner.score([C(rf.forges_garbage_frame, "x", None, cache=False),
                                       C(rf.forges_oversized_frame, "y", None, cache=False)])
    assert time.monotonic() - t0 < 4  # refused as soon as read, not after the 5 s sleep
    assert (garbage.status, garbage.reason) == (Status.ERROR, "bad_result"), garbage
    assert (oversized.status, oversized.reason) == (Status.ERROR, "result_too_large"), oversized
    # a frame cut short: the caller waits for the rest only until the call's deadline
    v = runner.score([C(rf.forges_partial_frame, "x", None, {"timeout_s": 1}, cache=False)])[0]
    assert v.status in (Status.TIMEOUT, Status.ERROR), v
    still_works(runner)


# ------------------------------------------------------------------------------ what a call starts


def test_descendants_that_left_the_session_die_with_a_timed_out_call(runner, tmp_path):
    pid_file = tmp_path / "sleeper.pid"
    v = runner.score([C(rf.escaped_child_then_hang, "x", str(pid_file), {"timeout_s": 3.0})])[0]
    assert v.status == Status.TIMEOUT
    sleeper = int(pid_file.read_text())
    assert os.getsid(sleeper) == sleeper if alive(sleeper) else True  # it really left the worker's session
    assert wait_dead(sleeper), f"{sleeper} outlived the call"


def test_descendants_die_when_the_call_returns(runner, tmp_path):
    pid_file = tmp_path / "sleeper.pid"
    v = runner.score([C(rf.escaped_child_then_return, "x", str(pid_file), cache=False)])[0]
    assert v.status == Status.CORRECT
    assert wait_dead(int(pid_file.read_text()), 2.0)


def test_descendants_die_when_the_worker_dies(runner, tmp_path):
    pid_file = tmp_path / "sleeper.pid"
    with RewardRunner(workers=1) as fresh:
        v = fresh.score([C(rf.escaped_child_then_exit, "x", str(pid_file))])[0]
    assert (v.status, v.reason, v.details["exitcode"]) == (Status.ERROR, "worker_died", 5), v
    assert wait_dead(int(pid_file.read_text()), 2.0)


# ------------------------------------------------------------------- nothing reaches the next call


@pytest.mark.parametrize("fn", [rf.exits_later_from_a_thread, rf.exits_later_from_an_alarm,
                                rf.child_kills_worker_later])
def test_a_crash_armed_by_one_call_is_not_charged_to_the_next(fn):
    with RewardRunner(workers=1, timeout_s=10.0) as r:
        first = r.score([C(fn, "x", "0.5", cache=False)])[0]
        assert first.status == Status.CORRECT, first
        later = r.score([C(rf.slow_match, "y", "y", {"delay": 1.5}, cache=False)])[0]
        assert (later.status, later.reason) == (Status.CORRECT, "float_reward"), later
        time.sleep(0.5)
        assert r.score([C(rf.match, "z", "z", cache=False)])[0].status == Status.CORRECT


def test_a_forked_copy_of_the_worker_never_answers(runner):
    verdicts = runner.score([C(rf.forks_and_returns_twice, str(i), None, cache=False) for i in range(4)])
    assert [v.details for v in verdicts] == [{"child": False}] * 4, verdicts
    before = runner.stats()["worker_restarts"]
    still_works(runner)
    assert runner.stats()["worker_restarts"] == before


def test_a_death_on_a_used_worker_is_retried_once_then_charged():
    with RewardRunner(workers=1) as r:
        r.score([C(rf.match, "warm", "warm")])  # the worker has served a call
        r.reset_stats()
        v = r.score([C(rf.hard_exit, "x", None)])[0]
        assert (v.status, v.reason) == (Status.ERROR, "worker_died")
        assert r.stats()["worker_restarts"] == 2  # ran again on a fresh worker, which died too


def test_cwd_environment_and_umask_do_not_leak_into_the_next_call():
    with RewardRunner(workers=1) as r:
        before = r.score([C(rf.process_state, "a", None, cache=False)])[0].details
        assert r.score([C(rf.changes_process_state, "b", None, cache=False)])[0].status == Status.CORRECT
        after = r.score([C(rf.process_state, "c", None, cache=False)])[0].details
    assert after == before  # same worker (pid), same cwd, no RLVR_LEAKED, same umask
    assert before["cwd"] == os.getcwd() and before["leaked"] is None


def test_everything_a_call_started_dies_with_a_killed_caller(tmp_path):
    import signal
    import subprocess
    import sys
    import textwrap
    from pathlib import Path

    pid_file = tmp_path / "sleeper.pid"
    script = textwrap.dedent(f"""
        import reward_fns as rf
        from rlvr.verifiers import CallableRequest, RewardRunner
        runner = RewardRunner(workers=1, timeout_s=600)
        runner.score([CallableRequest(rf.escaped_child_then_hang, "x", {str(pid_file)!r})])
    """)
    tests = Path(__file__).resolve().parent
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tests.parent / "src"), str(tests),
                                                        os.environ.get("PYTHONPATH", "")])}
    caller = subprocess.Popen([sys.executable, "-c", script], env=env)
    try:
        deadline = time.monotonic() + 60
        while not (pid_file.exists() and pid_file.read_text()) and time.monotonic() < deadline:
            time.sleep(0.05)
        sleeper = int(pid_file.read_text())
        assert alive(sleeper)
    finally:
        caller.send_signal(signal.SIGKILL)
        caller.wait()
    assert wait_dead(sleeper, 5.0), f"{sleeper} outlived its killed caller"
