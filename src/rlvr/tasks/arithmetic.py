"""Procedurally generated arithmetic tasks ("37+58=" -> "95") with disjoint training and held-out splits.

A problem belongs to the held-out split when a hash of its text falls in the held-out bucket, so the two
splits never share a problem however many of each are drawn, and the split of a problem never depends on
the seed. ``arithmetic:chain`` specs name the multi-term family with worked solutions (chain.py).
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass

from rlvr.tasks.base import Task
from rlvr.errors import UserError

SPLITS = ("train", "eval")


@dataclass(frozen=True)
class ArithmeticSpec:
    digits: int = 2
    ops: str = "+"
    heldout_percent: int = 10

    def __post_init__(self):
        if self.digits < 1 or self.digits > 6:
            raise UserError(f"arithmetic: digits must be in 1..6, got {self.digits}")
        bad = set(self.ops) - set("+-*")
        if not self.ops or bad:
            raise UserError(f"arithmetic: ops must be a non-empty string of '+', '-', '*', got {self.ops!r}")
        if not 1 <= self.heldout_percent <= 50:
            raise UserError(f"arithmetic: heldout_percent must be in 1..50, got {self.heldout_percent}")


def split_of(problem: str, heldout_percent: int) -> str:
    bucket = int.from_bytes(hashlib.sha256(problem.encode()).digest()[:4], "big") % 100
    return "eval" if bucket < heldout_percent else "train"


def _answer(a: int, op: str, b: int) -> int:
    return a + b if op == "+" else a - b if op == "-" else a * b


def all_problems(spec: ArithmeticSpec, split: str) -> list[Task]:
    """Every problem of a split, in a fixed order (small digit counts only)."""
    if split not in SPLITS:
        raise UserError(f"arithmetic: unknown split {split!r}; known: {', '.join(SPLITS)}")
    hi = 10**spec.digits
    tasks = []
    for op in spec.ops:
        for a in range(hi):
            for b in range(hi):
                problem = f"{a}{op}{b}="
                if split_of(problem, spec.heldout_percent) == split:
                    tasks.append(Task(prompt=problem, reference=str(_answer(a, op, b)), id=f"arith:{problem}"))
    return tasks


def sample_problems(spec: ArithmeticSpec, split: str, n: int, seed: int) -> list[Task]:
    """``n`` distinct problems of a split, drawn with ``seed``; all of them when the split has fewer."""
    problems = all_problems(spec, split)
    rng = random.Random(seed)
    rng.shuffle(problems)
    return problems[:n] if n else problems


def parse_spec(text: str) -> tuple[str, ArithmeticSpec, int, int]:
    """Parse ``arithmetic:SPLIT[:key=value,...]`` with keys digits, ops, n, seed, heldout_percent."""
    parts = text.split(":", 2)
    if parts[0] != "arithmetic" or len(parts) < 2:
        raise UserError(f"not an arithmetic spec: {text!r} (expected 'arithmetic:train' or 'arithmetic:eval:n=500')")
    split = parts[1]
    options: dict[str, str] = {}
    if len(parts) == 3 and parts[2]:
        for item in parts[2].split(","):
            key, sep, value = item.partition("=")
            if not sep:
                raise UserError(f"{text!r}: expected key=value, got {item!r}")
            options[key.strip()] = value.strip()
    known = {"digits", "ops", "n", "seed", "heldout_percent"}
    unknown = set(options) - known
    if unknown:
        raise UserError(f"{text!r}: unknown option(s) {sorted(unknown)}; known: {sorted(known)}")
    try:
        spec = ArithmeticSpec(
            digits=int(options.get("digits", 2)),
            ops=options.get("ops", "+"),
            heldout_percent=int(options.get("heldout_percent", 10)),
        )
        n, seed = int(options.get("n", 0)), int(options.get("seed", 0))
    except ValueError as exc:
        raise UserError(f"{text!r}: {exc}") from None
    if split not in SPLITS:
        raise UserError(f"{text!r}: unknown split {split!r}; known: {', '.join(SPLITS)} (multi-term problems with "
                        "worked solutions: arithmetic:chain)")
    return split, spec, n, seed


def from_spec(text: str) -> list[Task]:
    """The tasks of ``arithmetic:SPLIT[:options]``, or of ``arithmetic:chain[:options]`` (multi-term problems
    with worked solutions, chain.py)."""
    if text.split(":", 2)[1:2] == ["chain"]:
        from rlvr.tasks import chain

        return chain.from_spec(text)
    split, spec, n, seed = parse_spec(text)
    return sample_problems(spec, split, n, seed)
