"""Evaluation: maj@k with the verifier's own equivalence, bootstrap intervals (plain and paired), the
comparison of two models, dataset presets, and `rlvr eval` / `rlvr compare` end to end on a tiny model."""

from __future__ import annotations

import itertools
import json
from collections import Counter

import pytest

from rlvr.cli import main
from rlvr.eval.majority import equivalence_for, group_answers, majority_at_k, task_majority
from rlvr.eval.compare import compare_rows
from rlvr.eval.intervals import bootstrap_ci, paired_bootstrap_ci
from rlvr.tasks import DataError, load_tasks
from rlvr.verifiers import Status, Verdict

# ------------------------------------------------------------------------------------------------ maj@k


def test_math_equivalence_groups_spellings_of_one_answer():
    same = equivalence_for("math")
    answers = ["1/2", "0.5", "\\frac{1}{2}", "3", None, "\\dfrac12", "3.0", "x"]
    assert group_answers(answers, same) == [0, 0, 0, 1, -1, 0, 1, 2]


def test_exact_equivalence_does_not_group_spellings():
    assert group_answers(["1/2", "0.5", "1/2"], equivalence_for("exact")) == [0, 1, 0]


def _brute_force_majority(groups, correct, k):
    """Average over every k-subset of a vote with a fair tie-break."""
    total = 0.0
    subsets = list(itertools.combinations(range(len(groups)), k))
    for subset in subsets:
        counts = Counter(groups[i] for i in subset if groups[i] >= 0)
        if not counts:
            continue
        top = max(counts.values())
        winners = [g for g, c in counts.items() if c == top]
        right = {groups[i]: correct[i] for i in subset}
        total += sum(right[g] for g in winners) / len(winners)
    return total / len(subsets)


@pytest.mark.parametrize("groups, correct", [
    ([0, 0, 1, 2, 0, 1], [1, 1, 0, 0, 1, 0]),
    ([0, 1, 1, 1, 2, 0, 0], [1, 0, 0, 0, 0, 1, 1]),
    ([0, -1, -1, 1], [0, 0, 0, 1]),
    ([0, 0, 0, 0], [1, 1, 1, 1]),
    ([0, 1, 2, 3], [0, 0, 1, 0]),
])
def test_majority_matches_brute_force(groups, correct):
    correct = [bool(c) for c in correct]
    for k in range(1, len(groups) + 1):
        assert majority_at_k(groups, correct, k) == pytest.approx(_brute_force_majority(groups, correct, k))


def test_majority_hand_cases():
    assert majority_at_k([0, 0, 1], [True, True, False], 3) == 1.0  # two of three agree on the right answer
    assert majority_at_k([0, 1], [True, False], 2) == 0.5  # a tie: half the time right
    assert majority_at_k([-1, -1], [False, False], 2) == 0.0  # nothing extracted: no vote
    with pytest.raises(ValueError):
        majority_at_k([0], [True], 2)


def test_majority_over_many_samples_is_estimated_and_seeded():
    groups = [i % 3 for i in range(40)]
    correct = [g == 0 for g in groups]
    a, b = majority_at_k(groups, correct, 8, seed=1), majority_at_k(groups, correct, 8, seed=1)
    assert a == b and 0.3 < a < 0.8


def test_task_majority_for_math_verdicts():
    def v(extracted, score):
        return Verdict(score, Status.CORRECT if score else Status.INCORRECT, "", extracted)

    # the right answer is spelled three ways; the wrong one is the most common single spelling
    verdicts = [v("1/2", 1.0), v("0.5", 1.0), v("\\frac{1}{2}", 1.0), v("3", 0.0), v("3", 0.0)]
    assert task_majority(verdicts, [5], equivalence_for("math")) == {5: 1.0}
    assert task_majority(verdicts, [5], equivalence_for("exact")) == {5: 0.0}


# ------------------------------------------------------------------------------------------- intervals


def test_bootstrap_interval_contains_the_mean_and_narrows_with_tasks():
    values = [1.0, 0.0] * 50
    low, high = bootstrap_ci(values)
    assert low < 0.5 < high and high - low < 0.25
    wide = bootstrap_ci([1.0, 0.0] * 5)
    assert wide[1] - wide[0] > high - low
    assert bootstrap_ci([0.7]) == (0.7, 0.7)


