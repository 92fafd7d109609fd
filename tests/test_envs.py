"""rlvr.envs: tool-call parsers, tools (schemas, supervision), the calculator, environments by name."""

import pytest

from rlvr.envs import (CallError, ToolEnv, calculate, env_names, function_tool, make_env, parse_calls, tool_names)
from rlvr.envs.parsers import ToolCall
from rlvr.tasks import Task

from agent_tools import population


@pytest.mark.parametrize("fmt,text,name,args", [
    ("hermes", 'ok <tool_call>{"name": "calculator", "arguments": {"expression": "2+3"}}</tool_call>', "calculator",
     {"expression": "2+3"}),
    ("hermes", '<tool_call>{"name": "f", "arguments": "{\\"x\\": 1}"}</tool_call>', "f", {"x": 1}),
    ("json", '{"name": "calculator", "parameters": {"expression": "1"}}', "calculator", {"expression": "1"}),
    ("json", '<|python_tag|>{"name": "g", "arguments": {}}', "g", {}),
    ("fenced", "```calculator\n37*58\n```", "calculator", {}),
    ("fenced", '```lookup\n{"city": "Oslo"}\n```', "lookup", {"city": "Oslo"}),
])
def test_parsers_read_calls(fmt, text, name, args):
    parsed = parse_calls(fmt, text)
    assert parsed.errors == [] and len(parsed.calls) == 1
    assert (parsed.calls[0].name, parsed.calls[0].arguments) == (name, args)


@pytest.mark.parametrize("fmt,text,message", [
    ("hermes", '<tool_call>{"name": "calculator", "arguments": {"expression": "2+3"}}', "not closed"),
    ("hermes", "<tool_call>{name: calculator}</tool_call>", "not valid JSON"),
    ("hermes", '<tool_call>["calculator"]</tool_call>', "must be a JSON object"),
    ("hermes", '<tool_call>{"arguments": {}}</tool_call>', 'no "name"'),
    ("hermes", '<tool_call>{"name": "f", "arguments": [1]}</tool_call>', "must be a JSON object, got list"),
    ("json", '{"name": "f", "parameters": 3', "not valid JSON"),
    ("fenced", "```calculator\n37*58", "not closed"),
])
def test_malformed_calls_become_errors_not_exceptions(fmt, text, message):
    parsed = parse_calls(fmt, text)
    assert parsed.calls == [] and len(parsed.errors) == 1 and message in parsed.errors[0].message


def test_plain_answers_have_no_calls():
    for fmt in ("hermes", "json", "fenced"):
        parsed = parse_calls(fmt, "The answer is 42.")
        assert not parsed.attempted and parsed.content == "The answer is 42."


@pytest.mark.parametrize("expr,value", [("37*58", "2146"), ("(2+3)**2/5", "5"), ("7/2", "3.5"), ("-4+10//3", "-1")])
def test_calculator(expr, value):
    assert calculate(expr) == value


@pytest.mark.parametrize("expr,message", [("__import__('os')", "unsupported"), ("9**9**9", "too large"),
                                          ("1/0", "division by zero"), ("2+", "cannot parse"), ("1" * 300, "longer")])
def test_calculator_refuses_what_it_cannot_bound(expr, message):
    with pytest.raises(ValueError, match=message):
        calculate(expr)


def test_function_tool_schema_and_argument_checks():
    tool = function_tool(population, isolation="inline")
    assert tool.schema() == {"type": "function", "function": {
        "name": "population", "description": "Population of a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "year": {"type": "integer"}},
                       "required": ["city"]}}}
    assert tool.run(ToolCall("population", {"city": "Oslo"})).text == "Oslo:2024"
    assert tool.run(ToolCall("population", {}, raw="Rome")).text == "Rome:2024"  # the one text parameter
    for args, problem in [({}, "missing argument(s) city"), ({"city": "x", "zip": 1}, "unknown argument(s) zip"),
                          ({"city": "x", "year": "2020"}, "must be a integer")]:
        result = tool.run(ToolCall("population", args))
        assert result.error and problem in result.text


def test_process_tools_run_supervised_with_a_deadline():
    from agent_tools import failing_tool, slow_tool

    slow = function_tool(slow_tool, timeout_s=0.5)
    result = slow.run(ToolCall("slow_tool", {"seconds": 30}))
    assert result.error and result.timeout and "timed out after 0.5 s" in result.text
    assert function_tool(slow_tool, timeout_s=30).run(ToolCall("slow_tool", {"seconds": 0})).text == "awake"
    # a deadline far above the call: a loaded machine's worker start must not turn the raise into a timeout
    failed = function_tool(failing_tool, timeout_s=60).run(ToolCall("failing_tool", {"x": 3}))
    assert failed.error and "RuntimeError: no luck with 3" in failed.text


def test_tool_env_turns_and_reward_parts():
    env = make_env("tools", tools=["calculator"], tool_format="fenced", max_turns=3, format_penalty=-0.1,
                   tool_error_penalty=-0.2)
    assert isinstance(env, ToolEnv) and env.tools[0]["function"]["name"] == "calculator"
    assert env.reset(Task("3*4=", "12", "t")) == [{"role": "user", "content": "3*4="}]
    step = env.step("```calculator\n3*4\n```")
    assert not step.done and step.observations == [{"role": "tool", "name": "calculator", "content": "12"}]
    step = env.step("```calculator\n3*\n```\n```nope\n1\n```")
    assert step.info == {"tool_calls": 2, "tool_errors": 2, "malformed_calls": 0}
    assert step.rewards == {"tool_error": pytest.approx(-0.4)} and "unknown tool 'nope'" in step.observations[1]["content"]
    step = env.step("```calculator\n3*4")  # third turn: the last one, so nothing runs
    assert step.done and step.rewards == {"format": pytest.approx(-0.1)} and step.info["malformed_calls"] == 1
    env.reset(Task("3*4=", "12", "t"))
    assert env.step("12").answer == "12"


def test_registry_names_and_errors():
    assert {"single_turn", "tools"} <= set(env_names()) and "calculator" in tool_names()
    with pytest.raises(ValueError, match="unknown environment 'nope'"):
        make_env("nope")
    with pytest.raises(ValueError, match="tool_format: unknown 'xml'"):
        make_env("tools", tool_format="xml")
    with pytest.raises(ValueError, match="bad env_options"):
        make_env("single_turn", tools=[])
    with pytest.raises(ValueError, match=r"environment 'tools': bad env_options \['max_turn'\]"):
        make_env("tools", max_turn=3)
    assert make_env("tools", tools=["agent_tools:failing_tool"]).by_name["failing_tool"].isolation == "process"
    assert isinstance(CallError("x"), CallError)
