"""``arithmetic:chain`` tasks (multi-term problems with worked solutions) and the ``chain_answer`` verifier."""

import re

import pytest

from rlvr.tasks import DataError, load_tasks
from rlvr.tasks.arithmetic import split_of
from rlvr.tasks.chain import ChainSpec, make_task, sample_chains, solve
from rlvr.verifiers import verify

STEP = re.compile(r"(-?\d+)([+\-*])(\d+)=(-?\d+)")


def _value(a: int, op: str, b: int) -> int:
    return a + b if op == "+" else a - b if op == "-" else a * b


def check_solution(task) -> None:
    """Each line is one true operation on numbers of the problem or earlier results; the last line is #answer."""
    *lines, last = task.meta["solution"].split("\n")
    assert last == f"#{task.reference}"
    pool = [int(x) for x in re.findall(r"\d+", task.prompt)]
    assert len(lines) == len(pool) - 1 == task.meta["terms"] - 1
    for line in lines:
        a, op, b, c = STEP.fullmatch(line).groups()
        assert _value(int(a), op, int(b)) == int(c), line
        pool.remove(int(b))  # the right operand is a problem number or a product, never used twice
        pool.append(int(c))
    assert int(task.reference) == int(lines[-1].split("=")[1])
    # Python's own precedence agrees with the worked answer
    assert int(task.reference) == eval(task.prompt[:-1], {"__builtins__": {}})  # noqa: S307 (generated digits and ops)


@pytest.mark.parametrize("spec", [
    "arithmetic:chain",
    "arithmetic:chain:terms=2",
    "arithmetic:chain:terms=4,ops=+-*,n=300,seed=2",
    "arithmetic:chain:terms=5,digits=2,ops=-*,n=200,split=eval",
    "arithmetic:chain:terms=8,digits=3,ops=*,n=50",
    "arithmetic:chain:terms=8,digits=1,ops=+-*,n=200,split=eval,seed=7",
])
def test_solutions_are_worked_correctly(spec):
    tasks = load_tasks(spec)
    assert tasks
    for task in tasks:
        check_solution(task)
        assert task.id == f"chain:{task.prompt}" and task.verifier == "chain_answer"
    assert len({t.id for t in tasks}) == len(tasks)


@pytest.mark.parametrize("numbers, ops, lines, answer", [
    ([12, 34, 5], ["+", "+"], ["12+34=46", "46+5=51"], 51),
    ([2, 3, 4], ["+", "*"], ["3*4=12", "2+12=14"], 14),
    ([5, 7, 3], ["-", "+"], ["5-7=-2", "-2+3=1"], 1),
    ([2, 3, 4, 5], ["*", "-", "*"], ["2*3=6", "4*5=20", "6-20=-14"], -14),
    ([9, 0], ["*"], ["9*0=0"], 0),
])
def test_worked_order(numbers, ops, lines, answer):
    assert solve(numbers, ops) == (lines, answer)


def test_spec_example():
    task = make_task([12, 34, 5], ["+", "+"])
    assert (task.prompt, task.reference, task.id) == ("12+34+5=", "51", "chain:12+34+5=")
    assert task.meta == {"solution": "12+34=46\n46+5=51\n#51", "terms": 3, "difficulty": "terms_3"}


@pytest.mark.parametrize("spec", [ChainSpec(), ChainSpec(terms=2, ops="+-*"), ChainSpec(terms=4, heldout_percent=30)])
def test_small_splits_are_disjoint_and_cover_every_problem(spec):
    train = {t.prompt for t in sample_chains(spec, "train", 0, seed=0)}
    heldout = {t.prompt for t in sample_chains(spec, "eval", 0, seed=5)}
    assert train and heldout and not train & heldout
    assert len(train) + len(heldout) == spec.space


def test_sampled_splits_are_disjoint_by_hash():
    spec = ChainSpec(terms=6, digits=2, ops="+-")
    train = sample_chains(spec, "train", 400, seed=0)
    heldout = sample_chains(spec, "eval", 400, seed=0)
    assert {t.prompt for t in train}.isdisjoint(t.prompt for t in heldout)
    assert all(split_of(t.prompt, 10) == "train" for t in train)
    assert all(split_of(t.prompt, 10) == "eval" for t in heldout)
    assert len({t.prompt for t in heldout}) == 400