def test_paired_bootstrap_cancels_task_difficulty():
    # b is a better by exactly 0.1 on every task, over tasks of very different difficulty
    a = [i / 100 for i in range(0, 90)]
    b = [x + 0.1 for x in a]
    low, high = paired_bootstrap_ci(b, a)
    assert low == pytest.approx(0.1) and high == pytest.approx(0.1)
    unpaired = bootstrap_ci(b)[1] - bootstrap_ci(b)[0]
    assert unpaired > 0.05
    with pytest.raises(ValueError):
        paired_bootstrap_ci([1.0], [1.0, 0.0])


def test_compare_rows_curve_and_differences():
    rows_a = [{"task_id": str(i), "n": 8, "correct": i % 4} for i in range(20)]
    rows_b = [{"task_id": str(i), "n": 8, "correct": min(8, i % 4 + 2)} for i in range(20)]
    result = compare_rows(rows_a, rows_b)
    assert result["ks"] == [1, 2, 4, 8] and result["n_tasks"] == 20
    for k in ("1", "2", "4", "8"):
        assert result["curve"]["b"][k] >= result["curve"]["a"][k]
    diff = result["difference"]["pass@1"]
    assert diff["value"] == pytest.approx(2 / 8) and diff["ci95"][0] <= diff["value"] <= diff["ci95"][1]
    assert result["curve"]["a"]["8"] == pytest.approx(15 / 20)  # tasks with c > 0 are solved at k = n
    with pytest.raises(ValueError):
        compare_rows(rows_a, [{"task_id": "other", "n": 8, "correct": 1}])


# --------------------------------------------------------------------------------------------- presets


def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_presets_read_the_common_layouts(tmp_path):
    gsm = _write(tmp_path / "gsm.jsonl", [{"question": "How many?", "answer": "3 + 4 = <<3+4=7>>7\n#### 1,007"}])
    math_ = _write(tmp_path / "math.jsonl", [
        {"problem": "Simplify.", "solution": "So it is $\\boxed{\\frac{1}{2}}$.", "unique_id": "test/1"},
        {"problem": "Compute.", "solution": "...", "answer": "7"},
    ])
    aime = _write(tmp_path / "aime.jsonl", [{"question": "Find N.", "answer": 204, "id": "2024-I-1"}])
    (g,) = load_tasks(f"gsm8k:{gsm}")
    assert (g.prompt, g.reference, g.verifier) == ("How many?", "1007", "math")
    m1, m2 = load_tasks(f"math:{math_}")
    assert (m1.reference, m1.id, m2.reference) == ("\\frac{1}{2}", "test/1", "7")
    (a,) = load_tasks(f"aime:{aime}")
    assert (a.prompt, a.reference, a.id) == ("Find N.", "204", "2024-I-1")


@pytest.mark.parametrize("preset, row, message", [
    ("gsm8k", {"question": "q", "answer": "no final line"}, "field 'answer': no '#### <final answer>' line"),
    ("math", {"problem": "p", "solution": "no box"}, "field 'solution': no \\boxed{...} answer"),
    ("aime", {"problem": "p"}, "field 'answer': missing"),
    ("gsm8k", {"answer": "#### 3"}, "field 'question': missing"),
])
def test_preset_errors_name_file_line_and_field(tmp_path, preset, row, message):
    path = _write(tmp_path / "d.jsonl", [row])
    with pytest.raises(DataError) as err:
        load_tasks(f"{preset}:{path}")
    assert f"{path}:1: {message}" in str(err.value)


# -------------------------------------------------------------------------------------- end to end (CLI)


def test_eval_reports_every_metric_and_per_task_rows(tmp_path, tiny_model_dir, capsys):
    out = tmp_path / "eval" / "summary.json"
    code = main(["eval", "--model", str(tiny_model_dir), "--data", "arithmetic:eval:n=6", "--samples", "4",
                 "--k", "1,2,4", "--max-new-tokens", "6", "--out", str(out), "--quiet"])
    assert code == 0
    summary = json.loads(out.read_text())
    for key in ("pass@1", "pass@2", "pass@4", "maj@1", "maj@2", "maj@4", "reward_mean", "response_length"):
        low, high = summary[key]["ci95"]
        assert low <= summary[key]["value"] <= high, key
    assert summary["pass@1"]["value"] <= summary["pass@2"]["value"] <= summary["pass@4"]["value"]
    assert summary["maj@1"]["value"] == pytest.approx(summary["pass@1"]["value"])
    assert (summary["n_tasks"], summary["samples_per_task"]) == (6, 4)
    rows = [json.loads(line) for line in open(summary["tasks_file"])]
    assert len(rows) == 6 and all(len(r["samples"]) == 4 for r in rows)
    assert all(1 <= s["length"] <= 6 for r in rows for s in r["samples"])
    assert "pass@4:" in capsys.readouterr().out


