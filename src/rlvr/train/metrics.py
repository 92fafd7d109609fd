"""Per-step metrics: one JSON object per line in metrics.jsonl, and TensorBoard when asked."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rlvr.jsonl import append_jsonl, read_jsonl


class MetricsLog:
    def __init__(self, run_dir: Path, *, tensorboard: bool = False):
        self.path = run_dir / "metrics.jsonl"
        self._tb = None
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError as exc:
                raise RuntimeError("train.tensorboard=true needs the tensorboard package: pip install tensorboard") from exc
            self._tb = SummaryWriter(str(run_dir / "tensorboard"))

    def truncate_after(self, step: int) -> None:
        """Keep only the lines of steps <= ``step`` (used when resuming, so each step appears once)."""
        if not self.path.exists():
            return
        kept = [line for line in self.path.read_text().splitlines() if _step_of(line) is not None and _step_of(line) <= step]
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text("".join(line + "\n" for line in kept))
        tmp.replace(self.path)

    def write(self, row: dict[str, Any]) -> None:
        append_jsonl(self.path, row)
        if self._tb is not None:
            for key, value in row.items():
                if key != "step" and isinstance(value, (int, float)):
                    self._tb.add_scalar(key, value, row["step"])

    def close(self) -> None:
        if self._tb is not None:
            self._tb.close()


def _step_of(line: str) -> int | None:
    """The step of a metrics line; None for a blank line or one torn by a kill in the middle of writing it."""
    try:
        row = json.loads(line)
    except json.JSONDecodeError:
        return None
    return row.get("step") if isinstance(row, dict) and isinstance(row.get("step"), int) else None


def read_metrics(run_dir: str | Path) -> list[dict[str, Any]]:
    return read_jsonl(Path(run_dir) / "metrics.jsonl")
