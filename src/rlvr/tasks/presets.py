"""Dataset presets: local files (any layout tables.py reads) in the shapes common datasets ship in, as Tasks.

    load_tasks("gsm8k:data/gsm8k_test.parquet")   # {"question": ..., "answer": "... #### 72"}
    load_tasks("math:data/math500.jsonl")         # {"problem": ..., "solution": "... \\boxed{3}"} (or "answer")
    load_tasks("apps:data/apps_test.parquet")     # {"question": ..., "input_output": "{\"inputs\": ...}"}

| preset        | prompt from                       | reference                                 | verifier |
|---------------|-----------------------------------|-------------------------------------------|----------|
| gsm8k         | question                          | the text after "####" in answer           | math     |
| math, math500 | problem                           | answer, else the last \\boxed{} of solution | math     |
| aime          | problem or question               | answer                                    | math     |
| deepscaler    | problem                           | answer, else the last \\boxed{} of solution | math     |
| dapo          | prompt (chat messages or text)    | reward_model.ground_truth                 | math     |
| apps, taco    | question                          | input_output: stdin/stdout or fn_name calls | code   |
| codecontests  | description                       | public + private (+ generated) tests      | code     |
| humaneval     | prompt (the function stub)        | test + check(entry_point)                 | code     |
| mbpp          | text (+ the tests it must pass)   | test_setup_code + test_list               | code     |
| ifeval        | prompt                            | instruction_id_list + kwargs              | ifeval   |

Nothing is downloaded: point a preset at a file you have. The row's other fields stay in ``Task.meta``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

from rlvr.tasks.base import DataError, Prompt, Task
from rlvr.tasks.files import RowFormat, default_id, dress, source_name
from rlvr.tasks.prompting import fill_template
from rlvr.tasks.tables import iter_rows


def _field(row: dict, names: tuple[str, ...], where: str) -> Any:
    for name in names:
        if name in row and row[name] not in (None, ""):
            return row[name]
    raise DataError(f"{where}: field {' or '.join(repr(n) for n in names)}: missing")


def _text(row: dict, names: tuple[str, ...], where: str) -> str:
    value = _field(row, names, where)
    if not isinstance(value, str):
        raise DataError(f"{where}: field {names[0]!r}: expected a string, got {type(value).__name__}")
    return value


def _json_field(row: dict, name: str, where: str) -> Any:
    value = _field(row, (name,), where)
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError as exc:
            raise DataError(f"{where}: field '{name}': not valid JSON ({exc})") from None
    return value


# ------------------------------------------------------------------------------------------------- math


def _last_boxed(solution: str, where: str, field: str) -> str:
    from rlvr.verifiers.math.extract import boxed_all

    boxes = boxed_all(solution)
    if not boxes:
        raise DataError(f"{where}: field '{field}': no \\boxed{{...}} answer (and no 'answer' field)")
    return boxes[-1].strip()


def _gsm8k(row: dict, where: str) -> tuple[Prompt, Any]:
    answer = _text(row, ("answer",), where)
    if "####" not in answer:
        raise DataError(f"{where}: field 'answer': no '#### <final answer>' line")
    return _text(row, ("question",), where), answer.rsplit("####", 1)[1].strip().replace(",", "")


def _math(row: dict, where: str) -> tuple[Prompt, Any]:
    prompt = _text(row, ("problem",), where)
    if row.get("answer") not in (None, ""):
        return prompt, str(row["answer"]).strip()
    return prompt, _last_boxed(_text(row, ("solution",), where), where, "solution")


def _aime(row: dict, where: str) -> tuple[Prompt, Any]:
    return _text(row, ("problem", "question"), where), str(_field(row, ("answer",), where)).strip()


def _dapo(row: dict, where: str) -> tuple[Prompt, Any]:
    prompt = _field(row, ("prompt",), where)
    if isinstance(prompt, list):
        prompt = [{"role": str(m.get("role")), "content": str(m.get("content"))} for m in prompt if isinstance(m, dict)]
        if not prompt:
            raise DataError(f"{where}: field 'prompt': expected chat messages with role and content")
    elif not isinstance(prompt, str):
        raise DataError(f"{where}: field 'prompt': expected a string or chat messages, got {type(prompt).__name__}")
    reward_model = _field(row, ("reward_model",), where)
    if not isinstance(reward_model, dict) or reward_model.get("ground_truth") in (None, ""):
        raise DataError(f"{where}: field 'reward_model.ground_truth': missing")
    return prompt, str(reward_model["ground_truth"]).strip()


# ------------------------------------------------------------------------------------------------- code


def _lines(value: Any) -> str:
    """An APPS/TACO input or output: a string, or a list of lines."""
    if isinstance(value, list):
        return "\n".join(str(v) for v in value) + "\n"
    return str(value)


def _call_test(fn_name: str, args: Any, expected: Any) -> str:
    """An assert calling ``fn_name`` as APPS' call-based tests do: a tuple result counts as a list, and an
    expected value wrapped in a one-element list also matches its element."""
    args = args if isinstance(args, list) else [args]
    return (
        f"_result = {fn_name}(*{args!r})\n"
        "_result = list(_result) if isinstance(_result, tuple) else _result\n"
        f"_expected = {expected!r}\n"
        "assert _result == _expected or (isinstance(_expected, list) and len(_expected) == 1 "
        "and _result == _expected[0])"
    )


def _apps(row: dict, where: str) -> tuple[Prompt, Any]:
    prompt = _text(row, ("question",), where)
    spec = _json_field(row, "input_output", where)
    if not isinstance(spec, dict) or not isinstance(spec.get("inputs"), list) or not isinstance(spec.get("outputs"), list):
        raise DataError(f"{where}: field 'input_output': expected an object with lists 'inputs' and 'outputs'")
    inputs, outputs = spec["inputs"], spec["outputs"]
    if not inputs or len(inputs) != len(outputs):
        raise DataError(f"{where}: field 'input_output': {len(inputs)} inputs but {len(outputs)} outputs")
    if spec.get("fn_name"):
        fn = str(spec["fn_name"])
        return prompt, {"language": "python", "tests": [_call_test(fn, a, e) for a, e in zip(inputs, outputs)]}
    return prompt, {"language": "python", "io": [{"input": _lines(i), "output": _lines(o)} for i, o in zip(inputs, outputs)]}


def _codecontests(row: dict, where: str) -> tuple[Prompt, Any]:
    prompt = _text(row, ("description",), where)
    cases = []
    for name in ("public_tests", "private_tests", "generated_tests"):
        tests = row.get(name)
        if tests in (None, ""):
            continue
        if not isinstance(tests, dict) or len(tests.get("input") or []) != len(tests.get("output") or []):
            raise DataError(f"{where}: field '{name}': expected {{'input': [...], 'output': [...]}} of equal length")
        cases += [{"input": str(i), "output": str(o)} for i, o in zip(tests["input"], tests["output"])]
    if not cases:
        raise DataError(f"{where}: field 'public_tests' or 'private_tests': no test cases")
    return prompt, {"language": "python", "io": cases}


def _humaneval(row: dict, where: str) -> tuple[Prompt, Any]:
    prompt, test = _text(row, ("prompt",), where), _text(row, ("test",), where)
    entry = _text(row, ("entry_point",), where)
    return prompt, {"language": "python", "tests": [f"{test}\ncheck({entry})"]}


def _mbpp(row: dict, where: str) -> tuple[Prompt, Any]:
    text = _text(row, ("text", "prompt"), where)
    tests = _field(row, ("test_list",), where)
    if not isinstance(tests, list) or not tests or not all(isinstance(t, str) for t in tests):
        raise DataError(f"{where}: field 'test_list': expected a non-empty list of assert strings")
    setup = row.get("test_setup_code") or ""
    prompt = f"{text}\nYour code should pass these tests:\n" + "\n".join(tests)
    return prompt, {"language": "python", "tests": [f"{setup}\n{t}" if setup else t for t in tests]}


# ------------------------------------------------------------------------------------------------ ifeval


def _ifeval(row: dict, where: str) -> tuple[Prompt, Any]:
    ids = _field(row, ("instruction_id_list",), where)
    kwargs = row.get("kwargs") or [{}] * len(ids)
    if not isinstance(ids, list) or not isinstance(kwargs, list) or len(ids) != len(kwargs):
        raise DataError(f"{where}: field 'kwargs': expected one object per entry of 'instruction_id_list'")
    # parquet fills absent keys of a struct column with nulls; IFEval's checkers take only the keys given
    kwargs = [{k: v for k, v in (kw or {}).items() if v is not None} for kw in kwargs]
    return _text(row, ("prompt",), where), {"instruction_id_list": ids, "kwargs": kwargs}


# preset -> (how a row becomes (prompt, reference), verifier, the fields holding the prompt, the id fields)
Reader = Callable[[dict, str], tuple[Prompt, Any]]
PRESETS: dict[str, tuple[Reader, str, tuple[str, ...], tuple[str, ...]]] = {
    "gsm8k": (_gsm8k, "math", ("question",), ("id",)),
    "math": (_math, "math", ("problem",), ("id", "unique_id")),
    "math500": (_math, "math", ("problem",), ("id", "unique_id")),
    "aime": (_aime, "math", ("problem", "question"), ("id", "ID")),
    "deepscaler": (_math, "math", ("problem",), ("id",)),
    "dapo": (_dapo, "math", ("prompt",), ("id",)),
    "apps": (_apps, "code", ("question",), ("problem_id", "id")),
    "taco": (_apps, "code", ("question",), ("id",)),
    "codecontests": (_codecontests, "code", ("description",), ("name", "id")),
    "humaneval": (_humaneval, "code", ("prompt",), ("task_id",)),
    "mbpp": (_mbpp, "code", ("text", "prompt"), ("task_id",)),
    "ifeval": (_ifeval, "ifeval", ("prompt",), ("key", "id")),
}


def _difficulty(row: dict) -> Any:
    """A row's own difficulty label where its dataset has one (MATH's "level", TACO's "difficulty")."""
    for name in ("level", "difficulty"):
        value = row.get(name)
        if isinstance(value, (str, int, float)) and not isinstance(value, bool) and value != "":
            return value
    return None


