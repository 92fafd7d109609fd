"""RewardRunner: supervised reward calls in real worker processes (no mocks).

The hostile reward functions live in tests/reward_fns.py so that the spawned workers can import them."""

import asyncio
import functools
import os
import subprocess
import sys
import textwrap
import threading
import time
import types
from pathlib import Path

import pytest
import reward_fns as rf
from procs import alive, children, parent, still_works, wait_dead, warm

from rlvr.verifiers import (
    CallableRequest,
    RewardRunner,
    ScoreRequest,
    Status,
    UnknownVerifierError,
    Verdict,
    default_runner,
    score_batch,
    set_default_runner,
)

C = CallableRequest
S = ScoreRequest


@pytest.fixture(scope="module")
def runner():
    with RewardRunner(workers=2, timeout_s=5.0, memory_mb=512) as r:
        warm(r)
        yield r










# ------------------------------------------------------------------------------------------ conversions


def test_float_verdict_and_raising_rewards(runner):
    verdicts = runner.score(
        [
            C(rf.half, "x", None),
            C(rf.match, "a", "a"),
            C(rf.match, "a", "b"),
            C(rf.raises, "x", None),
            C(rf.returns_junk, "x", None),
            C(rf.raises_system_exit, "x", None),
            C(rf.pid_verdict, "x", None),
        ]
    )
    assert (verdicts[0].score, verdicts[0].status, verdicts[0].reason) == (0.5, Status.PARTIAL, "float_reward")
    assert (verdicts[1].score, verdicts[1].status) == (1.0, Status.CORRECT)
    assert (verdicts[2].score, verdicts[2].status) == (0.0, Status.INCORRECT)
    raised = verdicts[3]
    assert (raised.status, raised.reason) == (Status.ERROR, "verifier_raised")
    assert raised.details["error"] == repr(ValueError("bad response x"))
    assert "reward_fns.py" in raised.details["traceback"]
    assert (verdicts[4].status, verdicts[4].reason) == (Status.ERROR, "bad_verifier_return")
    assert (verdicts[5].status, verdicts[5].reason) == (Status.ERROR, "verifier_raised")
    assert verdicts[6].details["pid"] != os.getpid()  # it really ran in a worker


def test_unpicklable_rewards_are_error_verdicts(runner, tmp_path):
    def nested(response, reference):
        return 1.0

    module = types.ModuleType("rlvr_test_parent_only_module")  # importable here, not in a worker
    exec("def reward(response, reference):\n    return 1.0\n", module.__dict__)
    sys.modules[module.__name__] = module
    try:
        verdicts = runner.score(
            [
                C(lambda response, reference: 1.0, "x", None),
                C(nested, "x", None),
                C(module.reward, "x", None),
                C(rf.match, "x", threading.Lock()),  # the reference cannot be pickled
                C(rf.match, "x", "x"),
            ]
        )
    finally:
        del sys.modules[module.__name__]
    assert [(v.status, v.reason) for v in verdicts[:3]] == [(Status.ERROR, "unpicklable_reward")] * 3
    assert "top level" in verdicts[0].details["error"]
    assert "could not be loaded in the worker" in verdicts[2].details["error"]
    assert (verdicts[3].status, verdicts[3].reason) == (Status.ERROR, "unpicklable_arguments")
    assert verdicts[4].status == Status.CORRECT


def test_timeout_option_reaches_only_verifiers_that_accept_it(runner):
    verdicts = runner.score(
        [
            C(rf.takes_timeout, "x", None, {"timeout_s": 2}),
            C(rf.takes_kwargs, "x", None, {"timeout_s": 2, "other": 1}),
            C(rf.no_options, "x", None, {"timeout_s": 2}),
            C(rf.no_options, "x", None, {"timeout_s": -1}),
            C(rf.no_options, "x", None, {"timeout_s": "soon"}),
            S("exact", "a", "a", {"timeout_s": 2}),  # inline verifier that takes it
        ]
    )
    assert verdicts[0].details == {"timeout_s": 2}
    assert verdicts[1].details == {"options": ["other", "timeout_s"]}
    assert verdicts[2].status == Status.CORRECT
    assert [(v.status, v.reason) for v in verdicts[3:5]] == [(Status.ERROR, "bad_timeout")] * 2
    assert verdicts[5].status == Status.CORRECT


