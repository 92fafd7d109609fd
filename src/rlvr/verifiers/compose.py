"""Composed rewards: several scored terms combined with weights, gates, vetoes, schedules and length terms.

Declared in config as a list of terms under ``reward.terms``::

    reward:
      terms:
        - {name: format, verifier: format, weight: 0.2}
        - {name: digits, verifier: regex, reference: {pattern: "\\d+", mode: search}, weight: 0.1}
        - {name: correct, verifier: task, weight: 1.0, gate: format}       # counts only when the format passed
        - {name: overlong, kind: overlong, weight: 1.0, buffer_frac: 0.2}  # DAPO soft overlong punishment
        - {name: short, kind: length_among_correct, weight: {start: 0.0, end: 0.2, steps: 200}, correct: correct}

The total reward of a response is sum_t weight_t(step) * score_t, where a gated term scores
``gate_fail_score`` unless every term it is gated on reached ``gate_min``, and a veto term whose score is
below ``veto_min`` replaces the total with ``veto_value``. Each term's score is reported on its own so the
trainer can log it.
"""

from __future__ import annotations

import difflib
import math
from dataclasses import dataclass, field, fields
from typing import Any, Sequence

from rlvr.errors import UserError

KINDS = ("verifier", "overlong", "length_among_correct")
NORMALIZE = ("none", "batch")


class RewardSpecError(UserError):
    """A reward term that cannot be used; the message names the term and key."""


@dataclass(frozen=True)
class Schedule:
    """A weight that follows the training step: linear from ``start`` to ``end`` over ``steps``, then ``end``;
    or piecewise linear through ``points`` [[step, value], ...]."""

    start: float = 0.0
    end: float = 0.0
    steps: int = 1
    points: tuple[tuple[int, float], ...] = ()

    def at(self, step: int) -> float:
        if self.points:
            pts = self.points
            if step <= pts[0][0]:
                return pts[0][1]
            for (s0, v0), (s1, v1) in zip(pts, pts[1:]):
                if step <= s1:
                    return v0 + (v1 - v0) * (step - s0) / (s1 - s0)
            return pts[-1][1]
        frac = min(max(step / self.steps, 0.0), 1.0)
        return self.start + (self.end - self.start) * frac


@dataclass(frozen=True)
class Term:
    name: str
    kind: str = "verifier"
    verifier: str | None = None  # None or "task": the row's own verifier, else data.verifier
    options: dict[str, Any] = field(default_factory=dict)
    reference: Any = None  # what this term's verifier checks against (None = the task's reference)
    weight: float | Schedule = 1.0
    gate: tuple[str, ...] = ()  # terms that must reach gate_min for this one to count
    gate_min: float = 1.0
    gate_fail_score: float = 0.0
    veto: bool = False
    veto_min: float = 1.0
    veto_value: float = 0.0
    normalize: str = "none"  # "batch": z-score this term over the batch before weighting
    buffer_frac: float = 0.2  # overlong: the last fraction of max_new_tokens where the penalty ramps to -1
    penalty_factor: float = 1.0  # overlong
    correct: str | None = None  # length_among_correct: the term whose score >= correct_min marks a correct answer
    correct_min: float = 1.0

    def weight_at(self, step: int) -> float:
        return self.weight.at(step) if isinstance(self.weight, Schedule) else float(self.weight)

    @property
    def uses_task_verifier(self) -> bool:
        return self.kind == "verifier" and self.verifier in (None, "task")


@dataclass(frozen=True)
class RewardSpec:
    terms: tuple[Term, ...]

    @property
    def names(self) -> list[str]:
        return [t.name for t in self.terms]

    def verifier_terms(self) -> list[Term]:
        return [t for t in self.terms if t.kind == "verifier"]


_TERM_KEYS = [f.name for f in fields(Term)]


