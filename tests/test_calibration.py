"""The `calibrated` verifier (RLCR's Brier reward, TruthRL's ternary reward) and the calibration metrics that
`rlvr eval` reports for it (ECE, Brier, AUROC): spec numbers (float64, abs 1e-6), hand-computed tables and the CLI."""

import itertools
import json
import random

import pytest
import torch

from rlvr.cli import main
from rlvr.eval.calibration import (BINS, auroc, brier_score, expected_calibration_error, summary_entries,
                                   verdict_confidence, verdict_correct)
from rlvr.eval.summary import summarize
from rlvr.verifiers import Status, Verdict, verify
from rlvr.verifiers import calibrated as _calibrated  # noqa: F401  (registers "calibrated" and "noisy")
from rlvr.verifiers.calibrated import brier_reward, parse_confidence


def cal(response, reference="42", **options):
    return verify("calibrated", response, reference, **options)


# ------------------------------------------------------------------------------------------- spec 4.11 numbers

@pytest.mark.parametrize("correct, q, expected", [(True, 0.8, 0.96), (False, 0.8, -0.64), (False, 0.0, 0.0),
                                                  (True, 1.0, 1.0), (True, 0.0, 0.0), (False, 1.0, -1.0)])
def test_brier_reward_spec_numbers(correct, q, expected):
    assert brier_reward(correct, q) == pytest.approx(expected, abs=1e-6)


@pytest.mark.parametrize("response, expected, status", [
    ("42 <confidence>0.8</confidence>", 0.96, Status.CORRECT),
    ("41 <confidence>0.8</confidence>", -0.64, Status.INCORRECT),
    ("41 <confidence>0</confidence>", 0.0, Status.INCORRECT),
    ("42<confidence>1</confidence>", 1.0, Status.CORRECT),
    ("<confidence> 0.25 </confidence>\n42", 1 - 0.75 ** 2, Status.CORRECT),   # tag first, spaces inside
    ("42 <CONFIDENCE>0.5</CONFIDENCE>", 0.75, Status.CORRECT),                 # tag case
    ("42 <confidence>0.9</confidence> <confidence>0.2</confidence>", 1 - 0.8 ** 2, Status.CORRECT),  # the last
])
def test_calibrated_verifier_brier_mode(response, expected, status):
    v = cal(response)
    assert v.score == pytest.approx(expected, abs=1e-6) and v.status is status
    assert v.details["correct"] is (status is Status.CORRECT)


@pytest.mark.parametrize("response, reason", [
    ("42", "missing_confidence"),
    ("42 <confidence>high</confidence>", "bad_confidence"),
    ("42 <confidence>80%</confidence>", "bad_confidence"),
    ("42 <confidence>1.5</confidence>", "bad_confidence"),
    ("42 <confidence>-0.1</confidence>", "bad_confidence"),
    ("42 <confidence>nan</confidence>", "bad_confidence"),
    ("42 <confidence>inf</confidence>", "bad_confidence"),
    ("42 <confidence></confidence>", "bad_confidence"),
    ("42 <confidence>" + "9" * 10_000 + "</confidence>", "bad_confidence"),
])
def test_missing_or_bad_confidence_is_a_format_failure(response, reason):
    v = cal(response)
    assert (v.score, v.reason) == (-2.0, reason)
    assert v.details["confidence"] is None and v.details["correct"] is True  # the answer itself was right
    assert cal(response, missing_score=-1.0).score == -1.0


def test_an_unclosed_tag_stays_in_the_answer():
    v = cal("42 <confidence>0.8")
    assert (v.score, v.reason, v.details["correct"]) == (-2.0, "missing_confidence", False)


def test_the_inner_verifier_sees_the_response_without_the_tag():
    v = cal("42 <confidence>0.8</confidence>")
    assert v.extracted == "42" and v.details["inner"]["reason"] == "exact_match"


def test_inner_verifier_and_its_options():
    assert cal("ABC <confidence>1</confidence>", "abc", inner_options={"case_sensitive": True}).score == -1.0
    v = cal("so the answer is \\boxed{1/2} <confidence>0.6</confidence>", "0.5", inner="math")
    assert v.status is Status.CORRECT and v.score == pytest.approx(1 - 0.4 ** 2)


def test_custom_tag():
    assert cal("42 <c>0.5</c>", tag="c").score == pytest.approx(0.75)
    assert cal("42 <confidence>0.5</confidence>", tag="c").reason == "missing_confidence"


