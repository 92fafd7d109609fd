"""Hostile model output in the tools environment: every message becomes observations within a bounded time, never
an exception; tools that leave the interpreter fail their call only; a turn's calls are capped in number and share
one time budget; no tool state crosses from one episode to the next."""

import json
import time

import pytest

from rlvr.envs import Step, function_tool, make_env, register_env, register_tool, unregister_env, unregister_tool
from rlvr.envs.base import Environment
from rlvr.envs.tool_env import MAX_CALLS_PER_TURN, TURN_TIME_BUDGET_S
from rlvr.envs.parsers import MAX_CALL_CHARS, MAX_CALLS_READ, MAX_DEPTH, MAX_INT_DIGITS, nesting_depth, parse_calls
from rlvr.tasks import Task

TASK = Task([{"role": "user", "content": "what is 37*58?"}], "2146", "t")
# Seconds a wall-clock bound may overrun on a loaded machine (other processes hold the cores): process starts, the
# supervised runner's kill and the scheduler's delays are not the code's to bound.
LOAD_GRACE_S = 6.0


def hermes(name, arguments):
    return f'<tool_call>{{"name": {name}, "arguments": {arguments}}}</tool_call>'


DEEP = "[" * 100_000 + "]" * 100_000
NESTED = "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1)
BIG_INT = "9" * 5000
HOSTILE = [  # (label, tool_format, model text, what the observation must say)
    ("deep array as the call", "hermes", f"<tool_call>{DEEP}</tool_call>", "longer than"),
    ("deep array under the limit of length", "hermes", f"<tool_call>{'[' * 40_000}{']' * 40_000}</tool_call>",
     "deeper than"),
    ("deep arguments", "hermes", hermes('"calculator"', '{"expression": ' + NESTED + "}"), "deeper than"),
    ("deep double-encoded arguments", "hermes", hermes('"calculator"', json.dumps('{"e": ' + NESTED + "}")),
     "deeper than"),
    ("deep json-format call", "json", '{"name": "calculator", "parameters": ' + NESTED + "}", "deeper than"),
    ("deep fenced body", "fenced", "```calculator\n{\"expression\": " + NESTED + "}\n```", "deeper than"),
    ("int of 5000 digits in arguments", "hermes", hermes('"calculator"', '{"expression": ' + BIG_INT + "}"),
     f"more than {MAX_INT_DIGITS} digits"),
    ("negative int of 5000 digits as the name", "hermes", hermes("-" + BIG_INT, "{}"), "digits"),
    ("int of 5000 digits in a fenced body", "fenced", "```calculator\n{\"expression\": " + BIG_INT + "}\n```",
     "digits"),
    ("int of 5000 digits, json format", "json", '{"name": "calculator", "parameters": {"x": ' + BIG_INT + "}}",
     "digits"),
    ("float of 5000 digits", "hermes", hermes('"calculator"', '{"expression": 1' + "0" * 5000 + ".5}"),
     "must be a string"),
    ("NaN", "hermes", hermes('"calculator"', '{"expression": NaN}'), "NaN is not a JSON number"),
    ("-Infinity", "hermes", hermes('"calculator"', '{"expression": -Infinity}'), "not a JSON number"),
    ("huge string argument", "hermes", hermes('"calculator"', json.dumps({"expression": "1+" * 300_000 + "1"})),
     "longer than"),
    ("huge fenced body", "fenced", "```calculator\n" + "1+" * 300_000 + "1\n```", "longer than"),
    ("huge tool name", "hermes", hermes(json.dumps("x" * 50_000), "{}"), "name is longer"),
    ("lone surrogate escaped in JSON", "hermes", hermes('"calculator"', '{"expression": "\\ud800"}'), "error"),
    ("lone surrogate in the text", "fenced", "```calculator\n1+\ud800\n```", "error"),
    ("undecodable bytes as surrogateescape", "hermes",
     hermes('"calculator"', '{"expression": "2+2"}').replace("2+2", b"2+\xff".decode("utf-8", "surrogateescape")),
     "error"),
    ("arguments a list", "hermes", hermes('"calculator"', "[1, 2]"), "must be a JSON object"),
    ("arguments a number", "hermes", hermes('"calculator"', "7"), "must be a JSON object"),
    ("name a number", "hermes", hermes("7", "{}"), 'no "name" string'),
    ("argument of the wrong type", "hermes", hermes('"calculator"', '{"expression": {"a": [1]}}'),
     "must be a string"),
    ("unknown argument", "hermes", hermes('"calculator"', '{"expression": "1", "rm": "-rf"}'), "unknown argument"),
    ("unknown tool", "hermes", hermes('"os.system"', '{"cmd": "ls"}'), "unknown tool"),
    ("unknown tool with a huge name", "fenced", "```" + "t" * 5000 + "\n1\n```", "unknown tool"),
    ("unclosed call", "hermes", '<tool_call>{"name": "calculator"', "not closed"),
    ("null byte in a call", "hermes", hermes('"calculator"', '{"expression": "1\\u0000+1"}'), "error"),
    ("calculator power bomb", "hermes", hermes('"calculator"', '{"expression": "9**9**9**9"}'), "too large"),
]


