"""The ``hints`` collection stage (GHPO, and Guide with algo.hint_mode=guide): which groups are hinted, with what
prompt, how rows are replaced, what the rows are trained on, and its metrics through `rlvr train`."""

import dataclasses
import json

import pytest
import torch

import rlvr.rollout.collection_stages  # noqa: F401  (first: the stages register in the order they run)
from rlvr.config import config_from_dict
from rlvr.errors import UserError
from rlvr.rollout.provenance import HINTED, ON_POLICY
from rlvr.rollout.stage_hints import GHPO_TEMPLATE, Hints, hinted_prompt
from rlvr.rollout.stages import build_stages
from rlvr.tasks import Task

from stage_fixtures import SAMPLED_LOGPROB, decoded, scripted_context

GHPO_WORDS = ("\n The following text is the beginning part of the answer, which you can refer to for solving the "
              "problem:\n")
SOLUTION = "3+4=7, 7*2=14"  # 13 characters: the spec's prefix case


def two_tasks(prompt0="(3+4)*2=", solution=SOLUTION):
    meta0 = {"solution": solution} if solution is not None else {}
    return [Task(prompt=prompt0, reference="14", id="t0", meta=meta0),
            Task(prompt="5+4=", reference="9", id="t1", meta={"solution": "5+4=9\n#9"})]


def solved_from_half_hint(text, call, j):
    """Prompt 0 is solved (first sample only) once the hint shows "3+4=7,"; prompt 1 half the time, unhinted."""
    if text.startswith("5+4="):
        return "9" if j == 0 else "8"
    return "14" if "3+4=7," in text and j == 0 else "13"


def run_stage(answer, tasks, stage, n=2):
    ctx = scripted_context(answer, n=n)
    first = ctx.generate(tasks, step=0)
    out, metrics = stage.run(first, ctx, 0)
    return ctx, first, out, metrics


def test_spec_stage_logic_two_prompts_group_of_two():
    """Spec 4.1: unhinted [0,0] / [1,0]; prompt 0 hinted at 0.25 -> [0,0], at 0.5 -> [1,0]."""
    ctx, first, out, metrics = run_stage(solved_from_half_hint, two_tasks(), Hints([0.25, 0.5, 0.75]))
    assert first.rewards == [0.0, 0.0, 1.0, 0.0]
    engine = ctx.engine
    assert [len(prompts) * n for prompts, n in engine.calls] == [4, 2, 2]
    assert engine.calls[1][0] == ["(3+4)*2=" + GHPO_WORDS + "3+4"]
    assert engine.calls[2][0] == ["(3+4)*2=" + GHPO_WORDS + "3+4=7,"]
    tok = ctx.tokenizer
    assert decoded(tok, out.batch.prompt_ids) == ["(3+4)*2=" + GHPO_WORDS + "3+4=7,"] * 2 + ["5+4="] * 2
    assert out.rewards == [1.0, 0.0, 1.0, 0.0]
    assert out.responses == ["14", "13", "9", "8"]
    assert out.batch.group_index.tolist() == [0, 0, 1, 1]
    assert out.batch.row_kind.tolist() == [HINTED, HINTED, ON_POLICY, ON_POLICY]
    assert out.tasks[0].prompt.endswith("3+4=7,") and out.tasks[2] is first.tasks[2]
    assert torch.equal(out.batch.response_ids[2:, : first.batch.response_ids.shape[1]], first.batch.response_ids[2:])
    assert metrics == {"hint_frac": 0.5, "hint/no_solution_groups": 0.0, "hint/stage_1_groups": 1.0,
                       "hint/stage_2_groups": 1.0, "hint/stage_3_groups": 0.0, "hint/solved_groups": 1.0}


def test_a_group_never_solved_keeps_the_last_ratios_rows():
    """GHPO's trainer replaces an all-wrong group at every ratio, so after the last one the group holds its rows."""
    ctx, _, out, metrics = run_stage(lambda text, call, j: "9" if text.startswith("5+4=") else "0",
                                     two_tasks(), Hints([0.25, 0.5, 0.75]))
    assert [len(p) for p, _ in ctx.engine.calls] == [2, 1, 1, 1]
    assert decoded(ctx.tokenizer, out.batch.prompt_ids)[:2] == ["(3+4)*2=" + GHPO_WORDS + "3+4=7, 7*2"] * 2
    assert out.batch.row_kind.tolist() == [HINTED, HINTED, ON_POLICY, ON_POLICY]
    assert metrics["hint/solved_groups"] == 0.0 and metrics["hint/stage_3_groups"] == 1.0
    assert metrics["hint_frac"] == 0.5


