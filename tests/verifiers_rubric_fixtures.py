"""Environments of the verifiers package (release 0.3.1) scored by their own rubrics, for
tests/test_envs_packages.py: a SingleTurnEnv on one-digit addition whose Rubric has reward functions, and rubrics
the adapter must refuse or survive."""

import verifiers as vf

CALLS: list[float] = []  # every reward the rubric computed, in any episode


def _text(completion) -> str:
    return str(vf.Parser().parse_answer(completion) or "").strip()


def correct_sum(completion, answer, **kwargs) -> float:
    reward = float(_text(completion) == answer)
    CALLS.append(reward)
    return reward


def short(completion, **kwargs) -> float:
    """Half a point for an answer of at most two characters (a sum of two digits)."""
    reward = 0.5 * (len(_text(completion)) <= 2)
    CALLS.append(reward)
    return reward


def group_mean(completions, answers, **kwargs) -> list[float]:
    return [0.0] * len(completions)


def broken(completion, **kwargs) -> float:
    raise ZeroDivisionError("the rubric's own bug")


def not_a_number(completion, **kwargs) -> float:
    return float("nan")


def _rows():
    from datasets import Dataset

    return Dataset.from_list([{"question": f"{a}+{b}", "answer": str(a + b)} for a in range(3) for b in range(3)])


def load_environment(rubric: str = "sum", **kwargs):
    funcs = {"sum": [correct_sum, short], "group": [correct_sum, group_mean], "broken": [broken],
             "nan": [not_a_number], "none": []}[rubric]
    return vf.SingleTurnEnv(dataset=_rows(), rubric=vf.Rubric(funcs=funcs, weights=[1.0] * len(funcs)), **kwargs)
