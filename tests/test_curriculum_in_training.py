"""The trainer drives the data sampler's curriculum: it reports every round's verifier scores to the sampler and
logs the sampler's per-source and per-difficulty metrics each step; the sampler's state resumes exactly."""

from __future__ import annotations

import pytest

from rlvr.config import config_from_dict
from rlvr.train import train
from rlvr.train.metrics import read_metrics


def _cfg(model_dir, out, steps):
    return config_from_dict({
        "model": {"path": str(model_dir)},
        "data": {"train": "arithmetic:train:digits=1,ops=+@1; arithmetic:train:digits=1,ops=-@1", "prompts_per_step": 4,
                 "curriculum": "filter+replay"},
        "rollout": {"group_size": 2, "max_new_tokens": 3},
        "train": {"steps": steps, "out": str(out), "progress": False, "save_every": 2},
    })


def test_a_mixture_with_a_curriculum_logs_its_metrics_and_resumes(tiny_model_dir, tmp_path):
    full = read_metrics(train(_cfg(tiny_model_dir, tmp_path / "full", 4)))
    assert any(k.startswith(("source/", "mixture/")) for k in full[0]), sorted(full[0])
    assert any(k.startswith("curriculum/") for k in full[0]), sorted(full[0])
    train(_cfg(tiny_model_dir, tmp_path / "cut", 2))
    resumed = read_metrics(train(_cfg(tiny_model_dir, tmp_path / "cut", 4), resume=True))
    for a, b in zip(full, resumed):
        for key, value in a.items():
            if key not in ("time_s", "tokens_per_s") and not key.startswith("reward_latency") and isinstance(value, float):
                assert b[key] == pytest.approx(value, rel=1e-6, abs=1e-9), (a["step"], key)
