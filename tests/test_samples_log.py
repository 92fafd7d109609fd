"""RUN_DIR/samples.jsonl: what the policy wrote each step, with its reward and verdict; spread over the step's
groups; exactly once per step across a resume."""

import pytest

from rlvr.config import config_from_dict
from rlvr.jsonl import read_jsonl
from rlvr.train import train
from rlvr.train.samples import pick_rows

from conftest import one_digit_rl_config


@pytest.mark.parametrize("groups, wanted, rows", [
    ([0, 0, 1, 1, 2, 2], 3, [0, 2, 4]),  # one per group first
    ([0, 0, 1, 1, 2, 2], 4, [0, 1, 2, 4]),  # then the second of each, in order
    ([0, 0, 1, 1], 10, [0, 1, 2, 3]),  # never more than there are
    ([0, 1, 1, 1], 3, [0, 1, 2]),  # groups of unequal size
    ([0, 0], 0, []),
])
def test_rows_are_spread_over_groups(groups, wanted, rows):
    assert pick_rows(len(groups), groups, wanted) == rows


def _cfg(model_dir, out, steps, **train_keys):
    cfg = one_digit_rl_config(model_dir, out, steps=steps, save_every=1, **train_keys)
    cfg["data"].update(prompts_per_step=3)
    cfg["rollout"].update(group_size=2, max_new_tokens=3)
    return config_from_dict(cfg)


def test_each_step_writes_its_samples_with_their_verdicts(tiny_model_dir, tmp_path):
    run = train(_cfg(tiny_model_dir, tmp_path / "run", 2, log_samples=4))
    rows = read_jsonl(run / "samples.jsonl")
    assert [r["step"] for r in rows] == [1] * 4 + [2] * 4
    assert len({r["group"] for r in rows if r["step"] == 1}) == 3  # every group shown before a second response
    first = rows[0]
    assert set(first) >= {"task_id", "prompt", "response", "reward", "score", "status", "reason", "extracted", "truncated"}
    assert first["prompt"].endswith("=") and first["status"] in ("correct", "incorrect", "undecidable")


def test_a_resumed_run_writes_each_step_once(tiny_model_dir, tmp_path):
    whole = train(_cfg(tiny_model_dir, tmp_path / "whole", 3))
    part = tmp_path / "part"
    train(_cfg(tiny_model_dir, part, 2))
    (part / "checkpoint-2").rename(part / "gone")  # as if killed before step 2's checkpoint: resume from step 1
    train(_cfg(tiny_model_dir, part, 3), resume=True)
    assert read_jsonl(part / "samples.jsonl") == read_jsonl(whole / "samples.jsonl")


def test_zero_turns_it_off(tiny_model_dir, tmp_path):
    run = train(_cfg(tiny_model_dir, tmp_path / "run", 1, log_samples=0))
    assert not (run / "samples.jsonl").exists() or read_jsonl(run / "samples.jsonl") == []
