"""reasoning-gym as a task source: specs parse and generate locally, and the "reasoning_gym" verifier gives
exactly the score of the generating dataset's own scorer on the same answers."""

import pytest

rg = pytest.importorskip("reasoning_gym")

from rlvr.tasks import DataError, load_tasks  # noqa: E402
from rlvr.tasks.reasoning_gym import INSTRUCTION, parse_spec  # noqa: E402
from rlvr.verifiers import Status, verify  # noqa: E402
from rlvr.verifiers.reasoning_gym import extract_answer, reasoning_gym_verifier  # noqa: E402

# a few generators with different scorers: exact match, numeric, set/list comparisons, word games
NAMES = ["basic_arithmetic", "chain_sum", "leg_counting", "word_sorting", "spell_backward", "letter_counting",
         "gcd", "fraction_simplification", "number_sorting", "propositional_logic"]


def candidates(entry):
    """Answers to score: right, wrong, near misses, padded, and junk."""
    gold = str(entry["answer"])
    return [gold, gold + " ", gold.upper(), gold[:-1], gold + gold, f"The answer is {gold}", "", "banana", "0",
            " ".join(str(i) for i in range(-20, 21)), entry["question"][-40:]]


def test_spec_parsing():
    names, own, per = parse_spec("reasoning_gym:chain_sum,gcd:size=7,seed=3,instruction=0,gcd.max_value=50")
    assert names == ["chain_sum", "gcd"]
    assert own == {"size": 7, "seed": 3, "instruction": 0, "split": "all", "heldout_percent": 10, "binary": 0,
                   "timeout_s": 30}
    assert parse_spec("reasoning_gym:gcd:levels=1-3")[1]["levels"] == [1, 2, 3]
    assert per == {"chain_sum": {}, "gcd": {"max_value": 50}}


@pytest.mark.parametrize(
    "spec, message",
    [
        ("reasoning_gym:", "expected reasoning_gym:NAME"),
        ("reasoning_gym:chain_sum:size=x", "size must be an integer"),
        ("reasoning_gym:chain_sum:size=0", "size must be >= 1"),
        ("reasoning_gym:chain_sum:colour=red", "unknown option 'colour'"),
        ("reasoning_gym:chain_sum:gcd.max_value=3", "is for 'gcd', which is not one of chain_sum"),
        ("reasoning_gym:no_such_thing", "reasoning-gym has no dataset 'no_such_thing'"),
        ("reasoning_gym:chain_sum:chain_sum.no_such_option=1", "dataset 'chain_sum': bad options"),
        ("reasoning_gym:chain_sum,chain_sum", "named twice"),
        ("reasoning_gym:chain_sum:split=test", "split must be one of all, train, eval"),
        ("reasoning_gym:chain_sum:heldout_percent=90", "heldout_percent must be in 1..50"),
    ],
)
def test_bad_specs(spec, message):
    with pytest.raises(DataError, match=message):
        load_tasks(spec)


def test_tasks_are_seeded_and_carry_source_and_verifier():
    tasks = load_tasks("reasoning_gym:chain_sum,leg_counting:size=5,seed=4")
    again = load_tasks("reasoning_gym:chain_sum,leg_counting:size=5,seed=4")
    other = load_tasks("reasoning_gym:chain_sum,leg_counting:size=5,seed=5")
    assert tasks == again and [t.prompt for t in tasks] != [t.prompt for t in other]
    assert [t.meta["source"] for t in tasks] == ["chain_sum"] * 5 + ["leg_counting"] * 5
    assert all(t.verifier == "reasoning_gym" and t.prompt.endswith(INSTRUCTION) for t in tasks)
    assert len({t.id for t in tasks}) == 10
    plain = load_tasks("reasoning_gym:chain_sum:size=2,instruction=0", system_prompt="Answer in <answer> tags.")
    assert plain[0].prompt[0] == {"role": "system", "content": "Answer in <answer> tags."}
    assert not plain[0].prompt[1]["content"].endswith(INSTRUCTION)


def test_another_seed_is_not_held_out_but_the_eval_split_is():
    seed1 = load_tasks("reasoning_gym:chain_sum:size=50,seed=1")
    seed2 = load_tasks("reasoning_gym:chain_sum:size=50,seed=2")
    shared = {t.prompt for t in seed1} & {t.prompt for t in seed2}
    assert len(shared) >= 45  # reasoning-gym seeds entry i with seed + i: seed 2 is seed 1 shifted by one
    train = load_tasks("reasoning_gym:chain_sum,spell_backward:size=300,seed=1,split=train")
    held_out = load_tasks("reasoning_gym:chain_sum,spell_backward:size=30,seed=2,split=eval")
    assert len(train) == 600 and len(held_out) == 60
    assert not {t.prompt for t in train} & {t.prompt for t in held_out}
    assert len({t.id for t in train + held_out}) == 660


