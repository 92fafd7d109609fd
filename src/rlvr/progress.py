"""A progress bar for long work: rich's bar on a terminal; elsewhere (a log file, a pipe, a Ray actor whose output
the driver relays) one flushed line on stderr at every tenth of the work and at least every 30 s, since a bar
redrawn in place reaches a log only when it ends. Silent when disabled."""

from __future__ import annotations

import contextlib
import sys
import time
from typing import Iterator

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

LINE_EVERY_S = 30.0


class _Bar:
    def __init__(self, progress: Progress | None, task_id):
        self._progress, self._task = progress, task_id

    def advance(self, status: str = "") -> None:
        if self._progress is not None:
            self._progress.update(self._task, advance=1, status=status)


class _Lines:
    """Progress as plain lines, for output that is not a terminal."""

    def __init__(self, label: str, total: int, completed: int, stream):
        self.label, self.total, self.done, self.stream = label, total, completed, stream
        self.every = max(1, total // 10)
        self.started = self.last = time.monotonic()

    def advance(self, status: str = "") -> None:
        self.done += 1
        now = time.monotonic()
        if self.done % self.every == 0 or self.done == self.total or now - self.last >= LINE_EVERY_S:
            self.last = now
            self.stream.write(f"{self.label} {self.done}/{self.total} {status} ({now - self.started:.0f} s)\n"
                              .replace("  ", " "))
            self.stream.flush()


@contextlib.contextmanager
def progress_bar(total: int, label: str, *, enabled: bool = True, completed: int = 0,
                 stream=None) -> Iterator[_Bar | _Lines]:
    if not enabled:
        yield _Bar(None, None)
        return
    if stream is not None or not sys.stdout.isatty():  # lines go to stderr, beside the command's own output
        yield _Lines(label, total, completed, stream if stream is not None else sys.stderr)
        return
    progress = Progress(
        TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[status]}"),
        TimeElapsedColumn(), TimeRemainingColumn(), transient=False,
    )
    with progress:
        task_id = progress.add_task(label, total=total, completed=completed, status="")
        yield _Bar(progress, task_id)
