"""What the policy wrote, step by step: ``RUN_DIR/samples.jsonl`` holds ``train.log_samples`` rows per step (the
task, its prompt, the response, its reward and the verifier's verdict: status, reason, what it extracted), spread
over the step's groups, and the run's loggers get them as a table (wandb, mlflow, tensorboard). A resumed run drops the rows of steps after its checkpoint, so each step appears once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rlvr.train.metrics import MetricsLog


def pick_rows(n_rows: int, groups: list[int], wanted: int) -> list[int]:
    """Up to ``wanted`` row indices: the first response of each group in turn, then the second of each, ..."""
    by_group: dict[int, list[int]] = {}
    for row, group in enumerate(groups):
        by_group.setdefault(group, []).append(row)
    picked: list[int] = []
    depth = 0
    while len(picked) < min(wanted, n_rows):
        layer = [rows[depth] for rows in by_group.values() if depth < len(rows)]
        if not layer:
            break
        picked += layer[: wanted - len(picked)]
        depth += 1
    return sorted(picked)


class SamplesLog(MetricsLog):
    """samples.jsonl, and the same rows as a table in each of the run's loggers that has one (wandb, mlflow,
    tensorboard); the loggers belong to the run's MetricsLog, which closes them."""

    def __init__(self, run_dir: Path, per_step: int, loggers: list | None = None):
        self.path = run_dir / "samples.jsonl"
        self.loggers = []
        self.tables = list(loggers or [])
        self.per_step = per_step

    def write_step(self, step: int, samples: Any, rewards: list[float]) -> None:
        if self.per_step <= 0:
            return
        groups = samples.batch.group_index.tolist()
        rows = []
        for i in pick_rows(len(samples.responses), groups, self.per_step):
            task, verdict = samples.tasks[i], samples.verdicts[i]
            rows.append({"step": step, "task_id": task.id, "group": int(groups[i]), "prompt": task.prompt,
                         "response": samples.responses[i], "reward": float(rewards[i]), "score": verdict.score,
                         "status": verdict.status.value, "reason": verdict.reason, "extracted": verdict.extracted,
                         "truncated": bool(samples.batch.truncated[i])})
            self.write(rows[-1])
        for logger in self.tables:
            logger.log_samples(rows, step)
