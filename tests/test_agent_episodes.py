"""Multi-turn episodes (rlvr.rollout.agent): which tokens carry the loss, with a Qwen-style and a Llama-style chat
template built locally, and what happens on malformed calls, tool timeouts, max turns and truncation mid-call."""

import pytest
import torch
from agent_fixtures import ScriptedEngine, llama_style_tokenizer, qwen_style_tokenizer

from rlvr.rollout.agent import run_episodes
from rlvr.rollout.base import SamplingParams
from rlvr.rollout.episodes import Scoring, generate_and_score
from rlvr.tasks import Task

HERMES_CALL = '<tool_call>{"name": "calculator", "arguments": {"expression": "37*58"}}</tool_call>'
JSON_CALL = '{"name": "calculator", "parameters": {"expression": "37*58"}}'


def task(fmt, **options):
    return Task("what is 37*58?", "2146", "t1", env="tools",
                env_options={"tools": ["calculator"], "tool_format": fmt, **options})


def call_then_answer(marker, call):
    """The call until the conversation holds a tool result (``marker``), then the answer."""
    return lambda text: call if marker not in text else "2146"


def parts(tok, batch, row):
    ids, response, loss = batch.response_ids[row], batch.response_mask[row].bool(), batch.loss_mask[row].bool()
    prompt = batch.prompt_ids[row][batch.prompt_mask[row].bool()].tolist()
    return (tok.decode(ids[loss]), tok.decode(ids[response & ~loss]), tok.decode(prompt + ids[response].tolist()))


def test_qwen_style_loss_on_model_tokens_only():
    tok = qwen_style_tokenizer()
    engine = ScriptedEngine(tok, call_then_answer("<tool_response>", HERMES_CALL))
    run = run_episodes(engine, tok, [task("hermes")], SamplingParams(n=2, max_new_tokens=200))
    assert engine.calls == [2, 2]  # one batched call per turn over the live episodes
    trained, env, whole = parts(tok, run.batch, 0)
    assert trained == HERMES_CALL + "<|im_end|>" + "2146<|im_end|>"
    assert env == "\n<|im_start|>user\n<tool_response>\n2146\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
    messages = [{"role": "user", "content": "what is 37*58?"}, {"role": "assistant", "content": HERMES_CALL},
                {"role": "tool", "name": "calculator", "content": "2146"}, {"role": "assistant", "content": "2146"}]
    tools = [{"type": "function", "function": {"name": "calculator"}}]
    assert whole + "\n" == tok.apply_chat_template(messages, tools=tools, tokenize=False)  # tokens as the template
    assert run.answers == ["2146", "2146"] and run.stats[0] == {"turns": 2, "tool_calls": 1, "tool_errors": 0,
                                                                "malformed_calls": 0, "skipped_calls": 0, "truncated": 0,
                                                                "env_errors": 0}
    b = run.batch
    assert torch.equal(b.logprobs != 0, b.loss_mask.bool()) and b.group_index.tolist() == [0, 0]
    assert (b.loss_mask <= b.response_mask).all()


def test_llama_style_loss_on_model_tokens_only():
    tok = llama_style_tokenizer()
    engine = ScriptedEngine(tok, call_then_answer("ipython", JSON_CALL))
    run = run_episodes(engine, tok, [task("json")], SamplingParams(n=1, max_new_tokens=200))
    trained, env, whole = parts(tok, run.batch, 0)
    assert trained == JSON_CALL + "<|eot_id|>" + "2146<|eot_id|>"
    assert env == "<|start_header_id|>ipython<|end_header_id|>\n\n2146<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
    messages = [{"role": "user", "content": "what is 37*58?"}, {"role": "assistant", "content": JSON_CALL},
                {"role": "tool", "name": "calculator", "content": "2146"}, {"role": "assistant", "content": "2146"}]
    assert whole == tok.apply_chat_template(messages, tools=[{"function": {"name": "calculator"}}], tokenize=False)
    assert run.answers == ["2146"]


