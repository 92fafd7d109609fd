"""Agent tasks through training and evaluation: tasks naming an environment run as episodes inside the one RL
loop (collect_rollouts), are logged with agent metrics, resume exactly, and are evaluated with turns, tool calls
and tool error rates."""

import shutil

import pytest

import torch
from transformers import AutoModelForCausalLM

from rlvr.config import config_from_dict
from rlvr.demo.agent import AGENT_TEMPLATE, ENV_OPTIONS, Teacher, sft_transcripts, transcripts
from rlvr.eval import evaluate_tasks
from rlvr.jsonl import write_jsonl
from rlvr.models import TinySpec, build_tiny_model
from rlvr.rollout import build_engine
from rlvr.rollout.episodes import Scoring
from rlvr.tasks import Task, load_data
from rlvr.train import train
from rlvr.train.metrics import read_metrics

TIMING = {"time_s", "tokens_per_s", "reward_latency_p50_ms", "reward_latency_p99_ms"}
ROWS = [{"id": f"m{i}", "prompt": [{"role": "user", "content": f"{a}*{b}"}], "reference": str(a * b)}
        for i, (a, b) in enumerate([(123, 45), (678, 12), (305, 99), (111, 11), (250, 40), (999, 98)])]


def agent_model_dir(path, sft_steps=0):
    """A tiny model with the agent chat template, warm-started on ``sft_steps`` batches of teacher transcripts."""
    model, tok = build_tiny_model(TinySpec(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64), seed=0)
    tok.chat_template = AGENT_TEMPLATE
    if sft_steps:
        torch.set_num_threads(1)
        tasks = [Task([{"role": "user", "content": f"{a}*{b}"}], str(a * b), f"s{a}{b}", env="tools",
                      env_options=ENV_OPTIONS) for a in range(100, 140) for b in range(10, 15)]
        sft_transcripts(model, tok, transcripts(tok, tasks, seed=0, tool_share=0.7), steps=sft_steps, batch_size=16,
                        lr=3e-3, seed=0, progress=False)
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


def config(model_dir, data, out, **train_keys):
    return config_from_dict({
        "model": {"path": str(model_dir)},
        "data": {"train": str(data), "verifier": "exact", "prompts_per_step": 2, "env": "tools",
                 "env_options": {**ENV_OPTIONS, "format_penalty": -0.1}},
        "rollout": {"group_size": 3, "max_new_tokens": 40},
        "train": {"steps": 2, "save_every": 1, "out": str(out), "seed": 0, "progress": False, "lr": 1e-3, "threads": 1,
                  **train_keys},  # one thread: a model this small only loses time to more on a shared machine
    })


def test_data_env_reaches_tasks_and_rows_may_name_their_own(tmp_path):
    data = tmp_path / "d.jsonl"
    write_jsonl(data, ROWS[:2] + [{**ROWS[2], "env": "single_turn", "env_options": {}}])
    tasks = load_data(config(tmp_path, data, tmp_path / "r").data, "train")
    assert [t.env for t in tasks] == ["tools", "tools", "single_turn"]
    assert tasks[0].env_options["tool_format"] == "fenced" and tasks[2].env_options == {}


def test_agent_training_logs_episode_metrics_and_resumes_exactly(tmp_path):
    data = tmp_path / "d.jsonl"
    write_jsonl(data, ROWS)
    model_dir = agent_model_dir(tmp_path / "model", sft_steps=150)
    whole = train(config(model_dir, data, tmp_path / "whole"))
    rows = read_metrics(whole)
    for key in ("turns_mean", "tool_calls_mean", "tool_error_rate", "episode_truncated_frac"):
        assert all(key in r for r in rows), key
    assert all(r["grad_norm"] > 0 for r in rows) and max(r["turns_mean"] for r in rows) > 1  # learning, multi-turn
    cut = tmp_path / "cut"
    train(config(model_dir, data, cut))
    shutil.rmtree(cut / "checkpoint-2")
    (cut / "metrics.jsonl").write_text((cut / "metrics.jsonl").read_text().splitlines()[0] + "\n")
    train(config(model_dir, data, cut), resume=True)  # the run died during step 2, with its episodes live
    strip = lambda rs: [{k: v for k, v in r.items() if k not in TIMING} for r in rs]
    assert strip(read_metrics(cut)) == strip(rows)
    a = AutoModelForCausalLM.from_pretrained(whole / "checkpoint-2").state_dict()
    b = AutoModelForCausalLM.from_pretrained(cut / "checkpoint-2").state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_teacher_transcripts_label_only_the_model_turns():
    model, tok = build_tiny_model(TinySpec(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64), seed=0)
    tok.chat_template = AGENT_TEMPLATE
    tasks = [Task([{"role": "user", "content": "123*45"}], "5535", "a", env="tools", env_options=ENV_OPTIONS)]
    (ids, labels), = transcripts(tok, tasks, seed=0, tool_share=1.0)
    assert tok.decode(ids) == "<s>Q:123*45\nA:```calc\n123*45\n```</s>T:5535\nA:5535</s>"
    assert tok.decode([t for t in labels if t != -100]) == "```calc\n123*45\n```</s>5535</s>"
    (ids, labels), = transcripts(tok, tasks, seed=0, tool_share=0.0)
    assert tok.decode(ids) == "<s>Q:123*45\nA:5535</s>"
    assert Teacher(tok, 0, 1.0).reply("<s>Q:1*2\nA:") == "```calc\n1*2\n```"


