"""JSON Lines files: the one writer and reader of every JSONL file rlvr produces (metrics, per-task evaluation
rows, verified rows). Writes of whole files are atomic: a kill mid-write leaves the previous file."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any


def dumps(row: dict[str, Any]) -> str:
    """One line of JSON (UTF-8 kept as is), without the newline."""
    if not isinstance(row, dict):
        raise TypeError(f"expected a dict, got {type(row).__name__}")
    return json.dumps(row, ensure_ascii=False)


def write_jsonl(path: str | os.PathLike[str], rows: Iterable[dict[str, Any]]) -> int:
    """Write one JSON object per line, creating parent folders, through a temporary file renamed into place;
    returns the number of rows written."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    count = 0
    with open(tmp, "w", encoding="utf-8", newline="\n") as fh:
        for row in rows:
            try:
                fh.write(dumps(row) + "\n")
            except TypeError as exc:
                raise TypeError(f"row {count}: {exc}") from None
            count += 1
    tmp.replace(path)
    return count


def append_jsonl(path: str | os.PathLike[str], row: dict[str, Any]) -> None:
    """Append one row (a line is written whole, with a single write call)."""
    with open(path, "a", encoding="utf-8", newline="\n") as fh:
        fh.write(dumps(row) + "\n")


def read_jsonl(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Every non-blank line parsed as JSON."""
    text = Path(path).read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines() if line.strip()]
