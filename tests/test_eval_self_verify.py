"""`rlvr eval --self-verify`: the model rates its own held-out answers; verification accuracy per class of answer and
the verdict balance, so a checker that says "correct" to everything shows as such."""

from __future__ import annotations

import json
import re

import pytest

from rlvr.cli import main
from rlvr.eval import evaluate_tasks
from rlvr.eval.self_verify import SelfVerifySetup, says_correct, setup_of, verification_tasks
from rlvr.errors import UserError
from rlvr.models.tiny import char_tokenizer
from rlvr.rollout.episodes import Scoring
from rlvr.tasks import Task
from rlvr.verifiers import Status, Verdict, verify

from test_self_verify import ScriptedEngine_standin

TEMPLATE = "Q:{prompt} A:{response} ok? "
PROBLEMS = [Task(prompt=f"{a}+{b}=", reference=str(a + b), id=f"p{a}{b}") for a, b in [(1, 2), (3, 4), (2, 5), (4, 4)]]


@pytest.fixture(autouse=True)
def _one_thread():
    """Tiny models run fastest on one thread; two wait on each other on a busy 2-core machine."""
    import torch

    torch.set_num_threads(1)


def answers(text: str, j: int) -> str:
    """Problem k answers right when k is even, wrong when k is odd."""
    a, b = map(int, re.findall(r"\d+", text))
    return str(a + b + (a % 2))  # 1+2 wrong, 3+4 wrong, 2+5 right, 4+4 right


def scripted(rate):
    """Answers arithmetic with ``answers``; rates a verification prompt with ``rate(shown answer is right)``."""
    def script(text: str, j: int) -> str:
        m = re.fullmatch(r"Q:(\d+)\+(\d+)= A:(\d*) ok\? ", text)
        if m is None:
            return answers(text, j)
        a, b, shown = m.groups()
        return rate(shown == str(int(a) + int(b)))
    return script


def run(rate, samples: int = 1, setup: SelfVerifySetup | None = None):
    tokenizer = char_tokenizer()
    engine = ScriptedEngine_standin(tokenizer, scripted(rate))
    return evaluate_tasks(engine, tokenizer, PROBLEMS, Scoring("exact"), samples=samples, ks=[1], temperature=0.0,
                          max_new_tokens=8, self_verify=setup or SelfVerifySetup(TEMPLATE))["self_verify"]


def values(summary):
    return {k: v["value"] if isinstance(v, dict) else v for k, v in summary.items()
            if k not in ("template", "mode", "source")}


@pytest.mark.parametrize("name, rate, expected", [
    # a checker that says "correct" to everything: accuracy = the share of correct answers, 0 on wrong ones
    ("always yes", lambda right: "y", {"accuracy": 0.5, "accuracy_on_correct": 1.0, "accuracy_on_wrong": 0.0,
                                       "said_correct": 1.0, "no_rating": 0.0}),
    ("always no", lambda right: "n", {"accuracy": 0.5, "accuracy_on_correct": 0.0, "accuracy_on_wrong": 1.0,
                                      "said_correct": 0.0, "no_rating": 0.0}),
    ("checks", lambda right: "y" if right else "n", {"accuracy": 1.0, "accuracy_on_correct": 1.0,
                                                     "accuracy_on_wrong": 1.0, "said_correct": 0.5, "no_rating": 0.0}),
    ("inverted", lambda right: "n" if right else "y", {"accuracy": 0.0, "accuracy_on_correct": 0.0,
                                                       "accuracy_on_wrong": 0.0, "said_correct": 0.5,
                                                       "no_rating": 0.0}),
    ("says nothing", lambda right: "hmm", {"accuracy": 0.0, "accuracy_on_correct": 0.0, "accuracy_on_wrong": 0.0,
                                           "said_correct": 0.0, "no_rating": 1.0}),
])
def test_verification_accuracy_and_verdict_balance(name, rate, expected):
    summary = run(rate)
    assert values(summary) == {"rated": 4, "skipped": 0, "answers_correct": 0.5, **expected}, name
    assert summary["mode"] == "rise" and summary["template"] == TEMPLATE
    assert summary["accuracy"]["ci95"][0] <= summary["accuracy"]["value"] <= summary["accuracy"]["ci95"][1]


def test_every_sample_is_rated_and_critique_mode_judges():
    summary = run(lambda right: "y" if right else "n", samples=3,
                  setup=SelfVerifySetup(TEMPLATE, "critique"))
    assert (summary["rated"], summary["mode"], summary["accuracy"]["value"]) == (12, "critique", 1.0)


