"""Per-step metrics: one JSON object per line in metrics.jsonl, and the loggers of ``train.loggers`` (tensorboard,
wandb, mlflow, or one registered with ``register_logger``)."""

from __future__ import annotations

import importlib
import json
import os
from pathlib import Path
from typing import Any, Callable

from rlvr.jsonl import append_jsonl, read_jsonl
from rlvr.errors import UserError


class MetricsLogger:
    """A destination for each step's metrics besides metrics.jsonl (which is always written). ``package`` and
    ``extra`` name what it imports, so a missing package is reported before the run starts."""

    package: str | None = None
    extra: str | None = None

    def log(self, row: dict[str, Any], step: int) -> None:
        raise NotImplementedError

    def log_samples(self, rows: list[dict[str, Any]], step: int) -> None:
        """A step's samples (RUN_DIR/samples.jsonl's rows) as the logger's table, where it has one."""

    def close(self) -> None:
        pass


def _table(rows: list[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    """Columns and cells (text) of sample rows."""
    columns = list(rows[0]) if rows else []
    return columns, [[v if isinstance(v, str) else json.dumps(v) for v in (r[c] for c in columns)] for r in rows]


_LOGGERS: dict[str, Callable[..., MetricsLogger]] = {}


def register_logger(name: str):
    """Register ``factory(run_dir: Path, config: dict) -> MetricsLogger`` for ``train.loggers: [name]``."""
    def decorator(factory):
        _LOGGERS[name] = factory
        return factory

    return decorator


def logger_names() -> list[str]:
    return sorted(_LOGGERS)


def check_loggers(names: list[str]) -> None:
    """Fail now, with one line, for an unknown logger or one whose package is missing."""
    for name in names:
        if name not in _LOGGERS:
            raise LoggerUnavailable(f"train.loggers: unknown logger {name!r}; known: {', '.join(logger_names())}")
        factory = _LOGGERS[name]
        if getattr(factory, "package", None):
            _needs(factory.package, factory.extra or name)


def _needs(package: str, extra: str):
    try:
        return importlib.import_module(package)
    except ImportError:
        raise LoggerUnavailable(f"train.loggers: {extra} needs the {package} package: pip install 'rlvr[{extra}]'") from None


class LoggerUnavailable(UserError):
    """A logger whose package is not installed; the message names the extra to install."""


def _numbers(row: dict[str, Any]) -> dict[str, float]:
    return {k: float(v) for k, v in row.items() if k != "step" and isinstance(v, (int, float)) and not isinstance(v, bool)}


@register_logger("tensorboard")
class TensorBoardLogger(MetricsLogger):
    package, extra = "torch.utils.tensorboard", "tensorboard"

    def __init__(self, run_dir: Path, config: dict):
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(str(run_dir / "tensorboard"))

    def log(self, row, step):
        for key, value in _numbers(row).items():
            self.writer.add_scalar(key, value, step)

    def log_samples(self, rows, step):
        columns, cells = _table(rows)
        lines = [" | ".join(columns), " | ".join("---" for _ in columns)]
        lines += [" | ".join(c.replace("|", "\\|").replace("\n", " ") for c in row) for row in cells]
        self.writer.add_text("samples", "\n".join(lines), step)

    def close(self):
        self.writer.close()


@register_logger("wandb")
class WandbLogger(MetricsLogger):
    """Weights & Biases: project from $WANDB_PROJECT (default "rlvr"), run name = the run folder's name, files under
    RUN_DIR/wandb; WANDB_MODE=offline works without a network."""

    package, extra = "wandb", "wandb"

    def __init__(self, run_dir: Path, config: dict):
        wandb = _needs("wandb", "wandb")
        self.run = wandb.init(project=os.environ.get("WANDB_PROJECT", "rlvr"), name=run_dir.name, dir=str(run_dir),
                              config=config, resume="allow", reinit="create_new")

    def log(self, row, step):
        self.run.log(_numbers(row), step=step)

    def log_samples(self, rows, step):
        import wandb

        columns, cells = _table(rows)
        self.run.log({"samples": wandb.Table(columns=columns, data=cells)}, step=step)

    def close(self):
        self.run.finish()


def mlflow_name(key: str, keys) -> str:
    """The metric's MLflow name: "@" spelled "_at_", and a "/" after a prefix that is itself a metric spelled "."
    (reward_mean/on_policy beside reward_mean): MLflow's file store keeps a metric as a file, so "reward_mean" could
    not also be the folder of "reward_mean/on_policy"."""
    parts = key.split("/")
    for i in range(len(parts) - 1, 0, -1):
        if "/".join(parts[:i]) in keys:
            key = "/".join(parts[:i]) + "." + "/".join(parts[i:])
            break
    return key.replace("@", "_at_")


@register_logger("mlflow")
class MlflowLogger(MetricsLogger):
    """MLflow: the tracking URI from $MLFLOW_TRACKING_URI (a server or database: MLflow's recommended set-ups), else
    a local file store in RUN_DIR/mlruns (which needs no server; MLflow 3 asks for MLFLOW_ALLOW_FILE_STORE=true,
    set here for that store only); the config as flattened params."""

    package, extra = "mlflow", "mlflow"

    def __init__(self, run_dir: Path, config: dict):
        mlflow = _needs("mlflow", "mlflow")
        if not os.environ.get("MLFLOW_TRACKING_URI"):
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
            mlflow.set_tracking_uri((run_dir / "mlruns").resolve().as_uri())
        self.mlflow = mlflow
        self.run = mlflow.start_run(run_name=run_dir.name)
        flat = {f"{section}.{key}": str(value)[:500] for section, body in config.items() if isinstance(body, dict)
                for key, value in body.items()}
        mlflow.log_params(flat)

    def log(self, row, step):
        numbers = _numbers(row)
        self.mlflow.log_metrics({mlflow_name(k, numbers): v for k, v in numbers.items()}, step=step)

    def log_samples(self, rows, step):
        columns, cells = _table(rows)
        self.mlflow.log_table({c: [row[i] for row in cells] for i, c in enumerate(columns)},
                              artifact_file=f"samples/step-{step}.json")

    def close(self):
        self.mlflow.end_run()


class MetricsLog:
    """metrics.jsonl (one JSON object per step) plus the configured loggers."""

    def __init__(self, run_dir: Path, *, tensorboard: bool = False, loggers: list[str] = (), config: dict | None = None):
        self.path = run_dir / "metrics.jsonl"
        names = list(dict.fromkeys([*loggers, *(["tensorboard"] if tensorboard else [])]))
        self.loggers = [_LOGGERS[name](run_dir, config or {}) for name in names]

    def truncate_after(self, step: int) -> None:
        """Keep only the lines of steps <= ``step`` (used when resuming, so each step appears once)."""
        if not self.path.exists():
            return
        text = self.path.read_text(encoding="utf-8", errors="replace")  # bytes a kill or a disk mangled: not a step
        kept = [line for line in text.splitlines() if _step_of(line) is not None and _step_of(line) <= step]
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text("".join(line + "\n" for line in kept))
        tmp.replace(self.path)

    def write(self, row: dict[str, Any]) -> None:
        append_jsonl(self.path, row)
        for logger in self.loggers:
            logger.log(row, row["step"])

    def close(self) -> None:
        for logger in self.loggers:
            logger.close()
        self.loggers = []


def _step_of(line: str) -> int | None:
    """The step of a metrics line; None for a blank line or one torn by a kill in the middle of writing it."""
    try:
        row = json.loads(line)
    except (ValueError, RecursionError):  # torn, or not JSON at all
        return None
    return row.get("step") if isinstance(row, dict) and isinstance(row.get("step"), int) else None


def read_metrics(run_dir: str | Path) -> list[dict[str, Any]]:
    return read_jsonl(Path(run_dir) / "metrics.jsonl")


class NullLog(MetricsLog):
    """The metrics log of a learner rank other than the main one: the main rank alone writes metrics."""

    def __init__(self):
        self.loggers = []

    def truncate_after(self, step: int) -> None:
        pass

    def write(self, row: dict[str, Any]) -> None:
        pass

    def write_step(self, *args: Any) -> None:  # the samples log's (rlvr.train.samples)
        pass
