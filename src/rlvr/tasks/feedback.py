"""What a sampler learns from the scores of the tasks it handed out, and the metrics it reports about them.

After each RL step the trainer calls ``sampler.observe(task_ids, scores)`` with one entry per scored response
(a task's ``group_size`` responses repeat its id) and logs ``sampler.metrics()``:

    source/<source>/score_mean, source/<source>/prompts         per data source (Task.meta["source"])
    difficulty/<bucket>/score_mean, difficulty/<bucket>/prompts by running pass rate before the step
                                                                (new, hard, medium, easy; difficulty.py)
    level/<label>/score_mean, level/<label>/prompts             by the row's own label (Task.meta["difficulty"],
                                                                e.g. MATH's "Level 3"), where rows have one
    data/seen_frac, data/pass_rate_mean                         tasks observed so far, their mean running rate
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from rlvr.tasks.base import Task
from rlvr.tasks.difficulty import DifficultyTracker

_UNSAFE = re.compile(r"[^A-Za-z0-9_.:@-]+")


def metric_label(value: Any) -> str:
    """A label safe inside a metric name ("Level 3" -> "Level_3")."""
    return _UNSAFE.sub("_", str(value)).strip("_") or "_"


def group_scores(task_ids: Sequence[str], scores: Sequence[float]) -> dict[str, list[float]]:
    """Scores per task id, in the order ids first appear."""
    if len(task_ids) != len(scores):
        raise ValueError(f"observe: {len(task_ids)} task ids but {len(scores)} scores")
    groups: dict[str, list[float]] = {}
    for task_id, score in zip(task_ids, scores):
        groups.setdefault(task_id, []).append(float(score))
    return groups


class Feedback:
    """Difficulty statistics of a task list: ``observe`` updates them, ``metrics`` reports the last step."""

    def __init__(self, tasks: Sequence[Task], tracker: DifficultyTracker | None = None):
        self.by_id = {task.id: task for task in tasks}
        self.tracker = tracker or DifficultyTracker()
        self._last: dict[str, float] = {}

    def observe(self, task_ids: Sequence[str], scores: Sequence[float]) -> dict[str, list[float]]:
        """Fold one step's scores into the running statistics; returns the scores grouped per task."""
        groups = group_scores(task_ids, scores)
        unknown = [task_id for task_id in groups if task_id not in self.by_id]
        if unknown:
            raise ValueError(f"observe: task id {unknown[0]!r} is not one of the sampler's tasks")
        sums: dict[str, list[float]] = {}  # metric prefix -> [sum of per-task means, prompts]
        for task_id, group in groups.items():
            task = self.by_id[task_id]
            mean = sum(group) / len(group)
            keys = [f"source/{metric_label(task.meta.get('source', 'data'))}",
                    f"difficulty/{self.tracker.bucket(task_id)}"]
            if task.meta.get("difficulty") is not None:
                keys.append(f"level/{metric_label(task.meta['difficulty'])}")
            for key in keys:
                acc = sums.setdefault(key, [0.0, 0])
                acc[0] += mean
                acc[1] += 1
            self.tracker.update(task_id, group)
        self._last = {}
        for key, (total, count) in sorted(sums.items()):
            self._last[f"{key}/score_mean"] = total / count
            self._last[f"{key}/prompts"] = count
        return groups

    def metrics(self) -> dict[str, float]:
        records = self.tracker.records
        seen = [r.rate for r in records.values()]
        return {**self._last, "data/seen_frac": len(seen) / max(1, len(self.by_id)),
                "data/pass_rate_mean": sum(seen) / len(seen) if seen else 0.0}

    def state_dict(self) -> dict[str, Any]:
        return self.tracker.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.tracker.load_state_dict(state)