def load_preset(name: str, path: str | os.PathLike[str], fmt: RowFormat = RowFormat()) -> list[Task]:
    """Tasks from a file in preset ``name``'s layout. ``fmt.template`` (filled from the row) replaces the
    preset's prompt; ``fmt.system_prompt`` is applied to every prompt."""
    if name not in PRESETS:
        raise DataError(f"unknown dataset preset {name!r}; known: {', '.join(sorted(PRESETS))}")
    reader, verifier, prompt_fields, id_fields = PRESETS[name]
    where_file = os.fspath(path)
    label = f"{name}:{source_name(where_file)}"
    tasks, seen = [], set()
    for index, (where, row) in enumerate(iter_rows(where_file)):
        prompt, reference = reader(row, where)
        if fmt.template is not None:
            prompt = fill_template(fmt.template, row, where)
        task_id = next((str(row[f]) for f in id_fields if row.get(f) not in (None, "")), default_id(where_file, where, index))
        if task_id in seen:
            raise DataError(f"{where}: field {id_fields[0]!r}: duplicate id {task_id!r}")
        seen.add(task_id)
        meta = {k: v for k, v in row.items() if k not in prompt_fields}
        if (difficulty := _difficulty(row)) is not None:
            meta["difficulty"] = difficulty
        task = Task(prompt=prompt, reference=reference, id=task_id, verifier=verifier, meta=meta)
        tasks.append(dress(task, fmt, label))
    if not tasks:
        raise DataError(f"{where_file}: no rows (the file is empty or has only blank lines)")
    return tasks


__all__ = ["PRESETS", "load_preset"]
