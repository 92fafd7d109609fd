"""JSONL task files (docs/api.md, "Data rows"): one JSON object per line, e.g. {"prompt": "12+34=", "reference": "46"}.

A bad row stops loading with a DataError naming the file, the line and the field, before any training starts:
    data/train.jsonl:7: field 'prompt': missing (expected a string or a list of chat messages)
A row whose images cannot be used (unreadable, truncated, too large, not a regular file, or a count of image
placeholders that does not match them) is dropped instead, with a warning naming its file, line and reason and a
count of the rows dropped; the rest of the data loads (an error when no row is left).
"""

from __future__ import annotations

import difflib
import json
import os
import warnings
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from rlvr.jsonl import write_jsonl  # noqa: F401  (re-exported: the one JSONL writer)
from rlvr.tasks.base import DataError, Prompt, Task

_PROMPT_EXPECTED = "expected a string or a list of chat messages"
_MESSAGE_EXPECTED = "expected an object with string 'role' and 'content'"
_PART_EXPECTED = "expected {'type': 'text', 'text': ...} or {'type': 'image'}"
_IMAGES_EXPECTED = "expected a list of image file paths (relative to the data file) or encoded images"
# Text that VLM processors read as an image placeholder (LLaVA, Qwen2-VL, Llama 3.2 Vision, Gemma 3): in a plain-text
# prompt with images it stands for one of the row's images, so its count must match them.
IMAGE_PLACEHOLDERS = ("<image>", "<|image_pad|>", "<|image|>", "<start_of_image>")
CHAT_ROLES = ("system", "developer", "user", "assistant", "tool", "ipython", "function")  # what chat templates render


def load_jsonl(
    path: str | os.PathLike[str],
    *,
    prompt_field: str = "prompt",
    reference_field: str = "reference",
    id_field: str = "id",
    verifier_field: str = "verifier",
) -> list[Task]:
    """Every task in a JSONL file. Blank lines are skipped; fields other than the known ones go into ``meta``
    (a row's own "meta" object wins on a clash). A missing id becomes ``"<file name>:<line>"``."""
    where = os.fspath(path)
    fields = (prompt_field, reference_field, id_field, verifier_field)
    base = Path(where).parent
    located = (
        (f"{where}:{lineno}", f"on line {lineno}",
         task_or_drop(_task_from_row, row, f"{where}:{lineno}", f"{Path(where).name}:{lineno}", fields, base))
        for lineno, row in iter_objects(path)
    )
    return unique_tasks(located, where, id_field)


class BadImageRow(DataError):
    """A row whose images cannot be used: the loaders drop it (with a warning) and keep the other rows."""


def task_or_drop(make, *args) -> Task | BadImageRow:
    """``make(*args)``, or the BadImageRow it raised (``unique_tasks`` drops that row)."""
    try:
        return make(*args)
    except BadImageRow as exc:
        return exc


def unique_tasks(located: Iterable[tuple[str, str, Task | BadImageRow]], where: str, id_field: str) -> list[Task]:
    """The tasks of (location, how a later duplicate refers to it, task) triples; a repeated id or no task at
    all is a DataError naming the row. A BadImageRow in place of a task is dropped with a warning naming it, and
    one more warning counts the drops."""
    tasks: list[Task] = []
    first: dict[str, str] = {}
    dropped: list[str] = []
    for loc, label, task in located:
        if isinstance(task, BadImageRow):
            dropped.append(str(task))
            warnings.warn(f"dropped a row: {task}", stacklevel=2)
            continue
        if task.id in first:
            raise DataError(f"{loc}: field '{id_field}': duplicate id {task.id!r} (first used {first[task.id]})")
        first[task.id] = label
        tasks.append(task)
    if dropped and not tasks:
        raise DataError(f"{where}: all {len(dropped)} rows dropped for their images; the first: {dropped[0]}")
    if not tasks:
        raise DataError(f"{where}: no rows (the file is empty or has only blank lines)")
    if dropped:
        warnings.warn(f"{where}: dropped {len(dropped)} of {len(dropped) + len(tasks)} rows for their images "
                      f"(each named above); {len(tasks)} kept", stacklevel=2)
    return tasks