@pytest.mark.parametrize("label,fmt,text,says", HOSTILE, ids=[c[0] for c in HOSTILE])
def test_hostile_calls_become_observations_in_bounded_time(label, fmt, text, says):
    env = make_env("tools", tools=["calculator"], tool_format=fmt, max_turns=4)
    env.reset(TASK)
    t0 = time.process_time()  # the work the message costs this process: what the parser's bounds promise
    step = env.step(text)
    assert time.process_time() - t0 < 2.0, label
    assert isinstance(step, Step) and not step.done and step.observations
    contents = [m["content"] for m in step.observations]
    for content in contents:  # every observation can be tokenized: valid UTF-8, bounded
        content.encode("utf-8")
        assert len(content) < 3000
    assert any(says in c for c in contents), contents
    assert step.info["malformed_calls"] + step.info["tool_errors"] >= 1


def test_nesting_depth_ignores_brackets_inside_strings():
    assert nesting_depth('{"a": "[[[[{{{{", "b": [[1]]}') == 3
    assert nesting_depth('"\\"[[[["') == 0
    assert nesting_depth("[" * 5 + "]" * 5) == 5


def test_calls_beyond_the_read_limit_are_errors_not_decoded():
    parsed = parse_calls("hermes", hermes('"calculator"', '{"expression": "1"}') * (MAX_CALLS_READ + 5))
    assert (len(parsed.calls), parsed.errors, parsed.unread) == (MAX_CALLS_READ, [], 5)


def test_the_largest_allowed_call_still_runs():
    env = make_env("tools", tools=["calculator"], max_turns=4)
    env.reset(TASK)
    padded = hermes('"calculator"', '{"expression": "37*58"' + " " * (MAX_CALL_CHARS - 100) + "}")
    step = env.step(padded)
    assert [m["content"] for m in step.observations] == ["2146"]
    nested_ok = '<tool_call>{"name": "calculator", "arguments": {"expression": "2+2"}, "x": ' + \
        "[" * (MAX_DEPTH - 2) + "]" * (MAX_DEPTH - 2) + "}</tool_call>"
    assert [m["content"] for m in env.step(nested_ok).observations] == ["4"]


# ------------------------------------------------------------------------------- tools that leave the interpreter

@pytest.fixture
def exit_tools():
    from agent_tools import dying_tool, exiting_tool, surrogate_tool

    names = {"exit_inline": lambda: function_tool(exiting_tool, name="exit_inline", isolation="inline"),
             "exit_process": lambda: function_tool(exiting_tool, name="exit_process", timeout_s=10),
             "die_process": lambda: function_tool(dying_tool, name="die_process", timeout_s=10),
             "surrogate_process": lambda: function_tool(surrogate_tool, name="surrogate_process", timeout_s=10),
             "surrogate_inline": lambda: function_tool(surrogate_tool, name="surrogate_inline", isolation="inline")}
    for name, factory in names.items():
        register_tool(name)(factory)
    yield list(names)
    for name in names:
        unregister_tool(name)


