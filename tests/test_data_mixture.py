"""Mixture specs: parts and weights parse, each task names its part, and ids must be unique across parts."""

import json

import pytest

from rlvr.tasks import DataError, load_tasks, parse_mixture
from rlvr.tasks.sources import part_label


def test_parts_and_weights():
    assert parse_mixture("a.jsonl") == [("a.jsonl", 1.0)]
    assert parse_mixture("a.jsonl@3; gsm8k:b.parquet @ 0.5 ;saved@train") == [
        ("a.jsonl", 3.0), ("gsm8k:b.parquet", 0.5), ("saved@train", 1.0)]  # a split name is not a weight
    assert parse_mixture("saved@train@2") == [("saved@train", 2.0)]


@pytest.mark.parametrize("spec, message", [("a.jsonl;;b.jsonl", "empty part"), ("a.jsonl@0", "weight 0"), ("", "empty")])
def test_bad_mixtures(spec, message):
    with pytest.raises(DataError, match=message):
        parse_mixture(spec)


def test_labels():
    assert part_label("reasoning_gym:chain_sum,gcd:size=5") == "rg:chain_sum,gcd"
    assert part_label("gsm8k:data/train.parquet") == "gsm8k:train"
    assert part_label("arithmetic:train:digits=1") == "arithmetic"
    assert part_label("data/x.jsonl") == "x"


def write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_tasks_name_their_part_and_ids_must_not_collide(tmp_path):
    a = write(tmp_path / "a.jsonl", [{"prompt": "p", "reference": "1"}])
    b = write(tmp_path / "b.jsonl", [{"prompt": "q", "reference": "2"}, {"prompt": "r", "reference": "3"}])
    tasks = load_tasks(f"{a}@2; {b}")
    assert [(t.id, t.meta["mixture"], t.meta["source"]) for t in tasks] == [
        ("a.jsonl:1", "a", "a"), ("b.jsonl:1", "b", "b"), ("b.jsonl:2", "b", "b")]
    c = write(tmp_path / "c.jsonl", [{"prompt": "s", "reference": "4", "id": "x"}])
    d = write(tmp_path / "d.jsonl", [{"prompt": "t", "reference": "5", "id": "x"}])
    with pytest.raises(DataError, match=r"task id 'x' is also in .*c\.jsonl"):
        load_tasks(f"{c}; {d}")