def test_groups_with_a_success_and_tasks_without_a_solution_are_left_alone():
    tasks = two_tasks(solution=None)  # prompt 0 fails but has nothing to hint from
    ctx, first, out, metrics = run_stage(solved_from_half_hint, tasks, Hints([0.5]))
    assert len(ctx.engine.calls) == 1
    assert out is first
    assert metrics == {"hint_frac": 0.0, "hint/no_solution_groups": 1.0, "hint/stage_1_groups": 0.0,
                       "hint/solved_groups": 0.0}


def test_partial_scores_above_zero_are_not_all_wrong():
    ctx, first, out, metrics = run_stage(lambda text, call, j: "x", [Task("1+1=", "2", "a", meta={"solution": "2"})],
                                         Hints([0.5]))
    assert metrics["hint_frac"] == 1.0  # all 0: hinted
    first.verdicts[0] = dataclasses.replace(first.verdicts[0], score=0.5)
    out, metrics = Hints([0.5]).run(first, ctx, 0)
    assert metrics["hint_frac"] == 0.0 and out is first


def test_guide_trains_on_the_plain_prompt_with_the_hinted_one_as_behaviour():
    ctx, first, out, metrics = run_stage(solved_from_half_hint, two_tasks(), Hints([0.25, 0.5], mode="guide"))
    tok = ctx.tokenizer
    hinted = "(3+4)*2=" + GHPO_WORDS + "3+4=7,"
    assert decoded(tok, out.batch.prompt_ids) == ["(3+4)*2="] * 2 + ["5+4="] * 2
    assert decoded(tok, out.batch.behaviour_prompt_ids) == [hinted] * 2 + ["5+4="] * 2
    # the masks match the ids: the plain prompt's tokens, and the hinted prompt's (BOS + text)
    assert out.batch.prompt_mask.sum(-1).tolist() == [9, 9, 5, 5]
    assert out.batch.behaviour_prompt_mask.sum(-1).tolist() == [1 + len(hinted)] * 2 + [5, 5]
    assert out.rewards == [1.0, 0.0, 1.0, 0.0]
    assert out.batch.row_kind.tolist() == [HINTED, HINTED, ON_POLICY, ON_POLICY]
    # the engine's log-probs are those of the hinted (behaviour) context, kept as they came
    assert torch.all(out.batch.logprobs[out.batch.response_mask.bool()] == SAMPLED_LOGPROB)
    assert out.tasks[0] is first.tasks[0]  # a row's task is the one it is trained on
    assert metrics["hint_frac"] == 0.5


def test_guide_old_policy_log_probs_come_from_the_hinted_context(tiny_model_dir):
    """The learner's old-policy forward sees the behaviour prompt; the policy's own forward the plain one."""
    from transformers import AutoModelForCausalLM

    from rlvr.train.learner import behaviour_view

    _, _, out, _ = run_stage(solved_from_half_hint, two_tasks(), Hints([0.25, 0.5], mode="guide"))
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()

    def response_logp(prompt_ids, prompt_mask, row):
        p = prompt_ids[row][prompt_mask[row].bool()]
        r = out.batch.response_ids[row][out.batch.response_mask[row].bool()]
        with torch.no_grad():
            logits = model(torch.cat([p, r]).unsqueeze(0)).logits[0, len(p) - 1: -1]
        return torch.log_softmax(logits.float(), -1).gather(-1, r.unsqueeze(-1)).sum()

    view = behaviour_view(out.batch)
    hinted = response_logp(view.prompt_ids, view.prompt_mask, 0)
    plain = response_logp(out.batch.prompt_ids, out.batch.prompt_mask, 0)
    assert hinted != pytest.approx(float(plain), abs=1e-4)
    again = response_logp(out.batch.behaviour_prompt_ids, out.batch.behaviour_prompt_mask, 0)
    assert hinted == pytest.approx(float(again))


def test_chat_prompts_get_the_hint_in_their_last_user_message():
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "(3+4)*2="},
                {"role": "assistant", "content": "ok"}, {"role": "user", "content": "again: (3+4)*2="}]
    hinted = hinted_prompt(messages, "3+4")
    assert hinted[:3] == messages[:3]
    assert hinted[3] == {"role": "user", "content": "again: (3+4)*2=" + GHPO_WORDS + "3+4"}
    assert messages[3]["content"] == "again: (3+4)*2="  # the task's own prompt is not changed
    ctx, _, out, _ = run_stage(solved_from_half_hint, [Task(prompt=messages[:2], reference="14", id="c",
                                                            meta={"solution": SOLUTION})], Hints([0.5]))
    assert ctx.engine.calls[1][0] == ["system: Be brief.\nuser: (3+4)*2=" + GHPO_WORDS + "3+4=7,\nassistant: "]
    assert out.rewards == [1.0, 0.0]


