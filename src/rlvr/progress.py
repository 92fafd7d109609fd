"""A progress bar for long work (rich), silent when disabled."""

from __future__ import annotations

import contextlib
from typing import Iterator

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn


class _Bar:
    def __init__(self, progress: Progress | None, task_id):
        self._progress, self._task = progress, task_id

    def advance(self, status: str = "") -> None:
        if self._progress is not None:
            self._progress.update(self._task, advance=1, status=status)


@contextlib.contextmanager
def progress_bar(total: int, label: str, *, enabled: bool = True, completed: int = 0) -> Iterator[_Bar]:
    if not enabled:
        yield _Bar(None, None)
        return
    progress = Progress(
        TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[status]}"),
        TimeElapsedColumn(), TimeRemainingColumn(), transient=False,
    )
    with progress:
        task_id = progress.add_task(label, total=total, completed=completed, status="")
        yield _Bar(progress, task_id)