@pytest.mark.parametrize("response, expected, reason", [
    ("42", 1.0, "correct"),
    ("I don't know.", 0.0, "abstained"),
    ("I DON\u2019T   know", 0.0, "abstained"),
    ("i am not sure, maybe 41", 0.0, "abstained"),
    ("41", -1.0, "wrong"),
    ("", -1.0, "wrong"),
])
def test_ternary_mode(response, expected, reason):
    v = cal(response, mode="ternary")
    assert (v.score, v.reason) == (expected, reason)


def test_ternary_mode_keeps_a_stated_confidence_and_custom_phrases():
    v = cal("41 <confidence>0.3</confidence>", mode="ternary")
    assert v.score == -1.0 and v.details["confidence"] == 0.3
    assert cal("pass", mode="ternary", abstain_phrases=["pass"]).score == 0.0
    assert cal("I don't know", mode="ternary", abstain_phrases=["pass"]).score == -1.0


def test_an_undecided_inner_verdict_keeps_its_status():
    v = cal("42 <confidence>0.9</confidence>", reference=None)  # exact: a null reference cannot be checked
    assert v.status is Status.ERROR and v.score == 0.0 and v.details["correct"] is None
    assert verdict_confidence(v) is None


@pytest.mark.parametrize("options, message", [
    ({"mode": "log"}, "mode: expected one of brier, ternary"),
    ({"tag": "a>b"}, "tag: expected a tag name"),
    ({"inner": "nope"}, "unknown verifier 'nope'"),
    ({"inner": 3}, "inner: expected a verifier name"),
    ({"abstain_phrases": [1]}, "abstain_phrases: expected a list of strings"),
    ({"missing_score": float("nan")}, "missing_score: expected a finite number"),
])
def test_bad_options_are_error_verdicts(options, message):
    v = cal("42 <confidence>1</confidence>", **options)
    assert v.status is Status.ERROR and message in v.details["error"]


@pytest.mark.parametrize("response", ["", "<confidence>", "</confidence><confidence>", "\x00\ud800",
                                      "<confidence>" * 20_000 + "0.5" + "</confidence>" * 20_000])
def test_odd_responses_never_raise(response):
    v = cal(response)
    assert v.status in (Status.CORRECT, Status.INCORRECT, Status.ERROR)


@pytest.mark.parametrize("response, q", [
    ("<confidence>0.1</confidence><confidence>0.4</confidence>", 0.4),
    ("<confidence><confidence>0.3</confidence>", None),           # the first open pairs with the close: "<confidence>0.3"
    ("<confidence>0.2</confidence><confidence>", 0.2),            # a trailing unclosed tag is text
    ("</confidence><confidence>0.6</confidence>", 0.6),
    ("<Confidence>0.7</CONFIDENCE>", 0.7),
])
def test_tag_pairing_matches_a_lazy_regex(response, q):
    import re

    found = re.findall(r"<confidence>(.*?)</confidence>", response, re.DOTALL | re.IGNORECASE)
    assert parse_confidence(response)[0] == q
    if found:
        try:
            assert float(found[-1]) == q
        except ValueError:
            assert q is None


def test_many_unclosed_tags_parse_in_linear_time():
    import time

    t = time.perf_counter()
    v = cal("42 " + "<confidence>" * 200_000)
    assert time.perf_counter() - t < 5.0  # a lazy regex needs ~10^11 steps here
    assert v.reason == "missing_confidence"


def test_parse_confidence_strips_every_tag():
    q, problem, rest = parse_confidence("a <confidence>0.1</confidence> b <confidence>0.4</confidence>")
    assert (q, problem) == (0.4, "") and "confidence" not in rest


# ------------------------------------------------------------------------------------------------- metrics

def test_metrics_hand_computed():
    conf, right = [0.9, 0.8, 0.3, 0.6], [True, False, False, True]
    # bins 9, 8, 3, 6 hold one answer each: (|1-.9| + |0-.8| + |0-.3| + |1-.6|) / 4
    assert expected_calibration_error(conf, right) == pytest.approx(0.4, abs=1e-12)
    assert brier_score(conf, right) == pytest.approx((0.01 + 0.64 + 0.09 + 0.16) / 4, abs=1e-12)
    assert auroc(conf, right) == pytest.approx(0.75, abs=1e-12)  # 3 of the 4 (right, wrong) pairs ordered


