"""Engines are built by name from config: an engine written outside rlvr, registered under its own name, is used
by training, evaluation and the demo through `rollout.engine` without editing them."""

from __future__ import annotations

import pytest

from rlvr.config import ConfigError, config_from_dict, load_config
from rlvr.demo import run_demo
from rlvr.eval import evaluate_model
from rlvr.rollout import HFEngine, build_engine, engine_names, register_engine, unregister_engine
from rlvr.train import train
from rlvr.train.metrics import read_metrics

from conftest import one_digit_rl_config


class CountingEngine:
    """A user's engine: samples with the hf engine's code, but counts calls and weight syncs, and does not claim
    that its log-probs are the trainer's (as an external engine such as vLLM would not)."""

    generated = 0
    synced = 0

    def __init__(self, model, tokenizer, *, tag: str = ""):
        self.tag = tag
        self.inner = HFEngine(model, pad_id=tokenizer.pad_token_id, eos_ids=tokenizer.eos_token_id)

    def generate(self, prompts, params):
        CountingEngine.generated += 1
        return self.inner.generate(prompts, params)

    def sync_weights(self, model):
        CountingEngine.synced += 1
        self.inner.sync_weights(model)


@pytest.fixture(scope="module", autouse=True)
def counting_engine():
    register_engine("test.counting")(lambda model, tokenizer, **options: CountingEngine(model, tokenizer, **options))
    yield
    unregister_engine("test.counting")
    unregister_engine("test.no_sync")


@pytest.fixture(autouse=True)
def _reset_counts():
    CountingEngine.generated = CountingEngine.synced = 0


def test_registered_engine_drives_training_with_its_options(warm_model_dir, tmp_path):
    cfg = one_digit_rl_config(warm_model_dir, tmp_path, steps=2)
    cfg["rollout"].update(engine="test.counting", engine_options={"tag": "x"})
    cfg["algo"] = {"mini_batches": 2}
    rows = read_metrics(train(config_from_dict(cfg)))
    assert CountingEngine.generated == 2
    assert sum(r["updates"] for r in rows) == 4
    assert CountingEngine.synced == 2  # once per step, after its updates: the next step samples from the new weights
    # an engine that does not vouch for its log-probs: the trainer computed its own, and logged the mismatch
    assert all("rollout_ratio_mean" in r for r in rows)


def test_registered_engine_drives_evaluation(warm_model_dir, tmp_path):
    summary = evaluate_model(str(warm_model_dir), "arithmetic:eval:digits=1,n=6", max_new_tokens=4,
                             engine="test.counting", out=str(tmp_path / "e.json"))
    assert CountingEngine.generated == 1 and summary["engine"] == "test.counting" and summary["n_tasks"] == 6


def test_registered_engine_drives_the_demo(tmp_path):
    run_demo(tmp_path, seed=0, progress=False, sft_steps=3, rl_steps=1, heldout_tasks=8,
             overrides=["rollout.engine=test.counting"])
    assert CountingEngine.generated == 3  # held-out before, one RL step, held-out after


def test_unknown_engine_is_a_config_error_listing_the_known_ones():
    with pytest.raises(ConfigError, match="rollout.engine: expected a registered engine: .*hf"):
        load_config(None, ["rollout.engine=vllmm"])
    assert "hf" in engine_names() and "test.counting" in engine_names()


def test_an_engine_without_sync_weights_is_refused(tiny):
    model, tokenizer = tiny
    register_engine("test.no_sync")(lambda m, t, **o: type("E", (), {"generate": lambda self, p, s: None})())
    with pytest.raises(TypeError, match="no sync_weights"):
        build_engine("test.no_sync", model, tokenizer)