@pytest.mark.parametrize("tool,args,says", [
    ("exit_inline", {"code": 0}, "SystemExit"),
    ("exit_process", {"code": 3}, "SystemExit"),
    ("die_process", {"code": 0}, "error: die_process failed"),
    ("surrogate_process", {"text": "a"}, "a\ufffd"),
    ("surrogate_inline", {"text": "a"}, "a\ufffd"),
])
def test_a_tool_that_exits_fails_its_call_not_the_step(exit_tools, tool, args, says):
    env = make_env("tools", tools=[tool, "calculator"], max_turns=4)
    env.reset(TASK)
    step = env.step(hermes(json.dumps(tool), json.dumps(args)) + hermes('"calculator"', '{"expression": "6*7"}'))
    contents = [m["content"] for m in step.observations]
    assert says in contents[0] and contents[1] == "42", contents  # the call after it still ran
    for content in contents:
        content.encode("utf-8")
    assert step.info["tool_errors"] == (0 if tool.startswith("surrogate") else 1)


PY_EXITS = ["import sys\nsys.exit(0)", "raise SystemExit", "import os\nos._exit(0)", "import os\nos._exit(7)",
            "import sys\nsys.exit('bye')", "import atexit, os\natexit.register(print, 'late')\nos._exit(0)",
            "import sys\nprint('half')\nsys.stdout.flush()\nsys.exit(0)"]


@pytest.mark.parametrize("code", PY_EXITS)
def test_python_cell_that_exits_is_an_error_and_is_not_kept(code):
    env = make_env("tools", tools=["python"], max_turns=8)
    env.reset(TASK)
    call = lambda src: hermes('"python"', json.dumps({"code": src}))
    assert env.step(call("x = 21")).observations[0]["content"] == "(no output)"
    step = env.step(call(code))
    assert step.info["tool_errors"] == 1 and step.observations[0]["content"].startswith("error"), step.observations
    # the exiting cell was not kept: later cells replay x = 21 and run to the end
    assert env.step(call("x * 2")).observations[0]["content"] == "42"


# ------------------------------------------------------------------------------------------- per-turn bounds

def test_calls_beyond_max_calls_per_turn_are_not_run():
    env = make_env("tools", tools=["calculator"], max_turns=4, max_calls_per_turn=3)
    env.reset(TASK)
    text = "".join(hermes('"calculator"', json.dumps({"expression": f"{i}+1"})) for i in range(20))
    step = env.step(text + "<tool_call>not json</tool_call>" * 5)
    contents = [m["content"] for m in step.observations]
    assert contents[3:6] == ["1", "2", "3"]  # errors first (3 shown), then the first 3 calls
    assert contents[-1] == "error: 19 more tool call(s) in this turn were not run (at most 3 per turn)"
    assert len(contents) == 7 and step.info["skipped_calls"] == 19


@pytest.mark.parametrize("fmt,call", [("hermes", hermes('"calculator"', '{"expression": "1+1"}')),
                                      ("fenced", "```calculator\n1+1\n```\n")])
def test_a_hundred_thousand_calls_in_one_message_return_quickly(fmt, call):
    env = make_env("tools", tools=["calculator"], tool_format=fmt, max_turns=4)
    env.reset(TASK)
    t0 = time.process_time()
    step = env.step(call * 100_000)
    assert time.process_time() - t0 < 3.0  # only the first MAX_CALLS_READ calls are decoded
    cap = MAX_CALLS_PER_TURN
    assert [m["content"] for m in step.observations[:cap]] == ["2"] * cap  # the first calls run in order
    assert len(step.observations) == cap + 1
    assert f"{100_000 - cap} more tool call(s)" in step.observations[-1]["content"]


@pytest.fixture
def slow_tool_registered():
    from agent_tools import slow_tool

    register_tool("slow")(lambda: function_tool(slow_tool, name="slow", timeout_s=20))
    yield
    unregister_tool("slow")


