"""A judge trained with rlvr: judgement tasks from verified data, `rlvr train` on them, the trained folder served by
`python -m rlvr.rollout.model_server` (a real process on loopback) and used as the `judge` verifier of another `rlvr train`
run through the official openai client, and `rlvr audit judge` against it."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
import torch
import yaml

from judge_standin import ScriptedJudgeServer_standin
from rlvr.cli import main
from rlvr.models import TinySpec, build_tiny_model, encode_prompt
from rlvr.errors import UserError
from rlvr.tasks.judgement import NO, SHORT_TEMPLATE, YES, judge_options, parse_spec
from rlvr.tasks.sources import load_source, load_tasks, part_label
from rlvr.train.metrics import read_metrics
from rlvr.verifiers import Status, verify

pytest.importorskip("openai")

BASES = [  # (base spec, the verifier that labels its candidates)
    ("arithmetic:train:digits=1", "exact"),
    ("arithmetic:train:digits=2,ops=+-", "exact"),
    ("arithmetic:chain:terms=3", "chain_answer"),
]
JUDGE_SPEC = TinySpec(hidden_size=64, num_layers=2, num_heads=4, intermediate_size=256, max_positions=2048)
# near_miss=0: a judge this small does not learn to tell near misses in the test's budget (with near_miss=0.6 it
# went from all-no to all-yes on them over 600 SFT steps); trained on easier mistakes it judges those well, and the
# end-to-end test measures what it does with the policy's near misses.
TRAIN_DATA = "judgement:arithmetic:train:digits=1,n=600,seed=0,near_miss=0"
HELD_OUT = "judgement:arithmetic:eval:digits=1,n=200,seed=1,near_miss=0"


# ------------------------------------------------------------------------------------------ the tasks

@pytest.mark.parametrize("base,verifier", BASES)
def test_judgement_tasks_are_balanced_deterministic_and_labelled_by_the_rule_verifier(base, verifier):
    spec = f"judgement:{base},n=120,seed=3"
    tasks = load_tasks(spec)
    assert len(tasks) == 120 and len({t.id for t in tasks}) == 120
    assert Counter(t.reference for t in tasks) == {YES: 60, NO: 60}
    assert all(t.verifier == "exact" for t in tasks)
    assert [(t.prompt, t.reference) for t in load_tasks(spec)] == [(t.prompt, t.reference) for t in tasks]
    assert [t.prompt for t in load_tasks(f"judgement:{base},n=120,seed=4")] != [t.prompt for t in tasks]
    base_tasks = {t.id: t for t in load_source(parse_spec(spec)[0])}
    for t in tasks:  # the reference is the rule verifier's verdict on the candidate, re-checked here
        source = base_tasks[t.meta["base_id"]]
        v = verify(source.verifier or verifier, t.meta["candidate"], source.reference)
        assert (YES if v.status == Status.CORRECT else NO) == t.reference, (t.meta, v)
        assert t.meta["corruption"] is None or t.reference == NO
        assert SHORT_TEMPLATE.format(question=source.prompt, reference=source.reference,
                                     response=t.meta["candidate"]) == t.prompt[-1]["content"]
    assert {t.meta["corruption"] for t in tasks if t.reference == NO} - {None}, "no corrupted candidate was drawn"


def test_near_miss_share_sets_how_many_wrong_candidates_keep_the_answers_length():
    base = {t.id: t for t in load_source("arithmetic:train:digits=2")}

    def same_length(near_miss):
        tasks = load_tasks(f"judgement:arithmetic:train:digits=2,n=400,seed=1,near_miss={near_miss}")
        wrong = [t for t in tasks if t.reference == NO]
        return sum(len(t.meta["candidate"]) == len(base[t.meta["base_id"]].reference) for t in wrong) / len(wrong)

    none, half, every = same_length(0), same_length(0.5), same_length(1)
    assert none < half < every == 1.0, (none, half, every)


def test_the_judge_verifier_sends_exactly_the_training_prompt():
    """What a judge is trained on is what the `judge` verifier asks it at use time (with judge_options)."""
    for fmt in ("short", "judge"):
        tasks = load_tasks(f"judgement:arithmetic:train:digits=2,n=6,seed=0,format={fmt}")
        base = {t.id: t for t in load_source("arithmetic:train:digits=2")}
        with ScriptedJudgeServer_standin(lambda messages: "yes") as server:
            for t in tasks:
                source = base[t.meta["base_id"]]
                v = verify("judge", t.meta["candidate"], source.reference, prompt=source.prompt,
                           base_url=server.base_url, model="judge", cache=False, **judge_options(fmt))
                assert v.status == Status.CORRECT, v
        assert [r["messages"] for r in server.requests] == [t.prompt for t in tasks]


@pytest.mark.parametrize("spec,base,own", [
    ("judgement:arithmetic:train:digits=1,n=20", "arithmetic:train:digits=1", {"n": "20"}),
    ("judgement:arithmetic:train", "arithmetic:train", {}),
    ("judgement:arithmetic:chain:terms=4,seed=2,format=judge", "arithmetic:chain:terms=4", {"seed": "2", "format": "judge"}),
    ("judgement:data/rows.jsonl:n=5,verifier=math", "data/rows.jsonl", {"n": "5", "verifier": "math"}),
])
def test_judgement_spec_splits_its_own_options_from_the_base(spec, base, own):
    assert parse_spec(spec) == (base, own)


@pytest.mark.parametrize("spec,words", [
    ("judgement:", "not a judgement spec"),
    ("judgement:arithmetic:train:n=1", "'n' must be >= 2"),
    ("judgement:arithmetic:train:n=ten", "must be integers"),
    ("judgement:arithmetic:train:format=long", "'format' must be one of short, judge"),
    ("judgement:arithmetic:train:verifier=exactt", "unknown verifier 'exactt'"),
    ("judgement:arithmetic:train:n=4,n=5", "given twice"),
    ("judgement:arithmetic:train:near_miss=1.5", "'near_miss' must be a number in 0..1"),
    ("judgement:arithmetic:train:near_miss=some", "'near_miss' must be a number in 0..1"),
    ("judgement:arithmetic:train:digits=9", "digits must be in 1..6"),
])
def test_bad_judgement_specs_are_clear_errors(spec, words):
    with pytest.raises(UserError, match=re.escape(words)):
        load_tasks(spec)


def test_judgement_in_a_mixture_is_labelled_by_its_base():
    tasks = load_tasks("judgement:arithmetic:train:digits=1,n=10; arithmetic:train:digits=1,n=5")
    assert Counter(t.meta["mixture"] for t in tasks) == {"judgement:arithmetic": 10, "arithmetic": 5}
    assert part_label("judgement:arithmetic:chain:terms=3,n=4") == "judgement:arithmetic"


# ------------------------------------------------------------------------------------------ train, serve, use

def _warm_judge(folder: Path) -> Path:
    """A tiny judge briefly fine-tuned on judgement tasks (RL then starts from a judge that answers yes/no)."""
    from rlvr.train import sft

    model, tokenizer = build_tiny_model(JUDGE_SPEC, seed=0)
    torch.manual_seed(0)
    pairs = [(t.prompt, t.reference) for t in load_tasks(TRAIN_DATA)]
    sft(model, tokenizer, pairs, steps=250, batch_size=32, lr=2e-3, seed=0, progress=False)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def _held_out_accuracy(folder: Path) -> float:
    from rlvr.models.loading import load_model
    from rlvr.rollout import SamplingParams, build_engine

    model, tokenizer = load_model(folder, device="cpu")
    tasks = load_tasks(HELD_OUT)
    out = build_engine("hf", model.eval(), tokenizer).generate(
        [encode_prompt(tokenizer, t.prompt) for t in tasks], SamplingParams(n=1, max_new_tokens=4, temperature=0.0))
    said = [tokenizer.decode(out.response_ids[i, :int(out.response_mask[i].sum())].tolist(), skip_special_tokens=True)
            for i in range(len(tasks))]
    return sum(s.strip() == t.reference for s, t in zip(said, tasks)) / len(tasks)


class Served:
    """``python -m rlvr.rollout.model_server FOLDER --port 0`` as a subprocess; its URL is read from its first line."""

    def __init__(self, folder: Path, name: str = "judge", key: str | None = None):
        env = {**os.environ, "OMP_NUM_THREADS": "1", **({"JUDGE_KEY": key} if key else {})}
        argv = [sys.executable, "-m", "rlvr.rollout.model_server", str(folder), "--port", "0", "--name", name,
                "--max-tokens", "8"] + (["--api-key-env", "JUDGE_KEY"] if key else [])
        self.process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        line = self.process.stdout.readline()
        match = re.search(r"at (http://127\.0\.0\.1:\d+/v1)", line)
        if not match:
            self.process.kill()
            raise AssertionError(f"the server did not start: {line!r} {self.process.stderr.read()[-2000:]}")
        self.base_url = match.group(1)

    def stop(self) -> str:
        """Stop it as a user would (SIGTERM); its last words: how many requests it served."""
        self.process.terminate()
        out, err = self.process.communicate(timeout=30)
        assert self.process.returncode == 0, err[-2000:]
        return out


def _served_count(words: str) -> int:
    return int(re.search(r"served (\d+) requests", words).group(1))


@pytest.fixture(scope="module")
def judges(tmp_path_factory):
    """(untrained folder, warmed folder, folder trained 3 steps by `rlvr train`)."""
    root = tmp_path_factory.mktemp("judge")
    untrained = root / "untrained"
    model, tokenizer = build_tiny_model(JUDGE_SPEC, seed=0)
    model.save_pretrained(untrained)
    tokenizer.save_pretrained(untrained)
    warm = _warm_judge(root / "warm")
    run = root / "judge-run"
    assert main(["train", "examples/arithmetic.yaml", f"model.path={warm}", f"data.train={TRAIN_DATA}",
                 f"train.out={run}", "train.steps=3", "data.prompts_per_step=8", "rollout.group_size=4",
                 "rollout.max_new_tokens=4", "train.lr=1e-4", "train.progress=false"]) == 0
    rows = read_metrics(run)
    assert [r["step"] for r in rows] == [1, 2, 3]
    return untrained, warm, run / "checkpoint-3", rows


def test_a_judge_trained_with_rlvr_is_served_and_judges_another_run(judges, warm_model_dir, tmp_path):
    untrained, warm, trained, judge_rows = judges
    before = _held_out_accuracy(untrained)
    assert before < 0.2  # it does not even answer yes/no
    accuracy = _held_out_accuracy(trained)
    print(f"held-out judgement accuracy: untrained {before:.3f}, warmed {_held_out_accuracy(warm):.3f}, "
          f"after rlvr train {accuracy:.3f}")
    assert accuracy >= 0.75, accuracy  # held-out problems: a judge, not a lookup table
    assert sum(r["verifier_score_mean"] for r in judge_rows) / 3 >= 0.6

    server = Served(trained, key="judge-secret")
    try:
        config = {
            "model": {"path": str(warm_model_dir)},  # a policy warmed on one-digit addition
            "data": {"train": "arithmetic:train:digits=1", "verifier": "judge", "prompts_per_step": 4,
                     "verifier_options": {"base_url": server.base_url, "model": "judge", "api_key_env": "JUDGE_KEY",
                                          "max_tokens": 4, "timeout_s": 60, **judge_options("short")}},
            "rollout": {"group_size": 2, "max_new_tokens": 4},
            "train": {"steps": 3, "lr": 1e-4, "out": str(tmp_path / "policy"), "progress": False, "log_samples": 8},
        }
        path = tmp_path / "policy.yaml"
        path.write_text(yaml.safe_dump(config))
        os.environ["JUDGE_KEY"] = "judge-secret"
        assert main(["train", str(path)]) == 0
    finally:
        words = server.stop()
    rows = read_metrics(tmp_path / "policy")
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert all(r.get("verdict_error", 0) == 0 and r.get("verdict_timeout", 0) == 0 for r in rows), rows
    samples = [json.loads(line) for line in (tmp_path / "policy" / "samples.jsonl").read_text().splitlines()]
    reasons = Counter(s["reason"] for s in samples)
    assert reasons["judge_correct"] + reasons["judge_incorrect"] + reasons["unparsable_judgement"] > 0, reasons
    assert _served_count(words) >= reasons["judge_correct"] + reasons["judge_incorrect"] > 0, (words, reasons)
    # the served judge against the rule verifier on the policy's answers: every right answer is accepted; what it
    # does with wrong ones is measured (a judge this small accepts near misses of the right shape)
    answers = {t.id: t.reference for t in load_source("arithmetic:train:digits=1")}
    judged = [(s["reason"] == "judge_correct", verify("exact", s["response"], answers[s["task_id"]]).status
               == Status.CORRECT) for s in samples if s["reason"] in ("judge_correct", "judge_incorrect")]
    right = [said for said, truth in judged if truth]
    wrong = [said for said, truth in judged if not truth]
    print(f"judge on the policy's answers: right ones accepted {sum(right)}/{len(right)}, wrong ones accepted "
          f"{sum(wrong)}/{len(wrong)}; reasons {dict(reasons)}")
    assert right and all(right), judged


def test_model_server_refuses_a_wrong_key_and_a_wrong_model_name(tiny_model_dir):
    import openai

    server = Served(tiny_model_dir, name="judge", key="k1")
    try:
        good = openai.OpenAI(base_url=server.base_url, api_key="k1", max_retries=0)
        reply = good.chat.completions.create(model="judge", messages=[{"role": "user", "content": "1+1="}], max_tokens=3)
        assert reply.model == "judge" and reply.usage.completion_tokens <= 3
        assert [m.id for m in good.models.list().data] == ["judge"]
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(base_url=server.base_url, api_key="k2", max_retries=0).chat.completions.create(
                model="judge", messages=[{"role": "user", "content": "1+1="}])
        with pytest.raises(openai.NotFoundError, match="serves 'judge'"):
            good.chat.completions.create(model="gpt-4", messages=[{"role": "user", "content": "1+1="}])
        again = good.chat.completions.create(model="judge", messages=[{"role": "user", "content": "1+1="}], max_tokens=3)
        assert again.choices[0].message.content == reply.choices[0].message.content  # greedy by default
    finally:
        words = server.stop()
    assert _served_count(words) == 2 and "(1 refused)" in words  # the wrong model name is not served either


def test_model_server_bad_arguments_are_clear_errors(tmp_path, monkeypatch):
    from rlvr.rollout import model_server

    monkeypatch.delenv("NO_SUCH_KEY_VAR", raising=False)
    assert model_server.main([str(tmp_path), "--api-key-env", "NO_SUCH_KEY_VAR"]) == 2
    assert model_server.main([str(tmp_path / "missing"), "--port", "0"]) == 2


def test_audit_judge_reports_false_positives_of_the_untrained_and_the_trained_judge(judges, tmp_path):
    untrained, _, trained, _ = judges
    items = tmp_path / "items.jsonl"
    items.write_text(json.dumps({"prompt": "3+4=", "reference": "7", "response": "7", "wrong": "8"}) + "\n")
    reports = {}
    for label, folder in (("untrained", untrained), ("trained", trained)):
        server = Served(folder)
        try:
            out = tmp_path / f"audit-{label}.json"
            assert main(["audit", "judge", "--endpoint", server.base_url, "--model", "judge", "--items", str(items),
                         "--timeout", "60", "--max-tokens", "4", "--out", str(out)]) == 0
        finally:
            words = server.stop()
        reports[label] = json.loads(out.read_text())["summary"]
        assert _served_count(words) > 0
    for label, summary in reports.items():  # the figures docs quote (run with -s)
        print(label, {setup: {k: round(v, 3) for k, v in row.items() if isinstance(v, (int, float))}
                      for setup, row in summary.items()})
    for label, summary in reports.items():
        assert set(summary) == {"plain prompt", "hardened prompt", "hardened + pre-checks"}
        for setup in summary.values():
            assert 0.0 <= setup["key_false_positive_rate"] <= 1.0
        # pre-checks only ever stop a key before the judge: with a greedy judge they cannot add a false positive
        assert summary["hardened + pre-checks"]["key_false_positive_rate"] <= \
            summary["hardened prompt"]["key_false_positive_rate"]
    # the trained judge answers in the verdict format the judge verifier parses; the untrained one does not
    assert reports["trained"]["plain prompt"]["undecided_calls"] < reports["untrained"]["plain prompt"]["undecided_calls"]


# ------------------------------------------------------------------------------------------ step labels (PRM)

def test_step_tasks_label_each_line_as_the_rule_checked_process_reward_does():
    from rlvr.rewards.process import line_verdict

    spec = "steps:arithmetic:chain:terms=4,ops=+-*,n=200,seed=2"
    tasks = load_tasks(spec)
    assert [t.reference for t in load_tasks(spec)] == [t.reference for t in tasks]
    base = {t.id: t for t in load_source("arithmetic:chain:terms=4,ops=+-*")}
    corrupted = 0
    for t in tasks:
        steps, labels, source = t.meta["steps"], t.meta["labels"], base[t.meta["base_id"]]
        assert t.reference == "".join(labels) and len(steps) == len(labels) and t.verifier == "exact"
        for line, label in zip(steps[:-1], labels[:-1]):
            assert line_verdict(line, 30) == ("true" if label == "+" else "false"), (line, label)
        assert (labels[-1] == "+") == (verify("chain_answer", "\n".join(steps), source.reference).status
                                       == Status.CORRECT)
        if t.meta["first_error"] is None:
            assert "\n".join(steps) == source.meta["solution"]  # an untouched solution is the base's own
        else:
            corrupted += 1
            assert labels[t.meta["first_error"]] == "-" and set(labels[:t.meta["first_error"]]) <= {"+"}
    assert 70 <= corrupted <= 130  # wrong=0.5


@pytest.mark.parametrize("spec,words", [
    ("steps:arithmetic:train:digits=1,n=4", "has no worked solution"),
    ("steps:arithmetic:chain:wrong=2", "wrong in 0..1"),
    ("steps:arithmetic:chain:n=x", "must be integers"),
])
def test_bad_step_specs_are_clear_errors(spec, words):
    with pytest.raises(UserError, match=re.escape(words)):
        load_tasks(spec)
