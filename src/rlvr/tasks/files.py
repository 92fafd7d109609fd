"""Tasks from a local table (tables.py) with configurable field names, a prompt template and a system prompt.

    load_file("data/train.parquet", RowFormat(prompt_field="question", reference_field="answer",
                                              system_prompt="Answer with a number."))

A row's other fields go into ``Task.meta`` as in the JSONL loader (docs/api.md, "Data rows"), and ``meta["source"]``
names the file's stem unless the row names its own source. Every error names the file, the row and the field.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path

from rlvr.tasks.base import Task
from rlvr.tasks.prompting import fill_template, with_system_prompt
from rlvr.tasks.tables import iter_rows, split_suffix


@dataclass(frozen=True)
class RowFormat:
    """Where a row keeps its parts, and how its prompt is dressed."""

    prompt_field: str = "prompt"
    reference_field: str = "reference"
    id_field: str = "id"
    verifier_field: str = "verifier"
    template: str | None = None  # e.g. "{question}\nPut the answer in \\boxed{{}}." (prompting.py)
    system_prompt: str | None = None


def source_name(path: str) -> str:
    """The label of a file in per-source metrics: its stem (``data/gsm8k_train.parquet`` -> ``gsm8k_train``)."""
    file, split = split_suffix(path)
    stem = Path(file.rstrip("/")).stem or file
    return f"{stem}@{split}" if split else stem


def default_id(file: str, loc: str, index: int) -> str:
    """The id of a row that has none: ``train.jsonl:7`` (its line, as the JSONL loader names it) in a JSONL
    file, ``train.parquet:6`` (its row index) in any other table."""
    line = loc[len(file) + 1 :]
    return f"{Path(file).name}:{line if line.isdigit() else index}"


def dress(task: Task, fmt: RowFormat, source: str) -> Task:
    """The task with the system prompt applied and ``meta["source"]`` filled in."""
    meta = task.meta if "source" in task.meta else {**task.meta, "source": source}
    return dataclasses.replace(task, prompt=with_system_prompt(task.prompt, fmt.system_prompt), meta=meta)


def load_file(path: str | os.PathLike[str], fmt: RowFormat = RowFormat()) -> list[Task]:
    """Every row of a table as a Task; duplicate ids and an empty table are errors."""
    from rlvr.tasks.jsonl import BadImageRow, _task_from_row, task_or_drop, unique_tasks

    where = os.fspath(path)
    fields = (fmt.prompt_field, fmt.reference_field, fmt.id_field, fmt.verifier_field)
    name = source_name(where)

    def located():
        for index, (loc, row) in enumerate(iter_rows(where)):
            if fmt.template is not None:
                row = {**row, fmt.prompt_field: fill_template(fmt.template, row, loc)}
            task = task_or_drop(_task_from_row, row, loc, default_id(where, loc, index), fields,
                                Path(split_suffix(where)[0]).parent)
            yield loc, f"at {loc}", task if isinstance(task, BadImageRow) else dress(task, fmt, name)

    return unique_tasks(located(), where, fmt.id_field)