# ------------------------------------------------------------------------------------ hostile rewards


def test_sleeping_reward_times_out_and_the_worker_is_replaced(runner):
    runner.score([C(rf.match, "warm", "warm")])  # workers up
    runner.reset_stats()
    t0 = time.monotonic()
    v = runner.score([C(rf.sleep_forever, "x", None, {"timeout_s": 1.0})])[0]
    elapsed = time.monotonic() - t0
    assert (v.score, v.status, v.reason) == (0.0, Status.TIMEOUT, "timeout"), v
    assert v.details["timeout_s"] == 1.0
    assert 0.9 <= elapsed < 4.0, elapsed
    stats = runner.stats()
    assert (stats["timeouts"], stats["worker_restarts"]) == (1, 1), stats
    still_works(runner)


def test_timeouts_are_not_cached(runner):
    runner.reset_stats()
    request = C(rf.sleep_forever, "x", None, {"timeout_s": 0.5})
    first, second = runner.score([request])[0], runner.score([request])[0]
    assert first.status == second.status == Status.TIMEOUT
    stats = runner.stats()
    assert (stats["timeouts"], stats["cache_hits"]) == (2, 0), stats
    # a call whose budget ran out before a worker could take it (a loaded machine) costs no worker
    assert stats["worker_restarts"] <= 2, stats


def test_memory_hog_hits_the_memory_cap(runner):
    runner.reset_stats()
    t0 = time.monotonic()
    v = runner.score([C(rf.hog_memory, "x", None, {"timeout_s": 20})])[0]
    assert (v.score, v.status, v.reason) == (0.0, Status.ERROR, "memory_limit"), v
    assert time.monotonic() - t0 < 10
    assert runner.stats()["worker_restarts"] == 1  # a worker that ran out of memory is recycled
    still_works(runner)


def test_segfault_and_hard_exit_kill_only_their_worker():
    with RewardRunner(workers=2, timeout_s=5.0) as runner:  # fresh workers: each death is charged at once
        segv, exited = runner.score([C(rf.segfault, "x", None), C(rf.hard_exit, "y", None)])
        assert (segv.status, segv.reason) == (Status.ERROR, "worker_died"), segv
        assert segv.details["signal"] == "SIGSEGV" and segv.details["exitcode"] == -11
        assert (exited.status, exited.reason, exited.details["exitcode"]) == (Status.ERROR, "worker_died", 7)
        stats = runner.stats()
        assert (stats["worker_restarts"], stats["errors"]) == (2, 2), stats
        still_works(runner)


def test_timeout_kills_what_the_reward_started(runner, tmp_path):
    pid_file = tmp_path / "grandchild.pid"
    v = runner.score([C(rf.grandchild_then_hang, "x", str(pid_file), {"timeout_s": 1.0})])[0]
    assert v.status == Status.TIMEOUT
    grandchild = int(pid_file.read_text())
    assert wait_dead(grandchild), f"grandchild {grandchild} outlived the timeout"


