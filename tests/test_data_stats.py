"""`rlvr data stats`: counts, length percentiles, verifier coverage, duplicates and eval overlap of a source."""

import json

import pytest

from rlvr.cli import main
from rlvr.tasks import load_tasks
from rlvr.tasks.stats import data_stats, percentiles


def write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_percentiles_are_nearest_rank():
    assert percentiles(list(range(1, 101))) == {"p0": 1, "p50": 50, "p90": 90, "p99": 99, "p100": 100}
    assert percentiles([7]) == {"p0": 7, "p50": 7, "p90": 7, "p99": 7, "p100": 7}


def test_stats_of_a_file_with_duplicates_overlap_and_an_unknown_verifier(tmp_path):
    train = write(tmp_path / "train.jsonl", [
        {"prompt": "What is 2+2?", "reference": "4", "topic": "add"},
        {"prompt": "what  is 2+2?", "reference": "5"},              # the same prompt, another reference
        {"prompt": "What is 3*3?", "reference": "9", "verifier": "numeric", "topic": "mul"},
        {"prompt": "Spell cat.", "reference": "cat", "verifier": "no_such_verifier"},
    ])
    evaluation = write(tmp_path / "eval.jsonl", [{"prompt": "WHAT IS 3*3?", "reference": "9"}])
    stats = data_stats(load_tasks(train), eval_tasks=load_tasks(evaluation), default_verifier="exact")
    assert stats["rows"] == 4 and stats["fields"]["topic"] == 2 and stats["sources"] == {"train": 4}
    assert stats["prompt_length"]["chars"]["p100"] == len("what  is 2+2?")
    assert stats["reference_length"]["chars"]["p0"] == 1
    assert stats["verifiers"]["exact"] == {"rows": 2, "registered": True, "reference_passes": {"checked": 2, "passed": 2}}
    assert stats["verifiers"]["numeric"]["reference_passes"] == {"checked": 1, "passed": 1}
    assert stats["verifiers"]["no_such_verifier"] == {"rows": 1, "registered": False}
    assert stats["duplicates"]["rows_with_a_repeated_prompt"] == 2
    assert stats["duplicates"]["with_different_references"] == 1
    assert stats["eval_overlap"]["train_rows_in_eval"] == 1 and stats["eval_overlap"]["examples"] == ["train.jsonl:3"]


def test_self_check_catches_references_the_verifier_rejects(tmp_path):
    rows = [{"prompt": f"q{i}", "reference": "\\frac{1}{2}" if i % 2 else "not \\latex{", "verifier": "math"} for i in range(4)]
    stats = data_stats(load_tasks(write(tmp_path / "m.jsonl", rows)))
    assert stats["verifiers"]["math"]["reference_passes"] == {"checked": 4, "passed": 2}


def test_reasoning_gym_self_check_uses_the_tagged_completion():
    pytest.importorskip("reasoning_gym")
    tasks = load_tasks("reasoning_gym:chain_sum:size=6")
    stats = data_stats(tasks, self_check=6)
    assert stats["verifiers"]["reasoning_gym"]["reference_passes"] == {"checked": 6, "passed": 6}
    assert stats["reference_length"]["chars"]["p100"] == max(len(t.reference["entry"]["answer"]) for t in tasks)


@pytest.mark.parametrize("spec,verifier", [
    ("arithmetic:chain:n=12,seed=3", "chain_answer"),     # the answer is read after the worked solution's last "#"
    ("arithmetic:train", "exact"),
])
def test_generated_tasks_pass_their_own_self_check(spec, verifier):
    tasks = load_tasks(spec)[:12]
    assert data_stats(tasks, self_check=12)["verifiers"][verifier]["reference_passes"] == {"checked": 12, "passed": 12}


def test_a_solution_that_states_another_answer_fails_the_self_check(tmp_path):
    rows = [{"prompt": "1+2+3", "reference": "6", "verifier": "chain_answer", "solution": "1+2=3\n3+3=6\n#6"},
            {"prompt": "1+2+4", "reference": "7", "verifier": "chain_answer", "solution": "1+2=3\n3+4=8\n#8"}]
    stats = data_stats(load_tasks(write(tmp_path / "c.jsonl", rows)))
    assert stats["verifiers"]["chain_answer"]["reference_passes"] == {"checked": 2, "passed": 1}


def test_cli_prints_and_writes_json(tmp_path, capsys):
    train = write(tmp_path / "t.jsonl", [{"prompt": "a", "reference": "1"}, {"prompt": "b", "reference": "2"}])
    assert main(["data", "stats", train, "--eval", train, "--json", str(tmp_path / "s.json")]) == 0
    out = capsys.readouterr().out
    assert "rows: 2" in out and "eval overlap: 2 train rows" in out
    assert json.loads((tmp_path / "s.json").read_text())["rows"] == 2
    assert main(["data", "stats", str(tmp_path / "missing.parquet")]) == 2
    assert "missing.parquet: file not found" in capsys.readouterr().err
