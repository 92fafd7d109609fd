"""What a new user trips over, pinned: an existing run directory is never mixed into, user plugins work from the
command line, environment problems are one line before the model loads, a failed checkpoint save leaves the
previous one usable, and learner metrics average over the rows that carry them."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from rlvr.cli import main
from rlvr.config import ConfigError, config_from_dict, load_config
from rlvr.train import train
from rlvr.train.metrics import read_metrics
from rlvr.train.run import RunSetupError

from conftest import one_digit_rl_config


def _cfg(model_dir, out, steps=2, **train_keys):
    cfg = one_digit_rl_config(model_dir, out, steps=steps, **train_keys)
    cfg["data"]["prompts_per_step"] = 4
    cfg["rollout"]["group_size"] = 4
    return config_from_dict(cfg)


# ---------------------------------------------------------------------------------------------- run directory


def test_a_second_run_into_the_same_directory_is_refused(tiny_model_dir, tmp_path):
    train(_cfg(tiny_model_dir, tmp_path))
    before = (tmp_path / "metrics.jsonl").read_text()
    with pytest.raises(RunSetupError, match=r"already holds a run .*--resume.*train.overwrite=true"):
        train(_cfg(tiny_model_dir, tmp_path))
    assert (tmp_path / "metrics.jsonl").read_text() == before  # nothing was touched


def test_overwrite_starts_afresh_and_resume_continues(tiny_model_dir, tmp_path):
    train(_cfg(tiny_model_dir, tmp_path, steps=2))
    (tmp_path / "notes.txt").write_text("mine")
    rows = read_metrics(train(_cfg(tiny_model_dir, tmp_path, steps=1, overwrite=True)))
    assert [r["step"] for r in rows] == [1]
    assert not (tmp_path / "checkpoint-2").exists() and (tmp_path / "notes.txt").read_text() == "mine"
    rows = read_metrics(train(_cfg(tiny_model_dir, tmp_path, steps=2), resume=True))
    assert [r["step"] for r in rows] == [1, 2]


def test_cli_refuses_with_one_line(tiny_model_dir, tmp_path, capsys):
    args = ["train", "examples/arithmetic.yaml", f"model.path={tiny_model_dir}", f"train.out={tmp_path}",
            "train.steps=1", "data.prompts_per_step=2", "rollout.group_size=2", "train.progress=false"]
    assert main(args) == 0
    capsys.readouterr()
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "already holds a run" in err[0]


# ---------------------------------------------------------------------------------------- environment problems


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message of a machine without CUDA")
def test_cuda_on_a_cpu_build_is_one_line_before_the_model_loads(tmp_path, capsys):
    assert main(["train", "examples/arithmetic.yaml", "model.path=/nonexistent/model", "model.device=cuda",
                 f"train.out={tmp_path}"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "model.device=cuda" in err and "cpu" in err


def test_run_directory_inside_a_file(tiny_model_dir, tmp_path):
    """A train.out no user (root included) can create: its parent is a file."""
    (tmp_path / "parent").write_text("a file, not a folder")
    with pytest.raises(RunSetupError, match=r"train.out=.*parent/run: cannot write there"):
        train(_cfg(tiny_model_dir, tmp_path / "parent" / "run"))
    assert (tmp_path / "parent").read_text() == "a file, not a folder"


def test_run_directory_blocked_by_a_file(tiny_model_dir, tmp_path):
    (tmp_path / "run").write_text("a file, not a folder")
    with pytest.raises(RunSetupError, match=r"train.out=.*run: cannot write there"):
        train(_cfg(tiny_model_dir, tmp_path / "run"))


def test_tensorboard_without_the_package(tiny_model_dir, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)  # an import of it now raises ImportError
    with pytest.raises(RunSetupError, match=r"rlvr\[tensorboard\]"):
        train(_cfg(tiny_model_dir, tmp_path, tensorboard=True))
    assert not (tmp_path / "config.yaml").exists()


def test_a_failed_checkpoint_save_keeps_the_previous_one(tiny_model_dir, tmp_path, monkeypatch):
    import rlvr.train.run as run_module

    real = run_module.save_checkpoint

    def disk_full_at_step_2(run_dir, step, *args, **kwargs):
        if step == 2:
            (run_dir / ".tmp-checkpoint-2").mkdir()
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(run_dir, step, *args, **kwargs)

    monkeypatch.setattr(run_module, "save_checkpoint", disk_full_at_step_2)
    with pytest.raises(RunSetupError, match=r"checkpoint-2 could not be saved .*No space left.*checkpoint-1 is intact"):
        train(_cfg(tiny_model_dir, tmp_path, steps=2, save_every=1))
    assert (tmp_path / "checkpoint-1" / "trainer_state.pt").is_file()
    assert not list(tmp_path.glob(".tmp-checkpoint-*"))


# ------------------------------------------------------------------------------------------------------ plugins

PLUGIN = textwrap.dedent('''
    from rlvr.verifiers import Verdict, register_verifier

    @register_verifier("mine.ends_with_reference", isolation="inline")
    def ends_with_reference(response, reference, **_):
        ok = response.strip().endswith(str(reference))
        return Verdict(1.0 if ok else 0.0, "correct" if ok else "incorrect", "suffix")
''')


def _rlvr(args, cwd):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "rlvr.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300, env=env)


def test_a_plugin_verifier_from_the_command_line_alone(tiny_model_dir, tmp_path):
    """train (plugins: in the config), then eval and verify (--plugin), with a verifier of the user's own."""
    (tmp_path / "my_rewards.py").write_text(PLUGIN)
    (tmp_path / "cfg.yaml").write_text(textwrap.dedent(f"""
        plugins: [./my_rewards.py]
        model: {{path: {tiny_model_dir}}}
        data: {{train: "arithmetic:train:digits=1", verifier: mine.ends_with_reference, prompts_per_step: 2}}
        rollout: {{group_size: 2, max_new_tokens: 3}}
        train: {{steps: 1, out: {tmp_path / 'run'}, progress: false}}
    """))
    done = _rlvr(["train", "cfg.yaml"], tmp_path)
    assert done.returncode == 0, done.stderr
    assert "my_rewards.py" in (tmp_path / "run" / "config.yaml").read_text()
    done = _rlvr(["eval", "--plugin", "./my_rewards.py", "--model", str(tiny_model_dir), "--data",
                  "arithmetic:eval:digits=1,n=3", "--verifier", "mine.ends_with_reference", "--max-new-tokens", "3",
                  "--quiet"], tmp_path)
    assert done.returncode == 0, done.stderr
    (tmp_path / "rows.jsonl").write_text('{"response": "so 12", "reference": "12"}\n{"response": "13", "reference": "12"}\n')
    done = _rlvr(["verify", "--plugin", "my_rewards", "--verifier", "mine.ends_with_reference", "--input", "rows.jsonl"],
                 tmp_path)
    assert done.returncode == 0 and "correct=1 (50.0%)" in done.stdout, done.stdout + done.stderr


