"""Adapters: OpenAI-style function tools, and environments of the verifiers package (the release the
rlvr[verifiers] extra pins) run by the package's own turn loop, through episodes and through `rlvr train`."""

import json
import time

import pytest
import yaml
from agent_fixtures import ScriptedEngine, qwen_style_tokenizer

from rlvr.envs import ToolCall, make_env, openai_tools
from rlvr.rollout.base import SamplingParams
from rlvr.rollout.episodes import Scoring, generate_and_score
from rlvr.tasks import Task

vf = pytest.importorskip("verifiers")  # a skip here fails the run (tests/conftest.py): the dev extra installs it

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


def test_the_pinned_release_is_the_one_installed():
    import tomllib
    from pathlib import Path

    extras = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert f"verifiers=={vf.__version__}" in extras["verifiers"]


def _episodes(kind, script, n=1, load_options=None, **options):
    tok = qwen_style_tokenizer()
    env_options = {"load": "verifiers_fixtures", "load_options": {"kind": kind, **(load_options or {})}, **options}
    task = Task("2+2?", "4", "t", env="verifiers", env_options=env_options)
    engine = ScriptedEngine(tok, script)
    return tok, generate_and_score(engine, tok, [task], SamplingParams(n=n, max_new_tokens=300), Scoring("exact"))


def test_a_multiturn_env_runs_its_own_turn_loop_as_episodes():
    tok, samples = _episodes("double_check", lambda text: "5" if "Are you sure?" not in text else "4",
                             load_options={"system_prompt": "Answer briefly."})
    assert samples.responses == ["4"] and samples.rewards == [1.0] and samples.episodes[0]["turns"] == 2
    prompt = tok.decode(samples.batch.prompt_ids[0][samples.batch.prompt_mask[0].bool()])
    assert "<|im_start|>system\nAnswer briefly.<|im_end|>" in prompt
    response = tok.decode(samples.batch.response_ids[0][samples.batch.response_mask[0].bool()])
    assert "<|im_start|>user\nAre you sure?<|im_end|>" in response  # the environment's message, attended to


def test_per_turn_rewards_the_environment_writes_add_to_the_episode():
    # the first answer is the reference: the environment's 0.5 for it adds to the verifier's 1.0
    _, samples = _episodes("double_check", lambda text: "4")
    assert samples.rewards == [1.5] and samples.episodes[0]["turns"] == 2


def test_turn_limits_an_unlimited_env_gets_the_option_or_ten_turns():
    env = make_env("verifiers", load="verifiers_fixtures", load_options={"kind": "double_check"})
    assert env.inner.max_turns == -1 and env.limits.max_turns == 10
    assert make_env("verifiers", load="verifiers_fixtures", load_options={"kind": "guess"}).limits.max_turns == 3
    assert make_env("verifiers", load="verifiers_fixtures", load_options={"kind": "double_check"},
                    max_turns=1).limits.max_turns == 1
    _, samples = _episodes("double_check", lambda text: "5", max_turns=1)  # rlvr's limit ends the episode
    assert samples.episodes[0]["turns"] == 1 and samples.rewards == [0.0]


def test_single_turn_env_of_the_package_is_one_turn():
    _, samples = _episodes("single", lambda text: "4", n=2)
    assert samples.rewards == [1.0, 1.0] and [e["turns"] for e in samples.episodes] == [1, 1]


def test_an_environment_that_raises_or_hangs_ends_its_episode_not_the_run():
    _, samples = _episodes("boom", lambda text: "5")
    assert samples.episodes[0]["env_errors"] == 1 and samples.episodes[0]["turns"] == 1
    from verifiers_fixtures import Slow

    start = time.monotonic()
    _, samples = _episodes("slow", lambda text: "5", turn_timeout_s=0.5)
    assert time.monotonic() - start < 0.5 + 9.5 and samples.episodes[0]["env_errors"] == 1  # the timeout + load grace
    deadline = time.monotonic() + 5  # the cancelled rollout still runs the package's cleanup handlers
    while not Slow.cleaned and time.monotonic() < deadline:
        time.sleep(0.05)
    assert Slow.cleaned == ["4"]


def test_bad_options_are_one_line_errors():
    with pytest.raises(ValueError, match="give the option load"):
        make_env("verifiers")
    with pytest.raises(ValueError, match="cannot import load_environment from 'no_such_module'"):
        make_env("verifiers", load="no_such_module")
    with pytest.raises(TypeError, match="not a verifiers.MultiTurnEnv"):
        make_env("verifiers", load="verifiers_fixtures", load_options={"kind": "not_multi_turn"})


def test_rlvr_train_runs_the_packages_gym_env(warm_model_dir, tmp_path):
    """Two steps of `rlvr train` on vf.GymEnv: tasks from the environment's own dataset, episodes run by its turn
    loop (several turns each), its per-step rewards in the episode's reward."""
    from rlvr.cli import main
    from rlvr.train.metrics import read_metrics
    from verifiers_fixtures import guess_digit_env

    rows = [{"prompt": row["question"], "reference": row["answer"]} for row in guess_digit_env().get_dataset()]
    (tmp_path / "tasks.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    config = {"model": {"path": str(warm_model_dir)},
              "data": {"train": str(tmp_path / "tasks.jsonl"), "verifier": "exact", "prompts_per_step": 2,
                       "env": "verifiers", "env_options": {"load": "verifiers_fixtures"}},
              # the longest turn prompt (first prompt + the episode's tokens) plus a turn's limit stay within the context of 128
              "rollout": {"group_size": 4, "max_new_tokens": 40},
              "train": {"steps": 2, "out": str(tmp_path / "run"), "progress": False}}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    assert main(["train", str(tmp_path / "config.yaml")]) == 0
    metrics = read_metrics(tmp_path / "run")
    assert [m["step"] for m in metrics][-2:] == [1, 2]
    assert max(m["turns_mean"] for m in metrics) > 1  # the game answered and the policy guessed again
    assert all("reward/env/verifiers" in m for m in metrics)  # the game's per-guess rewards, in the reward
