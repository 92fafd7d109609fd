"""The co-trained verifier (rlvr.train.parts_verifier, RL Tango / Cooper) and its reward term model_verifier
(rlvr.verifiers.model_verifier): options that fail naming their key, the objectives' math by hand, each update moving
the verifier towards the rule verifier's labels, the term composed with gates, `rlvr train` with the recipes tango and
cooper, and exact resume of both models after kill -9."""

from __future__ import annotations

import copy
import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

import rlvr.train.parts_verifier as pv
from rlvr.config import ConfigError, config_from_dict
from rlvr.rollout.base import RolloutBatch
from rlvr.train.metrics import read_metrics
from rlvr.train.parts import PartContext, build_parts
from rlvr.verifiers import ScoreRequest, Status, score_batch
from rlvr.verifiers.compose import parse_spec
from rlvr.verifiers.model_verifier import compose_with_model_scores

ROOT = Path(__file__).resolve().parents[1]
PLUGIN = "rlvr.train.parts_verifier"
DIGIT_VERDICTS = ("algo.verifier_options.yes=1", "algo.verifier_options.no=0")
TIMING = {"time_s", "tokens_per_s", "reward_latency_p50_ms", "reward_latency_p99_ms"}


def _verifier(model_dir, objective: str, **options) -> pv.CotrainedVerifier:
    cfg = config_from_dict({"model": {"path": str(model_dir)},
                            "algo": {"verifier_model": "policy", "verifier_objective": objective, "verifier_lr": 1e-2,
                                     "verifier_options": options},
                            "train": {"steps": 100}})
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    return build_parts(cfg, PartContext(model, lambda: copy.deepcopy(model)))["cotrained_verifier"]


# ---------------------------------------------------------------- options and verdicts

@pytest.mark.parametrize("options, key", [
    ({"temprature": 1.0}, "algo.verifier_options.temprature: unknown option"),
    ({"samples": 1}, "algo.verifier_options.samples: expected an int >= 2"),
    ({"samples": "4"}, "algo.verifier_options.samples"),
    ({"samples": True}, "algo.verifier_options.samples"),
    ({"template": "Is it right? "}, "algo.verifier_options.template: expected a string holding {response}"),
    ({"yes": "  "}, "algo.verifier_options.yes"),
    ({"yes": "yes", "no": "y"}, "algo.verifier_options.yes/no"),
    ({"temperature": 0}, "algo.verifier_options.temperature"),
    ({"pairs": "some"}, "algo.verifier_options.pairs: expected first or all"),
    ({"rows_per_step": -1}, "algo.verifier_options.rows_per_step"),
])
def test_a_bad_option_is_an_error_naming_its_key(options, key):
    with pytest.raises(ConfigError, match=key.replace("?", r"\?").replace("{", r"\{").replace("}", r"\}")):
        pv.parse_options(options, "rl")


def test_options_default_by_objective_and_accept_ints_for_floats():
    assert "{reference}" in pv.parse_options({}, "contrastive").template  # Cooper's reward model reads the reference
    assert "{reference}" not in pv.parse_options({}, "rl").template
    assert pv.parse_options({"temperature": 2}, "rl").temperature == 2.0
    assert (pv.parse_options({"yes": 1, "no": 0}, "rl").yes, pv.parse_options({"yes": 1, "no": 0}, "rl").no) == ("1", "0")


@pytest.mark.parametrize("text, verdict", [
    ("y", True), (" y ok", True), ("\nyes", True), ("n", False), ("  no", False), ("", None), ("maybe", None),
    ("Y", None), ("7", None), ("?y", None),
])
def test_a_verdict_is_the_word_the_response_starts_with(text, verdict):
    assert pv.read_verdict(text, pv.parse_options({}, "rl")) is verdict


def test_the_prompt_fills_question_answer_and_reference():
    options = pv.parse_options({"template": "Q {prompt} A {response} R {reference} ->"}, "rl")
    assert options.prompt("2+2=", "4", 4) == "Q 2+2= A 4 R 4 ->"
    chat = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "2+2="}]
    assert options.prompt(chat, "4", "4") == "Q be brief\n2+2= A 4 R 4 ->"


