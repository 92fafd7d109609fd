"""Self-verification (RISE, Critique-RL): the ``self_verify`` verifier, the pick of answers spread over groups, the
``self_verify`` collection stage, and a training run that learns from its own verification tasks."""

from __future__ import annotations

import re
import shutil

import pytest
import torch
from transformers import AutoModelForCausalLM

from rlvr.cli import main
from rlvr.config import config_from_dict, load_config
from rlvr.errors import UserError
from rlvr.models.tiny import char_tokenizer
from rlvr.rollout.base import RolloutBatch, SamplingParams
from rlvr.rollout.episodes import Scoring, generate_and_score
from rlvr.rollout.provenance import EXPERT, ON_POLICY, VERIFICATION
from rlvr.rollout.stage_self_verify import (
    RISE_TEMPLATE, SelfVerify, downsample_counts, rating_of_verdict, verification_prompt,
)
from rlvr.rollout.stages import StageContext, build_stages, group_rows
from rlvr.tasks import Task
from rlvr.train import train
from rlvr.train.metrics import read_metrics
from rlvr.verifiers import Status, Verdict, verify

from conftest import one_digit_rl_config

BOX = "\\boxed"

# (response, reference, options, score, reason): the spec's cases first (seed-methods 4.6), then ours
VERIFIER_CASES = [
    (f"The answer checks out. {BOX}{{1}}", "1.0", {}, 1.0, "rating_match"),
    (f"{BOX}{{-0.5}}", "1.0", {}, -0.5, "rating_mismatch"),
    ("I think it is right.", "1.0", {}, -1.0, "no_rating"),
    (f"{BOX}{{1.0}}", "1.0", {}, 1.0, "rating_match"),
    # the last box is the rating; numbers compare by value; RISE's other ratings
    (f"first {BOX}{{1}} then {BOX}{{-1}}", "-1.0", {}, 1.0, "rating_match"),
    (f"{BOX}{{ -0.50 }}", "-0.5", {}, 1.0, "rating_match"),
    (f"{BOX}{{$-1$}}", "-1.0", {}, 1.0, "rating_match"),
    (f"{BOX}{{\u22120.5}}", "-0.5", {}, 1.0, "rating_match"),
    ("\\fbox{1}", "1.0", {}, 1.0, "rating_match"),
    (f"{BOX}{{1}}", "-0.5", {}, -0.5, "rating_mismatch"),
    (f"{BOX}{{1}}", -1.0, {}, -0.5, "rating_mismatch"),  # a numeric reference reads as its rating
    # under RISE a boxed rating is a number: any other box is a rating that does not match
    (f"{BOX}{{correct}}", "1.0", {}, -0.5, "rating_mismatch"),
    (f"{BOX}{{}}", "1.0", {}, -0.5, "rating_mismatch"),
    (f"unclosed {BOX}{{1", "1.0", {}, -1.0, "no_rating"),
    ("", "-1.0", {}, -1.0, "no_rating"),
    # plain: the leading word or number, for templates a small model can follow
    ("y", "1.0", {"format": "plain"}, 1.0, "rating_match"),
    ("y5=3", "1.0", {"format": "plain"}, 1.0, "rating_match"),
    (" Yes.", "1.0", {"format": "plain"}, 1.0, "rating_match"),
    ("n", "-0.5", {"format": "plain"}, 1.0, "rating_match"),
    ("n", "1.0", {"format": "plain"}, -0.5, "rating_mismatch"),
    ("-0.5 because 3+4 is 7", "-0.5", {"format": "plain"}, 1.0, "rating_match"),
    ("missing", "-1.0", {"format": "plain"}, 1.0, "rating_match"),
    ("maybe", "1.0", {"format": "plain"}, -1.0, "no_rating"),
    ("?y", "1.0", {"format": "plain"}, -1.0, "no_rating"),
    ("", "1.0", {"format": "plain"}, -1.0, "no_rating"),
    # Critique-RL stage I: the binary judgement, 1 right / -1 wrong or missing
    (f"{BOX}{{correct}}", "correct", {"scheme": "critique"}, 1.0, "rating_match"),
    (f"{BOX}{{Wrong}}", "wrong", {"scheme": "critique"}, 1.0, "rating_match"),
    (f"{BOX}{{-0.5}}", "wrong", {"scheme": "critique"}, 1.0, "rating_match"),
    (f"{BOX}{{1}}", "wrong", {"scheme": "critique"}, -1.0, "rating_mismatch"),
    (f"{BOX}{{correct}}", "incorrect", {"scheme": "critique"}, -1.0, "rating_mismatch"),
    ("no judgement here", "correct", {"scheme": "critique"}, -1.0, "no_rating"),
    ("n", "wrong", {"scheme": "critique", "format": "plain"}, 1.0, "rating_match"),
    ("y", "wrong", {"scheme": "critique", "format": "plain"}, -1.0, "rating_mismatch"),
]


