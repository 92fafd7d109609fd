"""Environments of other packages through rlvr's adapters, built with the packages' own classes and run as
episodes and through `rlvr train`, with the environments' own rewards arriving in the trained reward: OpenEnv
environments in this process and behind the package's own server on loopback (tests/openenv_fixtures.py), and
verifiers-package environments scored by their own rubrics (tests/verifiers_rubric_fixtures.py)."""

import json
import sys
import time

import pytest
import yaml
from agent_fixtures import ScriptedEngine, qwen_style_tokenizer

from rlvr.envs import make_env
from rlvr.rollout.base import SamplingParams
from rlvr.rollout.episodes import Scoring, generate_and_score
from rlvr.tasks import Task

pytestmark = pytest.mark.comparison  # a skip fails the run (tests/conftest.py): `make test` installs the packages


@pytest.fixture(autouse=True)
def package_installed(request):
    pytest.importorskip("verifiers" if "verifiers" in request.node.name else "openenv")


def test_the_pinned_openenv_release_is_the_one_installed():
    import tomllib
    from importlib.metadata import version
    from pathlib import Path

    extras = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert f"openenv=={version('openenv')}" in extras["openenv"]


def _episodes(script, n=1, meta=None, prompt="Play.", reference="cat", **options):
    tok = qwen_style_tokenizer()
    options = {"env": "openenv_fixtures:TwoTurnEnv", **options}
    task = Task(prompt, reference, "t", meta=meta or {}, env="openenv", env_options=options)
    return tok, generate_and_score(ScriptedEngine(tok, script), tok, [task], SamplingParams(n=n, max_new_tokens=300),
                                   Scoring("exact"))


def test_an_openenv_environment_runs_as_episodes_with_its_rubric_rewards():
    # the rubric scores each answer a tenth of its length: "cat" 0.3, then "kitten" 0.6; the verifier's 1 for "cat"
    # is not earned (the answer is the last turn), so the reward is the environment's 0.9
    tok, samples = _episodes(lambda text: "kitten" if "Another one." in text else "cat", meta={"reset": {"word": "dog"}})
    assert samples.episodes[0]["turns"] == 2 and samples.responses == ["kitten"]
    assert samples.rewards == [pytest.approx(0.9)]
    prompt = tok.decode(samples.batch.prompt_ids[0][samples.batch.prompt_mask[0].bool()])
    assert "<|im_start|>user\nPlay.\n\nSay dog.<|im_end|>" in prompt  # the task's prompt, then reset's observation
    response = tok.decode(samples.batch.response_ids[0][samples.batch.response_mask[0].bool()])
    assert "<|im_start|>user\nAnother one.<|im_end|>" in response  # the environment's message, attended to
    trained = tok.decode(samples.batch.response_ids[0][samples.batch.loss_mask[0].bool()])
    assert "Another one." not in trained and "cat" in trained and "kitten" in trained


def test_the_verifier_scores_the_final_turn_beside_the_environments_rewards():
    _, samples = _episodes(lambda text: "cat", env_options={"turns": 1})
    assert samples.rewards == [pytest.approx(1.0 + 0.3)] and samples.episodes[0]["turns"] == 1


@pytest.mark.parametrize("options, what", [
    ({}, "the one field of the action"),
    ({"action": "openenv_fixtures:SayAction", "action_field": "message"}, "named"),
    ({"observation_field": "prompt"}, "named observation field"),
])
def test_action_and_observation_fields_default_to_the_only_ones(options, what):
    env = make_env("openenv", env="openenv_fixtures:TwoTurnEnv", **options)
    assert env.action_field == "message", what
    assert env.reset(Task("", None, "t"))[0] == {"role": "user", "content": "Say a word."}
    assert env.step("word").observations == [{"role": "user", "content": "Another one."}]


def test_text_an_action_refuses_is_a_malformed_call_not_a_crash():
    _, samples = _episodes(lambda text: "four", reference="4", env="openenv_fixtures:CountActionEnv")
    assert samples.episodes[0]["malformed_calls"] == 1 and samples.rewards == [0.0]
    _, samples = _episodes(lambda text: "4", reference="4", env="openenv_fixtures:CountActionEnv")
    assert samples.episodes[0]["malformed_calls"] == 0 and samples.rewards == [2.0]  # verifier 1 + environment 1


@pytest.mark.parametrize("text, reward, malformed", [
    ('{"count": 4}', 1.0, 0),
    ('```json\n{"count": 4}\n```', 1.0, 0),
    ('{"count": 3}', 0.0, 0),
    ('{"count": "four"}', 0.0, 1),  # not the field's type
    ('{"legs": 4}', 0.0, 1),  # not the action's field
    ("[4]", 0.0, 1),  # not an object
    ("four", 0.0, 1),  # not JSON
])
def test_json_actions_fill_an_action_of_any_fields(text, reward, malformed):
    _, samples = _episodes(lambda prompt: text, reference="-", env="openenv_fixtures:CountActionEnv",
                           action_format="json")
    assert samples.components["env/openenv"] == [reward] and samples.episodes[0]["malformed_calls"] == malformed


