"""JSONL task loading: good files load, and every bad row names file, line and field."""

import json

import pytest

from rlvr.tasks.base import DataError, Task
from rlvr.tasks.jsonl import load_jsonl, write_jsonl


def write_lines(path, lines):
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_good_file_with_string_and_chat_prompts(tmp_path):
    chat = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2="}]
    path = write_lines(
        tmp_path / "train.jsonl",
        [
            json.dumps({"prompt": "12+34=", "reference": "46"}),
            "",
            "   ",
            json.dumps({"prompt": chat, "reference": 4, "id": "q2", "verifier": "numeric", "source": "gsm8k"}),
            json.dumps({"prompt": "x", "reference": ["a", "b"], "id": 7, "verifier_options": {"rel_tol": 0.1},
                        "meta": {"level": 3, "source": "mine"}, "source": "theirs"}),
        ],
    )
    tasks = load_jsonl(path)
    assert tasks == [
        Task(prompt="12+34=", reference="46", id="train.jsonl:1"),
        Task(prompt=chat, reference=4, id="q2", verifier="numeric", meta={"source": "gsm8k"}),
        Task(prompt="x", reference=["a", "b"], id="7", verifier_options={"rel_tol": 0.1},
             meta={"level": 3, "source": "mine"}),
    ]


def test_custom_field_names(tmp_path):
    path = write_lines(
        tmp_path / "custom.jsonl",
        [json.dumps({"question": "What is 6*7?", "answer": "42", "uid": "a1", "checker": "numeric", "prompt": "kept"})],
    )
    names = dict(prompt_field="question", reference_field="answer", id_field="uid", verifier_field="checker")
    (task,) = load_jsonl(path, **names)
    assert (task.prompt, task.reference, task.id, task.verifier) == ("What is 6*7?", "42", "a1", "numeric")
    assert task.meta == {"prompt": "kept"}
    with pytest.raises(DataError, match=r"custom\.jsonl:1: field 'text': missing"):
        load_jsonl(path, prompt_field="text")
    with pytest.raises(DataError, match=r"custom\.jsonl:1: field 'solution': missing"):
        load_jsonl(path, prompt_field="question", reference_field="solution")


def test_utf8_bom_and_non_ascii(tmp_path):
    path = tmp_path / "bom.jsonl"
    row = json.dumps({"prompt": "Größe?", "reference": "√2"}, ensure_ascii=False)
    path.write_bytes("\ufeff".encode() + row.encode())
    (task,) = load_jsonl(path)
    assert (task.prompt, task.reference) == ("Größe?", "√2")


GOOD = json.dumps({"prompt": "p", "reference": "r"})

# (bad line written as line 3 after two good ones, field named in the message or None, text in the message)
BAD_ROWS = [
    ('{"prompt": "p", "reference": ', None, "invalid JSON"),
    ("[1, 2]", None, "expected a JSON object, got a list"),
    ('"just a string"', None, "expected a JSON object"),
    ('{"reference": "r"}', "prompt", "missing (expected a string or a list of chat messages)"),
    ('{"prompt": 5, "reference": "r"}', "prompt", "got a number"),
    ('{"prompt": null, "reference": "r"}', "prompt", "got null"),
    ('{"prompt": "  ", "reference": "r"}', "prompt", "empty string"),
    ('{"prompt": [], "reference": "r"}', "prompt", "empty list"),
    ('{"prompt": ["hi"], "reference": "r"}', "prompt", "message at index 0: got a string"),
    ('{"prompt": [{"role": "user", "content": "a"}, {"role": "user"}], "reference": "r"}', "prompt",
     "message at index 1: missing 'content'"),
    ('{"prompt": [{"content": "a"}], "reference": "r"}', "prompt", "message at index 0: missing 'role'"),
    ('{"prompt": [{"role": "user", "content": ["a"]}], "reference": "r"}', "prompt",
     "message at index 0: 'content' is a list"),
    ('{"prompt": [{"role": "", "content": "a"}], "reference": "r"}', "prompt", "message at index 0: 'role' is empty"),
    ('{"prompt": "p"}', "reference", "missing"),
    ('{"prompt": "p", "reference": null}', "reference", "is null"),
    ('{"prompt": "p", "reference": "r", "verifier": 3}', "verifier", "got a number"),
    ('{"prompt": "p", "reference": "r", "verifier": ""}', "verifier", "got a blank string"),
    ('{"prompt": "p", "reference": "r", "verifier_options": [1]}', "verifier_options", "got a list"),
    ('{"prompt": "p", "reference": "r", "meta": "x"}', "meta", "got a string"),
    ('{"prompt": "p", "reference": "r", "id": {"a": 1}}', "id", "got an object"),
    ('{"prompt": "p", "reference": "r", "id": "train.jsonl:1"}', "id",
     "duplicate id 'train.jsonl:1' (first used on line 1)"),
]