# ---------------------------------------------------------------- the objectives' math

def test_pairwise_loss_is_coopers_mean_negative_log_sigmoid_of_score_differences():
    scores = torch.tensor([2.0, 0.5, -1.0])
    expected = (-math.log(1 / (1 + math.exp(-1.5))) - math.log(1 / (1 + math.exp(-3.0)))) / 2
    assert float(pv.pairwise_loss(scores, [(0, 1), (0, 2)])) == pytest.approx(expected, rel=1e-6)
    empty = pv.pairwise_loss(scores.requires_grad_(), [])
    assert float(empty.detach()) == 0.0 and empty.requires_grad


def test_pairs_are_drawn_within_a_group_from_decided_rows():
    labels = [1.0, 0.0, 1.0, None, 0.0, 0.0, 1.0, 1.0]
    groups = [0, 0, 0, 0, 1, 1, 2, 2]
    every = range(8)
    assert pv.contrastive_pairs(labels, groups, every, "first") == [(0, 1)]  # group 1 has no positive, 2 no negative
    assert pv.contrastive_pairs(labels, groups, every, "all") == [(0, 1), (2, 1)]
    assert pv.contrastive_pairs(labels, groups, [1, 2], "first") == [(2, 1)]  # only the rows picked for training


def test_agreement_metrics_show_the_hacking_gap():
    judgement = pv.Judgement(scores=[1.0, 1.0, 0.0, 1.0], said_yes=[1.0, 1.0, 0.0, 1.0], said_no=[0.0, 0.0, 1.0, 0.0],
                             state={})
    m = pv.agreement_metrics(judgement, [1.0, 0.0, 0.0, None])
    assert m["verifier/agreement"] == pytest.approx(2 / 3)
    assert m["verifier/agreement_on_correct"] == 1.0 and m["verifier/agreement_on_wrong"] == 0.5
    assert m["verifier/false_positive_rate"] == 0.5
    assert m["verifier/score_mean"] == 0.75 and m["verifier/true_accuracy"] == pytest.approx(1 / 3)


# ---------------------------------------------------------------- the reward term

def test_the_runner_gives_a_model_verifier_term_could_not_decide_never_a_score():
    verdict, = score_batch([ScoreRequest("model_verifier", "4", "4")])
    assert verdict.status is Status.UNDECIDABLE and verdict.score == 0.0


def test_model_scores_are_composed_with_weights_gates_and_schedules():
    spec = parse_spec([{"name": "checker", "verifier": "model_verifier", "weight": {"start": 0.0, "end": 1.0, "steps": 10}},
                       {"name": "correct", "verifier": "task", "gate": "checker", "gate_min": 0.5}])
    out = compose_with_model_scores(spec, {"correct": [1.0, 1.0, 0.0]}, [0.9, 0.2, 0.8], lengths=[1, 1, 1], max_len=4,
                                    groups=[0, 0, 0], step=5)
    assert out.components == {"checker": [0.9, 0.2, 0.8], "correct": [1.0, 0.0, 0.0]}  # the gate reads the model
    assert out.total == pytest.approx([0.45 + 1.0, 0.1, 0.4])
    with pytest.raises(KeyError, match="correct"):
        compose_with_model_scores(spec, {}, [0.0] * 3, lengths=[1] * 3, max_len=4, groups=[0] * 3, step=0)


ONLY_CHECKER = [{"name": "checker", "verifier": "model_verifier"}]
WITH_RULE = [{"name": "correct", "verifier": "task"}, *ONLY_CHECKER]


