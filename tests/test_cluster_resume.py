"""`rlvr train ... cluster.learners=2` end to end through torchrun: the driver killed with SIGKILL leaves no rank
behind, and `--resume` ends with the weights and metrics of the uninterrupted run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM

from rlvr.cluster.lifeline import DRIVER_PID
from rlvr.train.metrics import read_metrics

from procs import wait_dead

ROOT = Path(__file__).resolve().parents[1]
TIMING = {"time_s", "tokens_per_s", "reward_latency_p50_ms", "reward_latency_p99_ms"}


def _command(model, out, *extra):
    return [sys.executable, "-m", "rlvr.cli", "train", str(ROOT / "examples" / "arithmetic.yaml"), f"model.path={model}",
            f"train.out={out}", "data.train=arithmetic:train:digits=1", "data.prompts_per_step=8", "rollout.group_size=4",
            "rollout.max_new_tokens=4", "train.steps=4", "train.save_every=2", "train.lr=1e-3", "train.progress=false",
            "cluster.learners=2", *extra]


def _env():
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT / "src")}


def _processes_of(driver: int) -> list[int]:
    """Every process started on behalf of the driver (torchrun and the ranks carry its pid in their environment)."""
    mark = f"{DRIVER_PID}={driver}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if mark in (entry / "environ").read_bytes().split(b"\0"):
                    found.append(int(entry.name))
            except OSError:
                pass
    return found


def _without_timing(rows):
    return [{k: v for k, v in r.items() if k not in TIMING} for r in rows]


def test_resume_after_kill_9_of_the_driver(warm_model_dir, tmp_path):
    whole, cut = tmp_path / "whole", tmp_path / "cut"
    done = subprocess.run(_command(warm_model_dir, whole), env=_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]

    driver = subprocess.Popen(_command(warm_model_dir, cut), env=_env(), stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 240
    while not (cut / "checkpoint-2").is_dir() and time.monotonic() < deadline and driver.poll() is None:
        time.sleep(0.02)
    started = _processes_of(driver.pid)
    driver.send_signal(signal.SIGKILL)
    driver.wait()
    assert (cut / "checkpoint-2").is_dir() and not (cut / "checkpoint-4").exists(), "the kill came too late to test"
    assert len(started) >= 3  # torchrun and two ranks
    assert all(wait_dead(pid, within_s=10) for pid in started), "a learner process outlived the driver"

    resumed = subprocess.run(_command(warm_model_dir, cut), env=_env(), capture_output=True, text=True, timeout=300)
    assert resumed.returncode != 0 and "--resume" in resumed.stderr  # a second start without --resume is refused
    resumed = subprocess.run([*_command(warm_model_dir, cut), "--resume"], env=_env(), capture_output=True, text=True,
                             timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-3000:]

    assert [r["step"] for r in read_metrics(cut)] == list(range(1, 5))
    assert _without_timing(read_metrics(cut)) == _without_timing(read_metrics(whole))
    assert any(r["grad_norm"] > 0 for r in read_metrics(whole))
    a = AutoModelForCausalLM.from_pretrained(whole / "checkpoint-4").state_dict()
    b = AutoModelForCausalLM.from_pretrained(cut / "checkpoint-4").state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