@pytest.mark.parametrize("bad, field, text", BAD_ROWS)
def test_bad_row_message_names_file_line_and_field(tmp_path, bad, field, text):
    path = write_lines(tmp_path / "train.jsonl", [GOOD, GOOD.replace("}", ', "id": "two"}'), bad, "not even json"])
    with pytest.raises(DataError) as info:
        load_jsonl(path)
    message = str(info.value)
    assert message.startswith(f"{path}:3: "), message  # the FIRST error, with file:line
    if field is not None:
        assert f"field '{field}': " in message, message
    assert text in message, message


def test_invalid_json_message_includes_the_decoder_error(tmp_path):
    path = write_lines(tmp_path / "t.jsonl", ['{"prompt": "p" "reference": "r"}'])
    with pytest.raises(DataError, match=r"t\.jsonl:1: invalid JSON: Expecting ',' delimiter \(column 16\)"):
        load_jsonl(path)


def test_deeply_nested_and_non_utf8_lines(tmp_path):
    path = write_lines(tmp_path / "deep.jsonl", [GOOD, "[" * 100_000])
    with pytest.raises(DataError, match=r"deep\.jsonl:2: invalid JSON"):
        load_jsonl(path)
    path = tmp_path / "latin1.jsonl"
    path.write_bytes(GOOD.encode() + b"\n" + '{"prompt": "é", "reference": "r"}'.encode("latin-1") + b"\n")
    with pytest.raises(DataError, match=r"latin1\.jsonl:2: not valid UTF-8"):
        load_jsonl(path)


def test_missing_file_names_the_path(tmp_path):
    path = tmp_path / "data" / "nope.jsonl"
    with pytest.raises(DataError, match="nope.jsonl: file not found"):
        load_jsonl(path)
    with pytest.raises(DataError, match="is a directory"):
        load_jsonl(tmp_path)


@pytest.mark.parametrize("content", ["", "\n\n   \n"])
def test_empty_file(tmp_path, content):
    path = tmp_path / "empty.jsonl"
    path.write_text(content)
    with pytest.raises(DataError, match=r"empty\.jsonl: no rows"):
        load_jsonl(path)


def test_write_then_load_round_trip(tmp_path):
    rows = [
        {"prompt": "12+34=", "reference": "46", "id": "a"},
        {"prompt": [{"role": "user", "content": "héllo"}], "reference": {"tests": ["assert True"]}, "id": "b"},
    ]
    path = tmp_path / "out" / "rows.jsonl"
    assert write_jsonl(path, iter(rows)) == 2
    assert [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()] == rows
    loaded = [(t.id, t.prompt, t.reference) for t in load_jsonl(path)]
    assert loaded == [(r["id"], r["prompt"], r["reference"]) for r in rows]
    with pytest.raises(TypeError):
        write_jsonl(path, [["not", "a", "dict"]])


def test_data_error_is_a_value_error():
    assert issubclass(DataError, ValueError)