def test_evaluation_reports_turns_tool_calls_and_error_rate(tmp_path):
    model, tok = build_tiny_model(TinySpec(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64), seed=0)
    tok.chat_template = AGENT_TEMPLATE
    tasks = [Task(r["prompt"], r["reference"], r["id"], env="tools", env_options=ENV_OPTIONS) for r in ROWS[:3]]
    engine = build_engine("hf", model, tok)
    teacher = Teacher(tok, 0, 1.0)
    for name, eng, turns, calls in [("random", engine, None, None), ("teacher", teacher, 2.0, 1.0)]:
        summary = evaluate_tasks(eng, tok, tasks, Scoring("exact"), samples=2, ks=[1], temperature=1.0,
                                 max_new_tokens=40, out=tmp_path / f"{name}.json")
        for key in ("turns", "tool_calls", "tool_error_rate"):
            assert key in summary
        if turns is not None:
            assert summary["turns"]["value"] == turns and summary["tool_calls"]["value"] == calls
            assert summary["tool_error_rate"]["value"] == 0.0 and summary["pass@1"]["value"] == 1.0


def test_engine_logprobs_of_model_turns_match_the_trainer_forward():
    """The trainer sees each episode's tokens where the engine sampled them: on every loss position the trainer's
    log-prob equals the engine's (turns after the first included)."""
    from rlvr.rollout.agent import run_episodes
    from rlvr.rollout.base import SamplingParams
    from rlvr.train.policy import policy_forward

    model, tok = build_tiny_model(TinySpec(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64), seed=0)
    tok.chat_template = AGENT_TEMPLATE
    # an environment that always asks a second question (a verifiers-style MultiTurnEnv, tests/agent_fixtures.py)
    tasks = [Task(r["prompt"], r["reference"], r["id"], env="verifiers",
                  env_options={"load": "agent_fixtures", "max_turn_tokens": 10}) for r in ROWS[:3]]
    torch.manual_seed(0)
    run = run_episodes(build_engine("hf", model, tok), tok, tasks, SamplingParams(n=16, max_new_tokens=60))
    b = run.batch
    assert max(s["turns"] for s in run.stats) >= 2  # several turns happened
    with torch.no_grad():
        logp = policy_forward(model, b.prompt_ids, b.prompt_mask, b.response_ids, b.response_mask).logp
    loss = b.loss_mask.bool()
    assert torch.allclose(logp[loss], b.logprobs[loss], atol=1e-4)
    assert (b.logprobs[~loss] == 0).all()


def test_dynamic_sampling_keeps_episode_stats_and_env_parts():
    """DAPO dynamic sampling over episodes: the kept groups carry their episode stats and reward parts."""
    from itertools import count

    from agent_fixtures import ScriptedEngine, qwen_style_tokenizer

    from rlvr.rollout.base import SamplingParams
    from rlvr.tasks import PromptSampler
    from rlvr.train.rollouts import collect_rollouts

    tok = qwen_style_tokenizer()
    calls = count()
    call = '<tool_call>{"name": "calculator", "arguments": {"expression": "6*7"}}</tool_call>'
    # every other first turn is a malformed call; every third answer is right
    script = lambda text: ("2146" if next(calls) % 3 == 0 else "0") if "<tool_response>" in text else (
        call if next(calls) % 2 else "<tool_call>{oops</tool_call>")
    tasks = [Task([{"role": "user", "content": f"q{i}"}], "2146", f"t{i}", env="tools",
                  env_options={"tools": ["calculator"], "tool_format": "hermes", "format_penalty": -0.5})
             for i in range(4)]
    samples, metrics = collect_rollouts(ScriptedEngine(tok, script), tok, PromptSampler(tasks, seed=0),
                                        SamplingParams(n=3, max_new_tokens=200), Scoring("exact"), prompts=2,
                                        dynamic_sampling=True, max_rounds=3)
    assert len(samples.episodes) == len(samples.rewards) == samples.batch.size
    assert len(samples.components["env/format"]) == samples.batch.size
    for stats, parts_value, reward, verdict in zip(samples.episodes, samples.components["env/format"],
                                                   samples.rewards, samples.verdicts):
        assert parts_value == -0.5 * stats["malformed_calls"]
        assert reward == pytest.approx(verdict.score + parts_value)
    assert metrics["informative_groups"] == 2 and "turns_mean" in metrics  # the merged path ran
