"""Exact resume of a step opened up by the seed papers' mechanisms: a run with a collection stage (GHPO's hints on
arithmetic:chain, which the warm model fails, so every group is hinted) and a second trainable model (PRIME's
implicit PRM) is killed with SIGKILL after its first checkpoint and resumed with `--resume`; it ends with the policy,
the PRM and the metrics of the uninterrupted run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM

from rlvr.train.metrics import read_metrics

ROOT = Path(__file__).resolve().parents[1]
TIMING = {"time_s", "tokens_per_s", "reward_latency_p50_ms", "reward_latency_p99_ms"}
STEPS = 12  # checkpoints every 2 steps: the kill has the 10 steps after checkpoint-2 to land in


def _command(model, out):
    return [sys.executable, "-m", "rlvr.cli", "train", str(ROOT / "examples" / "arithmetic.yaml"),
            f"model.path={model}", f"train.out={out}", "data.train=arithmetic:chain:terms=2",
            "data.prompts_per_step=4", "rollout.group_size=4", "rollout.max_new_tokens=6", f"train.steps={STEPS}",
            "train.save_every=2", "train.progress=false", "algo.hint_stages=[0.5]", "algo.advantage=prime",
            "algo.implicit_prm=true", "algo.prm_lr=1e-3"]


def _without_timing(rows):
    return [{k: v for k, v in r.items() if k not in TIMING} for r in rows]


def _weights(folder: Path) -> dict[str, torch.Tensor]:
    return AutoModelForCausalLM.from_pretrained(folder).state_dict()


def test_kill_9_with_hints_and_an_implicit_prm_resumes_exactly(warm_model_dir, tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT / "src")}
    whole, cut = tmp_path / "whole", tmp_path / "cut"
    done = subprocess.run(_command(warm_model_dir, whole), env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]

    driver = subprocess.Popen(_command(warm_model_dir, cut), env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 240
    while not (cut / "checkpoint-2").is_dir() and driver.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    driver.send_signal(signal.SIGKILL)
    driver.wait()
    assert (cut / "checkpoint-2" / "prm").is_dir() and not (cut / f"checkpoint-{STEPS}").exists(), \
        "the kill came too late"

    resumed = subprocess.run([*_command(warm_model_dir, cut), "--resume"], env=env, capture_output=True, text=True,
                             timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-3000:]

    rows, expected = read_metrics(cut), read_metrics(whole)
    assert [r["step"] for r in rows] == list(range(1, STEPS + 1))
    assert _without_timing(rows) == _without_timing(expected)
    assert all(r["hint_frac"] > 0 and "prm/pairwise_acc" in r for r in expected)  # both mechanisms ran
    last = f"checkpoint-{STEPS}"
    for folder in (Path(last), Path(last) / "prm"):
        a, b = _weights(whole / folder), _weights(cut / folder)
        assert all(torch.equal(a[k], b[k]) for k in a), f"{folder} differs from the uninterrupted run's"
    initial, prm = _weights(warm_model_dir), _weights(whole / last / "prm")
    assert any(not torch.equal(initial[k], prm[k]) for k in prm)  # the PRM was trained, so its resume is tested
