"""Dataset presets: local JSONL files in the layouts the common math benchmarks ship in, read as Tasks.

    load_tasks("gsm8k:data/gsm8k_test.jsonl")   # {"question": ..., "answer": "... #### 72"}
    load_tasks("math:data/math500.jsonl")       # {"problem": ..., "solution": "... \\boxed{3}"} (or "answer")
    load_tasks("aime:data/aime24.jsonl")        # {"problem" | "question": ..., "answer": 204}

Every preset uses the "math" verifier. Nothing is downloaded: point it at a file you have.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from rlvr.tasks.base import DataError, Task
from rlvr.tasks.jsonl import iter_objects


def _field(row: dict, names: tuple[str, ...], where: str) -> Any:
    for name in names:
        if name in row and row[name] not in (None, ""):
            return row[name]
    raise DataError(f"{where}: field {' or '.join(repr(n) for n in names)}: missing")


def _gsm8k_reference(row: dict, where: str) -> str:
    answer = str(_field(row, ("answer",), where))
    if "####" not in answer:
        raise DataError(f"{where}: field 'answer': no '#### <final answer>' line")
    return answer.rsplit("####", 1)[1].strip().replace(",", "")


def _math_reference(row: dict, where: str) -> str:
    if row.get("answer") not in (None, ""):
        return str(row["answer"])
    from rlvr.verifiers.math.extract import boxed_all

    solution = str(_field(row, ("solution",), where))
    boxes = boxed_all(solution)
    if not boxes:
        raise DataError(f"{where}: field 'solution': no \\boxed{{...}} answer (and no 'answer' field)")
    return boxes[-1].strip()


def _aime_reference(row: dict, where: str) -> str:
    return str(_field(row, ("answer",), where)).strip()


# preset -> (prompt fields, tried in order; how to read the reference)
PRESETS: dict[str, tuple[tuple[str, ...], Callable[[dict, str], str]]] = {
    "gsm8k": (("question",), _gsm8k_reference),
    "math": (("problem",), _math_reference),
    "aime": (("problem", "question"), _aime_reference),
}


def load_preset(name: str, path: str | os.PathLike[str]) -> list[Task]:
    if name not in PRESETS:
        raise DataError(f"unknown dataset preset {name!r}; known: {', '.join(sorted(PRESETS))}")
    prompt_fields, reference = PRESETS[name]
    where_file = os.fspath(path)
    tasks = []
    for lineno, row in iter_objects(path):
        where = f"{where_file}:{lineno}"
        prompt = _field(row, prompt_fields, where)
        if not isinstance(prompt, str):
            raise DataError(f"{where}: field {prompt_fields[0]!r}: expected a string")
        task_id = str(row.get("id", row.get("unique_id", f"{os.path.basename(where_file)}:{lineno}")))
        meta = {k: v for k, v in row.items() if k not in prompt_fields}
        tasks.append(Task(prompt=prompt, reference=reference(row, where), id=task_id, verifier="math", meta=meta))
    if not tasks:
        raise DataError(f"{where_file}: no rows (the file is empty or has only blank lines)")
    return tasks


__all__ = ["PRESETS", "load_preset"]