def test_unknown_verifier_says_how_to_load_a_plugin(tmp_path, capsys):
    (tmp_path / "rows.jsonl").write_text('{"response": "1", "reference": "1"}\n')
    assert main(["verify", "--verifier", "mine.nothing", "--input", str(tmp_path / "rows.jsonl")]) == 2
    assert "--plugin" in capsys.readouterr().err


def test_a_broken_plugin_is_a_config_error_naming_it(tmp_path):
    (tmp_path / "broken.py").write_text("raise RuntimeError('boom')\n")
    (tmp_path / "c.yaml").write_text("plugins: [./broken.py]\n")
    with pytest.raises(ConfigError, match=r"c.yaml: line 1: plugin ./broken.py: import failed at .*broken.py:1: RuntimeError: boom"):
        load_config(tmp_path / "c.yaml")


# ------------------------------------------------------------------------------------------------------ metrics


def test_learner_metrics_average_over_the_rows_that_carry_them(warm_model_dir, tmp_path):
    """On-policy, the trainer/rollout ratio is 1 whatever share of rows had all-zero advantages (and were skipped)."""
    rows = read_metrics(train(_cfg(warm_model_dir, tmp_path, steps=3)))
    for r in rows:
        if r["rows_backpropagated"]:
            assert r["ratio_mean"] == pytest.approx(1.0, abs=1e-3)
            assert r["rollout_ratio_mean"] == pytest.approx(1.0, abs=1e-3) and r["rollout_ratio_max"] >= 0.999


