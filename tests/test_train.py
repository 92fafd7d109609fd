"""The RL loop end to end on CPU: reward goes up, metrics and checkpoints are what docs/api.md ("Command line") promises."""


import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from rlvr.config import config_from_dict, load_config
from rlvr.train import train
from rlvr.train.metrics import read_metrics

from conftest import assert_reward_went_up, one_digit_rl_config

TIMING_KEYS = {"time_s", "tokens_per_s", "reward_latency_p50_ms", "reward_latency_p99_ms"}

def rl_config(model_dir, out, **train):
    return config_from_dict(one_digit_rl_config(model_dir, out, **train))


def test_reward_goes_up(warm_model_dir, tmp_path):
    assert_reward_went_up(read_metrics(train(rl_config(warm_model_dir, tmp_path / "run"))))


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
    drop = TIMING_KEYS
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
    drop = TIMING_KEYS
    assert [{k: v for k, v in r.items() if k not in drop} for r in read_metrics(cut)] == \
        [{k: v for k, v in r.items() if k not in drop} for r in read_metrics(whole)]
    a = AutoModelForCausalLM.from_pretrained(whole / "checkpoint-4").state_dict()
    b = AutoModelForCausalLM.from_pretrained(cut / "checkpoint-4").state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("kl_coef, placement, models_seen", [(0.0, "loss", 1), (0.1, "loss", 2), (0.1, "reward", 2)])
def test_reference_model_only_runs_when_kl_is_on(warm_model_dir, tmp_path, monkeypatch, kl_coef, placement, models_seen):
    import rlvr.train.learner as loop

    seen = set()
    real = loop.policy_forward

    def spy(model, *args, **kwargs):
        seen.add(id(model))
        return real(model, *args, **kwargs)

    monkeypatch.setattr(loop, "policy_forward", spy)
    cfg = rl_config(warm_model_dir, tmp_path, steps=3)
    cfg.algo.kl_coef, cfg.algo.kl_placement = kl_coef, placement
    rows = read_metrics(train(cfg))
    assert len(seen) == models_seen
    assert (rows[-1]["kl"] > 0) == (kl_coef > 0)


def test_reward_runner_health_is_logged_every_step(tiny_model_dir, tmp_path):
    rows = read_metrics(train(rl_config(tiny_model_dir, tmp_path, steps=2)))
    for key in ("reward_timeouts", "reward_errors", "reward_latency_p50_ms", "reward_latency_p99_ms"):
        assert all(key in r for r in rows), key
    assert rows[-1]["reward_timeouts"] == 0


def test_hostile_rewards_cost_verdicts_not_the_run(tiny_model_dir, tmp_path):
    """A reward that hangs, one that allocates without bound and one that segfaults: the run finishes and
    counts them as timeouts and errors."""
    import reward_fns  # noqa: F401  (registers test.hostile)
    from rlvr.tasks.jsonl import write_jsonl
    from rlvr.verifiers import RewardRunner, set_default_runner

    data = tmp_path / "hostile.jsonl"
    write_jsonl(data, [{"prompt": "1+1=", "reference": ref} for ref in ("hang", "oom", "segv", "2")])
    previous = set_default_runner(RewardRunner(workers=2, timeout_s=1.0, memory_mb=512))
    try:
        cfg = rl_config(tiny_model_dir, tmp_path / "run", steps=2)
        cfg.data.train, cfg.data.verifier, cfg.data.prompts_per_step, cfg.rollout.group_size = str(data), "test.hostile", 4, 1
        cfg.data.shuffle = False
        rows = read_metrics(train(cfg))
    finally:
        set_default_runner(previous).close()
    assert [r["step"] for r in rows] == [1, 2]
    # per step: the hang times out, the segfault is an error, the memory blow-up is an error (or, on a slow
    # machine, a timeout before the cap is reached); only the plain row is judged normally
    assert rows[-1]["reward_timeouts"] >= 2 and rows[-1]["reward_timeouts"] + rows[-1]["reward_errors"] >= 6
    assert all(r.get("verdict_timeout", 0) + r.get("verdict_error", 0) == 0.75 for r in rows)
