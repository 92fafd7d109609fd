"""Tables of rows on local disk: JSONL, JSON, parquet, arrow and CSV files, and folders written by
``datasets.Dataset.save_to_disk``. Nothing is ever downloaded.

    for where, row in iter_rows("data/train.parquet"): ...   # where = "data/train.parquet: row 3"

JSONL is read line by line without any dependency (locations name the line). Every other layout goes through
the ``datasets`` library (the ``data`` extra), whose rows are numbered from 0 as ``datasets`` numbers them.
A saved DatasetDict folder needs a split: ``folder@train``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rlvr.tasks.base import DataError

# file suffix -> the ``datasets`` builder that reads it
BUILDERS = {".parquet": "parquet", ".arrow": "arrow", ".csv": "csv", ".json": "json"}
JSONL_SUFFIXES = (".jsonl", ".ndjson")


def needs_datasets(what: str):
    """Import ``datasets`` or fail with an error that names the extra to install."""
    try:
        import datasets
    except ImportError:
        raise DataError(f"{what}: reading it needs the 'datasets' library: pip install 'rlvr[data]'") from None
    datasets.disable_progress_bars()
    return datasets


def is_table(path: str) -> bool:
    """Whether ``path`` (with an optional ``@split``) names a file or dataset folder this module reads."""
    file, _ = split_suffix(path)
    p = Path(file)
    return p.is_dir() or p.suffix.lower() in (*BUILDERS, *JSONL_SUFFIXES)


def split_suffix(path: str) -> tuple[str, str | None]:
    """``folder@train`` -> (folder, "train"); a path whose ``@`` belongs to the name is left whole."""
    head, at, split = path.rpartition("@")
    if at and head and split and "/" not in split and not os.path.exists(path):
        return head, split
    return path, None


def iter_rows(path: str | os.PathLike[str]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(location, row) for every row of a table; the location names the file and the line or row."""
    from rlvr.tasks.jsonl import iter_objects

    file, split = split_suffix(os.fspath(path))
    p = Path(file)
    if not p.exists():
        raise DataError(f"{file}: file not found")
    if p.is_dir():
        yield from _rows(_load_saved(file, split), file)
        return
    if split is not None:
        raise DataError(f"{file}: '@{split}' selects a split of a saved dataset folder, but this is a file")
    suffix = p.suffix.lower()
    if suffix in JSONL_SUFFIXES:
        for lineno, row in iter_objects(file):
            yield f"{file}:{lineno}", row
        return
    if suffix not in BUILDERS:
        known = ", ".join(sorted((*BUILDERS, *JSONL_SUFFIXES)))
        raise DataError(f"{file}: unknown file type {p.suffix!r} (expected one of {known}, or a saved dataset folder)")
    datasets = needs_datasets(file)
    try:
        table = datasets.load_dataset(BUILDERS[suffix], data_files=os.path.abspath(file), split="train")
    except Exception as exc:  # the builders raise many types; all mean the same: unreadable
        if "corresponds to no data" in str(exc):  # how `datasets` reports a table with a header and no rows
            raise DataError(f"{file}: no rows") from None
        raise DataError(f"{file}: cannot read as {BUILDERS[suffix]}: {_first_line(exc)}") from None
    yield from _rows(table, file)


def _load_saved(folder: str, split: str | None):
    if not any((Path(folder) / name).is_file() for name in ("dataset_dict.json", "dataset_info.json", "state.json")):
        raise DataError(f"{folder}: is a directory, expected a data file or a folder written by datasets' "
                        "save_to_disk (it holds dataset_info.json or dataset_dict.json)")
    datasets = needs_datasets(folder)
    try:
        loaded = datasets.load_from_disk(folder)
    except Exception as exc:
        raise DataError(f"{folder}: not a saved dataset folder (datasets.save_to_disk): {_first_line(exc)}") from None
    if isinstance(loaded, datasets.DatasetDict):
        if split is None:
            raise DataError(f"{folder}: holds splits {', '.join(loaded)}; pick one as {folder}@SPLIT")
        if split not in loaded:
            raise DataError(f"{folder}: no split {split!r}; it holds {', '.join(loaded)}")
        return loaded[split]
    if split is not None:
        raise DataError(f"{folder}: holds one dataset without splits, so '@{split}' cannot be applied")
    return loaded


def _rows(table, where: str) -> Iterator[tuple[str, dict[str, Any]]]:
    for index, row in enumerate(table):
        yield f"{where}: row {index}", dict(row)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def read_table(path: str | os.PathLike[str]) -> list[tuple[str, dict[str, Any]]]:
    """Every row of a table; an empty table is a DataError."""
    rows = list(iter_rows(path))
    if not rows:
        raise DataError(f"{os.fspath(path)}: no rows")
    return rows
