"""Multi-term arithmetic with a worked solution: "12+34+5=" -> "51", ``meta["solution"]`` = "12+34=46\\n46+5=51\\n#51".

Spec: ``arithmetic:chain[:key=value,...]`` with keys

    terms=3            numbers per problem, 2..8 (the difficulty knob)
    digits=1           digits per number, 1..3 (intermediate results may have more)
    ops=+              operators drawn per position, any of "+-*"
    split=train        train | eval: disjoint by a hash of the problem text, as the two-term generator splits
    n=0                problems to draw (0: every problem of the split when there are at most 100,000 of them,
                       else 10,000 drawn)
    seed=0             which problems are drawn, and their order
    heldout_percent=10 share of all problems in the eval split, 1..50

The solution is the order a person works the problem: products first (left to right), then sums and differences
left to right, one line ``a op b=c`` per operation, then ``#answer``. It serves as a hint source (its prefixes), an
expert trace, the step checker's ground truth and a curriculum axis (``meta["terms"]``; ``meta["difficulty"]`` =
"terms_N" gives per-length ``level/terms_N/score_mean`` metrics in a mixture of lengths). A warm start on
worked solutions: ``rlvr sft ... data.completion_field=solution`` (the solution is not copied to
``meta["completion"]``, a key agent programs are shown). Tasks are scored by the ``chain_answer`` verifier (the
answer after the response's last ``#``), so a response may show its work.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from rlvr.errors import UserError
from rlvr.tasks.arithmetic import SPLITS, split_of
from rlvr.tasks.base import Task
from rlvr.verifiers import chain as _chain_verifier  # noqa: F401  (registers "chain_answer", the tasks' verifier)

FAMILY = "chain"
VERIFIER = "chain_answer"
MAX_ENUMERATED = 100_000  # a split of at most this many problems is listed in full; a larger one is sampled
DEFAULT_DRAWN = 10_000
_OPTIONS = ("terms", "digits", "ops", "split", "n", "seed", "heldout_percent")


@dataclass(frozen=True)
class ChainSpec:
    terms: int = 3
    digits: int = 1
    ops: str = "+"
    heldout_percent: int = 10

    def __post_init__(self):
        if not 2 <= self.terms <= 8:
            raise UserError(f"'terms' must be in 2..8, got {self.terms}")
        if not 1 <= self.digits <= 3:
            raise UserError(f"'digits' must be in 1..3, got {self.digits}")
        if not self.ops or set(self.ops) - set("+-*"):
            raise UserError(f"'ops' must be a non-empty string of '+', '-', '*', got {self.ops!r}")
        if not 1 <= self.heldout_percent <= 50:
            raise UserError(f"'heldout_percent' must be in 1..50, got {self.heldout_percent}")

    @property
    def space(self) -> int:
        """How many distinct problems the spec describes (both splits)."""
        return (10**self.digits) ** self.terms * len(set(self.ops)) ** (self.terms - 1)


def _apply(a: int, op: str, b: int) -> int:
    return a + b if op == "+" else a - b if op == "-" else a * b


def solve(numbers: list[int], ops: list[str]) -> tuple[list[str], int]:
    """The worked steps ("a op b=c", products first, then left to right) and the value of the expression."""
    numbers, ops, lines = list(numbers), list(ops), []
    for tier in ("*", "+-"):
        i = 0
        while i < len(ops):
            if ops[i] in tier:
                value = _apply(numbers[i], ops[i], numbers[i + 1])
                lines.append(f"{numbers[i]}{ops[i]}{numbers[i + 1]}={value}")
                numbers[i:i + 2] = [value]
                del ops[i]
            else:
                i += 1
    return lines, numbers[0]


def problem_text(numbers: list[int], ops: list[str]) -> str:
    return "".join(f"{n}{op}" for n, op in zip(numbers, [*ops, "="]))


def make_task(numbers: list[int], ops: list[str]) -> Task:
    problem = problem_text(numbers, ops)
    lines, answer = solve(numbers, ops)
    solution = "\n".join([*lines, f"#{answer}"])
    meta = {"solution": solution, "terms": len(numbers), "difficulty": f"terms_{len(numbers)}"}
    return Task(prompt=problem, reference=str(answer), id=f"{FAMILY}:{problem}", verifier=VERIFIER, meta=meta)


def _problem_parts(spec: ChainSpec, index: int) -> tuple[list[int], list[str]]:
    """The ``index``-th problem of the spec in a fixed order (numbers vary fastest, then operators)."""
    base, ops = 10**spec.digits, sorted(set(spec.ops), key=spec.ops.index)
    numbers = []
    for _ in range(spec.terms):
        index, digit = divmod(index, base)
        numbers.append(digit)
    chosen = []
    for _ in range(spec.terms - 1):
        index, k = divmod(index, len(ops))
        chosen.append(ops[k])
    return numbers, chosen


def sample_chains(spec: ChainSpec, split: str, n: int, seed: int) -> list[Task]:
    """``n`` distinct problems of ``split`` drawn with ``seed`` (0: all of a small split, DEFAULT_DRAWN of a large
    one); all of the split when it holds fewer. A problem's split depends only on its text, never on the seed."""
    if split not in SPLITS:
        raise UserError(f"unknown split {split!r}; known: {', '.join(SPLITS)}")
    rng = random.Random(seed)
    if spec.space <= MAX_ENUMERATED:
        parts = [_problem_parts(spec, i) for i in range(spec.space)]
        mine = [p for p in parts if split_of(problem_text(*p), spec.heldout_percent) == split]
        rng.shuffle(mine)
        return [make_task(*p) for p in (mine[:n] if n else mine)]
    want, seen, tasks = n or DEFAULT_DRAWN, set(), []
    share = spec.heldout_percent if split == "eval" else 100 - spec.heldout_percent
    if want > spec.space * share // 200:
        raise UserError(f"option 'n' ({want}) is more than half of the ~{spec.space * share // 100} problems of the "
                        f"{split} split; ask for fewer, or for more terms or digits")
    while True:  # at least half the split is left unseen, so each draw is new and in the split often enough
        index = rng.randrange(spec.space)
        if index in seen:
            continue
        seen.add(index)
        parts = _problem_parts(spec, index)
        if split_of(problem_text(*parts), spec.heldout_percent) == split:
            tasks.append(make_task(*parts))
            if len(tasks) == want:
                return tasks