# --------------------------------------------------------------------------------------------- eval and compare


def test_eval_takes_the_verifier_of_the_models_run(tiny_model_dir, tmp_path):
    from rlvr.eval import evaluate_model

    cfg = one_digit_rl_config(tiny_model_dir, tmp_path / "run", steps=1)
    cfg["data"].update(verifier="numeric", prompts_per_step=2)
    cfg["rollout"].update(group_size=2, max_new_tokens=3)
    run = train(config_from_dict(cfg))
    summary = evaluate_model(str(run / "checkpoint-1"), "arithmetic:eval:digits=1,n=3", max_new_tokens=3)
    assert summary["verifier"] == "numeric" and summary["verifier_source"].endswith("config.yaml")
    assert evaluate_model(str(tiny_model_dir), "arithmetic:eval:digits=1,n=3", max_new_tokens=3)["verifier"] == "exact"


def test_eval_warns_when_no_verdict_could_be_decided(tiny_model_dir):
    from rlvr.eval import evaluate_model
    from rlvr.verifiers import Verdict, register_verifier

    register_verifier("test.never_decides", isolation="inline")(
        lambda response, reference, **_: Verdict(0.0, "undecidable", "no_answer_found"))
    with pytest.warns(UserWarning, match="every one of the 3 verdicts .* undecidable .*no_answer_found"):
        evaluate_model(str(tiny_model_dir), "arithmetic:eval:digits=1,n=3", verifier="test.never_decides",
                       max_new_tokens=3)


def _tasks_file(path, verifier):
    from rlvr.jsonl import write_jsonl

    write_jsonl(path, [{"task_id": str(i), "verifier": verifier, "n": 2, "correct": i % 3} for i in range(4)])
    return path


def test_compare_refuses_files_scored_by_different_verifiers(tmp_path, capsys):
    a, b = _tasks_file(tmp_path / "a.tasks.jsonl", "math"), _tasks_file(tmp_path / "b.tasks.jsonl", "exact")
    assert main(["compare", str(a), str(b)]) == 2
    assert "scored with verifier math" in capsys.readouterr().err
    assert main(["compare", str(a), str(_tasks_file(tmp_path / "c.tasks.jsonl", "math"))]) == 0


def test_compare_given_a_summary_names_its_tasks_file(tmp_path, capsys):
    (tmp_path / "s.json").write_text('{"pass@1": {"value": 0.5, "ci95": [0.4, 0.6]}, "tasks_file": "x.tasks.jsonl"}')
    assert main(["compare", str(tmp_path / "s.json"), str(tmp_path / "s.json")]) == 2
    err = capsys.readouterr().err
    assert "evaluation summary" in err and "x.tasks.jsonl" in err


@pytest.mark.parametrize("argv", [["eval", "--model", "m", "--data", "d", "--k", "1,x"], ["compare", "a", "b", "--k", "2,y"]])
def test_k_that_is_not_a_number(argv, capsys):
    assert main(argv) == 2
    assert "is not a whole number" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------------ small messages


def test_a_key_typo_in_a_yaml_file_names_its_line(tmp_path):
    (tmp_path / "c.yaml").write_text("train:\n  steps: 3\n  learning_rate: 0.1\n")
    with pytest.raises(ConfigError, match=r"c.yaml: line 3: unknown key 'train.learning_rate'"):
        load_config(tmp_path / "c.yaml")


def test_an_unknown_verifier_in_a_data_row_names_file_and_line(tiny_model_dir, tmp_path):
    data = tmp_path / "d.jsonl"
    data.write_text('{"prompt": "1+1=", "reference": "2"}\n{"prompt": "2+2=", "reference": "4", "verifier": "nmueric"}\n')
    cfg = _cfg(tiny_model_dir, tmp_path / "run")
    cfg.data.train = str(data)
    with pytest.raises(ValueError, match=r"task d.jsonl:2: field 'verifier': unknown verifier 'nmueric' \(did you mean 'numeric'"):
        train(cfg)


def test_the_report_plots_failures_per_step_not_running_totals():
    from rlvr.eval.run_report import per_step

    assert per_step([0, 2, 2, 5]) == [0, 2, 0, 3]


# ------------------------------------------------------------------------------------ prompt limits, stop strings


