"""The rubric verifier: explicit aggregation (weighted sum over positive weights, pitfalls, a required gate),
rubrics from YAML/JSONL files or inline, rule and judge criteria, undecided criteria."""

from __future__ import annotations

import json

import pytest

from rlvr.verifiers import Status, Verdict, register_verifier, verify
from rlvr.verifiers.rubric import RubricError, aggregate, load_rubric, parse_rubric

CAPITAL = {"criteria": [
    {"name": "names_paris", "weight": 2, "required": True, "check": {"regex": r"\bParis\b", "flags": "i"}},
    {"name": "final_line", "weight": 3, "check": {"regex": r"Answer: Paris\s*$", "mode": "search"}},
    {"name": "mentions_france", "weight": 1, "check": {"verifier": "regex", "reference": {"pattern": "France", "mode": "search"}}},
    {"name": "hedges", "weight": -2, "check": {"regex": "maybe|not sure", "flags": "i"}},
]}


def V(score, status=Status.CORRECT):
    return Verdict(score, status, "x")


def test_aggregate_by_hand():
    rubric = parse_rubric(CAPITAL)
    # names_paris 1, final_line 0, mentions_france 1, hedges 0 -> (2*1 + 3*0 + 1*1 - 2*0) / (2+3+1) = 3/6
    v = aggregate(rubric, [V(1.0), V(0.0, Status.INCORRECT), V(1.0), V(0.0, Status.INCORRECT)])
    assert (v.score, v.status, v.reason) == (0.5, Status.PARTIAL, "rubric_score")
    # a met pitfall subtracts: (2 + 3 + 1 - 2) / 6
    assert aggregate(rubric, [V(1.0)] * 4).score == pytest.approx(4 / 6)
    # the score is clipped at 0: only the pitfall and the gate-passing criterion... (2 - 2) / 6 = 0
    v = aggregate(rubric, [V(1.0), V(0.0), V(0.0), V(1.0)])
    assert (v.score, v.status) == (0.0, Status.INCORRECT)
    # the required criterion failing gates everything to 0
    v = aggregate(rubric, [V(0.0, Status.INCORRECT), V(1.0), V(1.0), V(0.0)])
    assert (v.score, v.reason, v.details["required_failed"]) == (0.0, "required_failed", ["names_paris"])


def test_pass_fail_threshold_and_graded_values():
    rubric = parse_rubric([{"name": "a", "weight": 1, "check": {"regex": "x"}},
                           {"name": "b", "weight": 3, "graded": True, "check": {"regex": "y"}}])
    partial = [V(0.6, Status.PARTIAL), V(0.6, Status.PARTIAL)]
    assert aggregate(rubric, partial).score == pytest.approx((0 + 3 * 0.6) / 4)  # pass/fail needs 1.0 by default
    assert aggregate(rubric, partial, pass_threshold=0.5).score == pytest.approx((1 + 3 * 0.6) / 4)


def test_undecided_criteria():
    rubric = parse_rubric([{"name": "req", "required": True, "check": {"regex": "x"}},
                           {"name": "opt", "weight": 1, "check": {"regex": "y"}}])
    v = aggregate(rubric, [V(0.0, Status.TIMEOUT), V(1.0)])
    assert (v.status, v.reason, v.score) == (Status.TIMEOUT, "required_undecided", 0.0)
    v = aggregate(rubric, [V(1.0), V(0.0, Status.ERROR)])  # an undecided optional criterion counts 0
    assert (v.status, v.score) == (Status.PARTIAL, 0.5)
    assert v.details["criteria"][1]["status"] == "error"


def test_rule_criteria_end_to_end():
    good = verify("rubric", "Paris is the capital of France.\nAnswer: Paris", CAPITAL)
    assert (good.status, good.score) == (Status.CORRECT, 1.0)
    assert [c["value"] for c in good.details["criteria"]] == [1.0, 1.0, 1.0, 0.0]
    hedged = verify("rubric", "maybe paris, not sure", CAPITAL)
    assert hedged.score == 0.0 and hedged.details["criteria"][3]["value"] == 1.0
    wrong = verify("rubric", "Lyon, France.\nAnswer: Lyon", CAPITAL)
    assert (wrong.score, wrong.reason) == (0.0, "required_failed")


def test_gold_answer_reaches_rule_criteria(tmp_path):
    path = tmp_path / "shared.yaml"
    path.write_text("name: shared\ncriteria:\n"
                    "  - {name: right, weight: 1, required: true, check: {verifier: numeric}}\n"
                    "  - {name: shows_work, weight: 1, check: {regex: '[0-9]+ ?[+*-] ?[0-9]+'}}\n")
    assert verify("rubric", "3 + 4 = 7", "7", rubric=str(path)).score == 1.0
    assert verify("rubric", "it is 7", "7", rubric=str(path)).score == 0.5
    assert verify("rubric", "3 + 4 = 8", {"rubric": str(path), "answer": "7"}).reason == "required_failed"


