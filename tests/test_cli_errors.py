"""The command line tells a user error (one line naming what to fix, exit 2) from a bug (its traceback and a request
to report it, exit 1): a real fault never hides behind a one-line message."""

import json

import pytest

from rlvr import cli


@pytest.fixture
def rows(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps({"response": "4", "reference": "4"}) + "\n")
    return path


def test_a_user_error_is_one_line(tmp_path, capsys):
    code = cli.main(["verify", "--verifier", "no_such_verifier", "--input", str(tmp_path / "missing.jsonl")])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("rlvr verify: error:")
    assert "Traceback" not in err


@pytest.mark.parametrize("exc", [ValueError("a bug's ValueError"), KeyError("a bug's KeyError"), TypeError("a bug")])
def test_a_bug_shows_its_traceback_and_asks_for_a_report(rows, capsys, monkeypatch, exc):
    import rlvr.tasks.jsonl

    def broken(*args, **kwargs):
        raise exc

    monkeypatch.setattr(rlvr.tasks.jsonl, "iter_objects", broken)
    code = cli.main(["verify", "--verifier", "exact", "--input", str(rows)])
    err = capsys.readouterr().err
    assert code == 1
    assert "Traceback (most recent call last)" in err and "in broken" in err
    assert "internal error" in err and "please report it" in err


def test_a_config_error_names_the_key(tmp_path, capsys):
    code = cli.main(["train", str(tmp_path / "none.yaml")])
    err = capsys.readouterr().err
    assert code == 2 and "none.yaml" in err and "Traceback" not in err


# (content of `rlvr verify`'s input, what its one error line says after the file name): truncated, binary, empty,
# too deep, numbers past Python's limit, wrong types of the fields the command reads
MALFORMED_VERIFY_INPUT = [
    ('{"response": "4", "reference": "4"}\n{"response": "4", "refer', ":2: invalid JSON"),
    (b"\x89PNG\r\n\x1a\n\x00\x00\xff\xfe", ":1: not valid UTF-8"),
    ("", ": no rows"),
    ("\n \n", ": no rows"),
    ("[" * 100_000, ":1: invalid JSON: nested too deeply"),
    ('{"response": "4", "reference": 1' + "0" * 5000 + "}", ":1: invalid JSON"),
    ('["response", "reference"]', ":1: expected a JSON object"),
    ('{"response": "4"}', ":1: field 'reference': missing"),
    ('{"reference": "4"}', ":1: field 'response': missing"),
    ('{"response": "4", "reference": "4", "verifier_options": [1]}', ":1: field 'verifier_options'"),
    ('{"response": "4", "reference": "4", "verifier": {"name": "exact"}}', ":1: field 'verifier'"),
    ('{"response": "4", "reference": "4", "verifier_options": "strict"}', ":1: field 'verifier_options'"),
]


@pytest.mark.parametrize("content, says", MALFORMED_VERIFY_INPUT)
def test_malformed_verify_input_is_one_line_naming_the_file(tmp_path, capsys, content, says):
    path = tmp_path / "rows.jsonl"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    code = cli.main(["verify", "--verifier", "exact", "--input", str(path)])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert err.count("\n") == 1 and f"{path}{says}" in err, err


def test_resume_over_a_mangled_metrics_file_keeps_its_good_steps(tmp_path):
    from rlvr.train.metrics import MetricsLog

    path = tmp_path / "metrics.jsonl"
    good = [json.dumps({"step": s, "loss": 0.5}) for s in (1, 2, 3)]
    path.write_bytes(("\n".join(good) + "\n").encode() + b"\xff\xfe{garbage\n" + b"[" * 100_000 + b"\n" +
                     b'{"step": 1' + b"0" * 5000 + b"}\n")
    log = MetricsLog(tmp_path)
    log.truncate_after(2)
    assert path.read_text().splitlines() == good[:2]