def test_eval_against_a_baseline_writes_the_paired_comparison(tmp_path, tiny_model_dir, warm_model_dir):
    out = tmp_path / "trained.json"
    code = main(["eval", "--model", str(warm_model_dir), "--baseline", str(tiny_model_dir), "--data",
                 "arithmetic:eval:n=5", "--samples", "4", "--k", "1,4", "--max-new-tokens", "6", "--out", str(out),
                 "--quiet"])
    assert code == 0
    comparison = json.loads((tmp_path / "trained.compare.json").read_text())
    assert comparison["models"] == {"a": str(tiny_model_dir), "b": str(warm_model_dir)}
    assert set(comparison["difference"]) == {"pass@1", "pass@2", "pass@4"} and comparison["n_tasks"] == 5
    code = main(["compare", str(tmp_path / "trained.baseline.tasks.jsonl"), str(tmp_path / "trained.tasks.jsonl"),
                 "--k", "1,2", "--out", str(tmp_path / "again.json")])
    again = json.loads((tmp_path / "again.json").read_text())
    assert code == 0 and again["difference"]["pass@1"] == comparison["difference"]["pass@1"]


def test_eval_errors_before_loading_anything(tmp_path, tiny_model_dir, capsys):
    assert main(["eval", "--model", str(tiny_model_dir), "--data", "arithmetic:eval:n=2", "--verifier", "nope"]) == 2
    assert "unknown verifier 'nope'" in capsys.readouterr().err
    assert main(["eval", "--model", str(tiny_model_dir), "--data", "arithmetic:eval:n=2", "--baseline", "x"]) == 2
    assert "--baseline needs --out" in capsys.readouterr().err
    assert main(["eval", "--model", str(tiny_model_dir), "--data", "arithmetic:eval:n=2", "--baseline",
                 str(tmp_path / "missing"), "--out", str(tmp_path / "o.json")]) == 2
    assert f"--baseline: {tmp_path / 'missing'} is not a directory" in capsys.readouterr().err


# ------------------------------------------------------------------------------------ during training


def _short_run(model_dir, out, **train):
    from rlvr.config import config_from_dict

    from conftest import one_digit_rl_config

    cfg = one_digit_rl_config(model_dir, out, steps=4, **train)
    cfg["data"].update({"eval": "arithmetic:eval:digits=1,n=6"})
    cfg["rollout"]["group_size"] = 4
    cfg["data"]["prompts_per_step"] = 4
    return config_from_dict(cfg)


def test_train_evaluates_every_n_steps_without_changing_training(tmp_path, warm_model_dir):
    import torch
    from transformers import AutoModelForCausalLM

    from rlvr.train import train
    from rlvr.train.metrics import read_metrics

    with_eval = train(_short_run(warm_model_dir, tmp_path / "a", eval_every=2, eval_samples=2))
    without = train(_short_run(warm_model_dir, tmp_path / "b"))
    rows = read_metrics(with_eval)
    assert [("eval/pass@1" in row) for row in rows] == [False, True, False, True]
    assert {"eval/pass@2", "eval/maj@2", "eval/reward_mean", "eval/response_length"} <= set(rows[1])
    summary = json.loads((with_eval / "eval" / "step-4.json").read_text())
    assert summary["step"] == 4 and summary["n_tasks"] == 6 and summary["samples_per_task"] == 2
    assert (with_eval / "eval" / "step-4.tasks.jsonl").exists()
    a = AutoModelForCausalLM.from_pretrained(with_eval / "checkpoint-4")
    b = AutoModelForCausalLM.from_pretrained(without / "checkpoint-4")
    for (name, p), q in zip(a.named_parameters(), b.parameters()):
        assert torch.equal(p, q), name


def test_eval_every_needs_eval_data(tmp_path, warm_model_dir):
    from rlvr.config import ConfigError, config_from_dict

    from conftest import one_digit_rl_config

    with pytest.raises(ConfigError, match="train.eval_every: needs data.eval"):
        config_from_dict(one_digit_rl_config(warm_model_dir, tmp_path, eval_every=2))
