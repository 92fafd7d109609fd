"""Difficulty-aware sampling: mixtures of sources with weights, and curricula driven by running pass rates.

    sampler = CurriculumSampler(tasks, seed=0, rules=CurriculumRules.parse("filter+replay", {"skip_after": 2}))
    batch = sampler.next(8)
    ...                                   # generate and score group_size responses per task
    sampler.observe(ids, scores)          # one id and one score per response
    log(sampler.metrics())

Rules (``data.curriculum``; several join with "+", e.g. "filter+replay"; options in ``data.curriculum_options``):

filter   skip a task once every response was solved, or none was, in ``skip_after`` observations in a row
         (online filtering of prompts that give no learning signal; ``retire``: both, solved or failed)
band     keep tasks whose running pass rate lies in [``band_low``, ``band_high``] (a "zone of proximal
         development"); a known task outside the band is still drawn with probability ``outside_keep``
replay   fill ``replay_frac`` of each batch with tasks seen before whose running rate is below
         ``replay_below`` (hard-prompt replay)

``alpha``, ``hard_below`` and ``easy_above`` set the running rate and its difficulty buckets (difficulty.py).
Tasks not yet observed are always drawn. When every task of a source would be skipped, the sampler draws them
anyway rather than stall (counted in curriculum/exhausted). Each source (a part of a mixture) keeps its own
shuffled epoch order; each slot of a batch picks its source by weight.

All randomness comes from the seed and the number of ``next`` calls, so ``state_dict`` (positions, counters
and the difficulty statistics) restores the exact future draws.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from rlvr.tasks.base import Task
from rlvr.tasks.difficulty import DifficultyTracker
from rlvr.tasks.feedback import Feedback, metric_label
from rlvr.errors import UserError

RULES = ("filter", "band", "replay")


@dataclass(frozen=True)
class CurriculumRules:
    rules: frozenset[str] = frozenset()
    skip_after: int = 2
    retire: str = "both"
    band_low: float = 0.2
    band_high: float = 0.8
    outside_keep: float = 0.1
    replay_frac: float = 0.25
    replay_below: float = 0.5
    alpha: float = 0.5
    hard_below: float = 0.2
    easy_above: float = 0.8

    @classmethod
    def parse(cls, name: str | None, options: dict[str, Any] | None = None) -> "CurriculumRules":
        """Rules from ``data.curriculum`` ("none", "filter", "band+replay", ...) and ``data.curriculum_options``."""
        chosen = set() if name in (None, "", "none") else {part.strip() for part in name.split("+")}
        unknown = chosen - set(RULES)
        if unknown:
            raise UserError(f"data.curriculum: unknown rule {sorted(unknown)[0]!r}; known: none, {', '.join(RULES)} "
                             "(join several with '+')")
        known = {f.name: f.type for f in fields(cls) if f.name != "rules"}
        values: dict[str, Any] = {}
        for key, value in (options or {}).items():
            if key not in known:
                raise UserError(f"data.curriculum_options: unknown option {key!r}; known: {', '.join(known)}")
            default = getattr(cls, key)
            if isinstance(default, str):
                values[key] = str(value)
            elif isinstance(value, bool) or not isinstance(value, (int, float)):
                raise UserError(f"data.curriculum_options.{key}: expected a number, got {value!r}")
            elif isinstance(default, int) and value != int(value):
                raise UserError(f"data.curriculum_options.{key}: expected a whole number, got {value!r}")
            else:
                values[key] = type(default)(value)
        rules = cls(frozenset(chosen), **values)
        rules.check()
        return rules

    def check(self) -> None:
        problems = []
        if self.skip_after < 1:
            problems.append(f"skip_after must be >= 1, got {self.skip_after}")
        if self.retire not in ("both", "solved", "failed"):
            problems.append(f"retire must be both, solved or failed, got {self.retire!r}")
        if not 0 <= self.band_low <= self.band_high <= 1:
            problems.append(f"need 0 <= band_low <= band_high <= 1, got {self.band_low}, {self.band_high}")
        for name in ("outside_keep", "replay_frac", "replay_below"):
            if not 0 <= getattr(self, name) <= 1:
                problems.append(f"{name} must be in [0, 1], got {getattr(self, name)}")
        if problems:
            raise UserError("data.curriculum_options: " + "; ".join(problems))

    def tracker(self) -> DifficultyTracker:
        return DifficultyTracker(alpha=self.alpha, hard_below=self.hard_below, easy_above=self.easy_above)


@dataclass
class Part:
    """One source of a mixture: its tasks (indices into the sampler's list), weight and epoch position."""

    label: str
    weight: float
    indices: list[int]
    epoch: int = 0
    position: int = 0
    order: list[int] = field(default_factory=list)


class CurriculumSampler:
    """Draws batches from weighted sources under curriculum rules; see the module docstring."""

    def __init__(
        self,
        tasks: list[Task],
        *,
        seed: int,
        shuffle: bool = True,
        rules: CurriculumRules = CurriculumRules(),
        parts: Sequence[tuple[str, float, list[int]]] | None = None,
    ):
        if not tasks:
            raise UserError("no tasks to sample from")
        self.tasks, self.seed, self.shuffle, self.rules = tasks, seed, shuffle, rules
        parts = parts or [("all", 1.0, list(range(len(tasks))))]
        for label, weight, indices in parts:
            if weight <= 0 or not indices:
                raise UserError(f"mixture part {label!r}: needs a weight > 0 and at least one task")
        self.parts = [Part(label, float(weight), list(indices)) for label, weight, indices in parts]
        for i, part in enumerate(self.parts):
            part.order = self._order_for(i, 0)
        self.feedback = Feedback(tasks, rules.tracker())
        self.calls = 0
        self._last = {"skipped": 0, "replayed": 0, "exhausted": 0}
        self._drawn: dict[str, int] = {}

    def _order_for(self, part_index: int, epoch: int) -> list[int]:
        order = list(self.parts[part_index].indices)
        if self.shuffle:
            random.Random(f"{self.seed}:{part_index}:{epoch}").shuffle(order)
        return order

    # --------------------------------------------------------------------------------------------- drawing

    def _retired(self, task_id: str) -> bool:
        record = self.feedback.tracker.record(task_id)
        if "filter" not in self.rules.rules or record is None:
            return False
        k, retire = self.rules.skip_after, self.rules.retire
        return (retire != "failed" and record.solved_streak >= k) or (retire != "solved" and record.failed_streak >= k)

    def _skip(self, task_id: str, rng: random.Random) -> bool:
        if self._retired(task_id):
            return True
        rate = self.feedback.tracker.rate(task_id)
        if "band" in self.rules.rules and rate is not None and not self.rules.band_low <= rate <= self.rules.band_high:
            return rng.random() >= self.rules.outside_keep
        return False

    def _advance(self, i: int) -> Task:
        part = self.parts[i]
        if part.position == len(part.order):
            part.epoch += 1
            part.position = 0
            part.order = self._order_for(i, part.epoch)
        task = self.tasks[part.order[part.position]]
        part.position += 1
        return task

    def _next_from(self, i: int, rng: random.Random, taken: set[str]) -> Task:
        size = len(self.parts[i].indices)
        for scanned in range(1, 2 * size + 1):
            task = self._advance(i)
            if task.id in taken and scanned <= size:
                continue
            if scanned <= size and self._skip(task.id, rng):
                self._last["skipped"] += 1
                continue
            if scanned > size:  # a whole epoch's worth skipped: draw rather than stall
                self._last["exhausted"] += 1
            return task
        return task

    def _replay(self, n: int, rng: random.Random) -> list[Task]:
        if "replay" not in self.rules.rules:
            return []
        pool = sorted(task_id for task_id, record in self.feedback.tracker.records.items()
                      if record.rate < self.rules.replay_below and not self._retired(task_id))
        count = min(len(pool), int(round(self.rules.replay_frac * n)))
        return [self.feedback.by_id[task_id] for task_id in rng.sample(pool, count)]

    def next(self, n: int) -> list[Task]:
        rng = random.Random(f"{self.seed}:draw:{self.calls}")
        self.calls += 1
        self._last = {"skipped": 0, "replayed": 0, "exhausted": 0}
        out = self._replay(n, rng)
        self._last["replayed"] = len(out)
        taken = {task.id for task in out}
        weights = [part.weight for part in self.parts]
        self._drawn = {part.label: 0 for part in self.parts}
        while len(out) < n:
            i = 0 if len(self.parts) == 1 else rng.choices(range(len(self.parts)), weights)[0]
            task = self._next_from(i, rng, taken)
            taken.add(task.id)
            self._drawn[self.parts[i].label] += 1
            out.append(task)
        return out

    # -------------------------------------------------------------------------------------------- feedback

    def observe(self, task_ids: Sequence[str], scores: Sequence[float]) -> None:
        """Fold one step's scores (one id and score per response) into the running pass rates."""
        self.feedback.observe(task_ids, scores)

    def metrics(self) -> dict[str, float]:
        """The last step's per-source and per-difficulty scores (feedback.py) and what the rules did."""
        tracker, rules = self.feedback.tracker, self.rules
        records = tracker.records
        out = dict(self.feedback.metrics())
        out["curriculum/skipped"] = self._last["skipped"]
        out["curriculum/replayed"] = self._last["replayed"]
        out["curriculum/exhausted"] = self._last["exhausted"]
        if "filter" in rules.rules:
            out["curriculum/retired_solved"] = sum(r.solved_streak >= rules.skip_after for r in records.values())
            out["curriculum/retired_failed"] = sum(r.failed_streak >= rules.skip_after for r in records.values())
        if "band" in rules.rules:
            out["curriculum/in_band"] = sum(rules.band_low <= r.rate <= rules.band_high for r in records.values())
        if "replay" in rules.rules:
            out["curriculum/replay_pool"] = sum(r.rate < rules.replay_below for r in records.values())
        if len(self.parts) > 1:
            drawn = max(1, sum(self._drawn.values()))
            for label, count in self._drawn.items():
                out[f"mixture/{metric_label(label)}/share"] = count / drawn
        return out

    # ---------------------------------------------------------------------------------------------- resume

    def state_dict(self) -> dict[str, Any]:
        return {"kind": "curriculum", "seed": self.seed, "calls": self.calls, "n_tasks": len(self.tasks),
                "parts": [[p.label, p.epoch, p.position] for p in self.parts],
                "difficulty": self.feedback.state_dict(), "last": dict(self._last), "drawn": dict(self._drawn)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("kind") != "curriculum":
            raise UserError("the checkpoint's sampler had no curriculum or mixture; resume with the same data.* settings")
        if state["n_tasks"] != len(self.tasks):
            raise UserError(f"data changed since the checkpoint: {state['n_tasks']} tasks then, {len(self.tasks)} now")
        labels = [p.label for p in self.parts]
        if [label for label, _, _ in state["parts"]] != labels:
            raise UserError(f"data sources changed since the checkpoint: {[p[0] for p in state['parts']]} then, {labels} now")
        self.seed, self.calls = state["seed"], state["calls"]
        for i, (part, (_, epoch, position)) in enumerate(zip(self.parts, state["parts"])):
            part.epoch, part.position = epoch, position
            part.order = self._order_for(i, epoch)
        self.feedback.load_state_dict(state["difficulty"])
        self._last, self._drawn = dict(state["last"]), dict(state["drawn"])
