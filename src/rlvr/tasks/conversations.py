"""Conversations for supervised fine-tuning in TRL's conversational format: one row per conversation, its turns in
a ``messages`` field ([{"role": "user", "content": ...}, {"role": "assistant", "content": ...}, ...]); the loss is
on the assistant turns (rlvr.train.sft.conversation_tokens).

    tasks = load_conversations("data/chat.jsonl")     # Task.prompt = the whole conversation

A row without the field, with an unknown role, or without an assistant turn stops loading with its file and line.
"""

from __future__ import annotations

import os

from rlvr.tasks.base import DataError, Task
from rlvr.tasks.jsonl import check_prompt, unique_tasks
from rlvr.tasks.tables import iter_rows

MESSAGES_FIELD = "messages"


def is_conversational(source: str | os.PathLike[str], field: str = MESSAGES_FIELD) -> bool:
    """Whether a local table's first row holds ``field`` (TRL's conversational rows); False for generator specs and
    mixtures, which are not tables of conversations."""
    try:
        first = next(iter(iter_rows(source)), None)
    except DataError:
        return False
    return first is not None and field in first[1]


def load_conversations(source: str | os.PathLike[str], field: str = MESSAGES_FIELD) -> list[Task]:
    def located():
        for index, (where, row) in enumerate(iter_rows(source)):
            def fail(problem: str) -> DataError:
                return DataError(f"{where}: field '{field}': {problem}")

            if field not in row:
                raise fail("missing (expected the conversation's messages, TRL's conversational format)")
            messages = check_prompt(row[field], fail)
            if not isinstance(messages, list) or not any(m["role"] == "assistant" for m in messages):
                raise fail("no assistant turn to train on")
            task_id = str(row.get("id", f"{os.fspath(source)}#{index}"))
            yield where, f"at {where}", Task(messages, None, task_id, meta={"conversation": True})

    return unique_tasks(located(), os.fspath(source), "id")
