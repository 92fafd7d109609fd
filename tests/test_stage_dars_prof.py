"""The ``dars`` (extra rollouts for hard prompts) and ``prof`` (process-consistency filter) collection stages: which
groups change and how, their metrics, and both through `rlvr train`."""

import json

import pytest
import torch

import rlvr.rollout.collection_stages  # noqa: F401  (first: the stages register in the order they run)
from rlvr.algos import advantages
from rlvr.algos.collection import dars_extra
from rlvr.config import config_from_dict
from rlvr.errors import UserError
from rlvr.rollout.provenance import ON_POLICY
from rlvr.rollout.stage_dars import ExtraRollouts
from rlvr.rollout.stage_prof import ProcessConsistencyFilter
from rlvr.rollout.stages import build_stages
from rlvr.tasks import Task

from stage_fixtures import scripted_context

# ---------------------------------------------------------------------------------------------------------- dars

FIRST_CORRECT = {"qA=": 1, "qB=": 3, "qC=": 4, "qD=": 0}  # correct samples of 8 on the first call: a = 1/8, 3/8, 1/2, 0
LATER_CORRECT = {"qA=": [0], "qD=": [2]}  # which extra samples are correct, by prompt


def by_difficulty(text, call, j):
    correct = j < FIRST_CORRECT[text] if call == 0 else j in LATER_CORRECT.get(text, [])
    return "ok" if correct else "no"


def dars_tasks():
    return [Task(prompt=p, reference="ok", id=p) for p in FIRST_CORRECT]


def run_dars(stage, answer=by_difficulty):
    ctx = scripted_context(answer, n=8)
    first = ctx.generate(dars_tasks(), step=0)
    out, metrics = stage.run(first, ctx, 0)
    return ctx, first, out, metrics


def test_hard_prompts_get_the_spec_top_ups_joined_to_their_groups():
    """Spec 4.10, N = 8: a = 1/8 -> 5 more, a = 3/8 -> 1 more, a >= 1/2 -> none; a = 0 counts as a = 0.5/8 (the
    released schedule_ET) -> 17 in all, 9 more."""
    ctx, first, out, metrics = run_dars(ExtraRollouts(24))
    assert [(prompts, n) for prompts, n in ctx.engine.calls[1:]] == [(["qD="], 9), (["qA="], 5), (["qB="], 1)]
    sizes = torch.bincount(out.batch.group_index).tolist()
    assert sizes == [13, 9, 8, 17]
    assert out.batch.group_index.tolist() == sorted(out.batch.group_index.tolist())  # each group contiguous
    assert [t.id for t in out.tasks] == ["qA="] * 13 + ["qB="] * 9 + ["qC="] * 8 + ["qD="] * 17
    assert torch.all(out.batch.row_kind == ON_POLICY)
    assert out.responses[:8] == first.responses[:8]  # the group's own rows first, then its extra rollouts
    assert metrics == {"dars/extra_rollouts": 15.0, "dars/hard_prompts": 3.0,
                       "dars/hard_prompt_positives_mean": pytest.approx((2 + 3 + 1) / 3), "dars/rescued_prompts": 1.0}


def test_grpo_advantages_of_the_enlarged_group():
    """Spec 4.10: the 13-row group with 2 correct: mean 2/13, sample std sqrt(22/156) -> A = 2.253203 / -0.409673."""
    _, _, out, _ = run_dars(ExtraRollouts(24))
    rewards = torch.tensor(out.rewards, dtype=torch.float64)
    adv = advantages.compute("grpo", rewards, out.batch.group_index, torch.ones(len(rewards), 1, dtype=torch.float64),
                             epsilon=0.0)[:, 0]
    group_a = out.batch.group_index == 0
    assert int(group_a.sum()) == 13 and float(rewards[group_a].sum()) == 2.0
    assert sorted(set(round(float(a), 6) for a in adv[group_a])) == pytest.approx([-0.409673, 2.253203], abs=1e-6)


@pytest.mark.parametrize("max_extra, schedule", [(6, "equal"), (24, "hardness"), (1, "hardness")])
def test_cap_and_schedule_reach_the_top_up(max_extra, schedule):
    _, _, out, metrics = run_dars(ExtraRollouts(max_extra, schedule))
    expected = [8 + dars_extra(a, 8, max_extra, schedule) for a in (1 / 8, 3 / 8, 4 / 8, 0.0)]
    assert torch.bincount(out.batch.group_index).tolist() == expected
    assert metrics["dars/extra_rollouts"] == sum(expected) - 32