def test_ece_averages_within_a_bin_and_weighs_bins_by_count():
    conf, right = [0.82, 0.88, 0.85, 0.05], [True, True, False, False]
    # bin 8: accuracy 2/3, mean confidence 0.85, weight 3/4; bin 0: |0 - 0.05|, weight 1/4
    assert expected_calibration_error(conf, right) == pytest.approx(0.75 * (0.85 - 2 / 3) + 0.25 * 0.05, abs=1e-12)


@pytest.mark.parametrize("q, b", [(0.0, 0), (0.1, 1), (0.3, 3), (0.7, 7), (0.99, 9), (1.0, 9)])
def test_ece_bin_edges(q, b):
    # one answer per case: ECE = |correct - q| wherever it lands, so check the bin through a second answer
    other = b / BINS + 0.001  # lands in bin b too: the two then share one accuracy
    assert BINS == 10
    assert expected_calibration_error([q, other], [True, False]) == pytest.approx(abs(0.5 - (q + other) / 2), abs=1e-12)


def test_auroc_ties_and_one_sided_sets():
    assert auroc([0.5, 0.5], [True, False]) == pytest.approx(0.5)
    assert auroc([0.9, 0.2], [True, True]) is None and auroc([0.9, 0.2], [False, False]) is None
    assert auroc([0.2, 0.9], [True, False]) == 0.0


def test_auroc_matches_brute_force_pairs():
    rng = random.Random(0)
    for _ in range(20):
        n = rng.randint(2, 30)
        conf = [rng.choice([0.0, 0.25, 0.5, 0.75, 1.0, rng.random()]) for _ in range(n)]
        right = [rng.random() < 0.5 for _ in range(n)]
        pos = [q for q, c in zip(conf, right) if c]
        neg = [q for q, c in zip(conf, right) if not c]
        if not pos or not neg:
            continue
        brute = sum((p > q) + 0.5 * (p == q) for p, q in itertools.product(pos, neg)) / (len(pos) * len(neg))
        assert auroc(conf, right) == pytest.approx(brute, abs=1e-12)


def test_metrics_refuse_bad_input():
    with pytest.raises(ValueError, match="no .confidence, correct. pairs"):
        brier_score([], [])
    with pytest.raises(ValueError, match="one correctness per confidence"):
        expected_calibration_error([0.5], [True, False])
    with pytest.raises(ValueError, match=r"in \[0, 1\]"):
        auroc([1.5, 0.2], [True, False])


def test_summary_entries_with_intervals_over_tasks():
    tasks = [[(0.9, True), (0.8, False)], [(0.3, False)], [(0.6, True)]]
    out = summary_entries(tasks, decided=5, seed=0)
    assert out["ece"]["value"] == pytest.approx(0.4) and out["auroc"]["value"] == pytest.approx(0.75)
    for key in ("ece", "brier", "auroc"):
        low, high = out[key]["ci95"]
        assert low <= out[key]["value"] <= high
    assert (out["ece_bins"], out["calibration_n"], out["confidence_stated"]) == (10, 4, 0.8)
    assert summary_entries([[], []], decided=3) == {}


def test_verdict_correctness_is_read_from_details_when_the_score_is_a_reward():
    assert verdict_correct(Verdict(0.96, Status.CORRECT, "brier", details={"correct": True}))
    assert not verdict_correct(Verdict(0.0, Status.INCORRECT, "brier", details={"correct": False}))
    assert verdict_correct(Verdict(1.0, Status.CORRECT, "exact_match"))
    assert not verdict_correct(Verdict(0.5, Status.PARTIAL, "x", details={"correct": "yes"}))


def test_summary_has_calibration_only_for_verdicts_with_a_confidence():
    def row(samples):
        return {"n": len(samples), "pass@1": 0.5, "maj@1": 0.5, "reward_mean": 0.0, "response_length": 3.0,
                "samples": samples}

    plain = [row([{"status": "correct"}, {"status": "incorrect"}])]
    assert not {"ece", "brier", "auroc", "ece_bins"} & set(summarize(plain, [1]))
    stated = [row([{"status": "correct", "confidence": 0.9, "correct": True},
                   {"status": "incorrect", "confidence": 0.8, "correct": False}])]
    summary = summarize(stated, [1])
    assert summary["brier"]["value"] == pytest.approx((0.01 + 0.64) / 2)


# ------------------------------------------------------------------------------------------------- the CLI

