"""Step-labelling tasks for a process reward model: worked solutions, some with a wrong step, each line labelled.

    steps:arithmetic:chain:terms=3,n=500,seed=0

Everything after ``steps:`` is a base data spec whose tasks carry a worked solution in ``meta["solution"]`` (lines
``a op b=c`` then ``#answer``, as ``arithmetic:chain`` writes them); the last ``:``-part's options that are steps'
own are taken out of it:

    n=1000      tasks to build (the base tasks are cycled in a seeded order)
    seed=0      which base tasks, which solutions are corrupted and where
    wrong=0.5   share of solutions with one wrong step

A corrupted solution has one step's result changed (by 1 to 3, never to the right value) and the steps after it
worked on from the wrong value, as a solver that slipped once would write them. Labels, one per line: an equation
line is "+" when it holds and "-" when it does not (each line checked on its own, as the ``arith_steps`` process
reward checks it); the ``#answer`` line is "+" when the answer is the reference. The task: prompt = the problem and
the solution, one step per line, reference = the labels as one string ("++-" ...), checked by ``exact``, so a model
can learn to label steps with ``rlvr train``; ``meta["steps"]`` and ``meta["labels"]`` hold the lines and their
labels for a token-classification PRM (label 1 for "+", 0 for "-", on each line's last token).

A model trained on these tasks (``rlvr sft`` with ``data.completion_field=reference``, then ``rlvr train``) is a
generative step labeller: the ``prm`` process source reads it with ``reader: labels``, asking it for the labels of a
policy's steps in the same prompt (``labelling_prompt``).
"""

from __future__ import annotations

import random
import re

from rlvr.tasks.base import DataError, Task
from rlvr.tasks.judgement import split_options

PREFIX = "steps"
VERIFIER = "exact"
GOOD, BAD = "+", "-"
LABELS_CUE = "labels:"
_OPTIONS = ("n", "seed", "wrong")
_TOKEN = re.compile(r"\d+|[-+*]")


def _apply(a: int, op: str, b: int) -> int:
    return a + b if op == "+" else a - b if op == "-" else a * b


def worked_lines(numbers: list[int], ops: list[str], slip_at: int | None = None, slip: int = 0) -> list[str]:
    """The lines ``a op b=c`` in the order arithmetic:chain solves (products first, then left to right), with the
    result of operation ``slip_at`` off by ``slip`` and every later line worked on from it."""
    numbers, ops, lines, done = list(numbers), list(ops), [], 0
    for tier in ("*", "+-"):
        i = 0
        while i < len(ops):
            if ops[i] in tier:
                value = _apply(numbers[i], ops[i], numbers[i + 1]) + (slip if done == slip_at else 0)
                lines.append(f"{numbers[i]}{ops[i]}{numbers[i + 1]}={value}")
                numbers[i:i + 2] = [value]
                del ops[i]
                done += 1
            else:
                i += 1
    return lines


def _holds(line: str) -> bool:
    m = re.fullmatch(r"(-?\d+)([-+*])(-?\d+)=(-?\d+)", line)
    return bool(m) and _apply(int(m.group(1)), m.group(2), int(m.group(3))) == int(m.group(4))


def labelling_prompt(problem: str, steps: list[str]) -> str:
    """The prompt that asks for the labels of ``steps``: the problem, one step per line, then the labels' cue."""
    return "\n".join([problem, *steps, LABELS_CUE])


def step_task(task: Task, index: int, rng: random.Random, corrupt: bool) -> Task:
    solution = task.meta.get("solution")
    prompt = task.prompt if isinstance(task.prompt, str) else None
    if not isinstance(solution, str) or prompt is None:
        raise DataError(f"steps: base task {task.id!r} has no worked solution (meta['solution']) or no text prompt; "
                        "step labels need a base such as arithmetic:chain")
    tokens = _TOKEN.findall(prompt)
    numbers, ops = [int(t) for t in tokens[::2]], tokens[1::2]
    slip_at = rng.randrange(len(ops)) if corrupt and ops else None
    lines = worked_lines(numbers, ops, slip_at, rng.choice((-3, -2, -1, 1, 2, 3)) if slip_at is not None else 0)
    answer = lines[-1].rsplit("=", 1)[1] if lines else str(numbers[0])
    steps = [*lines, f"#{answer}"]
    labels = [GOOD if _holds(line) else BAD for line in lines] + [GOOD if answer == str(task.reference) else BAD]
    meta = {"base_id": task.id, "problem": prompt, "steps": steps, "labels": labels, "source": PREFIX,
            "first_error": next((k for k, label in enumerate(labels) if label == BAD), None)}
    return Task(prompt=labelling_prompt(prompt, steps), reference="".join(labels),
                id=f"{PREFIX}:{index}:{task.id}", verifier=VERIFIER, meta=meta)


def from_spec(text: str) -> list[Task]:
    base, own = split_options(text, PREFIX, _OPTIONS)
    try:
        n, seed, wrong = int(own.get("n", 1000)), int(own.get("seed", 0)), float(own.get("wrong", 0.5))
    except ValueError:
        raise DataError(f"{text!r}: options 'n' and 'seed' must be integers and 'wrong' a number, got {own}") from None
    if n < 1 or not 0.0 <= wrong <= 1.0:
        raise DataError(f"{text!r}: expected n >= 1 and wrong in 0..1, got n={n}, wrong={wrong}")
    from rlvr.tasks.sources import load_source

    base_tasks = load_source(base)
    if not base_tasks:
        raise DataError(f"{text!r}: the base spec {base!r} gives no tasks")
    rng = random.Random(seed)
    order = list(range(len(base_tasks)))
    rng.shuffle(order)
    return [step_task(base_tasks[order[i % len(order)]], i, rng, rng.random() < wrong) for i in range(n)]
