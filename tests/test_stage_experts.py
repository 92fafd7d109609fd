"""The ``experts`` collection stage (LUFFY / RL-PLUS expert rows): what an expert row holds, where it goes in its
group, which traces are dropped, and its metrics through `rlvr train`."""

import json

import pytest
import torch

import rlvr.rollout.collection_stages  # noqa: F401  (first: the stages register in the order they run)
from rlvr.algos import advantages
from rlvr.config import config_from_dict
from rlvr.errors import UserError
from rlvr.rollout.provenance import EXPERT, ON_POLICY
from rlvr.rollout.stage_experts import ExpertRows
from rlvr.rollout.stages import build_stages
from rlvr.tasks import Task

from stage_fixtures import SAMPLED_LOGPROB, decoded, scripted_context


def wrong(text, call, j):
    return f"w{j}"


def tasks_with(metas):
    return [Task(prompt=f"q{i}=", reference=f"a{i}", id=f"t{i}", meta=meta) for i, meta in enumerate(metas)]


def run_stage(tasks, stage, n=4, max_new_tokens=32, answer=wrong):
    ctx = scripted_context(answer, n=n, max_new_tokens=max_new_tokens)
    first = ctx.generate(tasks, step=0)
    out, metrics = stage.run(first, ctx, 0)
    return ctx, first, out, metrics


