"""The built-in tools beyond the calculator: python (sandboxed, state across turns), read-only SQL, BM25 search."""

import json

import pytest

from rlvr.envs import ToolCall, make_env, python_tool, search_tool, sql_tool
from rlvr.tasks import Task

SCHEMA = "CREATE TABLE city(name TEXT, people INT); INSERT INTO city VALUES ('Oslo', 709000), ('Rome', 2873000);"


def test_python_tool_keeps_state_within_an_episode_only():
    tool = python_tool(timeout_s=5)
    assert tool.run(ToolCall("python", {"code": "x = 21\nprint('set')"})).text == "set"
    assert tool.run(ToolCall("python", {"code": "x * 2"})).text == "42"  # earlier cells replay silently
    failed = tool.run(ToolCall("python", {"code": "1/0"}))
    assert failed.error and "ZeroDivisionError" in failed.text
    assert tool.run(ToolCall("python", {"code": "x + 1"})).text == "22"  # a failed cell is not kept
    assert python_tool().run(ToolCall("python", {"code": "x"})).error  # a new episode starts empty
    bad = tool.run(ToolCall("python", {"code": "def f(:"}))
    assert bad.error and "SyntaxError" in bad.text


def test_python_tool_deadline():
    result = python_tool(timeout_s=1).run(ToolCall("python", {"code": "while True:\n    pass"}))
    assert result.error and result.timeout and "ran past 1 s" in result.text


def test_sql_tool_reads_and_refuses_writes(tmp_path):
    tool = sql_tool(schema=SCHEMA, timeout_s=60)  # what is checked is the answers, not the deadline
    assert tool.run(ToolCall("sql", {"query": "SELECT name, people FROM city ORDER BY people"})).text == \
        "Oslo | 709000\nRome | 2873000"
    for query, message in [("DELETE FROM city", "only one read query"), ("SELECT nope FROM city", "no such column"),
                           ("WITH x AS (SELECT 1) DELETE FROM city", "not a read-only query")]:
        result = tool.run(ToolCall("sql", {"query": query}))
        assert result.error and message in result.text, result.text
    many = sql_tool(schema="CREATE TABLE t(x INT);" + "".join(f"INSERT INTO t VALUES ({i});" for i in range(30)),
                    max_rows=5, timeout_s=60).run(ToolCall("sql", {"query": "SELECT x FROM t"}))
    assert many.text.splitlines()[-1] == "... (more than 5 rows)" and len(many.text.splitlines()) == 6
    with pytest.raises(ValueError, match="give db"):
        sql_tool()


def test_search_tool_ranks_a_local_corpus(tmp_path):
    pytest.importorskip("bm25s")
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("\n".join(json.dumps(r) for r in [
        {"id": "a", "title": "Cats", "text": "The cat sat on the mat."},
        {"id": "b", "title": "France", "text": "The capital of France is Paris."},
        {"id": "c", "text": "Dogs are loyal animals."}]) + "\n")
    tool = search_tool(corpus=str(corpus), k=2)
    assert tool.run(ToolCall("search", {"query": "capital of France"})).text == \
        "[b] France: The capital of France is Paris."
    assert tool.run(ToolCall("search", {"query": "zebra"})).text == "no results"
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"title": "x"}\n')
    with pytest.raises(ValueError, match="bad.jsonl:1"):
        search_tool(corpus=str(bad))


def test_environment_with_several_tools(tmp_path):
    env = make_env("tools", tools=["calculator", {"tool": "sql", "schema": SCHEMA, "timeout_s": 60}],
                   tool_format="hermes", turn_time_budget_s=60)  # the answers are checked here, not the deadlines
    assert [t["function"]["name"] for t in env.tools] == ["calculator", "sql"]
    env.reset(Task("How many people live in Oslo and Rome?", "3582000", "t"))
    call = '<tool_call>{"name": "sql", "arguments": {"query": "SELECT sum(people) FROM city"}}</tool_call>'
    assert env.step(call).observations[0]["content"] == "3582000"
