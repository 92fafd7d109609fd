"""Judgement tasks: verified data turned into "question + candidate response (+ reference) -> verdict" tasks, to
train a judge (a generative reward model) with rlvr like any policy.

    judgement:arithmetic:train:digits=1,n=2000,seed=0
    judgement:arithmetic:chain:terms=3,n=500,format=judge
    judgement:data/train.jsonl:n=1000,verifier=math

Everything after ``judgement:`` is a base data spec (any source ``load_tasks`` reads); the last ``:``-part's
options that are judgement's own are taken out of it:

    n=1000          judgement tasks to build (the base tasks are cycled in a seeded order)
    seed=0          which base tasks and which candidates are drawn
    format=short    the judge prompt: "short" (SHORT_SYSTEM and SHORT_TEMPLATE, a prompt a tiny character model can
                    learn: "Q:12+34= R:46 A:47 ok?") or "judge" (the judge verifier's own hardened prompts)
    verifier=exact  the rule verifier of base tasks that name none
    near_miss=0.5   share of "no" tasks whose candidate is a near miss (the answer's length kept: a digit changed, off
                    by a little), the mistakes a policy makes; the rest are any corruption

Each task's prompt is built by the judge verifier's own ``build_messages`` (verifiers/judge/prompts.py), so a judge
trained on these tasks sees at training time exactly what the ``judge`` verifier sends it at use time; use it with
the verifier options of ``judge_options(format)``. The candidate is the base answer itself (or the base task's
worked solution) or a corruption of it made locally with the seed (the number off by a little, a digit changed, swapped,
dropped or added, the worked solution's answer changed). The task's reference is the base rule verifier's verdict on
the candidate, "yes" or "no", checked by the ``exact`` verifier; a candidate the rule verifier cannot decide is never
used. Half the tasks target "yes" and half "no"; a slot whose target no candidate reaches keeps the verdict its
candidate got, so the references are always the rule verifier's.
"""

from __future__ import annotations

import random
import re
from typing import Any

from rlvr.errors import UserError
from rlvr.tasks.base import DataError, Task

PREFIX = "judgement"
VERIFIER = "exact"
YES, NO = "yes", "no"
SHORT_SYSTEM = "Reply yes or no."
SHORT_TEMPLATE = "Q:{question} R:{reference} A:{response} ok?"
FORMATS = {"short": {"template": SHORT_TEMPLATE, "system": SHORT_SYSTEM}, "judge": {}}
_OPTIONS = ("n", "seed", "format", "verifier", "near_miss")
_CANDIDATES_PER_SLOT = 4
# Without near misses a small judge learns to reject answers that look different and to accept any answer of the
# right shape (format over substance): measured in tests/test_judge_training.py.
NEAR_MISS_SHARE = 0.5
_INTEGER = re.compile(r"^[-+]?[0-9]+$")


def judge_options(fmt: str = "short") -> dict[str, Any]:
    """The ``judge`` verifier options under which a judge trained on ``format=fmt`` tasks sees its training prompts."""
    if fmt not in FORMATS:
        raise UserError(f"unknown judgement format {fmt!r}; known: {', '.join(FORMATS)}")
    return dict(FORMATS[fmt])


def parse_spec(text: str) -> tuple[str, dict[str, str]]:
    """``judgement:BASE[:options]`` -> (base spec, judgement's own options)."""
    return split_options(text, PREFIX, _OPTIONS)


def split_options(text: str, prefix: str, names: tuple[str, ...]) -> tuple[str, dict[str, str]]:
    """``PREFIX:BASE[:options]`` -> (base spec, the options in ``names``); the other options stay with the base."""
    head, sep, rest = text.partition(":")
    if head != prefix or not sep or not rest.strip():
        raise DataError(f"not a {prefix} spec: {text!r} (expected e.g. '{prefix}:arithmetic:train:n=2000,seed=0')")
    base, own = rest, {}
    stem, colon, last = rest.rpartition(":")
    items = [part.strip() for part in last.split(",") if part.strip()]
    if colon and items and all("=" in item for item in items):
        kept = []
        for item in items:
            key, _, value = (s.strip() for s in item.partition("="))
            if key in names:
                if key in own:
                    raise DataError(f"{text!r}: option {key!r} is given twice")
                own[key] = value
            else:
                kept.append(item)
        base = f"{stem}:{','.join(kept)}" if kept else stem
    return base, own


def from_spec(text: str) -> list[Task]:
    base, own = parse_spec(text)
    try:
        n, seed = int(own.get("n", 1000)), int(own.get("seed", 0))
    except ValueError:
        raise DataError(f"{text!r}: options 'n' and 'seed' must be integers, got n={own.get('n')!r}, "
                        f"seed={own.get('seed')!r}") from None
    try:
        near_miss = float(own.get("near_miss", NEAR_MISS_SHARE))
    except ValueError:
        near_miss = -1.0
    if not 0.0 <= near_miss <= 1.0:
        raise DataError(f"{text!r}: option 'near_miss' must be a number in 0..1, got {own.get('near_miss')!r}")
    fmt = own.get("format", "short")
    if fmt not in FORMATS:
        raise DataError(f"{text!r}: option 'format' must be one of {', '.join(FORMATS)}, got {fmt!r}")
    if n < 2:
        raise DataError(f"{text!r}: option 'n' must be >= 2 (half yes, half no), got {n}")
    from rlvr.tasks.sources import load_source
    from rlvr.verifiers import verifier_names

    verifier = own.get("verifier", "exact")
    if verifier not in verifier_names():
        raise DataError(f"{text!r}: option 'verifier': unknown verifier {verifier!r}; known: "
                        f"{', '.join(sorted(verifier_names()))}")
    base_tasks = load_source(base)
    if not base_tasks:
        raise DataError(f"{text!r}: the base spec {base!r} gives no tasks")
    return judgement_tasks(base_tasks, n=n, seed=seed, fmt=fmt, default_verifier=verifier, near_miss=near_miss)