@pytest.mark.parametrize("use_std, added", [
    (True, [5, 1, 0, 9]),  # the paper's std-normalised schedule: a = 0 taken as 1/16 -> 17 in all
    (False, [11, 1, 0, 24]),  # the released scripts' (no std): 8 / (4 a (1 - a)) in all; a = 0: 27 more, capped at 24
])
def test_std_normalised_and_released_schedules(use_std, added):
    _, _, out, metrics = run_dars(ExtraRollouts(24, "equal", use_std))
    assert torch.bincount(out.batch.group_index).tolist() == [8 + n for n in added]
    assert metrics["dars/extra_rollouts"] == sum(added)


def test_no_hard_prompt_leaves_the_samples_alone():
    ctx = scripted_context(lambda text, call, j: "ok" if j % 2 else "no", n=4)
    first = ctx.generate(dars_tasks(), step=0)
    out, metrics = ExtraRollouts(8).run(first, ctx, 0)
    assert out is first and len(ctx.engine.calls) == 1
    assert metrics["dars/extra_rollouts"] == 0.0 and metrics["dars/hard_prompts"] == 0.0


def test_accuracy_is_the_verifier_score_not_the_shaped_reward():
    ctx = scripted_context(by_difficulty, n=8)
    first = ctx.generate(dars_tasks(), step=0)
    first.rewards = [r - 0.5 for r in first.rewards]  # a shaping term: accuracy stays what the verifier said
    _, metrics = ExtraRollouts(24).run(first, ctx, 0)
    assert metrics["dars/extra_rollouts"] == 15.0


# ---------------------------------------------------------------------------------------------------------- prof

# Spec 4.14's six-response group: correct rollouts' mean step values [0.9, 0.2, 0.7, 0.8], incorrect [-0.5, 0.6].
# Each rollout has two steps; the 0.2 one reaches its right answer through a false step (1.0, -0.6).
PROF_STEPS = [(0.9, 0.9), (1.0, -0.6), (0.7, 0.7), (0.8, 0.8), (-0.5, -0.5), (0.6, 0.6)]


def with_steps(samples, steps):
    """Step rewards on the first and last response token of each row, as the process stage would place them."""
    n, width = samples.batch.response_ids.shape
    values, ends = torch.zeros(n, width), torch.zeros(n, width, dtype=torch.bool)
    for i, row_steps in enumerate(steps):
        last = int(samples.batch.response_mask[i].sum()) - 1
        for position, value in zip((0, last), row_steps):
            values[i, position], ends[i, position] = value, True
    samples.batch.step_rewards, samples.batch.step_end = values, ends
    return samples


def prof_group(n_groups=1):
    ctx = scripted_context(lambda text, call, j: "ok" if j < 4 else "no", n=6)
    tasks = [Task(prompt=f"q{i}=", reference="ok", id=f"q{i}") for i in range(n_groups)]
    return ctx, with_steps(ctx.generate(tasks, step=0), PROF_STEPS * n_groups)


def test_prof_spec_group():
    """Remove 3 of 6: k+ = round((4 - 2 + 3) / 2) = 2 correct with the lowest means (0.2, 0.7) and the incorrect one
    with the highest mean (0.6) leave; advantages are then computed on [0.9, 0.8, -0.5]."""
    ctx, samples = prof_group(2)
    out, metrics = ProcessConsistencyFilter().run(samples, ctx, 0)
    assert out.batch.group_index.tolist() == [0, 0, 0, 1, 1, 1]
    kept_means = (out.batch.step_rewards.sum(-1) / out.batch.step_end.sum(-1)).tolist()
    assert kept_means == pytest.approx([0.9, 0.8, -0.5] * 2)
    assert out.rewards == [1.0, 1.0, 0.0] * 2
    assert metrics == {"prof/dropped_frac": 0.5, "prof/correct_with_false_step_frac": 0.25,
                       "prof/kept_correct_with_false_step_frac": 0.0}


def test_prof_needs_step_rewards():
    ctx = scripted_context(lambda text, call, j: "ok", n=2)
    samples = ctx.generate([Task("q=", "ok", "q")], step=0)
    with pytest.raises(UserError, match="reward.process"):
        ProcessConsistencyFilter().run(samples, ctx, 0)