def parse_spec(text: str) -> tuple[str, ChainSpec, int, int]:
    """``arithmetic:chain[:key=value,...]`` -> (split, spec, n, seed); a bad option is a UserError naming it."""
    head, family, options_text = (text.split(":", 2) + ["", ""])[:3]
    if head != "arithmetic" or family != FAMILY:
        raise UserError(f"not a chain spec: {text!r} (expected e.g. 'arithmetic:chain:terms=4,split=eval')")
    options: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in options_text.split(","))):
        key, sep, value = item.partition("=")
        if not sep:
            raise UserError(f"{text!r}: expected key=value, got {item!r}")
        if key.strip() in options:
            raise UserError(f"{text!r}: option {key.strip()!r} is given twice")
        options[key.strip()] = value.strip()
    unknown = sorted(set(options) - set(_OPTIONS))
    if unknown:
        raise UserError(f"{text!r}: unknown option(s) {unknown}; known: {list(_OPTIONS)}")
    values: dict[str, int] = {}
    for key in ("terms", "digits", "n", "seed", "heldout_percent"):
        if key in options:
            try:
                values[key] = int(options[key])
            except ValueError:
                raise UserError(f"{text!r}: option {key!r} must be an integer, got {options[key]!r}") from None
    if values.get("n", 0) < 0:
        raise UserError(f"{text!r}: option 'n' must be >= 0, got {values['n']}")
    split = options.get("split", "train")
    if split not in SPLITS:
        raise UserError(f"{text!r}: option 'split' must be one of {', '.join(SPLITS)}, got {split!r}")
    try:
        spec = ChainSpec(terms=values.get("terms", 3), digits=values.get("digits", 1), ops=options.get("ops", "+"),
                         heldout_percent=values.get("heldout_percent", 10))
    except UserError as exc:
        raise UserError(f"{text!r}: option {exc}") from None
    return split, spec, values.get("n", 0), values.get("seed", 0)


def from_spec(text: str) -> list[Task]:
    split, spec, n, seed = parse_spec(text)
    try:
        return sample_chains(spec, split, n, seed)
    except UserError as exc:
        raise UserError(f"{text!r}: {exc}") from None