@pytest.mark.parametrize("response, reference, options, score, reason", VERIFIER_CASES)
def test_self_verify_verifier(response, reference, options, score, reason):
    verdict = verify("self_verify", response, reference, **options)
    assert (verdict.score, verdict.reason) == (score, reason)
    assert verdict.status == (Status.CORRECT if reason == "rating_match" else Status.INCORRECT)


@pytest.mark.parametrize("reference, options, reason", [
    ("0.5", {}, "bad_reference"),  # not one of RISE's ratings
    (None, {}, "bad_reference"),
    (True, {}, "bad_reference"),
    ("1.0", {"scheme": "critique"}, "bad_reference"),
    ("correct", {}, "bad_reference"),
    ("1.0", {"scheme": "judge"}, "bad_option"),
    ("1.0", {"format": "json"}, "bad_option"),
])
def test_self_verify_bad_input_is_an_error_verdict(reference, options, reason):
    verdict = verify("self_verify", f"{BOX}{{1}}", reference, **options)
    assert (verdict.status, verdict.reason, verdict.score) == (Status.ERROR, reason, 0.0)


def test_self_verify_bounded_on_hostile_responses():
    opened = verify("self_verify", "{" * 200_000 + f"{BOX}{{" * 50_000, "1.0")
    assert opened.reason == "no_rating"
    tail = verify("self_verify", "x" * 1_000_000 + f"{BOX}{{1}}", "1.0")
    assert tail.reason == "rating_match"  # the rating at the end of a long response is found


@pytest.mark.parametrize("k, groups, counts", [
    (5, 3, [2, 2, 1]),  # the spec's case
    (4, 4, [1, 1, 1, 1]),
    (2, 3, [1, 1, 0]),
    (8, 2, [4, 4]),
    (128, 1024, [1] * 128 + [0] * 896),  # RISE's 3B script: 128 of 1024 prompts
    (0, 3, [0, 0, 0]),
    (3, 0, []),
])
def test_downsample_counts(k, groups, counts):
    assert downsample_counts(k, groups) == counts
    assert sum(counts) == (k if groups else 0)


@pytest.mark.parametrize("verdict, rating", [
    (Verdict(1.0, Status.CORRECT, "exact_match", extracted="7"), 1.0),
    (Verdict(0.0, Status.INCORRECT, "mismatch", extracted="8"), -0.5),
    (Verdict(0.0, Status.INCORRECT, "empty_response", extracted=""), -1.0),
    (Verdict(0.0, Status.INCORRECT, "no_answer"), -1.0),  # chain_answer without '#'
    (Verdict(0.0, Status.UNDECIDABLE, "no_answer_found"), -1.0),  # math without an answer
    (Verdict(0.5, Status.PARTIAL, "some", extracted="x"), -0.5),
    (Verdict(0.0, Status.UNDECIDABLE, "too_complex", extracted="9^9^9"), None),  # the truth is unknown
    (Verdict(0.0, Status.TIMEOUT, "timeout"), None),
    (Verdict(0.0, Status.ERROR, "internal_error"), None),
])
def test_rating_of_verdict(verdict, rating):
    assert rating_of_verdict(verdict) == rating