@pytest.mark.parametrize("spec", ["arithmetic:chain:terms=4,n=100,seed=3", "arithmetic:chain:terms=7,n=100,seed=3"])
def test_seeded_and_deterministic(spec):
    first = load_tasks(spec)
    assert first == load_tasks(spec)
    assert first != load_tasks(spec.replace("seed=3", "seed=4"))
    assert len(first) == 100


@pytest.mark.parametrize("spec, prompts", [
    ("arithmetic:chain:n=3,seed=1", ["2+9+8=", "6+2+5=", "3+6+2="]),                              # listed split
    ("arithmetic:chain:terms=6,digits=2,ops=+-*,n=2,seed=0", ["49+63+8+66-86-43=", "93*74+57-54+63+39="]),  # drawn
])
def test_draws_are_pinned(spec, prompts):
    """The same spec draws the same problems in every release (a resumed run's sampler relies on the order)."""
    assert [t.prompt for t in load_tasks(spec)] == prompts


@pytest.mark.parametrize("terms", range(2, 9))
def test_terms_knob(terms):
    tasks = load_tasks(f"arithmetic:chain:terms={terms},n=20,ops=+-*")
    assert all(t.meta["terms"] == terms and t.prompt.count("=") == 1 for t in tasks)
    assert all(len(re.findall(r"\d+", t.prompt)) == terms for t in tasks)
    assert all(len(t.meta["solution"].split("\n")) == terms for t in tasks)


def test_default_size_and_digits():
    tasks = load_tasks("arithmetic:chain")  # 3 one-digit terms, "+": 1000 problems, ~90% of them train
    assert 850 < len(tasks) < 950 and all(len(t.prompt) == 6 for t in tasks)
    assert len(load_tasks("arithmetic:chain:terms=6")) == 10_000  # 10^6 problems: a default draw of 10,000


def test_an_unknown_arithmetic_split_points_to_chain():
    with pytest.raises(DataError, match=r"unknown split 'chains'; known: train, eval \(multi-term .*arithmetic:chain\)"):
        load_tasks("arithmetic:chains")


def test_the_two_term_generator_is_unchanged():
    tasks = load_tasks("arithmetic:train:digits=1")
    assert all(t.id.startswith("arith:") and t.verifier is None and not t.meta.keys() - {"source"} for t in tasks)
    assert len(tasks) + len(load_tasks("arithmetic:eval:digits=1")) == 100


@pytest.mark.parametrize("spec, message", [
    ("arithmetic:chain:terms=1", r"'arithmetic:chain:terms=1': option 'terms' must be in 2\.\.8, got 1"),
    ("arithmetic:chain:terms=9", r"option 'terms' must be in 2\.\.8"),
    ("arithmetic:chain:terms=x", r"option 'terms' must be an integer, got 'x'"),
    ("arithmetic:chain:digits=4", r"option 'digits' must be in 1\.\.3"),
    ("arithmetic:chain:ops=/", r"option 'ops' must be"),
    ("arithmetic:chain:ops=", r"option 'ops' must be"),
    ("arithmetic:chain:split=test", r"option 'split' must be one of train, eval, got 'test'"),
    ("arithmetic:chain:heldout_percent=0", r"option 'heldout_percent' must be in 1\.\.50"),
    ("arithmetic:chain:n=-3", r"option 'n' must be >= 0"),
    ("arithmetic:chain:term=3", r"unknown option\(s\) \['term'\]; known: \['terms'"),
    ("arithmetic:chain:terms", r"expected key=value, got 'terms'"),
    ("arithmetic:chain:terms=3,terms=4", r"option 'terms' is given twice"),
    ("arithmetic:chain:terms=6,digits=1,heldout_percent=1,split=eval,n=6000", r"option 'n' \(6000\) is more than half"),
])
def test_bad_options_are_one_line_data_errors(spec, message):
    with pytest.raises(DataError, match=message) as info:
        load_tasks(spec)
    assert "\n" not in str(info.value) and spec in str(info.value)