def test_undecided_answers_are_not_rated():
    task = PROBLEMS[0]
    decided = [(task, "3", Verdict(1.0, Status.CORRECT, "exact_match", extracted="3")),
               (task, "", Verdict(0.0, Status.INCORRECT, "empty_response", extracted="")),
               (task, "x", Verdict(0.0, Status.TIMEOUT, "timeout")),
               (task, "y", Verdict(0.0, Status.ERROR, "internal_error"))]
    tasks, skipped = verification_tasks(decided, SelfVerifySetup(TEMPLATE))
    assert skipped == 2 and [t.reference for t in tasks] == ["1.0", "-1.0"]
    assert tasks[0].prompt == "Q:1+2= A:3 ok? " and tasks[0].verifier_options == {"scheme": "rise", "format": "plain"}
    boxed = verification_tasks(decided[:1], SelfVerifySetup())[0][0]
    assert boxed.verifier_options == {"scheme": "rise", "format": "boxed"} and "\\boxed{}" in boxed.prompt


@pytest.mark.parametrize("response, reference, options, said", [
    ("y", "1.0", {"format": "plain"}, True),
    ("n", "1.0", {"format": "plain"}, False),
    ("-1", "-1.0", {"format": "plain"}, False),
    ("what", "1.0", {"format": "plain"}, None),
    ("\\boxed{1}", "-0.5", {}, True),
    ("\\boxed{-0.5}", "-0.5", {}, False),
    ("\\boxed{correct}", "1.0", {}, False),  # RISE reads a box without a number as a rating that does not match
    ("no box", "1.0", {}, None),
    ("\\boxed{correct}", "wrong", {"scheme": "critique"}, True),
    ("\\boxed{wrong}", "wrong", {"scheme": "critique"}, False),
])
def test_which_ratings_call_the_answer_correct(response, reference, options, said):
    verdict = verify("self_verify", response, reference, **options)
    assert says_correct(verdict, {"scheme": "rise", "format": "boxed", **options}) is said


def test_setup_comes_from_flags_then_the_run_config(tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text(f"algo:\n  self_verify_template: '{TEMPLATE}'\n  self_verify_mode: critique\n")
    from_run = setup_of(config)
    assert (from_run.template, from_run.mode, from_run.source) == (TEMPLATE, "critique", f"run config {config}")
    flagged = setup_of(config, template="R {prompt} {response}", mode="rise")
    assert (flagged.template, flagged.mode) == ("R {prompt} {response}", "rise")
    assert setup_of(None) == SelfVerifySetup(None, "rise", "default")
    with pytest.raises(UserError, match=r"--self-verify-template .*missing \{response\}"):
        setup_of(None, template="only {prompt}")


def test_rlvr_eval_self_verify_on_a_trained_checkpoint(warm_model_dir, tmp_path, capsys):
    """A checkpoint of a run trained with self-verification is evaluated with its run's template; the JSON summary
    and the printed report hold the verification figures; without --self-verify there are none."""
    run = tmp_path / "run"
    assert main(["train", "examples/arithmetic.yaml", f"model.path={warm_model_dir}",
                 "data.train=arithmetic:train:digits=1", "data.prompts_per_step=8", "rollout.group_size=4",
                 "rollout.max_new_tokens=4", "train.steps=2", "train.progress=false", f"train.out={run}",
                 "algo.self_verify_per_step=4", f"algo.self_verify_template='{TEMPLATE}'"]) == 0
    out = tmp_path / "eval.json"
    capsys.readouterr()
    assert main(["eval", "--model", str(run / "checkpoint-2"), "--data", "arithmetic:eval:digits=1", "--limit", "20",
                 "--samples", "2", "--k", "1,2", "--self-verify", "--out", str(out), "--quiet"]) == 0
    printed = capsys.readouterr().out
    whole = json.loads(out.read_text())
    summary = whole["self_verify"]
    assert summary["template"] == TEMPLATE and summary["source"].startswith("run config")
    assert summary["rated"] + summary["skipped"] == 2 * whole["n_tasks"] and summary["rated"] > 0
    for key in ("accuracy", "said_correct", "answers_correct", "no_rating"):
        assert 0.0 <= summary[key]["value"] <= 1.0
    assert "verdict balance (said correct)" in printed and f"{summary['rated']} answers rated" in printed
    plain = tmp_path / "plain.json"
    assert main(["eval", "--model", str(run / "checkpoint-2"), "--data", "arithmetic:eval:digits=1", "--limit", "5",
                 "--out", str(plain), "--quiet"]) == 0
    assert "self_verify" not in json.loads(plain.read_text())


def test_self_verify_flags_without_self_verify_are_an_error(tiny_model_dir, capsys):
    assert main(["eval", "--model", str(tiny_model_dir), "--data", "arithmetic:eval", "--limit", "2",
                 "--self-verify-mode", "critique"]) == 2
    assert "need --self-verify" in capsys.readouterr().err