def test_levels_follow_reasoning_gyms_curriculum_and_label_difficulty():
    tasks = load_tasks("reasoning_gym:chain_sum:size=30,levels=0-2,seed=1")
    assert len(tasks) == 90 and len({t.id for t in tasks}) == 90
    terms = {}
    for task in tasks:
        terms.setdefault(task.meta["difficulty"], []).append(task.reference["entry"]["metadata"]["num_terms"])
    assert sorted(terms) == ["level_0", "level_1", "level_2"]
    assert max(terms["level_0"]) == 2 and max(terms["level_1"]) <= 3 and max(terms["level_2"]) == 4
    assert not {t.prompt for t in tasks if t.meta["difficulty"] == "level_0"} >= {
        t.prompt for t in tasks if t.meta["difficulty"] == "level_1"}
    pinned = load_tasks("reasoning_gym:chain_sum:size=5,levels=4,chain_sum.max_terms=2")
    assert all(t.reference["entry"]["metadata"]["num_terms"] == 2 for t in pinned)  # a NAME.key option wins
    with pytest.raises(DataError, match="levels must be A-B or A"):
        load_tasks("reasoning_gym:chain_sum:levels=easy")


def test_dataset_options_reach_the_generator():
    tasks = load_tasks("reasoning_gym:chain_sum:size=20,chain_sum.min_terms=4,chain_sum.max_terms=4")
    assert all(t.reference["entry"]["metadata"]["num_terms"] == 4 for t in tasks)


@pytest.mark.parametrize("name", NAMES)
def test_scores_match_reasoning_gyms_own(name):
    dataset = rg.create_dataset(name, size=8, seed=11)
    checked = 0
    for entry in dataset:
        reference = {"dataset": name, "entry": entry}
        for answer in candidates(entry):
            own = dataset.score_answer(answer, entry)
            verdict = reasoning_gym_verifier(f"thinking...\n<answer>{answer}</answer>", reference)
            # reasoning-gym's extraction strips the answer; an empty tag is "no answer" to both
            expected = dataset.score_answer(extract_answer(f"<answer>{answer}</answer>"), entry)
            assert verdict.score == pytest.approx(expected), (name, answer, own)
            assert verdict.status == (Status.CORRECT if expected >= 1 else Status.INCORRECT if expected <= 0
                                      else Status.PARTIAL)
            checked += 1
        if entry["answer"] is not None:  # propositional_logic has no single gold answer; its scorer checks validity
            assert reasoning_gym_verifier(f"<answer>{entry['answer']}</answer>", reference).score == 1.0
    assert checked == 8 * len(candidates(dataset[0]))


def test_extraction_takes_the_last_answer_block_and_raw_mode_takes_all():
    entry = rg.create_dataset("chain_sum", size=1, seed=0)[0]
    reference = {"dataset": "chain_sum", "entry": entry}
    gold = entry["answer"]
    assert reasoning_gym_verifier(f"<answer>999999</answer> no, <answer>{gold}</answer>", reference).score == 1.0
    assert reasoning_gym_verifier(f"<answer>{gold}</answer> no, <answer>999999</answer>", reference).score == 0.0
    assert reasoning_gym_verifier(gold, reference, extract="raw").score == 1.0
    missing = reasoning_gym_verifier(gold, reference)
    assert missing.status == Status.UNDECIDABLE and missing.reason == "no_answer_found"


def test_binary_drops_the_partial_credit_of_padded_answers():
    entry = rg.create_dataset("chain_sum", size=1, seed=0)[0]
    reference = {"dataset": "chain_sum", "entry": entry}
    padded = f"<answer>{entry['answer']} or 12345</answer>"
    assert 0 < reasoning_gym_verifier(padded, reference).score < 1
    dropped = reasoning_gym_verifier(padded, reference, binary=True)
    assert dropped.score == 0.0 and dropped.status == Status.INCORRECT and dropped.details["raw_score"] > 0
    assert reasoning_gym_verifier(f"<answer>{entry['answer']}</answer>", reference, binary=True).score == 1.0


def test_audit_finds_the_scorer_that_credits_any_answer():
    from rlvr.tasks.reasoning_gym_audit import audit

    halting, chain = audit(["game_of_life_halting", "chain_sum"], size=5)
    assert "junk" in halting["gamed_by"] and halting["mean"]["junk"] == 1.0  # bool("banana") == bool("False")
    assert chain["gamed_by"] == [] and "hedge" in chain["leaks"] and chain["mean"]["gold"] == 1.0


def test_bad_references_and_options_are_errors_not_exceptions():
    assert reasoning_gym_verifier("<answer>1</answer>", {"dataset": "nope", "entry": {}}).reason == "bad_reference"
    assert reasoning_gym_verifier("<answer>1</answer>", "1").reason == "bad_reference"
    entry = rg.create_dataset("chain_sum", size=1, seed=0)[0]
    assert reasoning_gym_verifier("x", {"dataset": "chain_sum", "entry": entry}, extract="boxed").reason == "bad_options"


def test_through_the_runner_in_a_worker_process():
    [task] = load_tasks("reasoning_gym:basic_arithmetic:size=1,seed=2,binary=1")
    assert task.verifier_options == {"timeout_s": 30.0, "binary": True}  # a cold worker imports reasoning-gym first
    good = verify("reasoning_gym", f"<answer>{task.reference['entry']['answer']}</answer>", task.reference,
                  **task.verifier_options)
    bad = verify("reasoning_gym", "<answer>banana</answer>", task.reference, **task.verifier_options)
    assert (good.score, good.status, bad.score, bad.status) == (1.0, Status.CORRECT, 0.0, Status.INCORRECT)
