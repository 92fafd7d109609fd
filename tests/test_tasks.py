"""Generated arithmetic tasks and the prompt sampler."""

import pytest

from rlvr.tasks import DataError, PromptSampler, load_tasks
from rlvr.tasks.arithmetic import ArithmeticSpec, all_problems, sample_problems


@pytest.mark.parametrize("spec", [ArithmeticSpec(), ArithmeticSpec(digits=1, ops="+-*"), ArithmeticSpec(heldout_percent=30)])
def test_train_and_heldout_never_overlap(spec):
    train = {t.prompt for t in all_problems(spec, "train")}
    heldout = {t.prompt for t in all_problems(spec, "eval")}
    assert train and heldout and not train & heldout
    assert len(train) + len(heldout) == len(spec.ops) * (10**spec.digits) ** 2


def test_references_are_the_right_answers():
    for task in all_problems(ArithmeticSpec(digits=1, ops="+-*"), "train"):
        assert str(eval(task.prompt[:-1])) == task.reference


def test_sample_problems_is_seeded_and_distinct():
    a = sample_problems(ArithmeticSpec(), "eval", 200, seed=3)
    assert a == sample_problems(ArithmeticSpec(), "eval", 200, seed=3)
    assert a != sample_problems(ArithmeticSpec(), "eval", 200, seed=4)
    assert len({t.prompt for t in a}) == 200


def test_generator_specs():
    tasks = load_tasks("arithmetic:eval:n=50,digits=2,seed=1")
    assert len(tasks) == 50 and all(t.prompt.endswith("=") for t in tasks)


@pytest.mark.parametrize(
    "spec, message",
    [
        ("arithmetic:test", "unknown split 'test'"),
        ("arithmetic:train:digit=2", "unknown option"),
        ("arithmetic:train:digits=x", "invalid literal"),
        ("arithmetic:train:ops=/", "ops must be"),
        ("arithmetic:train:n", "expected key=value"),
    ],
)
def test_bad_generator_specs(spec, message):
    with pytest.raises(DataError, match=message):
        load_tasks(spec)


def test_sampler_covers_each_epoch_and_resumes_exactly():
    tasks = all_problems(ArithmeticSpec(digits=1), "train")
    sampler = PromptSampler(tasks, seed=0)
    first_epoch = sampler.next(len(tasks))
    assert sorted(t.id for t in first_epoch) == sorted(t.id for t in tasks)
    sampler.next(7)
    state = sampler.state_dict()
    expected = sampler.next(len(tasks) + 5)  # crosses an epoch boundary
    resumed = PromptSampler(tasks, seed=0)
    resumed.load_state_dict(state)
    assert resumed.next(len(tasks) + 5) == expected


def test_sampler_refuses_changed_data():
    tasks = all_problems(ArithmeticSpec(digits=1), "train")
    state = PromptSampler(tasks, seed=0).state_dict()
    with pytest.raises(ValueError, match="data changed"):
        PromptSampler(tasks[:-1], seed=0).load_state_dict(state)