def test_turn_time_budget_bounds_many_slow_calls(slow_tool_registered):
    env = make_env("tools", tools=["slow", "calculator"], max_turns=4, turn_time_budget_s=1.5, max_calls_per_turn=8)
    env.reset(TASK)
    call = hermes('"slow"', '{"seconds": 60}')
    t0 = time.monotonic()
    step = env.step(call * 5 + hermes('"calculator"', '{"expression": "1+1"}'))
    elapsed = time.monotonic() - t0
    assert elapsed < 1.5 + LOAD_GRACE_S, elapsed  # five calls of a 20 s tool: 100 s without a shared budget
    contents = [m["content"] for m in step.observations]
    assert "timed out after" in contents[0]
    assert all("time budget of 1.5 s is spent" in c for c in contents[1:])  # the calculator call too
    assert step.info["tool_errors"] == 6 and step.info["skipped_calls"] == 5


def test_turn_time_budget_reaches_the_python_tool():
    env = make_env("tools", tools=["python"], max_turns=4, turn_time_budget_s=1.0)
    env.reset(TASK)
    t0 = time.monotonic()
    step = env.step(hermes('"python"', json.dumps({"code": "while True:\n    pass"})) * 3)
    assert time.monotonic() - t0 < 1.0 + LOAD_GRACE_S  # the python tool's own deadline is 5 s per call, 15 s for 3
    assert "ran past 1 s" in step.observations[0]["content"]
    assert step.info["skipped_calls"] == 2


@pytest.mark.parametrize("option,value", [("max_calls_per_turn", 0), ("max_calls_per_turn", 2.5),
                                          ("max_calls_per_turn", True), ("turn_time_budget_s", 0),
                                          ("turn_time_budget_s", "10"), ("turn_time_budget_s", -1.0)])
def test_bad_per_turn_options_name_the_option(option, value):
    with pytest.raises(ValueError, match=option):
        make_env("tools", tools=["calculator"], **{option: value})


# ------------------------------------------------------------------------------------------ state across episodes

def run_cell(env, code):
    return env.step(hermes('"python"', json.dumps({"code": code}))).observations[0]["content"]


def test_python_state_does_not_cross_episodes_even_through_a_shared_tool():
    env_a = make_env("tools", tools=["agent_tools:SHARED_PYTHON"], max_turns=8)
    env_b = make_env("tools", tools=["agent_tools:SHARED_PYTHON"], max_turns=8)
    env_a.reset(TASK)
    env_b.reset(TASK)  # episodes of one batch are live at once
    assert run_cell(env_a, "secret = 42") == "(no output)"
    assert "NameError" in run_cell(env_b, "secret")
    assert run_cell(env_a, "secret") == "42"
    env_a.reset(TASK)  # the same environment, a new episode
    assert "NameError" in run_cell(env_a, "secret")


def test_keep_tool_state_is_the_environments_choice():
    env = make_env("tools", tools=["python"], max_turns=8, keep_tool_state=True)
    env.reset(TASK)
    assert run_cell(env, "memo = [1]") == "(no output)"
    env.reset(TASK)
    assert run_cell(env, "memo") == "[1]"


# ------------------------------------------------------------------------------- an environment that raises anyway

class Fragile(Environment):
    def reset(self, task):
        return task.prompt

    def step(self, assistant):
        if "boom" in assistant:
            raise RecursionError("the environment could not read this")
        if "exit" in assistant:
            raise SystemExit(1)
        return Step(done=True, answer=assistant)


@pytest.mark.parametrize("word", ["boom", "exit"])
def test_an_environment_that_raises_ends_its_episode_only(word):
    from agent_fixtures import ScriptedEngine, qwen_style_tokenizer

    from rlvr.rollout.agent import run_episodes
    from rlvr.rollout.base import SamplingParams

    register_env("fragile")(Fragile)
    try:
        tok = qwen_style_tokenizer()
        tasks = [Task([{"role": "user", "content": "a"}], "x", "bad", env="fragile"),
                 Task([{"role": "user", "content": "b"}], "x", "good", env="fragile")]
        engine = ScriptedEngine(tok, lambda text: word if "a<|im_end|>" in text else "fine")
        run = run_episodes(engine, tok, tasks, SamplingParams(n=1, max_new_tokens=50))
    finally:
        unregister_env("fragile")
    assert run.answers == [word, "fine"]
    assert [s["env_errors"] for s in run.stats] == [1, 0]
