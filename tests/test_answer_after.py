"""data.answer_after: verifiers score only what a reasoning model wrote after its thoughts."""

import pytest

from rlvr.verifiers.reasoning import answer_part


@pytest.mark.parametrize("response, after, required, part", [
    ("<think>maybe 4</think>The answer is 5.", "</think>", True, "The answer is 5."),
    ("<think>5</think><think>no, 6</think>6", "</think>", True, "6"),  # after the LAST marker
    ("<think>the answer is 5 but I am still thinking", "</think>", True, ""),  # thoughts never closed: no answer
    ("<think>the answer is 5 but I am still thinking", "</think>", False, "<think>the answer is 5 but I am still thinking"),
    ("plain 5", None, True, "plain 5"),  # no marker configured: the whole response
    ("5</think>", "</think>", True, ""),  # nothing after the thoughts
])
def test_answer_part(response, after, required, part):
    assert answer_part(response, after, required) == part


# ---------------------------------------------------------------------------------------- through training

import json  # noqa: E402

from agent_fixtures import ScriptedEngine  # noqa: E402

from rlvr.config import config_from_dict  # noqa: E402
from rlvr.rollout import register_engine, unregister_engine  # noqa: E402
from rlvr.train import train  # noqa: E402
from rlvr.train.metrics import read_metrics  # noqa: E402

from conftest import one_digit_rl_config  # noqa: E402


@pytest.fixture
def thinking_engine():
    """Every answer is in the thoughts only: the number after the prompt's '=' ... as a thought, nothing after."""
    def script(prompt_text):
        a, b = prompt_text.split("=")[0].split("+")
        return f"<think>{int(a[-1]) + int(b)}</think>"

    register_engine("test.thinks_only")(lambda model, tokenizer, **_: ScriptedEngine(tokenizer, script))
    yield
    unregister_engine("test.thinks_only")


@pytest.mark.parametrize("answer_after, reward", [(None, 1.0), ("</think>", 0.0)])
def test_an_answer_inside_the_thoughts_earns_nothing(thinking_engine, tiny_model_dir, tmp_path, answer_after, reward):
    cfg = one_digit_rl_config(tiny_model_dir, tmp_path, steps=1)
    cfg["data"].update(verifier="numeric", prompts_per_step=2, answer_after=answer_after)
    cfg["rollout"].update(group_size=2, max_new_tokens=20, engine="test.thinks_only")
    run = train(config_from_dict(cfg))
    assert read_metrics(run)[0]["verifier_score_mean"] == reward
    samples = [json.loads(line) for line in open(run / "samples.jsonl")]
    assert all(s["response"].startswith("<think>") for s in samples)  # the log keeps the whole response
