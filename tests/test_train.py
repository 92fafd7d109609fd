"""The RL loop end to end on CPU: reward goes up, metrics and checkpoints are what CONTRACTS.md C4 promises."""

import json

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from rlvr.config import config_from_dict, load_config
from rlvr.models import TinySpec, build_tiny_model
from rlvr.tasks.arithmetic import ArithmeticSpec, all_problems
from rlvr.train import sft, train
from rlvr.train.metrics import read_metrics

ONE_DIGIT = ArithmeticSpec(digits=1)


@pytest.fixture(scope="module")
def warm_model_dir(tmp_path_factory):
    """A tiny model briefly fine-tuned on one-digit addition, so it is right some of the time."""
    model, tokenizer = build_tiny_model(TinySpec(hidden_size=64, num_layers=2, num_heads=4, intermediate_size=256), seed=0)
    torch.manual_seed(0)
    pairs = [(t.prompt, t.reference) for t in all_problems(ONE_DIGIT, "train")]
    sft(model, tokenizer, pairs, steps=100, batch_size=32, lr=3e-3, seed=0, progress=False)
    path = tmp_path_factory.mktemp("warm") / "model"
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def rl_config(model_dir, out, **train):
    return config_from_dict({
        "model": {"path": str(model_dir)},
        "data": {"train": "arithmetic:train:digits=1", "verifier": "exact", "prompts_per_step": 32},
        "rollout": {"group_size": 8, "max_new_tokens": 4},
        "train": {"steps": 100, "lr": 1e-3, "out": str(out), "progress": False, **train},
    })


def test_reward_goes_up(warm_model_dir, tmp_path):
    run_dir = train(rl_config(warm_model_dir, tmp_path / "run"))
    rewards = [row["reward_mean"] for row in read_metrics(run_dir)]
    first, last = sum(rewards[:10]) / 10, sum(rewards[-10:]) / 10
    assert last > first + 0.15, f"reward did not go up: first 10 steps {first:.3f}, last 10 steps {last:.3f}"


def test_run_directory_contents(warm_model_dir, tmp_path):
    run_dir = train(rl_config(warm_model_dir, tmp_path / "run", steps=3, save_every=2))
    assert load_config(run_dir / "config.yaml") == rl_config(warm_model_dir, tmp_path / "run", steps=3, save_every=2)
    rows = read_metrics(run_dir)
    assert [r["step"] for r in rows] == [1, 2, 3]
    for key in ("step", "reward_mean", "reward_std", "response_len_mean", "entropy", "kl", "clip_frac", "time_s", "tokens_per_s"):
        assert all(isinstance(r[key], (int, float)) for r in rows), key
    assert sorted(p.name for p in run_dir.glob("checkpoint-*")) == ["checkpoint-2", "checkpoint-3"]
    final = run_dir / "checkpoint-3"
    model = AutoModelForCausalLM.from_pretrained(final)
    tokenizer = AutoTokenizer.from_pretrained(final)
    assert tokenizer.decode(tokenizer("1+2=")["input_ids"], skip_special_tokens=True) == "1+2="
    assert model.config.vocab_size == len(tokenizer)
    assert (final / "trainer_state.pt").is_file()


def test_kl_term_uses_a_reference_model(warm_model_dir, tmp_path):
    cfg = rl_config(warm_model_dir, tmp_path / "run", steps=3)
    cfg.algo.kl_coef = 0.1
    rows = read_metrics(train(cfg))
    assert rows[0]["kl"] == pytest.approx(0.0, abs=1e-6)  # the policy starts equal to the reference
    assert rows[-1]["kl"] > 0


def test_same_seed_same_run(warm_model_dir, tmp_path):
    a = read_metrics(train(rl_config(warm_model_dir, tmp_path / "a", steps=3)))
    b = read_metrics(train(rl_config(warm_model_dir, tmp_path / "b", steps=3)))
    drop = {"time_s", "tokens_per_s"}
    assert [{k: v for k, v in r.items() if k not in drop} for r in a] == [{k: v for k, v in r.items() if k not in drop} for r in b]


def test_resume_continues_exactly(tiny_model_dir, tmp_path):
    """Stopping after checkpoint 2 and resuming ends with the weights and metrics of an uninterrupted run."""
    def cfg(out):
        c = rl_config(tiny_model_dir, out, steps=4, save_every=2)
        c.data.prompts_per_step, c.rollout.group_size = 4, 4
        return c

    whole = train(cfg(tmp_path / "whole"))
    cut = tmp_path / "cut"
    train(cfg(cut))
    import shutil
    shutil.rmtree(cut / "checkpoint-4")
    lines = (cut / "metrics.jsonl").read_text().splitlines()
    (cut / "metrics.jsonl").write_text("\n".join(lines[:3]) + "\n")  # the run died during step 4
    train(cfg(cut), resume=True)
    assert [r["step"] for r in read_metrics(cut)] == [1, 2, 3, 4]
    drop = {"time_s", "tokens_per_s"}
    assert [{k: v for k, v in r.items() if k not in drop} for r in read_metrics(cut)] == \
        [{k: v for k, v in r.items() if k not in drop} for r in read_metrics(whole)]
    a = AutoModelForCausalLM.from_pretrained(whole / "checkpoint-4").state_dict()
    b = AutoModelForCausalLM.from_pretrained(cut / "checkpoint-4").state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