def test_prof_step_count_penalty_ranks_a_one_step_rollout_last():
    """The released consistency score subtracts 10 from a rollout with fewer than 2 steps."""
    ctx, samples = prof_group()
    one_step = samples.batch.step_end.clone()
    one_step[0, 1:] = False  # the 0.9 rollout now has one step (reward 0.9)
    samples.batch.step_end = one_step
    out, _ = ProcessConsistencyFilter().run(samples, ctx, 0)
    means = (out.batch.step_rewards * out.batch.step_end).sum(-1) / out.batch.step_end.sum(-1)
    assert means.tolist() == pytest.approx([0.7, 0.8, -0.5])


# ------------------------------------------------------------------------------------------------- config, train


def config(tmp_path, reward=None, **algo):
    return config_from_dict({"model": {"path": "m"}, "data": {"train": "arithmetic:chain"},
                             "train": {"out": str(tmp_path)}, "algo": algo, "reward": reward or {}})


def test_builders_follow_the_config(tmp_path):
    assert not {"dars", "prof"} & set(build_stages(config(tmp_path)))
    stage = build_stages(config(tmp_path, dars_max_extra=24, dars_schedule="hardness"))["dars"]
    assert (stage.max_extra, stage.schedule, stage.use_std) == (24, "hardness", True)
    stage = build_stages(config(tmp_path, dars_max_extra=24, dars_use_std=False))["dars"]
    assert (stage.schedule, stage.use_std) == ("equal", False)
    from rlvr.config import load_config

    recipe = load_config(None, ["algo.recipe=dars", "model.path=m"]).algo
    assert (recipe.dars_use_std, recipe.dars_max_extra, recipe.advantage) == (False, 24, "dr_grpo")
    with pytest.raises(UserError, match="reward.process"):
        build_stages(config(tmp_path, prof_filter=True))
    assert "prof" in build_stages(config(tmp_path, {"process": {"source": "arith_steps"}}, prof_filter=True))


def train_rows(tiny_model_dir, out, *extra):
    from rlvr.cli import main

    assert main(["train", "examples/arithmetic.yaml", f"model.path={tiny_model_dir}", f"train.out={out}",
                 "train.steps=3", "data.train=arithmetic:chain:terms=3", "data.prompts_per_step=2",
                 "rollout.group_size=2", "rollout.max_new_tokens=8", "train.progress=false", *extra]) == 0
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3]
    return rows


def test_dars_three_steps_through_rlvr_train(tiny_model_dir, tmp_path):
    """The untrained model solves nothing: each prompt of a group of 2 at a = 0 gets ceil(2 / sqrt(3) - 2) = 1 more."""
    for row in train_rows(tiny_model_dir, tmp_path / "run", "algo.dars_max_extra=4"):
        assert row["dars/hard_prompts"] == 2.0 and row["dars/extra_rollouts"] == 2.0
        assert row["rows/on_policy"] == 6
        assert "dars/hard_prompt_positives_mean" in row and "dars/rescued_prompts" in row


def test_prof_three_steps_through_rlvr_train(tiny_model_dir, tmp_path):
    rows = train_rows(tiny_model_dir, tmp_path / "run", "algo.prof_filter=true",
                      "reward.process={source: arith_steps}")
    for row in rows:
        assert row["prof/dropped_frac"] == 0.5  # one of each group of 2
        assert row["rows/on_policy"] == 2
        assert 0.0 <= row["prof/correct_with_false_step_frac"] <= 1.0


@pytest.mark.parametrize("module", ["stage_prof", "stage_dars", "stage_experts", "stage_hints"])
def test_stages_run_in_their_order_whichever_module_is_imported_first(module, monkeypatch):
    """prof reads the step rewards the process stage puts on rows that hints, experts and dars add (the registry
    runs stages in registration order): the modules are imported afresh into an empty registry."""
    import importlib
    import sys

    import rlvr.rollout
    from rlvr.rollout import stages

    monkeypatch.setattr(stages, "_BUILDERS", {})
    for name in ("stage_hints", "stage_experts", "stage_dars", "stage_process", "stage_prof"):
        monkeypatch.delitem(sys.modules, f"rlvr.rollout.{name}")
        monkeypatch.delattr(rlvr.rollout, name, raising=False)
    importlib.import_module(f"rlvr.rollout.{module}")
    order = ["hints", "experts", "dars", "process", "prof"]
    assert list(stages._BUILDERS) == order[: order.index(module.removeprefix("stage_")) + 1]