def test_malformed_call_is_an_observation_with_a_format_part():
    tok = qwen_style_tokenizer()
    script = lambda text: '<tool_call>{"name": calculator}</tool_call>' if "<tool_response>" not in text else "2146"
    samples = generate_and_score(ScriptedEngine(tok, script), tok, [task("hermes", format_penalty=-0.25)],
                                 SamplingParams(n=1, max_new_tokens=200), Scoring("exact"))
    _, env, _ = parts(tok, samples.batch, 0)
    assert "error: the tool call is not valid JSON" in env
    assert samples.episodes[0]["malformed_calls"] == 1 and samples.episodes[0]["tool_calls"] == 0
    assert samples.components == {"env/format": [-0.25]} and samples.rewards == [pytest.approx(0.75)]
    assert samples.metrics["malformed_calls_mean"] == 1.0


def test_tool_timeout_is_an_observation_and_a_tool_error():
    tok = qwen_style_tokenizer()
    env_task = Task("wake up", "awake", "t", env="tools", env_options={
        "tools": [{"tool": "slow", "seconds": 0.5}], "tool_format": "hermes", "tool_error_penalty": -0.5})
    from rlvr.envs import function_tool, register_tool, unregister_tool
    from agent_tools import slow_tool

    register_tool("slow")(lambda seconds: function_tool(slow_tool, name="slow", timeout_s=seconds))
    try:
        call = '<tool_call>{"name": "slow", "arguments": {"seconds": 60}}</tool_call>'
        script = lambda text: call if "<tool_response>" not in text else "no"
        samples = generate_and_score(ScriptedEngine(tok, script), tok, [env_task], SamplingParams(n=1, max_new_tokens=300),
                                     Scoring("exact"))
    finally:
        unregister_tool("slow")
    _, env, _ = parts(tok, samples.batch, 0)
    assert "error: slow timed out after 0.5 s" in env
    assert samples.episodes[0]["tool_errors"] == 1 and samples.metrics["tool_error_rate"] == 1.0
    assert samples.components["env/tool_error"] == [-0.5]


def test_max_turns_ends_the_episode():
    tok = qwen_style_tokenizer()
    engine = ScriptedEngine(tok, lambda text: HERMES_CALL)  # never answers
    run = run_episodes(engine, tok, [task("hermes", max_turns=3)], SamplingParams(n=1, max_new_tokens=1000))
    assert run.stats[0]["turns"] == 3 and run.stats[0]["tool_calls"] == 3 and engine.calls == [1, 1, 1]
    trained, env, _ = parts(tok, run.batch, 0)
    assert trained == (HERMES_CALL + "<|im_end|>") * 3 and env.count("<tool_response>") == 2  # the last call is not run
    assert run.answers == [""] and not run.batch.truncated[0]


def test_truncation_mid_call_runs_nothing():
    tok = qwen_style_tokenizer()
    engine = ScriptedEngine(tok, lambda text: HERMES_CALL)
    run = run_episodes(engine, tok, [task("hermes", max_turn_tokens=20)], SamplingParams(n=1, max_new_tokens=500))
    trained, env, _ = parts(tok, run.batch, 0)
    assert trained == HERMES_CALL[:len(trained)] and len(run.batch.response_ids[0]) == 20 and env == ""
    assert run.batch.truncated.tolist() == [True] and run.stats[0]["tool_calls"] == 0
    # the episode budget: the observation after a full call does not fit, so the episode stops there, truncated
    first_turn = len(tok(HERMES_CALL, add_special_tokens=False)["input_ids"]) + 1
    run = run_episodes(ScriptedEngine(tok, call_then_answer("<tool_response>", HERMES_CALL)), tok, [task("hermes")],
                       SamplingParams(n=1, max_new_tokens=first_turn + 5))
    assert run.batch.truncated.tolist() == [True] and int(run.batch.response_mask.sum()) == first_turn
    assert int(run.batch.loss_mask.sum()) == first_turn