@pytest.mark.parametrize("env", ["RaisingEnv", "BadRewardEnv", "HangingEnv"])
def test_an_environment_that_raises_returns_nan_or_hangs_ends_its_episode_not_the_run(env):
    start = time.monotonic()
    _, samples = _episodes(lambda text: "cat", n=2, env=f"openenv_fixtures:{env}", step_timeout_s=0.5)
    assert time.monotonic() - start < 0.5 + 9.5  # step_timeout_s, plus a grace for setup on a loaded machine
    assert [e["env_errors"] for e in samples.episodes] == [1, 1] and [e["turns"] for e in samples.episodes] == [1, 1]
    assert samples.rewards == [1.0, 1.0]  # the verifier still scores the turn; no environment reward was taken


def test_bad_options_are_one_line_errors(monkeypatch):
    with pytest.raises(ValueError, match="exactly one of the options env"):
        make_env("openenv")
    with pytest.raises(ValueError, match="exactly one of the options env"):
        make_env("openenv", env="openenv_fixtures:TwoTurnEnv", base_url="http://127.0.0.1:1")
    with pytest.raises(ValueError, match="cannot import NoSuch from openenv_fixtures"):
        make_env("openenv", env="openenv_fixtures:NoSuch")
    with pytest.raises(ValueError, match=r"fields \['a', 'b'\]; name the one .* option action_field"):
        make_env("openenv", env="openenv_fixtures:TwoTurnEnv", action="openenv_fixtures:TwoFieldAction")
    with pytest.raises(ValueError, match="cannot read the action schema from http://127.0.0.1:9/schema"):
        make_env("openenv", base_url="http://127.0.0.1:9", connect_timeout_s=2)
    with pytest.raises(RuntimeError, match="ended the episode of task t at reset"):
        make_env("openenv", env="openenv_fixtures:EndsAtResetEnv").reset(Task("", None, "t"))
    with pytest.raises(ValueError, match="option action_format must be one of text, json, got 'yaml'"):
        make_env("openenv", env="openenv_fixtures:TwoTurnEnv", action_format="yaml")
    with pytest.raises(ValueError, match="bad env_options"):
        make_env("openenv", env="openenv_fixtures:TwoTurnEnv", no_such_option=1)
    monkeypatch.setitem(sys.modules, "openenv.core", None)  # the package missing
    with pytest.raises(ImportError, match=r"pip install 'rlvr\[openenv\]'"):
        make_env("openenv", env="openenv_fixtures:TwoTurnEnv")


@pytest.fixture
def openenv_server():
    from openenv_fixtures import serve

    url, server = serve()
    yield url
    server.should_exit = True


def test_a_server_session_per_episode_through_the_packages_client(openenv_server):
    env = make_env("openenv", base_url=openenv_server)
    assert env.action_field == "message"  # read from the server's /schema
    assert env.reset(Task("Play.", None, "t", meta={"reset": {"word": "owl"}})) == [
        {"role": "user", "content": "Play.\n\nSay owl."}]
    first = env.step("hello")
    assert first.rewards == {"openenv": 0.5} and first.observations == [{"role": "user", "content": "Another one."}]
    last = env.step("hi")
    assert last.done and last.answer == "hi" and last.rewards == {"openenv": pytest.approx(0.2)}
    env.close()


def test_an_action_the_server_refuses_is_a_malformed_call():
    from openenv_fixtures import CountAction, CountActionEnv, serve

    url, server = serve(CountActionEnv, CountAction)
    try:
        for text, done, reward, malformed in [("4", True, 1.0, 0), ("four", True, 0.0, 1)]:
            env = make_env("openenv", base_url=url)
            assert env.action_field == "count"
            env.reset(Task("", None, "t"))
            step = env.step(text)  # the server validates: "4" is the number 4, "four" its VALIDATION_ERROR
            assert step.done == done and step.rewards == {"openenv": reward}
            assert step.info.get("malformed_calls", 0) == malformed
            env.close()
    finally:
        server.should_exit = True


def test_rlvr_train_through_an_openenv_server_receives_its_rewards(openenv_server, warm_model_dir, tmp_path):
    """Three steps of `rlvr train` on a tiny model whose episodes run on the package's server (a WebSocket session
    each, real HTTP on loopback): every reward the environment's rubric computed reaches the trained reward."""
    import openenv_fixtures
    from rlvr.cli import main
    from rlvr.train.metrics import read_metrics

    rows = [{"prompt": "Play.", "reference": word, "meta": {"reset": {"word": word}}} for word in ("cat", "dog")]
    (tmp_path / "tasks.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    config = {"model": {"path": str(warm_model_dir)},
              "data": {"train": str(tmp_path / "tasks.jsonl"), "verifier": "exact", "prompts_per_step": 2,
                       "env": "openenv", "env_options": {"base_url": openenv_server, "max_turn_tokens": 12}},
              "rollout": {"group_size": 3, "max_new_tokens": 64},  # two turns of 12 and the game's message
              "train": {"steps": 3, "out": str(tmp_path / "run"), "progress": False, "threads": 1}}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    openenv_fixtures.STEP_REWARDS.clear()
    assert main(["train", str(tmp_path / "config.yaml")]) == 0
    metrics = read_metrics(tmp_path / "run")
    assert [m["step"] for m in metrics] == [1, 2, 3]
    assert max(m["turns_mean"] for m in metrics) > 1  # the game asked again and the policy answered again
    rewarded = openenv_fixtures.STEP_REWARDS  # what the server's rubric computed, over the 3 steps x 6 episodes
    assert len(rewarded) >= 3 * 6 and sum(rewarded) > 0
    assert sum(m["reward/env/openenv"] for m in metrics) * 6 == pytest.approx(sum(rewarded))


