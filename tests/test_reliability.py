"""Reliable runs: exact resume after SIGKILL (after a checkpoint and in the middle of writing one), atomic
checkpoints, keep_last, the NaN/Inf guard, the run manifest, and one-line errors for bad input."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml
from transformers import AutoModelForCausalLM

from rlvr.config import config_from_dict
from rlvr.train import train
from rlvr.train.loop import TrainingDiverged
from rlvr.train.metrics import read_metrics

from conftest import one_digit_rl_config

STEPS = 6
TIMING_KEYS = {"time_s", "tokens_per_s", "reward_latency_p50_ms", "reward_latency_p99_ms"}


def _config(model_dir, out, **train_keys) -> dict:
    cfg = one_digit_rl_config(model_dir, out, steps=STEPS, save_every=2, threads=1, **train_keys)
    cfg["data"]["prompts_per_step"] = 4
    cfg["rollout"]["group_size"] = 4
    return cfg


def _write_config(path: Path, cfg: dict) -> Path:
    path.write_text(yaml.safe_dump(cfg))
    return path


def _start(config: Path, *extra: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "rlvr.cli", "train", str(config), *extra],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def _kill_when(proc: subprocess.Popen, ready, timeout_s: float = 900) -> None:
    # timeout_s only guards against a hang (the run's speed is not what is tested: a loaded machine may take
    # minutes); the short sleep leaves the CPU to the run being watched instead of spinning beside it
    deadline = time.monotonic() + timeout_s
    while not ready():
        assert proc.poll() is None, f"the run ended before the kill point: {proc.stderr.read().decode()[-2000:]}"
        assert time.monotonic() < deadline, "the kill point never came"
        time.sleep(0.0002)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()


def _weights(checkpoint: Path) -> dict[str, torch.Tensor]:
    return AutoModelForCausalLM.from_pretrained(checkpoint).state_dict()


def _same_run(run: Path, reference: Path) -> None:
    rows, expected = read_metrics(run), read_metrics(reference)
    assert [r["step"] for r in rows] == list(range(1, STEPS + 1)), "every step exactly once"
    drop = lambda row: {k: v for k, v in row.items() if k not in TIMING_KEYS}  # noqa: E731
    assert [drop(r) for r in rows] == [drop(r) for r in expected]
    a, b = _weights(run / f"checkpoint-{STEPS}"), _weights(reference / f"checkpoint-{STEPS}")
    assert max((a[k] - b[k]).abs().max().item() for k in a) == 0.0


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory, tiny_model_dir):
    out = tmp_path_factory.mktemp("whole") / "run"
    config = _write_config(out.parent / "config.yaml", _config(tiny_model_dir, out))
    done = subprocess.run([sys.executable, "-m", "rlvr.cli", "train", str(config)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return out


def test_sigkill_right_after_a_checkpoint_then_resume(tmp_path, tiny_model_dir, uninterrupted):
    out = tmp_path / "run"
    config = _write_config(tmp_path / "config.yaml", _config(tiny_model_dir, out))
    proc = _start(config)
    _kill_when(proc, lambda: (out / "checkpoint-2").is_dir())
    assert proc.returncode == -signal.SIGKILL
    resumed = subprocess.run([sys.executable, "-m", "rlvr.cli", "train", str(config), "--resume"],
                             capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr
    _same_run(out, uninterrupted)
    manifest = json.loads((out / "manifest.json").read_text())
    assert [s["resumed_from"] is not None for s in manifest["starts"]] == [False, True]


def test_sigkill_while_writing_a_checkpoint_then_resume(tmp_path, tiny_model_dir, uninterrupted):
    out = tmp_path / "run"
    config = _write_config(tmp_path / "config.yaml", _config(tiny_model_dir, out))
    proc = _start(config)
    partial = out / ".tmp-checkpoint-4"
    _kill_when(proc, partial.exists)  # killed while checkpoint 4 is being written
    assert partial.exists() and not (out / "checkpoint-4").exists()
    assert (out / "checkpoint-2" / "trainer_state.pt").is_file()  # the previous checkpoint is whole
    AutoModelForCausalLM.from_pretrained(out / "checkpoint-2")
    resumed = subprocess.run([sys.executable, "-m", "rlvr.cli", "train", str(config), "--resume"],
                             capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr
    assert not list(out.glob(".tmp-checkpoint-*")), "the partial checkpoint is cleaned up"
    _same_run(out, uninterrupted)


def test_a_torn_metrics_line_is_dropped_on_resume(tmp_path, tiny_model_dir, uninterrupted):
    out = tmp_path / "run"
    cfg = config_from_dict(_config(tiny_model_dir, out))
    cfg.train.steps = 2
    train(cfg)
    with open(out / "metrics.jsonl", "a") as f:
        f.write('{"step": 3, "reward_mean": 0.4')  # a kill in the middle of writing step 3
    cfg.train.steps = STEPS
    train(cfg, resume=True)
    _same_run(out, uninterrupted)


def test_keep_last_bounds_the_checkpoints(tmp_path, tiny_model_dir):
    cfg = config_from_dict(_config(tiny_model_dir, tmp_path / "run", keep_last=2))
    cfg.train.save_every = 1
    run = train(cfg)
    assert sorted(p.name for p in run.glob("checkpoint-*")) == ["checkpoint-5", "checkpoint-6"]


def test_manifest_records_versions_config_seed_and_data_hashes(tmp_path, tiny_model_dir):
    import hashlib

    import transformers

    import rlvr

    data = tmp_path / "train.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"{i}+1=", "reference": str(i + 1)}) + "\n" for i in range(8)))
    cfg = _config(tiny_model_dir, tmp_path / "run")
    cfg["data"].update({"train": str(data), "eval": "arithmetic:eval:n=4"})
    cfg["train"].update({"steps": 1, "seed": 7})
    run = train(config_from_dict(cfg))
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["rlvr"]["version"] == rlvr.__version__
    assert manifest["torch"] == torch.__version__ and manifest["transformers"] == transformers.__version__
    assert manifest["seed"] == 7 and manifest["config"]["train"]["seed"] == 7
    assert manifest["data"]["data.train"]["sha256"] == hashlib.sha256(data.read_bytes()).hexdigest()
    assert manifest["data"]["data.eval"] == {"source": "arithmetic:eval:n=4", "generated": True}
    commit = manifest["rlvr"]["git_commit"]
    assert commit is None or len(commit.split("-")[0]) == 40


# -------------------------------------------------------------------------------------- numerical guard


def _nan_losses(monkeypatch, bad_steps: set[int]):
    """Make the policy loss NaN on the given steps (the guard must skip those updates)."""
    import rlvr.train.learner as loop

    real = loop.losses.compute
    calls = {"step": 0}
    real_learn = loop.learn

    def learn(*args, **kwargs):
        calls["step"] += 1
        return real_learn(*args, **kwargs)

    def compute(*args, **kwargs):
        loss, parts = real(*args, **kwargs)
        if calls["step"] in bad_steps:
            loss = loss * float("nan")
        return loss, parts

    monkeypatch.setattr(loop.losses, "compute", compute)
    monkeypatch.setattr(loop, "learn", learn)
    import rlvr.train.loop as train_loop

    monkeypatch.setattr(train_loop, "learn", learn)
    # every row goes through the loss (rows with zero advantage are otherwise skipped)
    monkeypatch.setattr(loop, "rows_needing_gradients", lambda exp, *a, **k: torch.arange(exp.size))


def test_a_nan_step_is_skipped_and_logged(tmp_path, tiny_model_dir, monkeypatch):
    _nan_losses(monkeypatch, {2})
    cfg = config_from_dict(_config(tiny_model_dir, tmp_path / "run"))
    cfg.train.steps, cfg.train.save_every = 3, 1
    run = train(cfg)
    assert [r["bad_step"] for r in read_metrics(run)] == [0, 1, 0]
    a, b = _weights(run / "checkpoint-1"), _weights(run / "checkpoint-2")
    assert all(torch.equal(a[k], b[k]) for k in a), "the NaN step changed no weight"
    assert all(torch.isfinite(t).all() for t in _weights(run / "checkpoint-3").values())


def test_too_many_bad_steps_in_a_row_stop_the_run(tmp_path, tiny_model_dir, monkeypatch, capsys):
    _nan_losses(monkeypatch, {2, 3, 4})
    cfg = config_from_dict(_config(tiny_model_dir, tmp_path / "run", max_bad_steps=3))
    with pytest.raises(TrainingDiverged) as err:
        train(cfg)
    message = str(err.value)
    assert message.startswith("step 4: the loss or gradient was NaN/Inf for 3 steps in a row (steps 2-4")
    assert "train.lr=0.001" in message
    assert [r["bad_step"] for r in read_metrics(tmp_path / "run")] == [0, 1, 1, 1]
    assert (tmp_path / "run" / "checkpoint-2").is_dir()  # saved before the NaNs began


# ----------------------------------------------------------------------------------------- input errors


def test_input_errors_are_one_line_that_says_what_and_where(tmp_path, tiny_model_dir, capsys):
    from rlvr.cli import main

    good = _config(tiny_model_dir, tmp_path / "run")
    bad_json = tmp_path / "bad.jsonl"
    bad_json.write_text('{"prompt": "1+1=", "reference": "2"}\n{"prompt": "2+2=", "reference": \n')
    no_field = tmp_path / "nofield.jsonl"
    no_field.write_text('{"prompt": "1+1=", "reference": "2"}\n{"question": "2+2=", "reference": "4"}\n')
    config = _write_config(tmp_path / "config.yaml", good)
    cases = [
        ((f"model.path={tmp_path / 'missing-model'}",), f"model.path: {tmp_path / 'missing-model'} is not a directory"),
        ((f"data.train={bad_json}",), f"{bad_json}:2:"),
        ((f"data.train={no_field}",), f"{no_field}:2: field 'prompt': missing"),
        ((f"data.train={tmp_path}",), "is a directory"),
        ((f"data.train={tmp_path / 'nope.jsonl'}",), f"{tmp_path / 'nope.jsonl'}: file not found"),
        (("data.verifier=exactt",), "unknown verifier 'exactt'"),
        (("train.stepz=3",), "unknown key 'train.stepz'"),
        (("train.steps=many",), "train.steps"),
        (("train.steps",), "expected the form section.key=value"),
    ]
    for overrides, expected in cases:
        code = main(["train", str(config), *overrides])
        lines = capsys.readouterr().err.strip().splitlines()
        assert code == 2 and len(lines) == 1, (overrides, lines)
        assert lines[0].startswith("rlvr train: error: ") and expected in lines[0], (overrides, lines[0])
        assert not (tmp_path / "run" / "metrics.jsonl").exists(), "nothing ran"