def test_single_turn_tasks_are_the_trivial_environment():
    from rlvr.models import TinySpec, build_tiny_model
    from rlvr.rollout import build_engine

    model, tok = build_tiny_model(TinySpec(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64), seed=0)
    engine = build_engine("hf", model, tok)
    tasks = [Task("1+1=", "2", "a"), Task("2+2=", "4", "b")]
    torch.manual_seed(0)
    direct = generate_and_score(engine, tok, tasks, SamplingParams(n=3, max_new_tokens=6), Scoring("exact"))
    torch.manual_seed(0)
    run = run_episodes(engine, tok, [Task(t.prompt, t.reference, t.id, env="single_turn") for t in tasks],
                       SamplingParams(n=3, max_new_tokens=6))
    width = run.batch.response_ids.shape[1]
    assert torch.equal(direct.batch.response_ids[:, :width], run.batch.response_ids)
    assert torch.equal(run.batch.loss_mask, run.batch.response_mask)
    assert direct.responses == run.answers and direct.batch.group_index.tolist() == run.batch.group_index.tolist()


def test_prompt_policy_applies_to_the_first_prompt():
    from rlvr.rollout.episodes import PromptPolicy, PromptTooLong

    tok = qwen_style_tokenizer()
    engine = ScriptedEngine(tok, call_then_answer("<tool_response>", HERMES_CALL))
    run = run_episodes(engine, tok, [task("hermes")], SamplingParams(n=2, max_new_tokens=200),
                       PromptPolicy(max_tokens=30, overflow="truncate_left"))
    assert run.metrics == {"prompt_truncated_frac": 1.0} and run.batch.prompt_ids.shape[1] == 30
    with pytest.raises(PromptTooLong, match="task t1"):
        run_episodes(engine, tok, [task("hermes")], SamplingParams(n=1, max_new_tokens=200), PromptPolicy(max_tokens=30))


def test_a_turn_never_samples_past_the_models_context():
    """One generate call serves every live episode: the longest one bounds the call, and an episode whose context
    is full ends, truncated, while the others go on."""
    from types import SimpleNamespace

    tok = qwen_style_tokenizer()
    engine = ScriptedEngine(tok, call_then_answer("<tool_response>", HERMES_CALL))
    from rlvr.rollout.agent import start_episode

    short = len(start_episode(task("hermes"), tok).prompt_ids)
    engine.model = SimpleNamespace(config=SimpleNamespace(max_position_embeddings=short + 40))
    seen = []
    generate = engine.generate
    engine.generate = lambda prompts, params: (seen.append((max(map(len, prompts)), params.max_new_tokens)),
                                               generate(prompts, params))[1]
    long_task = Task("what is 37*58? " + "please " * 12, "2146", "t2", env="tools",
                     env_options={"tools": ["calculator"], "tool_format": "hermes"})
    run = run_episodes(engine, tok, [task("hermes"), long_task], SamplingParams(n=1, max_new_tokens=200))
    assert seen and all(longest + most <= short + 40 for longest, most in seen)
    assert run.stats[1]["truncated"] == 1


def test_calls_past_the_turns_cap_are_counted_in_the_step_metrics():
    tok = qwen_style_tokenizer()
    script = lambda text: HERMES_CALL * 3 if "<tool_response>" not in text else "2146"
    samples = generate_and_score(ScriptedEngine(tok, script), tok, [task("hermes", max_calls_per_turn=1)],
                                 SamplingParams(n=2, max_new_tokens=400), Scoring("exact"))
    assert [e["skipped_calls"] for e in samples.episodes] == [2, 2]
    assert samples.metrics["skipped_calls_mean"] == 2.0 and samples.metrics["env_error_frac"] == 0.0


def test_eval_rows_hold_each_episodes_transcript(tmp_path):
    from rlvr.eval import evaluate_tasks

    tok = qwen_style_tokenizer()
    engine = ScriptedEngine(tok, call_then_answer("<tool_response>", HERMES_CALL))
    evaluate_tasks(engine, tok, [task("hermes")], Scoring("exact"), samples=1, ks=[1], temperature=0.0,
                   max_new_tokens=200, out=tmp_path / "e.json")
    import json

    row = json.loads((tmp_path / "e.tasks.jsonl").read_text().splitlines()[0])
    assert row["samples"][0]["transcript"] == [
        {"role": "user", "content": "what is 37*58?"}, {"role": "assistant", "content": HERMES_CALL},
        {"role": "tool", "name": "calculator", "content": "2146"}, {"role": "assistant", "content": "2146"}]