# ------------------------------------------------------------------------------------------- chain_answer


@pytest.mark.parametrize("response, reference, score, reason", [
    ("12+34=46\n46+5=51\n#51", "51", 1.0, "answer_match"),
    ("#51", 51, 1.0, "answer_match"),
    ("12+34=46\n46+5=51\n# 51 \n", "51", 1.0, "answer_match"),
    ("work\n#051", "51", 1.0, "answer_match"),
    ("#-969", "-969", 1.0, "answer_match"),
    ("#50\n#51", "51", 1.0, "answer_match"),          # the last answer line counts
    ("#51\n#50", "51", 0.0, "mismatch"),
    ("46+5=51\n#52", "51", 0.0, "mismatch"),
    ("46+5=51\n51", "51", 0.0, "no_answer"),            # the answer must follow '#'
    ("", "51", 0.0, "no_answer"),
    ("#", "51", 0.0, "mismatch"),
    ("#51 apples", "51", 0.0, "mismatch"),
    ("#" + "9" * 5000, "51", 0.0, "mismatch"),          # huge numbers are compared as text, never converted
    ("x" * 200_000 + "\n#51", "51", 1.0, "answer_match"),
    ("#abc", "ABC", 0.0, "mismatch"),
])
def test_chain_answer(response, reference, score, reason):
    verdict = verify("chain_answer", response, reference)
    assert (verdict.score, verdict.reason) == (score, reason)


@pytest.mark.parametrize("reference", [None, "", "  ", 1.5, True, ["51"]])
def test_chain_answer_bad_reference_is_an_error_verdict(reference):
    verdict = verify("chain_answer", "#51", reference)
    assert verdict.score == 0.0 and verdict.status.value == "error" and verdict.reason == "bad_reference"


@pytest.mark.parametrize("response", [None, 51, b"#51", ["#51"]])
def test_chain_answer_non_string_response_is_an_error_verdict(response):
    verdict = verify("chain_answer", response, "51")
    assert (verdict.score, verdict.status.value, verdict.reason) == (0.0, "error", "bad_response")


def test_every_generated_solution_passes_and_exact_does_not():
    tasks = load_tasks("arithmetic:chain:terms=4,ops=+-*,n=200")
    assert all(verify("chain_answer", t.meta["solution"], t.reference).score == 1.0 for t in tasks)
    assert all(verify("exact", t.reference, t.reference).score == 1.0 for t in tasks)  # the reference stays bare
    assert all(verify("chain_answer", t.reference, t.reference).score == 0.0 for t in tasks)  # no '#': wrong


def test_chain_answer_runs_inline():
    from rlvr.verifiers.registry import verifier_isolation

    assert verifier_isolation("chain_answer") == "inline"


def test_training_scores_chain_tasks_with_their_own_verifier():
    """The run's default verifier (examples/arithmetic.yaml: exact) does not apply: a chain task names its own."""
    from rlvr.rollout.episodes import Scoring, score

    tasks = load_tasks("arithmetic:chain:n=4,seed=1")
    responses = [t.meta["solution"] for t in tasks[:2]] + [t.reference for t in tasks[2:]]
    verdicts = score(tasks, responses, Scoring(verifier="exact"))
    assert [v.score for v in verdicts] == [1.0, 1.0, 0.0, 0.0]
    assert [v.reason for v in verdicts] == ["answer_match", "answer_match", "no_answer", "no_answer"]


def test_sft_target_is_the_solution_and_agent_programs_never_see_it():
    from rlvr.rollout.agent_program import HIDDEN_META_KEYS
    from rlvr.train.sft_run import completion_of

    tasks = load_tasks("arithmetic:chain:terms=3,ops=+-*,n=50")
    assert all(completion_of(t, "solution") == t.meta["solution"] for t in tasks)
    shown = {key for t in tasks for key in t.meta} - HIDDEN_META_KEYS
    assert shown == {"terms", "difficulty", "source"}