def test_mixed_batch_keeps_order(runner):
    items = [
        C(rf.match, "a", "a"),
        C(rf.sleep_forever, "x", None, {"timeout_s": 1.0}),
        C(rf.match, "a", "b"),
        C(rf.segfault, "x", None),
        C(rf.half, "x", None),
        C(rf.hog_memory, "x", None, {"timeout_s": 20}),
        S("test.proc_upper", "abc", "ABC"),
        S("exact", "Paris", "paris"),
        C(rf.raises, "z", None),
        C(rf.hard_exit, "x", None),
        C(rf.match, "last", "last"),
    ]
    t0 = time.monotonic()
    verdicts = runner.score(items)
    assert time.monotonic() - t0 < 15
    got = [(v.score, v.status, v.reason) for v in verdicts]
    assert got == [
        (1.0, Status.CORRECT, "float_reward"),
        (0.0, Status.TIMEOUT, "timeout"),
        (0.0, Status.INCORRECT, "float_reward"),
        (0.0, Status.ERROR, "worker_died"),
        (0.5, Status.PARTIAL, "float_reward"),
        (0.0, Status.ERROR, "memory_limit"),
        (1.0, Status.CORRECT, "upper"),
        (1.0, Status.CORRECT, "exact_match"),
        (0.0, Status.ERROR, "verifier_raised"),
        (0.0, Status.ERROR, "worker_died"),
        (1.0, Status.CORRECT, "float_reward"),
    ]
    still_works(runner)


# ---------------------------------------------------------------------------------------- routing


def test_inline_verifiers_start_no_worker():
    before = children(os.getpid())
    with RewardRunner() as r:
        verdicts = r.score([S("exact", "Paris", "paris"), S("numeric", "x = 42", "42")])
        assert [v.status for v in verdicts] == [Status.CORRECT, Status.CORRECT]
        stats = r.stats()
        assert (stats["calls"], stats["inline_calls"], stats["process_calls"], stats["workers"]) == (2, 2, 0, 0)
    assert children(os.getpid()) == before


def test_process_verifiers_run_in_a_worker_and_nest(runner):
    verdicts = runner.score(
        [S("test.proc_upper", "abc", "ABC"), S("test.proc_upper", "abc", "abd"), C(rf.nested_verify, "q", "Q")]
    )
    assert [v.status for v in verdicts] == [Status.CORRECT, Status.INCORRECT, Status.CORRECT]
    assert verdicts[0].details["pid"] != os.getpid()
    assert verdicts[2].details["pid"] != os.getpid()  # the nested process verifier ran inline in its worker


def test_caller_errors_raise_before_scoring(runner, tmp_path):
    log = tmp_path / "calls.txt"
    with pytest.raises(UnknownVerifierError):
        runner.score([C(rf.counted_match, "yes", str(log)), S("no.such.verifier", "a", "a")])
    with pytest.raises(TypeError):
        runner.score([("exact", "a", "a")])
    with pytest.raises(TypeError):
        runner.score([C("not callable", "a", "a")])
    assert not log.exists()


def test_score_batch_and_verify_route_through_the_default_runner():
    mine = RewardRunner(workers=1)
    previous = set_default_runner(mine)
    try:
        assert default_runner() is mine
        verdicts = score_batch([S("exact", "a", "a"), C(rf.match, "b", "b"), S("test.proc_upper", "x", "X")])
        assert [v.status for v in verdicts] == [Status.CORRECT] * 3
        stats = mine.stats()
        assert (stats["calls"], stats["inline_calls"], stats["process_calls"]) == (3, 1, 2)
    finally:
        set_default_runner(previous)
        mine.close()
    assert mine.closed and default_runner() is not mine


# ------------------------------------------------------------------------------------------- cache