def test_verification_prompt_fills_fields_once():
    prompt = verification_prompt("Q:{prompt} A:{response} ok? ", "{response}+1=", "{prompt}")
    assert prompt == "Q:{response}+1= A:{prompt} ok? "
    assert BOX + "{}" in verification_prompt(RISE_TEMPLATE, "1+2=", "3")
    chat = verification_prompt("Rate {response} for {prompt}",
                               [{"role": "system", "content": "be brief"}, {"role": "user", "content": "1+2="},
                                {"role": "assistant", "content": "4"}, {"role": "user", "content": "2+2="}], "4")
    assert chat == [{"role": "system", "content": "be brief"}, {"role": "user", "content": "Rate 4 for 2+2="}]


@pytest.mark.parametrize("template", ["Q:{prompt} ok? ", "{response} ok?", "no fields"])
def test_template_without_its_fields_is_a_user_error(template):
    with pytest.raises(UserError, match="algo.self_verify_template"):
        SelfVerify(4, template)


# ----------------------------------------------------------------------------------------------- the stage

class ScriptedEngine_standin:
    """A stand-in engine: sample j of a prompt is ``script(prompt_text, j)`` then EOS (no model)."""

    def __init__(self, tokenizer, script):
        self.tokenizer, self.script = tokenizer, script
        self.prompts: list[str] = []

    def sync_weights(self, model) -> None:
        pass

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> RolloutBatch:
        rows = []
        for p in prompts:
            text = self.tokenizer.decode(p, skip_special_tokens=True)
            self.prompts.append(text)
            for j in range(params.n):
                ids = self.tokenizer(self.script(text, j), add_special_tokens=False)["input_ids"]
                rows.append((list(ids) + [self.tokenizer.eos_token_id])[: params.max_new_tokens])
        width = max(len(r) for r in rows)
        response_ids = torch.full((len(rows), width), self.tokenizer.pad_token_id)
        response_mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, ids in enumerate(rows):
            response_ids[i, : len(ids)], response_mask[i, : len(ids)] = torch.tensor(ids), 1
        width_p = max(len(p) for p in prompts)
        prompt_ids = torch.tensor([[self.tokenizer.pad_token_id] * (width_p - len(p)) + p for p in prompts])
        prompt_ids = prompt_ids.repeat_interleave(params.n, 0)
        return RolloutBatch(prompt_ids, (prompt_ids != self.tokenizer.pad_token_id).long(), response_ids,
                            response_mask, -0.5 * response_mask.float(), torch.zeros(len(rows), dtype=torch.bool),
                            torch.arange(len(prompts)).repeat_interleave(params.n))


PROBLEMS = [Task(prompt=f"{a}+{b}=", reference=str(a + b), id=f"arith:{a}+{b}=") for a, b in [(1, 2), (3, 4), (2, 5)]]
ANSWERS = ["{right}", "{wrong}", "", "{right}"]  # the 4 samples of each problem: right, wrong, no answer, right


def answer_or_rate(text: str, j: int) -> str:
    """Answers arithmetic (per ANSWERS); rates a verification prompt "y" when the answer it shows is right."""
    if "ok?" not in text:
        a, b = map(int, re.findall(r"\d+", text))
        return ANSWERS[j].format(right=a + b, wrong=a + b + 1)
    a, b, shown = re.fullmatch(r"Q:(\d+)\+(\d+)= A:(\d*) ok\? ", text).groups()
    return "y" if shown == str(int(a) + int(b)) else "n"