def test_jsonl_rubric_file(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_text("\n".join(json.dumps(c) for c in CAPITAL["criteria"]) + "\n")
    assert load_rubric(str(path)) == parse_rubric(CAPITAL["criteria"], where=str(path))
    assert verify("rubric", "Paris, France. Answer: Paris", {"rubric": str(path)}).score == 1.0


@pytest.mark.parametrize("bad, message", [
    ([], "non-empty list"),
    ([{"name": "a"}], "exactly one of"),
    ([{"name": "a", "check": {"regex": "x", "judge": "y"}}], "exactly one of"),
    ([{"name": "a", "check": {"regex": "x"}, "wieght": 2}], "unknown key"),
    ([{"name": "a", "check": {"regex": "x"}}, {"name": "a", "check": {"regex": "y"}}], "used twice"),
    ([{"name": "a", "weight": -1, "check": {"regex": "x"}}], "positive weight"),
    ([{"name": "a", "check": {"verifier": "rubric"}}], "another rubric"),
    ([{"name": "a", "weight": "heavy", "check": {"regex": "x"}}], "criteria[0] (a).weight"),
])
def test_bad_rubrics_name_the_problem(bad, message):
    with pytest.raises(RubricError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        parse_rubric(bad)
    v = verify("rubric", "x", bad)
    assert (v.status, v.reason) == (Status.ERROR, "bad_rubric") and message.split()[0] in v.details["error"]


def test_unknown_verifier_and_missing_file_are_error_verdicts(tmp_path):
    v = verify("rubric", "x", [{"name": "a", "check": {"verifier": "nope"}}])
    assert v.details["criteria"][0]["reason"] == "bad_criterion"
    assert verify("rubric", "x", "7", rubric=str(tmp_path / "missing.yaml")).reason == "bad_rubric"


def test_judge_criteria_over_http():
    pytest.importorskip("openai")
    from judge_standin import ScriptedJudgeServer_standin

    def by_criterion(messages):
        text = messages[-1]["content"]
        if "Explains why" in text:
            return "SCORE: 5" if "because" in text else "SCORE: 0"
        return "VERDICT: CORRECT"

    rubric = {"criteria": [
        {"name": "names_paris", "weight": 1, "required": True, "check": {"regex": "Paris"}},
        {"name": "explains", "weight": 1, "graded": True, "check": {"judge": "Explains why the city is the capital."}},
    ]}
    with ScriptedJudgeServer_standin(by_criterion) as server:
        judge = {"base_url": server.base_url, "model": "m-rubric"}
        v = verify("rubric", "Paris, because the government sits there.", rubric, judge=judge,
                   prompt="Capital of France?")
        assert v.score == pytest.approx((1 + 0.5) / 2) and v.details["criteria"][1]["reason"] == "judge_score"
        sent = server.requests[-1]["messages"][1]["content"]
        assert "Explains why the city is the capital." in sent and "Capital of France?" in sent
        assert verify("rubric", "Paris.", rubric, judge=judge).score == 0.5


@register_verifier("rubric_test_meta")
def meta_level(response, reference, *, prompt=None, meta=None):
    """Passes when the task's meta says the level the response names."""
    return float(meta is not None and str(meta.get("level")) in response and prompt == "Which level?")


def test_prompt_and_meta_reach_verifier_and_judge_criteria():
    pytest.importorskip("openai")
    from judge_standin import ScriptedJudgeServer_standin

    seen = []
    with ScriptedJudgeServer_standin(lambda m: seen.append(m[-1]["content"]) or "VERDICT: CORRECT") as server:
        rubric = [{"name": "level", "check": {"verifier": "rubric_test_meta"}},
                  {"name": "judged", "check": {"verifier": "judge", "options": {"base_url": server.base_url,
                                                                                 "model": "m-rubric-meta"}}}]
        v = verify("rubric", "level 3", rubric, prompt="Which level?", meta={"level": 3})
        assert [c["value"] for c in v.details["criteria"]] == [1.0, 1.0]
        assert "Which level?" in seen[0]
        assert verify("rubric", "level 3", rubric, prompt="Which level?", meta={"level": 4}).score == 0.5


def test_a_slow_optional_criterion_cannot_stall_the_rubric():
    from procs import warm

    from rlvr.verifiers.runner import default_runner

    warm(default_runner())  # a call's clock includes a worker's start: start them before the 3 s budget runs
    rubric = [{"name": "fast", "weight": 1, "check": {"regex": "a"}},
              {"name": "explosive", "weight": 1, "check": {"regex": "(a+)+$", "mode": "fullmatch"}}]
    v = verify("rubric", "a" * 40 + "b", rubric, timeout_s=3.0)
    assert v.details["criteria"][1]["status"] == "timeout" and v.score == 0.5