def test_cache_hits_and_what_is_not_cached(runner, tmp_path):
    log = tmp_path / "calls.txt"
    ref = str(log)
    runner.reset_stats()
    info = runner.cache_info()

    first = runner.score([C(rf.counted_match, "yes", ref, {"a": 1, "b": [1, 2]})])[0]
    again = runner.score([C(rf.counted_match, "yes", ref, {"b": [1, 2], "a": 1})])[0]  # same options, other order
    assert first == again and first.status == Status.CORRECT
    assert log.read_text().splitlines() == ["yes"]
    assert runner.cache_info().hits == info.hits + 1 and runner.stats()["cache_hits"] == 1

    # identical requests in one batch run once; different responses each run
    verdicts = runner.score([C(rf.counted_match, "no", ref)] * 4 + [C(rf.counted_match, "other", ref)])
    assert [v.status for v in verdicts] == [Status.INCORRECT] * 5
    assert sorted(log.read_text().splitlines()) == ["no", "other", "yes"]

    # not cached: cache=False, a partial (not a plain module-level function)
    runner.score([C(rf.counted_match, "yes", ref, cache=False)] * 2)
    partial = functools.partial(rf.counted_match)
    runner.score([C(partial, "yes", ref)])
    runner.score([C(partial, "yes", ref)])
    assert log.read_text().splitlines().count("yes") == 5

    # a cached verdict can be mutated by a caller without corrupting the cache
    a = runner.score([S("test.proc_upper", "cache", "CACHE")])[0]
    a.details["pid"] = "mutated"
    b = runner.score([S("test.proc_upper", "cache", "CACHE")])[0]
    assert b.details["pid"] != "mutated"
    assert runner.cache_info().currsize >= 3


def test_cache_is_bounded():
    with RewardRunner(workers=1, cache_size=2) as r:
        r.score([C(rf.match, str(i), "x") for i in range(5)])
        info = r.cache_info()
        assert (info.maxsize, info.currsize) == (2, 2)


# ------------------------------------------------------------------------------------ concurrency


def test_score_async_keeps_the_event_loop_responsive(runner):
    async def main():
        ticks = []
        stop = asyncio.Event()

        async def ticker():
            while not stop.is_set():
                ticks.append(time.monotonic())
                await asyncio.sleep(0.01)

        tick_task = asyncio.create_task(ticker())
        batches = [
            [C(rf.slow_match, f"r{i}-{j}", f"r{i}-{j}" if j else "no", {"delay": 0.25}) for j in range(2)]
            for i in range(4)
        ]
        calls = [runner.score_async(batch) for batch in batches]
        results = await asyncio.gather(*calls)
        stop.set()
        await tick_task
        return results, ticks

    t0 = time.monotonic()
    results, ticks = asyncio.run(main())
    elapsed = time.monotonic() - t0
    assert [[v.status for v in r] for r in results] == [[Status.INCORRECT, Status.CORRECT]] * 4
    gaps = [b - a for a, b in zip(ticks, ticks[1:])]
    assert elapsed >= 0.9  # 8 calls of 0.25 s on 2 workers
    # blocked, the loop would stall for the whole second of scoring; slack for a loaded 2-core machine
    assert len(ticks) >= 0.25 * elapsed / 0.01, (len(ticks), elapsed)
    assert max(gaps) < 0.5, max(gaps)


def test_many_threads_share_one_runner(runner):
    barrier = threading.Barrier(8)
    results: dict[int, list[Verdict]] = {}
    errors = []

    def work(t):
        items = []
        for i in range(6):
            items.append(C(rf.match, f"t{t}-{i}", f"t{t}-{i}" if i % 2 else "nope"))
        items.append(S("exact", f"t{t}", f"t{t}"))
        items.append(S("test.proc_upper", f"t{t}", f"T{t}"))
        try:
            barrier.wait()
            results[t] = runner.score(items)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=60)
    assert not errors
    expected = [0.0, 1.0, 0.0, 1.0, 0.0, 1.0, 1.0, 1.0]
    assert {t: [v.score for v in vs] for t, vs in results.items()} == {t: expected for t in range(8)}


# --------------------------------------------------------------------------------- stats, lifecycle


def test_stats_fields(runner):
    runner.reset_stats()
    runner.score([C(rf.match, f"s{i}", "s0", cache=False) for i in range(10)] + [S("exact", "a", "a")])
    runner.score([C(rf.raises, "boom", None)])
    stats = runner.stats()
    for key in ("calls", "cache_hits", "timeouts", "errors", "worker_restarts", "latency_p50_ms", "latency_p99_ms"):
        assert key in stats
    assert (stats["calls"], stats["errors"], stats["timeouts"], stats["inline_calls"]) == (12, 1, 0, 1)
    assert 0 < stats["latency_p50_ms"] <= stats["latency_p99_ms"] < 2000
    assert 1 <= stats["workers"] <= 2 and stats["queued"] == 0
    runner.reset_stats()
    stats = runner.stats()
    assert (stats["calls"], stats["errors"], stats["latency_p50_ms"]) == (0, 0, 0.0)