def _schedule(value: Any, where: str) -> float | Schedule:
    if isinstance(value, bool):
        raise RewardSpecError(f"{where}: expected a number or a schedule, got {value!r}")
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, dict):
        unknown = set(value) - {"start", "end", "steps"}
        if unknown:
            raise RewardSpecError(f"{where}: unknown schedule key(s) {sorted(unknown)}; expected start, end, steps")
        steps = value.get("steps", 1)
        if not isinstance(steps, int) or steps < 1:
            raise RewardSpecError(f"{where}.steps: expected an int >= 1, got {steps!r}")
        return Schedule(start=float(value.get("start", 0.0)), end=float(value.get("end", 0.0)), steps=steps)
    if isinstance(value, list) and value and all(isinstance(p, (list, tuple)) and len(p) == 2 for p in value):
        points = tuple((int(s), float(v)) for s, v in value)
        if any(b[0] <= a[0] for a, b in zip(points, points[1:])):
            raise RewardSpecError(f"{where}: schedule points must have increasing steps, got {value!r}")
        return Schedule(points=points)
    raise RewardSpecError(f"{where}: expected a number, {{start, end, steps}} or [[step, value], ...], got {value!r}")


def parse_spec(terms: Sequence[dict[str, Any]], where: str = "reward.terms") -> RewardSpec:
    """Validate config terms into a RewardSpec; every error names the term and key."""
    if not isinstance(terms, (list, tuple)):
        raise RewardSpecError(f"{where}: expected a list of terms, got {type(terms).__name__}")
    parsed: list[Term] = []
    for i, raw in enumerate(terms):
        at = f"{where}[{i}]"
        if not isinstance(raw, dict):
            raise RewardSpecError(f"{at}: expected a mapping, got {raw!r}")
        for key in raw:
            if key not in _TERM_KEYS:
                close = difflib.get_close_matches(str(key), _TERM_KEYS, n=1)
                hint = f" (did you mean '{close[0]}'?)" if close else ""
                raise RewardSpecError(f"{at}: unknown key '{key}'{hint}")
        name = raw.get("name")
        if not isinstance(name, str) or not name:
            raise RewardSpecError(f"{at}: 'name' is required (a short label used in the logs)")
        at = f"{where}[{i}] ({name})"
        values = dict(raw)
        kind = values.get("kind", "verifier")
        if kind not in KINDS:
            raise RewardSpecError(f"{at}.kind: expected one of {', '.join(KINDS)}, got {kind!r}")
        if values.get("normalize", "none") not in NORMALIZE:
            raise RewardSpecError(f"{at}.normalize: expected one of {', '.join(NORMALIZE)}, got {values['normalize']!r}")
        values["weight"] = _schedule(values.get("weight", 1.0), f"{at}.weight")
        gate = values.get("gate", ())
        values["gate"] = (gate,) if isinstance(gate, str) else tuple(gate or ())
        if not isinstance(values.get("options", {}), dict):
            raise RewardSpecError(f"{at}.options: expected a mapping of verifier options")
        if kind == "overlong" and not 0 < float(values.get("buffer_frac", 0.2)) <= 1:
            raise RewardSpecError(f"{at}.buffer_frac: expected 0 < buffer_frac <= 1")
        if kind == "length_among_correct" and not values.get("correct"):
            raise RewardSpecError(f"{at}.correct: name the term that marks a correct answer")
        parsed.append(Term(**values))
    names = [t.name for t in parsed]
    for t in parsed:
        if names.count(t.name) > 1:
            raise RewardSpecError(f"{where}: term name '{t.name}' is used twice")
        for ref in (*t.gate, *([t.correct] if t.correct else [])):
            if ref not in names:
                raise RewardSpecError(f"{where} ({t.name}): refers to unknown term '{ref}'; terms: {', '.join(names)}")
            if ref == t.name:
                raise RewardSpecError(f"{where} ({t.name}): a term cannot gate on itself")
    _check_acyclic(parsed)
    return RewardSpec(tuple(parsed))


def _check_acyclic(terms: list[Term]) -> None:
    deps = {t.name: set(t.gate) | ({t.correct} if t.correct else set()) for t in terms}
    done: set[str] = set()

    def visit(name: str, path: tuple[str, ...]) -> None:
        if name in path:
            raise RewardSpecError(f"reward.terms: gates form a cycle: {' -> '.join(path + (name,))}")
        if name in done:
            return
        for dep in deps[name]:
            visit(dep, path + (name,))
        done.add(name)

    for t in terms:
        visit(t.name, ())


