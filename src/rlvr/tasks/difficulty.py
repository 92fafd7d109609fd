"""Difficulty tracking: a running pass rate per task, from the scores of the responses sampled for it.

    tracker.update("q7", [1.0, 0.0, 1.0, 1.0])     # one RL step's group for task q7
    tracker.rate("q7")                              # 0.75 after one observation; an EMA after more

Each update is one observation (one group, usually one per epoch). Besides the rate, a task keeps how many
observations in a row had every response solved and how many had none solved, which is what the filter
curriculum retires tasks on. Everything is plain Python numbers, so ``state_dict`` round-trips exactly.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

SOLVED = 1.0 - 1e-9  # a score at or above this counts as solved (scores are in [0, 1])

# difficulty buckets by the running pass rate, for per-difficulty metrics
BUCKETS = ("new", "hard", "medium", "easy")


@dataclass
class TaskRecord:
    observations: int = 0
    rate: float = 0.0  # exponential moving average of the mean score per observation
    solved_streak: int = 0  # observations in a row where every response was solved
    failed_streak: int = 0  # observations in a row where no response scored above 0

    def as_list(self) -> list:
        return [self.observations, self.rate, self.solved_streak, self.failed_streak]


class DifficultyTracker:
    """Running pass rates per task id. ``alpha`` weighs the newest observation (1.0 = only the latest);
    the first observation sets the rate outright."""

    def __init__(self, alpha: float = 0.5, hard_below: float = 0.2, easy_above: float = 0.8):
        if not 0 < alpha <= 1:
            raise ValueError(f"alpha must be in (0, 1], got {alpha}")
        if not 0 <= hard_below <= easy_above <= 1:
            raise ValueError(f"need 0 <= hard_below <= easy_above <= 1, got {hard_below}, {easy_above}")
        self.alpha, self.hard_below, self.easy_above = alpha, hard_below, easy_above
        self.records: dict[str, TaskRecord] = {}

    def update(self, task_id: str, scores: list[float]) -> TaskRecord:
        if not scores:
            raise ValueError(f"task {task_id!r}: no scores to observe")
        record = self.records.setdefault(task_id, TaskRecord())
        mean = sum(scores) / len(scores)
        record.rate = mean if record.observations == 0 else (1 - self.alpha) * record.rate + self.alpha * mean
        record.observations += 1
        record.solved_streak = record.solved_streak + 1 if all(s >= SOLVED for s in scores) else 0
        record.failed_streak = record.failed_streak + 1 if all(s <= 0.0 for s in scores) else 0
        return record

    def rate(self, task_id: str) -> float | None:
        """The running pass rate, or None for a task never observed."""
        record = self.records.get(task_id)
        return record.rate if record else None

    def record(self, task_id: str) -> TaskRecord | None:
        return self.records.get(task_id)

    def bucket(self, task_id: str) -> str:
        """``new`` (never observed), ``hard`` (rate < hard_below), ``easy`` (rate > easy_above) or ``medium``."""
        rate = self.rate(task_id)
        if rate is None:
            return "new"
        return "hard" if rate < self.hard_below else "easy" if rate > self.easy_above else "medium"

    def state_dict(self) -> dict[str, Any]:
        return {"alpha": self.alpha, "hard_below": self.hard_below, "easy_above": self.easy_above,
                "records": {task_id: r.as_list() for task_id, r in self.records.items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.alpha, self.hard_below, self.easy_above = state["alpha"], state["hard_below"], state["easy_above"]
        self.records = {task_id: TaskRecord(int(n), float(rate), int(s), int(f))
                        for task_id, (n, rate, s, f) in state["records"].items()}