def scripted_step(per_step=5, template="Q:{prompt} A:{response} ok? ", mode="rise", step=1, script=answer_or_rate):
    tokenizer = char_tokenizer()
    engine = ScriptedEngine_standin(tokenizer, script)
    params, scoring = SamplingParams(n=4, max_new_tokens=16), Scoring(verifier="exact")
    samples = generate_and_score(engine, tokenizer, PROBLEMS, params, scoring, step=step)
    stage = SelfVerify(per_step, template, mode, seed=0)
    ctx = StageContext(engine, tokenizer, params, scoring, None, cfg=None)
    out, metrics = stage.run(samples, ctx, step)
    return samples, out, metrics, engine


def test_stage_picks_answers_spread_over_groups():
    samples, out, metrics, engine = scripted_step()
    picked = [t.meta["verified_task"] for t in out.tasks[12::4]]
    assert [picked.count(t.id) for t in PROBLEMS] == [2, 2, 1]
    assert metrics["verify/rows"] == 5 * 4
    assert out.batch.row_kind.tolist() == [ON_POLICY] * 12 + [VERIFICATION] * 20
    groups = group_rows(out)
    assert len(groups) == 3 + 5  # each verification task is a group of its own
    assert all(len(set(out.batch.row_kind[rows].tolist())) == 1 for rows in groups.values())
    assert out.responses[:12] == samples.responses and out.rewards[:12] == samples.rewards


def test_stage_references_are_the_outcome_verdicts_ratings():
    _, out, metrics, engine = scripted_step(per_step=12)  # every answer
    verification = out.tasks[12::4]
    assert [t.reference for t in verification] == ["1.0", "-0.5", "-1.0", "1.0"] * 3
    assert {t.verifier for t in verification} == {"self_verify"}
    assert verification[0].verifier_options == {"scheme": "rise", "format": "plain"}
    assert engine.prompts[3:6] == ["Q:1+2= A:3 ok? ", "Q:1+2= A:4 ok? ", "Q:1+2= A: ok? "]
    # the stand-in rates right answers "y" and the others "n": right on 1.0 and -0.5, wrong on -1.0 (no answer)
    assert metrics["verify/accuracy"] == pytest.approx(9 / 12)
    assert metrics["verify/answers_correct"] == pytest.approx(6 / 12)
    assert (metrics["verify/accuracy_on_correct"], metrics["verify/accuracy_on_wrong"]) == (1.0, 0.5)
    assert out.rewards[12:] == [1.0] * 8 + [-0.5] * 4 + [1.0] * 4 + [1.0] * 8 + [-0.5] * 4 + [1.0] * 4 + \
        [1.0] * 8 + [-0.5] * 4 + [1.0] * 4


def test_stage_critique_mode_judges_correct_or_wrong():
    _, out, metrics, _ = scripted_step(per_step=12, mode="critique")
    assert [t.reference for t in out.tasks[12::4]] == ["correct", "wrong", "wrong", "correct"] * 3
    assert metrics["verify/accuracy"] == 1.0  # "n" is the right judgement of a missing answer too
    assert set(out.rewards[12:]) == {1.0}


def test_stage_default_template_is_boxed():
    def rate_in_box(text, j):
        return answer_or_rate(text, j) if "Rate the response" not in text else f"{BOX}{{1}}"

    _, out, metrics, engine = scripted_step(per_step=6, template=None, script=rate_in_box)
    assert out.tasks[12].verifier_options == {"scheme": "rise", "format": "boxed"}
    shown = [out.tasks[i].meta["verified_task"] for i in range(12, 36, 4)]
    assert shown == ["arith:1+2="] * 2 + ["arith:3+4="] * 2 + ["arith:2+5="] * 2
    assert "Question:\n1+2=\n" in engine.prompts[-6] and "\\boxed{} at the end." in engine.prompts[-6]
    references = [t.reference for t in out.tasks[12::4]]
    assert metrics["verify/accuracy"] == pytest.approx(references.count("1.0") / 6)  # it always rates 1
    assert (metrics["verify/accuracy_on_correct"], metrics["verify/accuracy_on_wrong"]) == (1.0, 0.0)


