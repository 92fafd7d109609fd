"""`rlvr train` with two learners, end to end, in both multi-process layouts (torchrun, and Ray with two rollout
workers): the driver killed with SIGKILL leaves no process of the run behind, and `--resume` ends with the weights
and metrics of the uninterrupted run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

from rlvr.cluster.lifeline import descendants, process_table
from rlvr.train.metrics import read_metrics

ROOT = Path(__file__).resolve().parents[1]
TIMING = {"time_s", "tokens_per_s", "reward_latency_p50_ms", "reward_latency_p99_ms"}
LAYOUTS = {
    "torchrun": [],
    "ray": ["cluster.backend=ray", "cluster.rollout_workers=2"],
}


STEPS = 8


def _command(model, out, layout):
    return [sys.executable, "-m", "rlvr.cli", "train", str(ROOT / "examples" / "arithmetic.yaml"), f"model.path={model}",
            f"train.out={out}", "data.train=arithmetic:train:digits=1", "data.prompts_per_step=8", "rollout.group_size=4",
            "rollout.max_new_tokens=4", f"train.steps={STEPS}", "train.save_every=2", "train.lr=1e-3", "train.progress=false",
            "cluster.learners=2", *LAYOUTS[layout]]


@pytest.fixture
def run_env(tmp_path):
    """One intra-op thread per process; Ray (when used) keeps its files and token under this test's directories
    (a short temp dir: Ray's socket paths have a length limit)."""
    home = tmp_path / "home"
    home.mkdir()
    ray_tmp = tempfile.mkdtemp(prefix="rlvr-ray-")
    yield {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT / "src"), "HOME": str(home),
           "RAY_TMPDIR": ray_tmp}
    subprocess.run(["rm", "-rf", ray_tmp], check=False)


def _tree_until(driver: subprocess.Popen, done, within_s: float) -> dict[int, int]:
    """Follow the driver's process tree (pid -> start time) until ``done()`` holds, the driver exits or time runs
    out; processes that were in the tree once stay recorded even after init adopts them."""
    seen: dict[int, int] = {}
    deadline = time.monotonic() + within_s
    while not done() and time.monotonic() < deadline and driver.poll() is None:
        table = process_table()
        seen.update({pid: table[pid][1] for pid in descendants({driver.pid}, table)})
        time.sleep(0.05)
    return seen


def _still_running(seen: dict[int, int], within_s: float) -> list[int]:
    deadline = time.monotonic() + within_s
    while True:
        table = process_table()
        left = [pid for pid, start in seen.items() if pid in table and table[pid][1] == start and not _zombie(pid)]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.1)


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except OSError:
        return True


def _without_timing(rows):
    return [{k: v for k, v in r.items() if k not in TIMING} for r in rows]


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_resume_after_kill_9_of_the_driver(warm_model_dir, tmp_path, run_env, layout):
    whole, cut = tmp_path / "whole", tmp_path / "cut"
    done = subprocess.run(_command(warm_model_dir, whole, layout), env=run_env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]

    driver = subprocess.Popen(_command(warm_model_dir, cut, layout), env=run_env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    started = _tree_until(driver, lambda: (cut / "checkpoint-2").is_dir(), within_s=240)
    driver.send_signal(signal.SIGKILL)
    driver.wait()
    # the kill lands after the first checkpoint and before the last (steps are quick on an idle machine: the run
    # has STEPS - 2 steps after checkpoint-2 for the kill to land in)
    assert (cut / "checkpoint-2").is_dir() and not (cut / f"checkpoint-{STEPS}").exists(), "the kill came too late"
    assert len(started) >= 3  # torchrun and two ranks; Ray's GCS, raylet and actors
    assert _still_running(started, within_s=20) == [], "a process of the run outlived the driver"

    resumed = subprocess.run(_command(warm_model_dir, cut, layout), env=run_env, capture_output=True, text=True,
                             timeout=300)
    assert resumed.returncode != 0 and "--resume" in resumed.stderr  # a second start without --resume is refused
    resumed = subprocess.run([*_command(warm_model_dir, cut, layout), "--resume"], env=run_env, capture_output=True,
                             text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-3000:]

    assert [r["step"] for r in read_metrics(cut)] == list(range(1, STEPS + 1))
    assert _without_timing(read_metrics(cut)) == _without_timing(read_metrics(whole))
    assert any(r["grad_norm"] > 0 for r in read_metrics(whole))
    a = AutoModelForCausalLM.from_pretrained(whole / f"checkpoint-{STEPS}").state_dict()
    b = AutoModelForCausalLM.from_pretrained(cut / f"checkpoint-{STEPS}").state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