def _verifiers_episodes(answer, reference="3", rubric="sum", n=1):
    tok = qwen_style_tokenizer()
    task = Task("1+2", reference, "t", env="verifiers",
                env_options={"load": "verifiers_rubric_fixtures", "load_options": {"rubric": rubric}})
    return generate_and_score(ScriptedEngine(tok, lambda text: answer), tok, [task],
                              SamplingParams(n=n, max_new_tokens=50), Scoring("exact"))


@pytest.mark.parametrize("answer, rubric_reward", [
    ("3", 1.5),  # the rubric's correct_sum 1 and short 0.5
    ("4", 0.5),  # wrong, short
    ("333", 0.0),  # wrong, long
])
def test_a_verifiers_rubric_scores_the_episode_beside_the_task_verifier(answer, rubric_reward):
    samples = _verifiers_episodes(answer)
    assert samples.components["env/verifiers"] == [rubric_reward]
    assert samples.rewards == [rubric_reward + float(answer == "3")]


def test_a_verifiers_rubric_without_weighted_functions_leaves_the_turn_rewards():
    samples = _verifiers_episodes("3", rubric="none")  # only the package's own turn counter, of weight 0
    assert samples.components["env/verifiers"] == [0.0] and samples.rewards == [1.0]


def test_a_verifiers_rubric_that_fails_is_a_verdict_not_a_crash():
    samples = _verifiers_episodes("3", rubric="broken")  # the package scores a raising function 0 itself
    assert samples.components["env/verifiers"] == [0.0] and samples.episodes[0]["env_errors"] == 0
    samples = _verifiers_episodes("3", rubric="nan", n=2)  # a non-finite score ends the episode without it
    assert [e["env_errors"] for e in samples.episodes] == [1, 1] and samples.rewards == [1.0, 1.0]


def test_a_verifiers_rubric_with_group_functions_is_refused_up_front():
    with pytest.raises(ValueError, match=r"group-level reward functions \(group_mean\)"):
        make_env("verifiers", load="verifiers_rubric_fixtures", load_options={"rubric": "group"})


def test_rlvr_train_on_a_verifiers_single_turn_env_receives_its_rubric_rewards(warm_model_dir, tmp_path):
    """Three steps of `rlvr train` on the package's SingleTurnEnv (tasks from its own dataset): every reward its
    rubric's functions computed reaches the trained reward."""
    import verifiers_rubric_fixtures
    from rlvr.cli import main
    from rlvr.train.metrics import read_metrics

    dataset = verifiers_rubric_fixtures.load_environment().get_dataset()
    rows = [{"prompt": row["question"], "reference": row["answer"]} for row in dataset]
    (tmp_path / "tasks.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    config = {"model": {"path": str(warm_model_dir)},
              "data": {"train": str(tmp_path / "tasks.jsonl"), "verifier": "exact", "prompts_per_step": 2,
                       "env": "verifiers", "env_options": {"load": "verifiers_rubric_fixtures"}},
              "rollout": {"group_size": 3, "max_new_tokens": 8},
              "train": {"steps": 3, "out": str(tmp_path / "run"), "progress": False, "threads": 1}}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    verifiers_rubric_fixtures.CALLS.clear()
    assert main(["train", str(tmp_path / "config.yaml")]) == 0
    metrics = read_metrics(tmp_path / "run")
    assert [m["step"] for m in metrics] == [1, 2, 3]
    scored = verifiers_rubric_fixtures.CALLS  # two reward functions per episode, 3 steps x 6 episodes
    assert len(scored) >= 2 * 6 and sum(scored) > 0
    assert sum(m["reward/env/verifiers"] for m in metrics) * 6 == pytest.approx(sum(scored))


def test_a_verifiers_release_without_the_classic_environments_is_one_error_naming_the_extra(monkeypatch):
    """verifiers 0.4.0 keeps only its v1 stack: ``import verifiers`` works and ``verifiers.MultiTurnEnv`` is gone."""
    import types

    release = types.ModuleType("verifiers")
    release.__version__ = "0.4.0"
    monkeypatch.setitem(sys.modules, "verifiers", release)
    with pytest.raises(ImportError, match=r"verifiers 0.4.0 no longer has: pip install 'rlvr\[verifiers\]'"):
        make_env("verifiers", load="verifiers_rubric_fixtures")
    monkeypatch.setitem(sys.modules, "verifiers", None)  # not installed
    with pytest.raises(ImportError, match=r"needs the verifiers package: pip install 'rlvr\[verifiers\]'"):
        make_env("verifiers", load="verifiers_rubric_fixtures")
