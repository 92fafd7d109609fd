"""Bounds and channels of episodes: a turn's default limits, agent programs' process trees and reward channel."""

import json
import time

import pytest

from rlvr.envs import function_tool, make_env, register_tool, unregister_tool
from rlvr.envs.tool_env import MAX_CALLS_PER_TURN, TURN_TIME_BUDGET_S
from rlvr.tasks import Task

TASK = Task([{"role": "user", "content": "what is 37*58?"}], "2146", "t")
LOAD_GRACE_S = 6.0  # what a wall-clock bound may overrun on a loaded machine (process starts, scheduling)


def _calls(name, arguments, count):
    return "".join(f'<tool_call>{{"name": "{name}", "arguments": {json.dumps(arguments)}}}</tool_call>'
                   for _ in range(count))


@pytest.fixture
def one_second_tool():
    from agent_tools import slow_tool

    # inline: the supervised runner's worker start (seconds on a loaded machine) would blur what the cap bounds
    register_tool("slow1")(lambda: function_tool(slow_tool, name="slow1", isolation="inline"))
    yield
    unregister_tool("slow1")


def test_default_options_bound_a_turn():
    env = make_env("tools", tools=["calculator"], max_turns=4)
    assert env.max_calls_per_turn == MAX_CALLS_PER_TURN <= 4 and env.turn_time_budget_s == TURN_TIME_BUDGET_S <= 10


@pytest.mark.parametrize("count", [MAX_CALLS_PER_TURN + 1, 8, 40])
def test_many_slow_calls_with_default_options_run_at_most_the_cap(one_second_tool, count):
    env = make_env("tools", tools=["slow1"], max_turns=4)
    env.reset(TASK)
    t0 = time.monotonic()
    step = env.step(_calls("slow1", {"seconds": 1}, count))
    elapsed = time.monotonic() - t0
    contents = [m["content"] for m in step.observations]
    ran = [c for c in contents if c == "awake"]
    assert len(ran) == MAX_CALLS_PER_TURN, contents
    assert contents[-1] == (f"error: {count - MAX_CALLS_PER_TURN} more tool call(s) in this turn were not run "
                            f"(at most {MAX_CALLS_PER_TURN} per turn)")
    assert step.info["skipped_calls"] == count - MAX_CALLS_PER_TURN and not step.done
    assert elapsed < TURN_TIME_BUDGET_S + LOAD_GRACE_S, elapsed