def test_an_expert_row_takes_the_place_of_the_groups_last_sampled_row():
    """LUFFY's rollout.n=8 with n_prefix=1 is 7 sampled rows and 1 expert row: the group size counts it."""
    ctx, first, out, metrics = run_stage(tasks_with([{"expert": "a0"}, {"expert": "a1"}]), ExpertRows(1))
    tok = ctx.tokenizer
    assert out.batch.size == 8
    assert out.batch.group_index.tolist() == [0, 0, 0, 0, 1, 1, 1, 1]
    assert out.batch.row_kind.tolist() == [ON_POLICY] * 3 + [EXPERT] + [ON_POLICY] * 3 + [EXPERT]
    assert out.responses == ["w0", "w1", "w2", "a0", "w0", "w1", "w2", "a1"]
    assert out.rewards == [0, 0, 0, 1, 0, 0, 0, 1]
    assert decoded(tok, out.batch.prompt_ids) == ["q0="] * 4 + ["q1="] * 4
    expert = out.batch.response_ids[3][out.batch.response_mask[3].bool()].tolist()
    assert expert == tok("a0", add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    assert torch.all(out.batch.logprobs[3] == 0) and torch.all(out.batch.logprobs[7] == 0)
    sampled = out.batch.response_mask[[0, 1, 2, 4, 5, 6]].bool()
    assert torch.all(out.batch.logprobs[[0, 1, 2, 4, 5, 6]][sampled] == SAMPLED_LOGPROB)
    assert not out.batch.truncated[3] and out.batch.entropy is None
    assert out.tasks[3] is first.tasks[0] and out.tasks[7] is first.tasks[4]
    assert metrics == {"expert/missing": 0.0, "expert/dropped": 0.0, "expert/truncated": 0.0}


def test_luffy_group_advantages_spec_case():
    """Spec 4.2: group [expert=1, 0, 0, 0] under Dr. GRPO (no std) -> A = [0.75, -0.25, -0.25, -0.25]."""
    _, _, out, _ = run_stage(tasks_with([{"expert": "a0"}]), ExpertRows(1))
    rewards = torch.tensor(out.rewards, dtype=torch.float64)
    adv = advantages.compute("dr_grpo", rewards, out.batch.group_index, torch.ones(4, 1, dtype=torch.float64))[:, 0]
    expert_first = torch.cat([adv[out.batch.row_kind == EXPERT], adv[out.batch.row_kind == ON_POLICY]])
    assert expert_first.tolist() == pytest.approx([0.75, -0.25, -0.25, -0.25], abs=1e-6)


@pytest.mark.parametrize("metas, field, expected, missing", [
    ([{"expert": "a0", "solution": "zz"}], "expert", "a0", 0),  # the expert field first
    ([{"solution": "a0"}], "expert", "a0", 0),  # else the hint field (the reference solution)
    ([{"worked": "a0"}], "worked", "a0", 0),  # a field of the user's choosing
    ([{}], "expert", None, 1),  # nothing to show: the group is left as it is
])
def test_where_the_trace_comes_from(metas, field, expected, missing):
    _, first, out, metrics = run_stage(tasks_with(metas), ExpertRows(1, field=field, fallback="solution"))
    assert metrics["expert/missing"] == missing
    if expected is None:
        assert out is first
    else:
        assert out.responses[-1] == expected and out.batch.row_kind.tolist()[-1] == EXPERT


def test_a_trace_the_verifier_does_not_pass_is_dropped_and_its_group_kept_whole():
    ctx, first, out, metrics = run_stage(tasks_with([{"expert": "not it"}, {"expert": "a1"}]), ExpertRows(1))
    assert metrics["expert/dropped"] == 1.0
    assert out.responses == ["w0", "w1", "w2", "w3", "w0", "w1", "w2", "a1"]
    assert out.batch.row_kind.tolist() == [ON_POLICY] * 7 + [EXPERT]


def test_every_trace_dropped_leaves_the_samples_as_they_were():
    _, first, out, metrics = run_stage(tasks_with([{"expert": "x"}, {"expert": "y"}]), ExpertRows(1))
    assert out is first and metrics["expert/dropped"] == 2.0


def test_a_trace_longer_than_the_response_limit_is_cut_and_scored_as_cut():
    # "a0" + EOS is 3 tokens; a limit of 2 keeps "a0" without its EOS (still the right answer), 1 keeps "a"
    _, _, out, metrics = run_stage(tasks_with([{"expert": "a0"}]), ExpertRows(1), max_new_tokens=2)
    assert metrics["expert/truncated"] == 1.0 and metrics["expert/dropped"] == 0.0
    assert out.responses[-1] == "a0" and bool(out.batch.truncated[-1])
    assert int(out.batch.response_mask[-1].sum()) == 2
    _, first, out, metrics = run_stage(tasks_with([{"expert": "a0"}]), ExpertRows(1), max_new_tokens=1)
    assert metrics == {"expert/missing": 0.0, "expert/dropped": 1.0, "expert/truncated": 1.0} and out is first


def test_several_expert_rows_per_group():
    _, _, out, _ = run_stage(tasks_with([{"expert": "a0"}, {"expert": "a1"}]), ExpertRows(2))
    assert out.responses == ["w0", "w1", "a0", "a0", "w0", "w1", "a1", "a1"]
    assert out.batch.group_index.tolist() == [0, 0, 0, 0, 1, 1, 1, 1]


def test_chat_prompts_keep_the_rendered_prompt_with_its_generation_prefix():
    tasks = [Task(prompt=[{"role": "user", "content": "q0="}], reference="a0", id="c", meta={"expert": "a0"})]
    ctx, _, out, _ = run_stage(tasks, ExpertRows(1))
    assert decoded(ctx.tokenizer, out.batch.prompt_ids)[-1] == "user: q0=\nassistant: "
    assert out.responses[-1] == "a0" and out.rewards[-1] == 1.0


def test_the_learner_takes_old_log_probs_from_the_trainer_for_expert_rows():
    from rlvr.rollout.provenance import all_sampled

    _, first, out, _ = run_stage(tasks_with([{"expert": "a0"}]), ExpertRows(1))
    assert all_sampled(first.batch.row_kind) and not all_sampled(out.batch.row_kind)


def config(tmp_path, **algo):
    return config_from_dict({"model": {"path": "m"}, "data": {"train": "arithmetic:chain"},
                             "rollout": {"group_size": 4}, "train": {"out": str(tmp_path)}, "algo": algo})


def test_builder_follows_the_config(tmp_path):
    assert "experts" not in build_stages(config(tmp_path))
    stage = build_stages(config(tmp_path, expert_rows=1, expert_field="trace", hint_field="worked"))["experts"]
    assert (stage.rows, stage.field, stage.fallback) == (1, "trace", "worked")
    with pytest.raises(UserError, match="algo.expert_rows=4.*rollout.group_size=4"):
        build_stages(config(tmp_path, expert_rows=4))


def test_three_steps_through_rlvr_train(tiny_model_dir, tmp_path):
    """Chain tasks' worked solutions as expert traces: one expert row per group, scored 1, old log-probs recomputed."""
    from rlvr.cli import main

    out = tmp_path / "run"
    assert main(["train", "examples/arithmetic.yaml", f"model.path={tiny_model_dir}", f"train.out={out}",
                 "train.steps=3", "data.train=arithmetic:chain:terms=2", "data.prompts_per_step=2",
                 "rollout.group_size=3", "rollout.max_new_tokens=12", "train.progress=false",
                 "algo.expert_rows=1", "algo.advantage=dr_grpo"]) == 0
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3]
    for row in rows:
        assert row["rows/expert"] == 2 and row["rows/on_policy"] == 4
        assert row["reward_mean/expert"] == 1.0
        assert row["expert/dropped"] == 0.0 and row["expert/missing"] == 0.0