@pytest.mark.parametrize("algo, terms, async_rollouts, message", [
    ({}, ONLY_CHECKER, 0, "set algo.verifier_model"),
    ({"verifier_model": "policy"}, ONLY_CHECKER, 1, "cluster.async_rollouts"),
    ({"verifier_model": "policy", "dynamic_sampling": True}, ONLY_CHECKER, 0, "algo.dynamic_sampling"),
    ({"verifier_model": "policy", "dynamic_sampling": True, "dynamic_sampling_metric": "reward"}, WITH_RULE, 0,
     "algo.dynamic_sampling_metric=score"),
    ({"verifier_model": "policy", "advantage": "remax"}, WITH_RULE, 0, "algo.advantage=remax: its greedy baseline"),
])
def test_a_verifier_that_cannot_work_is_a_config_error(tiny_model_dir, algo, terms, async_rollouts, message):
    cfg = config_from_dict({"model": {"path": str(tiny_model_dir)}, "algo": algo,
                            "cluster": {"async_rollouts": async_rollouts}, "reward": {"terms": terms}})
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    with pytest.raises(ConfigError, match=message):
        build_parts(cfg, PartContext(model, lambda: model))


# ---------------------------------------------------------------- each update moves the verifier towards the labels

def test_the_contrastive_update_separates_rule_correct_from_rule_wrong_answers(tiny_model_dir):
    verifier = _verifier(tiny_model_dir, "contrastive", pairs="all")
    texts = ["1+2=3 ref 3 ok? ", "1+2=4 ref 3 ok? ", "2+2=4 ref 4 ok? ", "2+2=5 ref 4 ok? "]
    prompts = [list(verifier.tokenizer(t)["input_ids"]) for t in texts]
    labels, groups = [1.0, 0.0, 1.0, 0.0], [0, 0, 1, 1]
    margin = lambda: [float(s) for s in verifier.objective.log_odds(prompts).detach()]  # noqa: E731
    before = margin()
    for step in range(30):
        metrics = verifier.update(verifier.objective.judge(prompts, step), labels, [0, 1, 2, 3], groups)
    after = margin()
    assert metrics["verifier/pairs"] == 2.0 and metrics["verifier/loss"] < math.log(2)
    assert after[0] - after[1] > before[0] - before[1] + 1.0 and after[2] - after[3] > before[2] - before[3] + 1.0
    assert pv.agreement_metrics(verifier.objective.judge(prompts, 99), labels)["verifier/agreement"] == 1.0
    assert verifier.scheduler.last_epoch == 30  # its own schedule stepped once per update


def test_the_rl_update_makes_the_verdicts_that_agreed_with_the_rule_more_likely(tiny_model_dir):
    """Tango's objective on verdicts fixed by hand: for the answer the rule calls correct, the sampled "y" was right
    and "n" wrong; for the wrong answer the reverse. GRPO's advantages then push each prompt towards its right word."""
    verifier = _verifier(tiny_model_dir, "rl", samples=2, temperature=1.0)
    tok = verifier.tokenizer
    prompts = [list(tok("1+2=3 ok? ")["input_ids"]), list(tok("1+2=4 ok? ")["input_ids"])]
    width = max(map(len, prompts))
    prompt_ids = torch.tensor([[0] * (width - len(p)) + p for p in prompts for _ in range(2)])
    prompt_mask = (prompt_ids != 0).long()
    words = [verifier.yes_ids, verifier.no_ids, verifier.yes_ids, verifier.no_ids]
    response_ids = torch.tensor(words)
    batch = RolloutBatch(prompt_ids, prompt_mask, response_ids, torch.ones_like(response_ids),
                         torch.zeros(response_ids.shape), torch.zeros(4, dtype=torch.bool), torch.tensor([0, 0, 1, 1]))
    judgement = pv.Judgement([0.5, 0.5], [0.5, 0.5], [0.5, 0.5], {"batch": batch, "verdicts": [True, False, True, False]})
    labels = [1.0, 0.0]

    def p_yes() -> list[float]:
        return [float(torch.sigmoid(s)) for s in pv.PairwiseYes(verifier).log_odds(prompts).detach()]

    before = p_yes()
    for _ in range(10):
        metrics = verifier.update(judgement, labels, [0, 1], [0, 1])
    after = p_yes()
    assert metrics["verifier/reward_mean"] == 0.5
    assert after[0] > before[0] + 0.2 and after[1] < before[1] - 0.2