@pytest.fixture(scope="module")
def confident_model_dir(tmp_path_factory):
    """A tiny model fine-tuned to answer every "a+b=" with "7<c>0.8</c>": right on tasks whose answer is 7."""
    from rlvr.models import TinySpec, build_tiny_model
    from rlvr.train import sft

    model, tokenizer = build_tiny_model(TinySpec(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64),
                                        seed=0)
    torch.manual_seed(0)
    pairs = [(f"{a}+{b}=", "7<c>0.8</c>") for a in range(10) for b in range(10)]
    sft(model, tokenizer, pairs, steps=150, batch_size=32, lr=1e-2, seed=0, progress=False)
    path = tmp_path_factory.mktemp("confident") / "model"
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def test_eval_prints_and_saves_calibration_metrics(tmp_path, confident_model_dir, capsys):
    data = tmp_path / "tasks.jsonl"
    options = {"tag": "c"}
    rows = [{"id": f"t{i}", "prompt": prompt, "reference": ref, "verifier": "calibrated", "verifier_options": options}
            for i, (prompt, ref) in enumerate([("3+4=", "7"), ("2+5=", "7"), ("1+1=", "2"), ("4+4=", "8")])]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "eval.json"
    code = main(["eval", "--model", str(confident_model_dir), "--data", str(data), "--max-new-tokens", "12",
                 "--out", str(out), "--quiet"])
    assert code == 0
    printed = capsys.readouterr().out
    summary = json.loads(out.read_text())
    samples = [s for line in open(summary["tasks_file"]) for s in json.loads(line)["samples"]]
    assert [s["response"] for s in samples] == ["7<c>0.8</c>"] * 4, "the fixture model did not learn its answer"
    # two right and two wrong answers, all at confidence 0.8 (one bin, accuracy 1/2; every pair tied)
    assert summary["ece"]["value"] == pytest.approx(0.3, abs=1e-6)
    assert summary["brier"]["value"] == pytest.approx((2 * 0.04 + 2 * 0.64) / 4, abs=1e-6)
    assert summary["auroc"]["value"] == pytest.approx(0.5, abs=1e-6)
    assert (summary["ece_bins"], summary["calibration_n"], summary["confidence_stated"]) == (10, 4, 1.0)
    assert summary["pass@1"]["value"] == pytest.approx(0.5)  # correctness, not the reward (0.96 when right)
    for key in ("ece", "brier", "auroc"):
        assert f"{key}:" in printed


def test_eval_of_plain_verdicts_has_no_calibration_keys(tmp_path, tiny_model_dir):
    out = tmp_path / "eval.json"
    assert main(["eval", "--model", str(tiny_model_dir), "--data", "arithmetic:eval:n=2", "--max-new-tokens", "3",
                 "--out", str(out), "--quiet"]) == 0
    assert not {"ece", "brier", "auroc", "calibration_n"} & set(json.loads(out.read_text()))


def test_run_report_shows_the_calibration_metrics(tmp_path):
    from rlvr.eval.run_report import write_run_report

    (tmp_path / "eval").mkdir()
    summary = summarize([{"n": 2, "pass@1": 0.5, "maj@1": 0.5, "reward_mean": 0.0, "response_length": 3.0,
                          "samples": [{"status": "correct", "confidence": 0.9, "correct": True},
                                      {"status": "incorrect", "confidence": 0.8, "correct": False}]}], [1])
    (tmp_path / "eval" / "calibrated.json").write_text(json.dumps(summary))
    page = write_run_report(tmp_path).read_text()
    for row in ("<td>ece</td><td>0.45</td>", "<td>brier</td><td>0.325</td>", "<td>auroc</td><td>1</td>"):
        assert row in page
    assert "samples with a stated confidence: 2" in page and "ECE bins (equal width): 10" in page


def test_vectorised_metrics_match_the_reference_functions():
    import numpy as np

    from rlvr.eval.calibration import _vector_metrics

    rng = random.Random(3)
    for _ in range(30):
        n = rng.randint(1, 40)
        conf = [rng.choice([0.0, 0.1, 0.5, 0.7, 1.0, rng.random()]) for _ in range(n)]
        right = [rng.random() < 0.6 for _ in range(n)]
        got = _vector_metrics(np.array(conf), np.array(right))
        assert got["ece"] == pytest.approx(expected_calibration_error(conf, right), abs=1e-12)
        assert got["brier"] == pytest.approx(brier_score(conf, right), abs=1e-12)
        want = auroc(conf, right)
        assert got["auroc"] is None if want is None else got["auroc"] == pytest.approx(want, abs=1e-12)