def soft_overlong_penalty(length: float, max_len: int, buffer_len: int, factor: float = 1.0) -> float:
    """DAPO Soft Overlong Punishment (Yu et al., 2025, Sec. 3.4, Eq. 13), with L_max = max_len, L_cache = buffer_len:
    0 up to L_max - L_cache, then ((L_max - L_cache) - |y|) / L_cache down to -1 at L_max, -1 beyond; times
    ``factor``. buffer_len = 0 turns it off. The one overlong penalty of rlvr: algo.overlong_buffer_frac and an
    ``overlong`` reward term both use it."""
    if buffer_len < 0 or max_len < 0 or buffer_len > max_len:
        raise ValueError(f"need 0 <= buffer_len <= max_len, got max_len={max_len}, buffer_len={buffer_len}")
    if buffer_len == 0:
        return 0.0
    free = max_len - buffer_len
    if length <= free:
        return 0.0
    if length <= max_len:
        return factor * (free - length) / buffer_len
    return -factor


def length_among_correct(lengths: Sequence[float], correct: Sequence[bool], groups: Sequence[int]) -> list[float]:
    """A length reward compared only among the correct answers of the same group, so it never competes with
    correctness (the decoupling of DRPO, Li et al., 2025, "DRPO: Efficient Reasoning via Decoupled Reward
    Policy Optimization"): among a group's correct answers, 1 for the shortest, 0 for the longest, linear
    between; incorrect answers and groups with a single distinct correct length get 0."""
    out = [0.0] * len(lengths)
    by_group: dict[int, list[int]] = {}
    for i, g in enumerate(groups):
        if correct[i]:
            by_group.setdefault(g, []).append(i)
    for rows in by_group.values():
        lo, hi = min(lengths[i] for i in rows), max(lengths[i] for i in rows)
        if hi > lo:
            for i in rows:
                out[i] = (hi - lengths[i]) / (hi - lo)
    return out


def _zscore(values: list[float]) -> list[float]:
    n = len(values)
    if n < 2:
        return [0.0] * n
    mean = sum(values) / n
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    return [(v - mean) / std if std > 0 else 0.0 for v in values]


@dataclass
class ComposedRewards:
    total: list[float]
    components: dict[str, list[float]]  # each term's score after gating and normalisation, before its weight
    vetoed: list[bool]


def compose(
    spec: RewardSpec,
    scores: dict[str, Sequence[float]],
    *,
    lengths: Sequence[float],
    max_len: int,
    groups: Sequence[int],
    step: int = 0,
) -> ComposedRewards:
    """Combine raw per-term scores (``scores[name]`` for each verifier term) into total rewards.

    Terms are evaluated in dependency order, so gates and "correct" see the gated scores of the terms they name.
    """
    n = len(lengths)
    raw: dict[str, list[float]] = {}
    for term in spec.terms:
        if term.kind == "verifier":
            if term.name not in scores:
                raise KeyError(f"no scores for reward term '{term.name}'")
            raw[term.name] = [float(s) for s in scores[term.name]]
        elif term.kind == "overlong":
            buffer_len = max(1, int(term.buffer_frac * max_len))
            raw[term.name] = [soft_overlong_penalty(l, max_len, buffer_len, term.penalty_factor) for l in lengths]
    final: dict[str, list[float]] = {}

    def resolve(term: Term) -> list[float]:
        if term.name in final:
            return final[term.name]
        if term.kind == "length_among_correct":
            marker = resolve(_term(spec, term.correct))
            values = length_among_correct(lengths, [m >= term.correct_min for m in marker], groups)
        else:
            values = list(raw[term.name])
        for gate_name in term.gate:
            gate_scores = resolve(_term(spec, gate_name))
            values = [v if g >= term.gate_min else term.gate_fail_score for v, g in zip(values, gate_scores)]
        if term.normalize == "batch":
            values = _zscore(values)
        final[term.name] = values
        return values

    for term in spec.terms:
        resolve(term)
    total = [sum(t.weight_at(step) * final[t.name][i] for t in spec.terms) for i in range(n)]
    vetoed = [False] * n
    for term in spec.terms:
        if term.veto:
            for i, s in enumerate(final[term.name]):
                if s < term.veto_min:
                    total[i], vetoed[i] = term.veto_value, True
    return ComposedRewards(total, final, vetoed)


def _term(spec: RewardSpec, name: str) -> Term:
    return next(t for t in spec.terms if t.name == name)
