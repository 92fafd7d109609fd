"""Tasks: data rows from JSONL files or built-in generators (CONTRACTS.md C3)."""

from __future__ import annotations

from rlvr.tasks.base import DataError, Task
from rlvr.tasks.sampler import PromptSampler

GENERATORS = ("arithmetic",)


def load_tasks(source: str, *, prompt_field: str = "prompt", reference_field: str = "reference") -> list[Task]:
    """Tasks from a JSONL path, a built-in generator spec such as ``arithmetic:train``, or a dataset preset
    with a local file such as ``gsm8k:path.jsonl`` (presets.py)."""
    head = source.split(":", 1)[0]
    from rlvr.tasks.presets import PRESETS, load_preset

    if head in PRESETS and ":" in source:
        return load_preset(head, source.split(":", 1)[1])
    if head in GENERATORS:
        from rlvr.tasks import arithmetic

        try:
            return arithmetic.from_spec(source)
        except ValueError as exc:
            raise DataError(str(exc)) from None
    from rlvr.tasks.jsonl import load_jsonl

    return load_jsonl(source, prompt_field=prompt_field, reference_field=reference_field)


__all__ = ["DataError", "PromptSampler", "Task", "load_tasks"]
