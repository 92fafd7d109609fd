"""Local dataset files through the `datasets` library: every layout loads the same tasks, field mapping,
templates and system prompts apply, and every bad row names the file, the row and the field."""

import json

import pytest

datasets = pytest.importorskip("datasets")
pa = pytest.importorskip("pyarrow")

from rlvr.tasks import DataError, load_tasks  # noqa: E402
from rlvr.tasks.files import RowFormat, load_file  # noqa: E402
from rlvr.tasks.tables import is_table  # noqa: E402

ROWS = [
    {"question": "What is 2+3?", "answer": "5", "level": 1},
    {"question": "What is 10*10?", "answer": "100", "level": 2},
    {"question": "What is 7-9?", "answer": "-2", "level": 3},
]


def write_all(tmp_path, rows=ROWS):
    """The same rows in every layout the loader reads; returns {layout: path}."""
    ds = datasets.Dataset.from_list(rows)
    paths = {}
    paths["parquet"] = tmp_path / "t.parquet"
    ds.to_parquet(paths["parquet"])
    paths["csv"] = tmp_path / "t.csv"
    ds.to_csv(paths["csv"], index=False)
    paths["jsonl"] = tmp_path / "t.jsonl"
    paths["jsonl"].write_text("".join(json.dumps(r) + "\n" for r in rows))
    paths["json"] = tmp_path / "t.json"
    paths["json"].write_text(json.dumps(rows))
    paths["arrow"] = tmp_path / "t.arrow"
    table = pa.Table.from_pylist(rows)
    with pa.OSFile(str(paths["arrow"]), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    paths["saved"] = tmp_path / "saved"
    ds.save_to_disk(paths["saved"])
    datasets.DatasetDict({"train": ds, "test": ds.select([0])}).save_to_disk(tmp_path / "saved_dict")
    paths["saved_split"] = f"{tmp_path / 'saved_dict'}@train"
    return paths


@pytest.fixture
def files(tmp_path):
    return write_all(tmp_path)


@pytest.mark.parametrize("layout", ["parquet", "csv", "jsonl", "json", "arrow", "saved", "saved_split"])
def test_every_layout_loads_the_same_rows(files, layout):
    tasks = load_tasks(str(files[layout]), prompt_field="question", reference_field="answer")
    assert [t.prompt for t in tasks] == [r["question"] for r in ROWS]
    assert [str(t.reference) for t in tasks] == [r["answer"] for r in ROWS]
    assert [t.meta["level"] for t in tasks] == [1, 2, 3]
    assert all(t.meta["source"] for t in tasks)
    assert len({t.id for t in tasks}) == 3


def test_jsonl_ids_stay_line_numbers_and_others_use_row_indices(files):
    assert [t.id for t in load_tasks(str(files["jsonl"]), prompt_field="question", reference_field="answer")] == [
        "t.jsonl:1", "t.jsonl:2", "t.jsonl:3"]
    assert [t.id for t in load_tasks(str(files["parquet"]), prompt_field="question", reference_field="answer")] == [
        "t.parquet:0", "t.parquet:1", "t.parquet:2"]


def test_a_split_of_a_saved_dict(files, tmp_path):
    tasks = load_tasks(f"{tmp_path / 'saved_dict'}@test", prompt_field="question", reference_field="answer")
    assert [t.prompt for t in tasks] == ["What is 2+3?"]


def test_template_and_system_prompt(files):
    fmt = RowFormat(prompt_field="question", reference_field="answer",
                    template="Level {level}: {question} Write \\boxed{{x}}.", system_prompt="Be brief.")
    task = load_file(files["parquet"], fmt)[1]
    assert task.prompt == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Level 2: What is 10*10? Write \\boxed{x}."},
    ]


def test_a_row_without_the_field_names_file_row_and_field(tmp_path):
    rows = [{"q": "a", "answer": "1"}, {"q": None, "answer": "2"}]
    path = tmp_path / "bad.parquet"
    datasets.Dataset.from_list(rows).to_parquet(path)
    with pytest.raises(DataError, match=r"bad\.parquet: row 1: field 'q': (got null|missing)"):
        load_tasks(str(path), prompt_field="q", reference_field="answer")
    with pytest.raises(DataError, match=r"bad\.parquet: row 0: field 'question': missing"):
        load_tasks(str(path), prompt_field="question", reference_field="answer")


def test_a_template_field_missing_names_the_row(files):
    with pytest.raises(DataError, match=r"t\.csv: row 0: field 'topic': missing \(used by data.prompt_template\)"):
        load_file(files["csv"], RowFormat(reference_field="answer", template="{topic}: {question}"))


def test_duplicate_ids_name_both_rows(tmp_path):
    path = tmp_path / "dup.parquet"
    datasets.Dataset.from_list([{"id": "a", "prompt": "x", "reference": "1"},
                                {"id": "a", "prompt": "y", "reference": "2"}]).to_parquet(path)
    with pytest.raises(DataError, match=r"dup\.parquet: row 1: field 'id': duplicate id 'a' \(first used at .*row 0\)"):
        load_tasks(str(path))


def written(path, data):
    path.write_bytes(data)
    return path


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda p: p / "missing.parquet", "file not found"),
        (lambda p: written(p / "x.xlsx", b""), "unknown file type '.xlsx'"),
        (lambda p: written(p / "broken.parquet", b"not parquet"), "cannot read as parquet"),
        (lambda p: p / "saved_dict", "holds splits train, test; pick one"),
        (lambda p: p, "is a directory, expected a data file or a folder written by datasets' save_to_disk"),
        (lambda p: f"{p / 'saved_dict'}@valid", "no split 'valid'"),
        (lambda p: f"{p / 't.parquet'}@train", "selects a split of a saved dataset folder"),
    ],
)
def test_unreadable_sources_say_why(files, tmp_path, make, message):
    with pytest.raises(DataError, match=message):
        load_tasks(str(make(tmp_path)), prompt_field="question", reference_field="answer")


def test_an_empty_table_is_an_error(tmp_path):
    path = tmp_path / "empty.parquet"
    datasets.Dataset.from_dict({"prompt": [], "reference": []}).to_parquet(path)
    with pytest.raises(DataError, match=r"empty\.parquet: no rows"):
        load_tasks(str(path))


def test_is_table():
    assert is_table("a.parquet") and is_table("b.JSONL") and not is_table("arithmetic:train")
