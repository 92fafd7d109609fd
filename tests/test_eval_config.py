"""`rlvr eval` evaluates what training trained: a checkpoint's own run config (or --config) supplies the prompt
rendering, stop strings, response length, engine and verifier, so its numbers and responses equal the in-training
evaluation's; each piece has a flag that overrides it, and the command prints what it used."""

from __future__ import annotations

import json

import pytest

from rlvr.cli import main
from rlvr.config import config_from_dict
from rlvr.train import train

from conftest import one_digit_rl_config

EVAL = "arithmetic:eval:digits=1,n=12"


@pytest.fixture(scope="module")
def run(warm_model_dir, tmp_path_factory):
    """One RL step from the warm model with a system prompt (chat-rendered prompts), a stop string and an
    evaluation at the end."""
    out = tmp_path_factory.mktemp("run")
    cfg = one_digit_rl_config(warm_model_dir, out, steps=1, eval_every=1, lr=1e-6)
    cfg["data"].update(eval=EVAL, system_prompt="Add the numbers.", prompts_per_step=2, verifier="numeric")
    cfg["rollout"].update(group_size=2, max_new_tokens=6, stop=["+"])
    return train(config_from_dict(cfg))


def rows(path):
    return {r["task_id"]: r for r in map(json.loads, open(path))}


def responses(path):
    return {task: [s["response"] for s in row["samples"]] for task, row in rows(path).items()}


def test_eval_of_a_checkpoint_reproduces_the_in_training_evaluation(run, tmp_path, capsys):
    assert main(["eval", "--model", str(run / "checkpoint-1"), "--out", str(tmp_path / "e.json"), "--quiet"]) == 0
    printed = capsys.readouterr().out
    ours, theirs = json.loads((tmp_path / "e.json").read_text()), json.loads((run / "eval" / "step-1.json").read_text())
    assert ours["pass@1"]["value"] == theirs["pass@1"]["value"] and ours["n_tasks"] == theirs["n_tasks"] == 12
    assert responses(tmp_path / "e.tasks.jsonl") == responses(run / "eval" / "step-1.tasks.jsonl")
    assert f"config: {run / 'config.yaml'}" in printed and "system prompt set (config)" in printed
    assert "stop: ['+'] (config), max_new_tokens 6 (config)" in printed and "verifier: numeric (config)" in printed


def test_without_the_run_config_the_prompts_differ(run, tmp_path, capsys):
    """What `rlvr eval` did before: raw prompts, no stop string; the responses are not training's."""
    assert main(["eval", "--model", str(run / "checkpoint-1"), "--no-run-config", "--data", EVAL, "--verifier",
                 "numeric", "--max-new-tokens", "6", "--out", str(tmp_path / "raw.json"), "--quiet"]) == 0
    assert "config: none" in capsys.readouterr().out
    assert responses(tmp_path / "raw.tasks.jsonl") != responses(run / "eval" / "step-1.tasks.jsonl")


def test_flags_override_the_run_config(run, tmp_path, capsys):
    assert main(["eval", "--model", str(run / "checkpoint-1"), "--config", str(run / "config.yaml"),
                 "--system-prompt", "Sum them.", "--stop", "=", "--max-new-tokens", "3", "--limit", "4",
                 "--out", str(tmp_path / "o.json"), "--quiet"]) == 0
    printed = capsys.readouterr().out
    assert "system prompt set (command line)" in printed and "stop: ['='] (command line)" in printed
    assert "max_new_tokens 3 (command line)" in printed and "4 tasks" in printed
    assert "Sum them." in printed  # the first prompt, as rendered for the model


def test_a_missing_config_file_is_one_line(run, tmp_path, capsys):
    assert main(["eval", "--model", str(run / "checkpoint-1"), "--config", str(tmp_path / "nope.yaml")]) == 2
    assert "nope.yaml is not a file" in capsys.readouterr().err


def test_the_plan_carries_the_runs_reasoning_marker_and_template_kwargs(tmp_path):
    from rlvr.eval.plan import plan_eval

    cfg = tmp_path / "config.yaml"
    cfg.write_text("data: {eval: 'arithmetic:eval:n=3', answer_after: '</think>'}\n"
                   "rollout: {chat_template_kwargs: {enable_thinking: false}}\n")
    plan = plan_eval(tmp_path / "checkpoint-1", config=cfg)
    assert plan.scoring.answer_after == "</think>" and plan.prompts.chat_template_kwargs == {"enable_thinking": False}
    assert "answer after: '</think>' (config)" in "\n".join(plan.describe())
    plan = plan_eval(tmp_path / "checkpoint-1", config=cfg, answer_after="</reasoning>",
                     chat_template_kwargs={"enable_thinking": True})
    assert plan.scoring.answer_after == "</reasoning>" and plan.prompts.chat_template_kwargs == {"enable_thinking": True}