def test_close_kills_every_worker():
    r = RewardRunner(workers=2)
    verdicts: list = []
    deadline = time.monotonic() + 60
    # on a loaded machine the first worker may serve a whole batch before the second is up: score until both served
    while len({v.details["pid"] for v in verdicts}) < 2 and time.monotonic() < deadline:
        # a budget that covers a worker's start on a loaded machine (a call's clock runs from the call)
        verdicts += r.score([C(rf.pid_verdict, f"{len(verdicts)}-{i}", None, {"delay": 0.3, "timeout_s": 120})
                             for i in range(4)])
    pids = {v.details["pid"] for v in verdicts}
    assert len(pids) == 2 and all(alive(pid) for pid in pids)
    keepers = {v.details["ppid"] for v in verdicts}  # each worker runs under a keeper, the runner's child
    assert all(parent(keeper) == os.getpid() for keeper in keepers)
    r.close()
    r.close()  # idempotent
    assert not any(alive(pid) for pid in pids | keepers)
    assert not children(os.getpid()) & keepers
    assert r.stats()["workers"] == 0
    with pytest.raises(RuntimeError, match="closed"):
        r.score([C(rf.match, "a", "a")])


def test_no_worker_outlives_the_interpreter(tmp_path):
    script = textwrap.dedent(
        """
        import os, sys
        import reward_fns as rf
        from rlvr.verifiers import CallableRequest, RewardRunner

        def children():
            out = []
            for name in os.listdir("/proc"):
                if not name.isdigit():
                    continue
                try:
                    with open(f"/proc/{name}/stat") as f:
                        ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                    with open(f"/proc/{name}/cmdline", "rb") as f:
                        cmd = f.read()
                except (OSError, IndexError, ValueError):
                    continue
                if ppid == os.getpid() and b"resource_tracker" not in cmd:
                    out.append(int(name))
            return out

        with RewardRunner(workers=2) as closed:
            closed.score([CallableRequest(rf.pid_verdict, str(i), None, {"delay": 0.2}) for i in range(4)])
        print("after-close", len(children()))
        left_open = RewardRunner(workers=2)
        pids, rounds = set(), 0
        while len(pids) < 2 and rounds < 100:  # until both workers have served (the second may start late)
            rounds += 1
            pids |= {v.details["pid"] for v in left_open.score(
                [CallableRequest(rf.pid_verdict, f"{rounds}-{i}", None, {"delay": 0.2}) for i in range(4)])}
        print("open", *sorted(pids))
        sys.stdout.flush()
        # exit without close(): the atexit hook must kill the workers
        """
    )
    env = dict(os.environ)
    src = str(Path(__file__).resolve().parents[1] / "src")
    env["PYTHONPATH"] = os.pathsep.join([src, str(Path(__file__).resolve().parent), env.get("PYTHONPATH", "")])
    out = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60, cwd=tmp_path
    )
    assert out.returncode == 0, out.stderr
    lines = dict(line.split(" ", 1) for line in out.stdout.strip().splitlines())
    assert lines["after-close"] == "0"
    pids = [int(p) for p in lines["open"].split()]
    assert len(pids) == 2
    assert all(wait_dead(pid, 5.0) for pid in pids), pids


def test_workers_start_when_the_main_script_came_from_stdin():
    """``python - < script.py`` has no importable main file; process-isolated verifiers must still work."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    script = "from rlvr.verifiers import verify\nprint(verify('regex', '2024', r'\\d+').status.value)\n"
    src = str(Path(__file__).resolve().parent.parent / "src")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-"], input=script, capture_output=True, text=True, timeout=60, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "correct"