def test_prompt_limit_errors_naming_the_task_or_truncates_and_logs(tiny_model_dir, tmp_path):
    data = tmp_path / "d.jsonl"
    data.write_text('{"prompt": "1+1=", "reference": "2"}\n{"prompt": "' + "9+" * 40 + '1=", "reference": "361"}\n')
    cfg = _cfg(tiny_model_dir, tmp_path / "a", steps=1)
    cfg.data.train, cfg.data.shuffle, cfg.data.prompts_per_step = str(data), False, 2
    cfg.rollout.max_prompt_tokens = 20
    with pytest.raises(ValueError, match=r"task d.jsonl:2: the prompt has \d+ tokens, over rollout.max_prompt_tokens=20"):
        train(cfg)
    cfg.train.out, cfg.rollout.prompt_overflow = str(tmp_path / "b"), "truncate_left"
    rows = read_metrics(train(cfg))
    assert rows[0]["prompt_truncated_frac"] == 0.5


def test_stop_strings_end_responses(tiny):
    from rlvr.models import encode_prompt
    from rlvr.rollout import SamplingParams, make_engine
    from rlvr.rollout.episodes import PromptPolicy, Scoring, generate_and_score
    from rlvr.tasks import Task

    model, tokenizer = tiny
    torch.manual_seed(0)
    tasks = [Task(f"{i}+{i}=", str(2 * i), str(i)) for i in range(6)]
    params = SamplingParams(n=2, max_new_tokens=12)
    plain = generate_and_score(make_engine("hf", model, tokenizer), tokenizer, tasks, params, Scoring("exact"))
    stop = plain.responses[0][2:4] or plain.responses[0][:1]
    torch.manual_seed(0)
    cut = generate_and_score(make_engine("hf", model, tokenizer), tokenizer, tasks, params, Scoring("exact"),
                             prompts=PromptPolicy(stop=(stop,)))
    assert cut.metrics["stopped_frac"] > 0
    for full, text, mask, ids in zip(plain.responses, cut.responses, cut.batch.response_mask, cut.batch.response_ids):
        if stop in full:
            assert text == full[: full.find(stop)]
            kept = tokenizer.decode(ids[: int(mask.sum())].tolist(), skip_special_tokens=True)
            assert stop in kept and stop not in kept[:-1] if kept.endswith(stop) else stop in kept
        else:
            assert text == full
    assert encode_prompt(tokenizer, "1+1=")  # the tokenizer round trip the test relies on


# ------------------------------------------------------------------------------------------------------ loggers


def test_wandb_and_mlflow_receive_every_step(tiny_model_dir, tmp_path, monkeypatch):
    """Real wandb (offline mode, no network) and real MLflow (a file store in the run directory)."""
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    run = train(_cfg(tiny_model_dir, tmp_path, steps=2, loggers=["wandb", "mlflow"]))
    assert list((run / "wandb").glob("offline-run-*/run-*.wandb"))
    import mlflow

    mlflow.set_tracking_uri((run / "mlruns").resolve().as_uri())
    [found] = mlflow.search_runs(search_all_experiments=True, output_format="list")
    history = mlflow.MlflowClient().get_metric_history(found.info.run_id, "reward_mean")
    assert [m.step for m in history] == [1, 2] and found.data.params["train.steps"] == "2"
    # a metric nested under another metric's name (reward_mean/on_policy) is kept beside it, not lost
    nested = mlflow.MlflowClient().get_metric_history(found.info.run_id, "reward_mean.on_policy")
    assert [m.step for m in nested] == [1, 2]
    # the step's samples as each logger's table
    artifacts = [a.path for a in mlflow.MlflowClient().list_artifacts(found.info.run_id, "samples")]
    assert artifacts == ["samples/step-1.json", "samples/step-2.json"]
    tables = list((run / "wandb").glob("offline-run-*/files/media/table/samples_*.table.json"))
    assert len(tables) == 2 and "response" in json.loads(tables[0].read_text())["columns"]


def test_an_unknown_logger_is_refused_before_the_model_loads(tiny_model_dir, tmp_path):
    with pytest.raises(RunSetupError, match="unknown logger 'neptune'; known: mlflow, tensorboard, wandb"):
        train(_cfg(tiny_model_dir, tmp_path, loggers=["neptune"]))
