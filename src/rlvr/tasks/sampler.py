"""Draws the prompts of each RL step: epoch-wise shuffles of the task list, resumable from its state.

Every sampler answers the same four calls: ``next(n)``, ``observe(task_ids, scores)`` after the step is
scored, ``metrics()`` for the step's log row, and ``state_dict()`` / ``load_state_dict()`` for checkpoints.
This one draws in plain epoch order whatever it observes; curriculum.py's sampler acts on what it observes.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from rlvr.tasks.base import Task
from rlvr.tasks.feedback import Feedback
from rlvr.errors import UserError


class PromptSampler:
    """Yields tasks in a seeded shuffled order, reshuffling each epoch; ``state_dict`` pins the position exactly."""

    def __init__(self, tasks: list[Task], *, seed: int, shuffle: bool = True):
        if not tasks:
            raise UserError("no tasks to sample from")
        self.tasks = tasks
        self.seed = seed
        self.shuffle = shuffle
        self.epoch = 0
        self.position = 0
        self._order = self._order_for(0)
        self.feedback = Feedback(tasks)

    def _order_for(self, epoch: int) -> list[int]:
        order = list(range(len(self.tasks)))
        if self.shuffle:
            random.Random(f"{self.seed}:{epoch}").shuffle(order)
        return order

    def next(self, n: int) -> list[Task]:
        out = []
        while len(out) < n:
            if self.position == len(self._order):
                self.epoch += 1
                self.position = 0
                self._order = self._order_for(self.epoch)
            out.append(self.tasks[self._order[self.position]])
            self.position += 1
        return out

    def observe(self, task_ids: Sequence[str], scores: Sequence[float]) -> None:
        """Record one step's scores (one entry per response); they change the metrics, not the order."""
        self.feedback.observe(task_ids, scores)

    def metrics(self) -> dict[str, float]:
        return self.feedback.metrics()

    def state_dict(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "position": self.position, "seed": self.seed, "n_tasks": len(self.tasks),
                "difficulty": self.feedback.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state["n_tasks"] != len(self.tasks):
            raise UserError(f"data changed since the checkpoint: {state['n_tasks']} tasks then, {len(self.tasks)} now")
        self.seed = state["seed"]
        self.epoch = state["epoch"]
        self.position = state["position"]
        self._order = self._order_for(self.epoch)
        if "difficulty" in state:  # absent in checkpoints written before samplers tracked difficulty
            self.feedback.load_state_dict(state["difficulty"])
