"""Adapters: OpenAI-style function tools, and environments written for the verifiers package."""

import pytest
from agent_fixtures import ScriptedEngine, qwen_style_tokenizer

from rlvr.envs import ToolCall, make_env, openai_tools
from rlvr.rollout.base import SamplingParams
from rlvr.rollout.episodes import Scoring, generate_and_score
from rlvr.tasks import Task

WEATHER = {"type": "function", "function": {
    "name": "population", "description": "Population of a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}


def test_openai_tools_keep_their_schema_and_run_supervised():
    from agent_tools import population

    tool, = openai_tools([WEATHER], {"population": population}, timeout_s=60)
    assert tool.schema() == WEATHER and tool.isolation == "process"
    assert tool.run(ToolCall("population", {"city": "Oslo"})).text == "Oslo:2024"
    assert "missing argument(s) city" in tool.run(ToolCall("population", {})).text
    with pytest.raises(ValueError, match="no implementation"):
        openai_tools([WEATHER], {})


def test_verifiers_multiturn_env_runs_as_episodes():
    env = make_env("verifiers", load="agent_fixtures")
    assert env.tools[0]["function"]["name"] == "noop" and env.limits.max_turns == 5
    tok = qwen_style_tokenizer()
    task = Task("2+2?", "4", "t", env="verifiers", env_options={"load": "agent_fixtures"})
    engine = ScriptedEngine(tok, lambda text: "5" if "Are you sure?" not in text else "4")
    samples = generate_and_score(engine, tok, [task], SamplingParams(n=1, max_new_tokens=300), Scoring("exact"))
    assert samples.responses == ["4"] and samples.rewards == [1.0] and samples.episodes[0]["turns"] == 2
    prompt = tok.decode(samples.batch.prompt_ids[0][samples.batch.prompt_mask[0].bool()])
    assert "<|im_start|>system\nAnswer briefly.<|im_end|>" in prompt
    with pytest.raises(ValueError, match="give the option load"):
        make_env("verifiers")
