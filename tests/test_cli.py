"""The rlvr command line: errors a user can act on, verify and eval on real files."""

import json
import subprocess
import sys


from rlvr.cli import main
from rlvr.config import load_config
from rlvr.demo import RL_CONFIG
from rlvr.tasks.jsonl import write_jsonl


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "rlvr.cli", *args], capture_output=True, text=True, timeout=120)


def test_examples_arithmetic_is_the_demo_rl_config():
    cfg = load_config("examples/arithmetic.yaml").to_dict()
    for section, values in RL_CONFIG.items():
        for key, value in values.items():
            assert cfg[section][key] == value, f"{section}.{key}: examples/arithmetic.yaml has {cfg[section][key]!r}, demo uses {value!r}"


def test_train_unknown_key_suggests_the_closest(capsys):
    assert main(["train", "examples/arithmetic.yaml", "train.step=3", "model.path=x"]) == 2
    err = capsys.readouterr().err
    assert "unknown key 'train.step'" in err and "did you mean 'train.steps'" in err


def test_train_missing_model_folder_is_named(tmp_path, capsys):
    missing = tmp_path / "nope"
    assert main(["train", "examples/arithmetic.yaml", f"model.path={missing}", f"train.out={tmp_path / 'run'}"]) == 2
    err = capsys.readouterr().err
    assert str(missing) in err and "model.path" in err


def test_train_bad_data_row_is_named_before_training(tmp_path, tiny_model_dir, capsys):
    data = tmp_path / "train.jsonl"
    data.write_text('{"prompt": "1+1=", "reference": "2"}\n{"reference": "3"}\n')
    assert main(["train", "examples/arithmetic.yaml", f"model.path={tiny_model_dir}", f"data.train={data}",
                 f"train.out={tmp_path / 'run'}"]) == 2
    err = capsys.readouterr().err
    assert f"{data}:2: field 'prompt': missing" in err
    assert not (tmp_path / "run" / "metrics.jsonl").exists()


def test_train_unknown_verifier_fails_before_training(tmp_path, tiny_model_dir, capsys):
    assert main(["train", "examples/arithmetic.yaml", f"model.path={tiny_model_dir}", "data.verifier=exactt",
                 f"train.out={tmp_path / 'run'}"]) == 2
    err = capsys.readouterr().err
    assert "exactt" in err and "exact" in err


def test_train_runs_from_the_command_line(tmp_path, tiny_model_dir):
    out = tmp_path / "run"
    result = run_cli("train", "examples/arithmetic.yaml", f"model.path={tiny_model_dir}", f"train.out={out}",
                     "train.steps=2", "data.prompts_per_step=2", "rollout.group_size=2", "train.progress=false")
    assert result.returncode == 0, result.stderr
    assert [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()] == [1, 2]
    assert (out / "checkpoint-2" / "config.json").is_file()
    # the command started itself again on TCMalloc (rlvr.train.allocator; the Makefile installs it)
    assert json.loads((out / "manifest.json").read_text())["host_allocator"] == "tcmalloc"


def test_verify_command_counts_by_status(tmp_path):
    rows = tmp_path / "rows.jsonl"
    write_jsonl(rows, [
        {"response": "46", "reference": "46"},
        {"response": "the answer is 45", "reference": "46"},
        {"response": "no idea", "reference": "46"},
    ])
    out = tmp_path / "verdicts.jsonl"
    result = run_cli("verify", "--verifier", "numeric", "--input", str(rows), "--output", str(out))
    assert result.returncode == 0, result.stderr
    assert "correct=1" in result.stdout and "incorrect=1" in result.stdout and "undecidable=1" in result.stdout
    verdicts = [json.loads(line) for line in out.read_text().splitlines()]
    assert [v["status"] for v in verdicts] == ["correct", "incorrect", "undecidable"]


def test_verify_bad_row_names_file_and_line(tmp_path):
    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"response": "1", "reference": "1"}\n{"response": "2"}\n')
    result = run_cli("verify", "--verifier", "exact", "--input", str(rows))
    assert result.returncode == 2
    assert f"{rows}:2: field 'reference': missing" in result.stderr


def test_eval_writes_pass_at_k_with_intervals(tmp_path, tiny_model_dir):
    data = tmp_path / "tasks.jsonl"
    write_jsonl(data, [{"prompt": f"{i}+1=", "reference": str(i + 1)} for i in range(4)])
    out = tmp_path / "eval.json"
    result = run_cli("eval", "--model", str(tiny_model_dir), "--data", str(data), "--samples", "4", "--k", "1,4",
                     "--max-new-tokens", "3", "--out", str(out))
    assert result.returncode == 0, result.stderr
    summary = json.loads(out.read_text())
    assert summary["n_tasks"] == 4 and summary["samples_per_task"] == 4
    for k in ("pass@1", "pass@4"):
        low, high = summary[k]["ci95"]
        assert 0.0 <= low <= summary[k]["value"] <= high <= 1.0


def test_eval_rejects_k_above_samples(tmp_path, tiny_model_dir):
    result = run_cli("eval", "--model", str(tiny_model_dir), "--data", "arithmetic:eval:n=2", "--samples", "2", "--k", "4")
    assert result.returncode == 2 and "--k 4" in result.stderr