@pytest.mark.parametrize("template, hinted", [
    (None, "Q?" + GHPO_WORDS + "ab"),
    ("{prompt} Hint: {hint}", "Q? Hint: ab"),
    ("{hint} | {prompt} {{literal}}", "ab | Q? {literal}"),
])
def test_templates(template, hinted):
    stage = Hints([0.5], template=template)
    assert stage.hinted_task(Task("Q?", "x", "q", meta={"solution": "abcd"}), 0.5).prompt == hinted


def test_prompt_braces_are_not_template_fields():
    assert hinted_prompt("{x} {prompt}", "{hint}", "{prompt}/{hint}") == "{x} {prompt}/{hint}"
    assert GHPO_TEMPLATE.format(prompt="P", hint="H") == "P" + GHPO_WORDS + "H"


@pytest.mark.parametrize("template, says", [
    ("{prompt} only", "no {hint} field"),
    ("{hint} only", "no {prompt} field"),
    ("{prompt} {hint} {other}", "does not format"),
    ("{prompt} {hint} {", "does not format"),
])
def test_bad_templates_name_the_key(template, says):
    with pytest.raises(UserError, match="algo.hint_template") as err:
        Hints([0.5], template=template)
    assert says in str(err.value)


def test_builder_follows_the_config(tmp_path):
    def cfg(**algo):
        return config_from_dict({"model": {"path": "m"}, "data": {"train": "arithmetic:chain"},
                                 "train": {"out": str(tmp_path)}, "algo": algo})

    assert "hints" not in build_stages(cfg())
    stage = build_stages(cfg(hint_stages=[0.25, 0.5], hint_mode="guide", hint_field="worked"))["hints"]
    assert (stage.ratios, stage.mode, stage.field) == ([0.25, 0.5], "guide", "worked")
    with pytest.raises(UserError, match="algo.hint_template"):
        build_stages(cfg(hint_stages=[0.5], hint_template="no fields"))


def test_three_steps_through_rlvr_train(tiny_model_dir, tmp_path):
    """4-term chains the untrained tiny model cannot solve: every group is hinted, and the metrics are logged (guide
    mode trains in test_resume_with_collection_stages_is_exact)."""
    from rlvr.cli import main

    out = tmp_path / "run"
    assert main(["train", "examples/arithmetic.yaml", f"model.path={tiny_model_dir}", f"train.out={out}",
                 "train.steps=3", "data.train=arithmetic:chain:terms=4", "data.prompts_per_step=2",
                 "rollout.group_size=2", "rollout.max_new_tokens=6", "train.progress=false",
                 "algo.hint_stages=[0.5, 1.0]", "algo.hint_template='{prompt}|{hint}'",
                 "train.save_every=0"]) == 0
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3]
    for row in rows:
        assert row["hint_frac"] == 1.0  # nothing solved unhinted
        assert row["hint/stage_1_groups"] == 2.0
        assert row["rows/hinted"] == 4
        for key in ("hint/stage_2_groups", "hint/solved_groups", "reward_mean/hinted"):
            assert key in row, key


def test_resume_with_collection_stages_is_exact(tiny_model_dir, tmp_path):
    """Stopped after checkpoint 2 and resumed, a run with Guide hints and DARS top-ups ends with the weights and
    metrics of the uninterrupted run (the stages keep no state; their sampling is the step's)."""
    import shutil

    from transformers import AutoModelForCausalLM

    from rlvr.train import train
    from rlvr.train.metrics import read_metrics

    def cfg(out):
        return config_from_dict({
            "model": {"path": str(tiny_model_dir)},
            "data": {"train": "arithmetic:chain:terms=3", "prompts_per_step": 2},
            "rollout": {"group_size": 2, "max_new_tokens": 6},
            "algo": {"hint_stages": [0.5, 1.0], "hint_template": "{prompt}|{hint}", "hint_mode": "guide",
                     "dars_max_extra": 2},
            "train": {"steps": 4, "save_every": 2, "lr": 1e-3, "out": str(out), "progress": False},
        })

    whole = train(cfg(tmp_path / "whole"))
    cut = tmp_path / "cut"
    train(cfg(cut))
    shutil.rmtree(cut / "checkpoint-4")
    lines = (cut / "metrics.jsonl").read_text().splitlines()
    (cut / "metrics.jsonl").write_text("\n".join(lines[:3]) + "\n")  # the run died during step 4
    train(cfg(cut), resume=True)
    timing = {"time_s", "tokens_per_s", "reward_latency_p50_ms", "reward_latency_p99_ms"}
    strip = lambda rows: [{k: v for k, v in r.items() if k not in timing} for r in rows]  # noqa: E731
    assert strip(read_metrics(cut)) == strip(read_metrics(whole))
    assert all(r["hint_frac"] == 1.0 and r["dars/extra_rollouts"] > 0 for r in read_metrics(whole))
    a = AutoModelForCausalLM.from_pretrained(whole / "checkpoint-4").state_dict()
    b = AutoModelForCausalLM.from_pretrained(cut / "checkpoint-4").state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