def test_rows_per_step_trains_on_a_seeded_subset(tiny_model_dir):
    verifier = _verifier(tiny_model_dir, "rl", rows_per_step=3)
    labels = [1.0, None, 0.0, 0.0, 1.0, 1.0]
    rows = verifier.training_rows(labels, step=4)
    assert len(rows) == 3 and 1 not in rows and rows == sorted(rows)
    assert verifier.training_rows(labels, step=4) == rows  # the same step picks the same rows (resume)


# ---------------------------------------------------------------- from the command line

def _train(model, out, *extra, steps=3, save_every=0):
    return [sys.executable, "-m", "rlvr.cli", "train", str(ROOT / "examples" / "arithmetic.yaml"), "--plugin", PLUGIN,
            f"model.path={model}", f"train.out={out}", "data.train=arithmetic:train:digits=1", "data.prompts_per_step=4",
            "rollout.group_size=4", "rollout.max_new_tokens=4", f"train.steps={steps}", f"train.save_every={save_every}",
            "train.progress=false", "algo.verifier_lr=1e-3", *extra]


def _env():
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT / "src")}


def _weights(folder: Path) -> dict[str, torch.Tensor]:
    return AutoModelForCausalLM.from_pretrained(folder).state_dict()


@pytest.mark.parametrize("recipe, objective_metric", [("tango", "verifier/reward_mean"), ("cooper", "verifier/pairs")])
def test_the_recipes_train_three_steps_and_save_the_verifier_as_its_own_folder(recipe, objective_metric,
                                                                                warm_model_dir, tmp_path):
    out = tmp_path / "run"
    # verdict words the digit-trained starting model already samples: RL sharpens a verdict it sometimes gives and
    # cannot discover one it never samples
    done = subprocess.run(_train(warm_model_dir, out, f"algo.recipe={recipe}", *DIGIT_VERDICTS), env=_env(),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = read_metrics(out)
    assert [r["step"] for r in rows] == [1, 2, 3]
    for r in rows:
        assert 0.0 <= r["verifier/agreement"] <= 1.0 and math.isfinite(r["verifier/loss"])
        assert r["reward/checker"] == pytest.approx(r["verifier/score_mean"])  # the term pays the verifier's score
        assert r["verifier_score_mean"] == pytest.approx(r["verifier/true_accuracy"])  # the rule's, still logged
        assert "verdict_undecidable" not in r  # the placeholder never stands for the rule verifier's verdicts
    assert any(objective_metric in r for r in rows)
    assert "verifier_objective: " + ("rl" if recipe == "tango" else "contrastive") in (out / "config.yaml").read_text()
    verifier = _weights(out / "checkpoint-3" / "verifier")  # a plain Hugging Face folder
    initial, policy = _weights(warm_model_dir), _weights(out / "checkpoint-3")
    assert any(not torch.equal(verifier[k], initial[k]) for k in verifier)  # it was trained
    assert any(not torch.equal(verifier[k], policy[k]) for k in verifier)  # ... as a model of its own


@pytest.mark.parametrize("objective", ["rl", "contrastive"])
def test_kill_9_and_resume_give_both_models_and_the_metrics_of_the_uninterrupted_run(objective, warm_model_dir,
                                                                                      tmp_path):
    steps = 6
    extra = [*DIGIT_VERDICTS, "algo.verifier_model=policy", f"algo.verifier_objective={objective}", "algo.verifier_options.pairs=all",
             'reward.terms=[{name: correct, verifier: task}, {name: checker, verifier: model_verifier, weight: 0.5}]']
    whole, cut = tmp_path / "whole", tmp_path / "cut"
    done = subprocess.run(_train(warm_model_dir, whole, *extra, steps=steps, save_every=2), env=_env(),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]

    driver = subprocess.Popen(_train(warm_model_dir, cut, *extra, steps=steps, save_every=2), env=_env(),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 240
    while not (cut / "checkpoint-2").is_dir() and driver.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    driver.send_signal(signal.SIGKILL)
    driver.wait()
    assert (cut / "checkpoint-2" / "verifier").is_dir() and not (cut / f"checkpoint-{steps}").exists(), \
        "the kill came too late"
    resumed = subprocess.run([*_train(warm_model_dir, cut, *extra, steps=steps, save_every=2), "--resume"], env=_env(),
                             capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-3000:]

    rows, expected = read_metrics(cut), read_metrics(whole)
    assert [r["step"] for r in rows] == list(range(1, steps + 1))
    strip = lambda rs: [{k: v for k, v in r.items() if k not in TIMING} for r in rs]  # noqa: E731
    assert strip(rows) == strip(expected)
    last = Path(f"checkpoint-{steps}")
    for folder in (last, last / "verifier"):
        a, b = _weights(whole / folder), _weights(cut / folder)
        assert all(torch.equal(a[k], b[k]) for k in a), f"{folder} differs from the uninterrupted run's"
    trained = _weights(whole / last / "verifier")
    assert any(not torch.equal(trained[k], v) for k, v in _weights(warm_model_dir).items())  # so its resume is tested
    assert all(json.dumps(r["verifier/lr"]) for r in expected)


@pytest.mark.parametrize("objective", ["rl", "contrastive"])
def test_an_answer_longer_than_the_verifiers_context_is_read_by_its_end(objective, tiny_model_dir):
    """A policy answer of any length is a judgement, never a crash: the verifier keeps the prompt's last tokens, the
    verdict cue, within its context (the tiny model has 128 positions)."""
    from rlvr.rollout.episodes import ScoredSamples, Scoring
    from rlvr.rollout.stages import StageContext
    from rlvr.tasks import Task
    from rlvr.verifiers import Verdict

    verifier = _verifier(tiny_model_dir, objective, samples=2, max_new_tokens=4, max_prompt_tokens=4096)
    assert verifier.prompt_limit() == 128 - 4
    n = 4
    batch = RolloutBatch(torch.ones(n, 2, dtype=torch.long), torch.ones(n, 2, dtype=torch.long),
                         torch.ones(n, 3, dtype=torch.long), torch.ones(n, 3, dtype=torch.long), torch.zeros(n, 3),
                         torch.zeros(n, dtype=torch.bool), torch.tensor([0, 0, 1, 1]))
    task = Task(id="t", prompt="1+2=" * 100, reference="3")
    samples = ScoredSamples(batch, [task] * n, ["3" * 500, "4", "3", "9" * 300],
                            [Verdict(1.0, Status.CORRECT, "ok"), Verdict(0.0, Status.INCORRECT, "no"),
                             Verdict(1.0, Status.CORRECT, "ok"), Verdict(0.0, Status.TIMEOUT, "slow")],
                            [1.0, 0.0, 1.0, 0.0])
    ctx = StageContext(None, verifier.tokenizer, None, Scoring("exact"), None, verifier.cfg)
    out, metrics = verifier.run(samples, ctx, step=1)
    assert out.rewards == samples.rewards  # no model_verifier term: the reward is the rule's
    assert metrics["verifier/labelled"] == 3.0  # the timed-out answer is no label
    assert 0.0 <= metrics["verifier/agreement"] <= 1.0 and math.isfinite(metrics["verifier/loss"])


def test_a_verifier_with_another_tokenizer_is_refused(tiny_model_dir, tmp_path):
    """Its checkpoint folder would hold the policy's tokenizer files: refused, naming the key."""
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    other = tmp_path / "other"
    model.save_pretrained(other)
    from rlvr.models.tiny import char_tokenizer

    tokenizer = char_tokenizer()
    tokenizer.add_tokens(["<extra>"])
    tokenizer.save_pretrained(other)
    cfg = config_from_dict({"model": {"path": str(tiny_model_dir)}, "algo": {"verifier_model": str(other)}})
    with pytest.raises(ConfigError, match="algo.verifier_model: .* another tokenizer"):
        build_parts(cfg, PartContext(model, lambda: model))
    same = config_from_dict({"model": {"path": str(tiny_model_dir)}, "algo": {"verifier_model": str(tiny_model_dir)}})
    assert "cotrained_verifier" in build_parts(same, PartContext(model, lambda: model))