def iter_objects(path: str | os.PathLike[str]) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) for each non-blank line; a line that is not a JSON object is a DataError naming it."""
    where = os.fspath(path)
    try:
        fh = open(path, "rb")
    except FileNotFoundError:
        raise DataError(f"{where}: file not found") from None
    except IsADirectoryError:
        raise DataError(f"{where}: is a directory, expected a JSONL file") from None
    except OSError as exc:
        raise DataError(f"{where}: cannot read: {exc.strerror or exc}") from None
    with fh:
        for lineno, raw in enumerate(fh, start=1):
            loc = f"{where}:{lineno}"
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise DataError(f"{loc}: not valid UTF-8 (byte {exc.start} of the line)") from None
            if lineno == 1:
                line = line.removeprefix("\ufeff")
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DataError(f"{loc}: invalid JSON: {exc.msg} (column {exc.colno})") from None
            except RecursionError:
                raise DataError(f"{loc}: invalid JSON: nested too deeply") from None
            except ValueError as exc:  # e.g. an integer past Python's digit limit
                raise DataError(f"{loc}: invalid JSON: {exc}") from None
            if not isinstance(row, dict):
                raise DataError(f"{loc}: expected a JSON object, got {_kind(row)}")
            yield lineno, row


def read_rows(path: str | os.PathLike[str], *, required: Sequence[str] = ()) -> list[dict[str, Any]]:
    """All objects of a JSONL file, each checked to have the ``required`` fields."""
    rows = []
    for lineno, row in iter_objects(path):
        for name in required:
            if name not in row:
                raise DataError(f"{os.fspath(path)}:{lineno}: field '{name}': missing")
        rows.append(row)
    if not rows:
        raise DataError(f"{os.fspath(path)}: no rows (the file is empty or has only blank lines)")
    return rows


def _task_from_row(row: dict[str, Any], loc: str, default_id: str, fields: tuple[str, str, str, str],
                   base: Path | None = None) -> Task:
    """The task of one row; ``base`` is the folder that relative image paths start from (the data file's)."""
    prompt_field, reference_field, id_field, verifier_field = fields

    def fail(field: str, problem: str) -> DataError:
        return DataError(f"{loc}: field '{field}': {problem}")

    if prompt_field not in row:
        raise fail(prompt_field, f"missing ({_PROMPT_EXPECTED})")
    prompt = check_prompt(row[prompt_field], lambda problem: fail(prompt_field, problem))

    if reference_field not in row:
        raise fail(reference_field, "missing (expected the answer the verifier checks against)")
    reference = row[reference_field]
    if reference is None:
        raise fail(reference_field, "is null (expected the answer the verifier checks against)")

    task_id = row.get(id_field)
    if task_id is None:
        task_id = default_id
    elif isinstance(task_id, int) and not isinstance(task_id, bool):
        task_id = str(task_id)
    elif not isinstance(task_id, str) or not task_id:
        raise fail(id_field, f"got {_kind(task_id)} (expected a non-empty string or an integer)")

    verifier = row.get(verifier_field)
    if verifier is not None and (not isinstance(verifier, str) or not verifier.strip()):
        raise fail(verifier_field, f"got {_kind(verifier)} (expected a verifier name)")

    options = row.get("verifier_options")
    if options is not None and not isinstance(options, dict):
        raise fail("verifier_options", f"got {_kind(options)} (expected an object of options)")
    if options or isinstance(reference, (dict, list)):
        # deferred: importing rlvr.verifiers loads every verifier (sympy among them); plain rows skip it
        from rlvr.verifiers.row_options import task_problem

        problem = task_problem(options, reference)
        if problem:
            raise DataError(f"{loc}: {problem}")
    meta = row.get("meta")
    if meta is not None and not isinstance(meta, dict):
        raise fail("meta", f"got {_kind(meta)} (expected an object)")

    env = row.get("env")
    if env is not None and (not isinstance(env, str) or not env.strip()):
        raise fail("env", f"got {_kind(env)} (expected an environment name)")
    env_options = row.get("env_options")
    if env_options is not None and not isinstance(env_options, dict):
        raise fail("env_options", f"got {_kind(env_options)} (expected an object of options)")

    def drop(field: str, problem: str) -> BadImageRow:
        return BadImageRow(f"{loc}: field '{field}': {problem}")

    images = check_images(row["images"], base, lambda problem: drop("images", problem)) \
        if row.get("images") is not None else ()
    # As the encoder places images (rlvr.models.prompts.encode_multimodal): plain text by its image token (none: all
    # before the text), chat messages by {"type": "image"} parts (none: one per image); text in chat messages, and in
    # rows without images, is tokenized as plain text, so a placeholder spelled there is no image.
    placed = len(placeholder_text(prompt)) if isinstance(prompt, str) else image_parts(prompt)
    if images and placed and placed != len(images) or not images and not isinstance(prompt, str) and placed:
        raise drop(prompt_field, f"shows {placed} image(s) but field 'images' has {len(images)}")

    known = {prompt_field, reference_field, id_field, verifier_field, "verifier_options", "meta", "env", "env_options",
             "images"}
    extra = {key: value for key, value in row.items() if key not in known}
    return Task(
        prompt=prompt,
        reference=reference,
        id=task_id,
        verifier=verifier,
        verifier_options=options or {},
        meta={**extra, **(meta or {})},
        env=env,
        env_options=env_options or {},
        images=images,
    )


def image_parts(prompt: Prompt) -> int:
    """How many images a prompt places with {"type": "image"} content parts."""
    if isinstance(prompt, str):
        return 0
    return sum(1 for m in prompt if isinstance(m["content"], list) for part in m["content"] if part["type"] == "image")


def placeholder_text(prompt: Prompt) -> list[str]:
    """Each image placeholder (``IMAGE_PLACEHOLDERS``) written in the prompt's text, in order of kind."""
    if isinstance(prompt, str):
        texts = [prompt]
    else:
        texts = [m["content"] if isinstance(m["content"], str) else "" for m in prompt]
        texts += [part.get("text", "") for m in prompt if isinstance(m["content"], list) for part in m["content"]
                  if part.get("type") == "text"]
    return [token for token in IMAGE_PLACEHOLDERS for text in texts for _ in range(text.count(token))]


def check_images(value: Any, base: Path | None, fail) -> tuple:
    """A row's images as Task.images (file paths, resolved against ``base``, or encoded bytes), each one checked to
    exist and to be an image a reader can open; or ``fail(problem)`` raised naming the bad one. Accepts what the
    datasets loader gives for its Image feature too: {"bytes": ..., "path": ...} objects and PIL images."""
    if not isinstance(value, (list, tuple)):
        raise fail(f"got {_kind(value)} ({_IMAGES_EXPECTED})")
    images = []
    for i, image in enumerate(value):
        if isinstance(image, dict):  # datasets' Image feature without decoding
            image = image.get("bytes") or image.get("path")
        if hasattr(image, "save") and hasattr(image, "mode"):  # a decoded PIL image
            import io

            buffer = io.BytesIO()
            image.save(buffer, format="PNG")
            image = buffer.getvalue()
        if isinstance(image, str) and image.strip():
            path = Path(image)
            image = str(path if path.is_absolute() or base is None else base / path)
        elif not isinstance(image, (bytes, bytearray)) or not image:
            raise fail(f"image at index {i}: got {_kind(image)} ({_IMAGES_EXPECTED})")
        problem = unreadable_image(image)
        if problem:
            raise fail(f"image at index {i}: {problem}")
        images.append(bytes(image) if isinstance(image, bytearray) else image)
    return tuple(images)


def unreadable_image(image: str | bytes) -> str | None:
    """Why an image file or encoded image cannot be used (None if it can): decoded in full when the data loads
    (rlvr.models.multimodal.image_problem: a regular file, within the size limits), so a bad image drops its row
    before any training rather than failing inside sampling or a forward."""
    from rlvr.models.multimodal import image_problem

    return image_problem(image)


def check_prompt(value: Any, fail) -> Prompt:
    """The prompt (a non-empty string, or chat messages with known roles and string contents) or ``fail(problem)``
    raised."""
    if isinstance(value, str):
        if not value.strip():
            raise fail(f"empty string ({_PROMPT_EXPECTED})")
        return value
    if not isinstance(value, list):
        raise fail(f"got {_kind(value)} ({_PROMPT_EXPECTED})")
    if not value:
        raise fail(f"empty list ({_PROMPT_EXPECTED})")
    for i, message in enumerate(value):
        if not isinstance(message, dict):
            raise fail(f"message at index {i}: got {_kind(message)} ({_MESSAGE_EXPECTED})")
        for key in ("role", "content"):
            if key not in message:
                raise fail(f"message at index {i}: missing '{key}' ({_MESSAGE_EXPECTED})")
            if key == "content" and isinstance(message[key], list):
                _check_parts(message[key], i, fail)
            elif not isinstance(message[key], str):
                raise fail(f"message at index {i}: '{key}' is {_kind(message[key])} (expected a string)")
        role = message["role"]
        if not role.strip():
            raise fail(f"message at index {i}: 'role' is empty (expected e.g. 'system', 'user' or 'assistant')")
        if role not in CHAT_ROLES:  # a chat template silently drops a role it does not know, and the text with it
            close = difflib.get_close_matches(role.strip().lower(), CHAT_ROLES, n=1, cutoff=0.5)
            hint = f"did you mean '{close[0]}'? " if close else ""
            raise fail(f"message at index {i}: unknown role {role!r} ({hint}expected one of {', '.join(CHAT_ROLES)})")
    return [dict(message) for message in value]


def _check_parts(parts: list, i: int, fail) -> None:
    """Content parts of a multimodal chat message: text parts with a string, image parts (the row's ``images``
    fill them in order)."""
    if not parts:
        raise fail(f"message at index {i}: 'content' is an empty list ({_PART_EXPECTED})")
    for j, part in enumerate(parts):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text" and isinstance(part.get("text"), str):
            continue
        if kind == "image":
            continue
        raise fail(f"message at index {i}: 'content' is a list whose part {j} is "
                   f"{_kind(part) if kind is None else repr(part)} ({_PART_EXPECTED})")


def _kind(value: Any) -> str:
    """The JSON name of a value's type, for messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a blank string" if not value.strip() else "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__