# ------------------------------------------------------------------------------------------ candidates

def _numeric_corruptions(answer: str, rng: random.Random) -> list[tuple[str, str]]:
    value = int(answer)
    sign, digits = ("-" if value < 0 else ""), str(abs(value))
    i = rng.randrange(len(digits))
    changed = digits[:i] + rng.choice([d for d in "0123456789" if d != digits[i] and (i or d != "0" or
                                                                                    len(digits) == 1)]) + digits[i + 1:]
    out = [("off_by_small", str(value + rng.choice((-3, -2, -1, 1, 2, 3)))),
           ("digit_changed", sign + changed),
           ("off_by_ten", str(value + rng.choice((-10, 10)))),
           ("digit_added", sign + digits + str(rng.randrange(10)))]
    if len(digits) > 1:
        out.append(("digit_dropped", sign + digits[:-1]))
        if digits != digits[::-1]:
            out.append(("digits_swapped", sign + digits[::-1]))
    return out


def _text_corruptions(answer: str, rng: random.Random) -> list[tuple[str, str]]:
    out = [("word_added", answer + " " + rng.choice(("not", "maybe", "too", "plus")))]
    if len(answer) > 1:
        cut = rng.randrange(1, len(answer))
        out.append(("truncated", answer[:cut]))
        i = rng.randrange(len(answer))
        other = "x" if answer[i] != "x" else "y"
        out.append(("character_changed", answer[:i] + other + answer[i + 1:]))
    return out


def _with_final_answer(solution: str, answer: str) -> str:
    """A worked solution (lines ending in ``#answer``) with its final answer replaced."""
    at = solution.rfind("#")
    return solution[:at + 1] + answer if at >= 0 else answer


def candidates(task: Task, want_correct: bool, rng: random.Random,
               near_miss: float = NEAR_MISS_SHARE) -> list[tuple[str, str]]:
    """(kind, response) candidates for one base task, those meant to be right first when ``want_correct``."""
    answer = str(task.reference).strip()
    solution = task.meta.get("solution") if isinstance(task.meta.get("solution"), str) else None
    right = [("reference", answer)] + ([("solution", solution)] if solution else [])
    wrong = _numeric_corruptions(answer, rng) if _INTEGER.match(answer) else _text_corruptions(answer, rng)
    near = [item for item in wrong if len(item[1]) == len(answer)]
    rng.shuffle(wrong)
    if near and rng.random() < near_miss:  # a near miss (same length) first: the mistakes policies make
        first = rng.choice(near)
        wrong = [first] + [item for item in wrong if item is not first]
    if solution:  # the same corruptions inside the worked solution
        wrong = [item for kind, bad in wrong for item in ((kind, bad), (kind + "_in_solution",
                                                                        _with_final_answer(solution, bad)))]
    rng.shuffle(right)
    chosen = right + wrong if want_correct else wrong + right
    return chosen[:_CANDIDATES_PER_SLOT]


def judgement_tasks(base_tasks: list[Task], *, n: int, seed: int = 0, fmt: str = "short",
                    default_verifier: str = "exact", near_miss: float = NEAR_MISS_SHARE) -> list[Task]:
    """``n`` judgement tasks from ``base_tasks`` (module docstring); deterministic in ``seed``."""
    from rlvr.verifiers import ScoreRequest, Status
    from rlvr.verifiers.row_options import score_rows, task_problem
    from rlvr.verifiers.judge.precheck import visible
    from rlvr.verifiers.judge.prompts import build_messages, question_of

    options = judge_options(fmt)
    rng = random.Random(seed)
    order = list(range(len(base_tasks)))
    rng.shuffle(order)
    slots = []  # (base task, target, candidates)
    for i in range(n):
        task = base_tasks[order[i % len(order)]]
        want = i % 2 == 0
        slots.append((task, want, candidates(task, want, rng, near_miss)))
    requests = [ScoreRequest(task.verifier or default_verifier, response, task.reference,
                             dict(task.verifier_options))
                for task, _, cands in slots for _, response in cands]
    verdicts = iter(score_rows(requests, [task_problem(task.verifier_options, task.reference)
                                          for task, _, cands in slots for _ in cands]))
    tasks: list[Task] = []
    for i, (task, want, cands) in enumerate(slots):
        decided = []
        for kind, response in cands:
            v = next(verdicts)
            if v.status in (Status.CORRECT, Status.INCORRECT):
                decided.append((kind, response, v.status == Status.CORRECT))
        if not decided:
            continue  # the rule verifier could decide none of them: no label to learn from
        kind, response, ok = next((d for d in decided if d[2] == want), decided[0])
        question = question_of(task.prompt, task.meta)
        messages = build_messages(visible(response), task.reference, question, **options)
        meta = {"base_id": task.id, "candidate": response, "corruption": None if kind in ("reference", "solution")
                else kind, "label": YES if ok else NO, "format": fmt, "source": PREFIX}
        tasks.append(Task(prompt=messages, reference=YES if ok else NO, id=f"{PREFIX}:{i}:{task.id}",
                          verifier=VERIFIER, meta=meta))
    if not tasks:
        raise DataError("judgement: the base tasks' verifier decided none of the candidates")
    return tasks