def test_stage_pick_is_seeded_by_step_and_reproducible():
    def picked(step, seed=0):
        samples, *_ = scripted_step(step=step)
        return SelfVerify(5, "Q:{prompt} A:{response} ok? ", seed=seed).pick(samples, step)

    assert picked(1) == picked(1)  # a resumed run picks the same rows
    assert len({tuple(picked(step)) for step in range(1, 7)}) > 1  # and each step draws anew
    assert len({tuple(picked(1, seed)) for seed in range(6)}) > 1
    for step in range(1, 7):
        rows = picked(step)
        assert [sum(r // 4 == g for r in rows) for g in range(3)] == [2, 2, 1] and rows == sorted(rows)


@pytest.mark.parametrize("k, correct, wrong", [(6, 3, 3), (5, 3, 2), (1, 1, 0), (12, 6, 6), (20, 6, 6)])
def test_balanced_pick_takes_half_correct_half_other_answers(k, correct, wrong):
    samples, *_ = scripted_step()  # each group: right, wrong, no answer, right -> 6 correct, 6 other answers
    stage = SelfVerify(k, "Q:{prompt} A:{response} ok? ", balance=True)
    for step in (1, 2, 3):
        rows = stage.pick(samples, step)
        ratings = [rating_of_verdict(samples.verdicts[i]) for i in rows]
        assert (sum(r > 0 for r in ratings), sum(r <= 0 for r in ratings)) == (correct, wrong)
        assert rows == sorted(set(rows))
        if k == 6:  # three of each class, spread one per group
            assert [sum(r // 4 == g for r in rows) for g in range(3)] == [2, 2, 2]


def test_balanced_pick_gives_what_a_short_class_has():
    samples, *_ = scripted_step(script=lambda text, j: str(sum(map(int, re.findall(r"\d+", text)))) if j else "x")
    rows = SelfVerify(8, "Q:{prompt} A:{response} ok? ", balance=True).pick(samples, 1)
    ratings = [rating_of_verdict(samples.verdicts[i]) for i in rows]
    assert sorted(ratings) == [-0.5] * 3 + [1.0] * 4  # only three wrong answers exist


def test_stage_skips_undecided_and_non_policy_rows():
    tokenizer = char_tokenizer()
    engine = ScriptedEngine_standin(tokenizer, answer_or_rate)
    params, scoring = SamplingParams(n=4, max_new_tokens=16), Scoring(verifier="exact")
    samples = generate_and_score(engine, tokenizer, PROBLEMS, params, scoring, step=1)
    samples.batch.row_kind[4:8] = EXPERT  # the second group: rows another stage added
    samples.verdicts[0] = Verdict(0.0, Status.TIMEOUT, "timeout")
    out, metrics = SelfVerify(12, "Q:{prompt} A:{response} ok? ").run(
        samples, StageContext(engine, tokenizer, params, scoring, None, cfg=None), 1)
    verified = [t.meta["verified_task"] for t in out.tasks[12::4]]
    assert verified == ["arith:1+2="] * 3 + ["arith:2+5="] * 4
    assert metrics["verify/rows"] == 7 * 4


def test_stage_with_nothing_to_verify_adds_nothing():
    _, out, metrics, engine = scripted_step(script=lambda text, j: "" if "ok?" not in text else "missing")
    assert len(out.responses) == 12 + 5 * 4  # an empty answer is verifiable: its rating is -1, "no answer"
    assert metrics["verify/accuracy"] == 1.0 and metrics["verify/answers_correct"] == 0.0
    assert metrics["verify/accuracy_on_wrong"] == 1.0 and "verify/accuracy_on_correct" not in metrics
    samples, *_ = scripted_step()
    for i in range(len(samples.verdicts)):
        samples.verdicts[i] = Verdict(0.0, Status.TIMEOUT, "timeout")
    same, metrics = SelfVerify(5).run(samples, StageContext(engine, engine.tokenizer, SamplingParams(n=4),
                                                            Scoring(), None, cfg=None), 1)
    assert same is samples and metrics == {"verify/rows": 0}


def test_stage_is_built_from_config_and_off_by_default(tmp_path):
    base = one_digit_rl_config("model", tmp_path)
    assert "self_verify" not in build_stages(config_from_dict(base))
    on = config_from_dict({**base, "algo": {"self_verify_per_step": 4, "self_verify_mode": "critique",
                                            "self_verify_template": "Q:{prompt} A:{response} ok? "}})
    stage = build_stages(on)["self_verify"]
    assert (stage.per_step, stage.mode, stage.options) == (4, "critique", {"scheme": "critique", "format": "plain"})
    assert list(build_stages(on))[-1] == "self_verify"  # it runs last, on every row the other stages made


# ------------------------------------------------------------------------------------------------ training

TINY_TEMPLATE = "Q:{prompt} A:{response} ok? "


def test_rlvr_train_with_self_verification_logs_its_metrics(warm_model_dir, tmp_path):
    out = tmp_path / "run"
    assert main(["train", "examples/arithmetic.yaml", f"model.path={warm_model_dir}",
                 "data.train=arithmetic:train:digits=1", "data.prompts_per_step=8", "rollout.group_size=4",
                 "rollout.max_new_tokens=4", "train.steps=3", "train.progress=false", f"train.out={out}",
                 "algo.self_verify_per_step=4", f"algo.self_verify_template={TINY_TEMPLATE}"]) == 0
    assert load_config(out / "config.yaml").algo.self_verify_template.startswith("Q:{prompt} A:{response} ok?")
    rows = read_metrics(out)
    assert [r["step"] for r in rows] == [1, 2, 3]
    for row in rows:
        assert row["verify/rows"] == row["rows/verification"] == 4 * 4
        assert row["rows/on_policy"] == 8 * 4
        assert 0.0 <= row["verify/accuracy"] <= 1.0 and 0.0 <= row["verify/answers_correct"] <= 1.0


def test_resume_with_self_verification_is_exact(tiny_model_dir, tmp_path):
    """Stopping after checkpoint 2 and resuming picks and samples the same verification tasks."""
    def cfg(out):
        c = one_digit_rl_config(tiny_model_dir, out, steps=4, save_every=2)
        c["data"]["prompts_per_step"], c["rollout"]["group_size"] = 4, 4
        c["algo"] = {"self_verify_per_step": 3, "self_verify_template": TINY_TEMPLATE}
        return config_from_dict(c)

    whole = train(cfg(tmp_path / "whole"))
    cut = tmp_path / "cut"
    train(cfg(cut))
    shutil.rmtree(cut / "checkpoint-4")
    lines = (cut / "metrics.jsonl").read_text().splitlines()
    (cut / "metrics.jsonl").write_text("\n".join(lines[:2]) + "\n")  # the run died during step 3
    train(cfg(cut), resume=True)
    timing = {"time_s", "tokens_per_s", "reward_latency_p50_ms", "reward_latency_p99_ms"}
    strip = lambda rows: [{k: v for k, v in r.items() if k not in timing} for r in rows]  # noqa: E731
    assert strip(read_metrics(cut)) == strip(read_metrics(whole))
    assert all(r["verify/rows"] == 3 * 4 for r in read_metrics(cut))
    a = AutoModelForCausalLM.from_pretrained(whole / "checkpoint-4").state_dict()
    b = AutoModelForCausalLM.from_pretrained(cut / "checkpoint-4").state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_rlvr_train_names_a_template_without_its_fields(tiny_model_dir, tmp_path, capsys):
    assert main(["train", "examples/arithmetic.yaml", f"model.path={tiny_model_dir}", f"train.out={tmp_path / 'run'}",
                 "algo.self_verify_per_step=2", "algo.self_verify_template=rate {prompt}"]) == 2
    err = capsys.readouterr().err
    assert "algo.self_verify_template" in err and "{response}" in err
    assert not (tmp_path / "run" / "metrics.jsonl").exists()
