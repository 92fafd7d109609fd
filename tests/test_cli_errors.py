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

    monkeypatch.setattr(rlvr.tasks.jsonl, "read_rows", broken)
    code = cli.main(["verify", "--verifier", "exact", "--input", str(rows)])
    err = capsys.readouterr().err
    assert code == 1
    assert "Traceback (most recent call last)" in err and "in broken" in err
    assert "internal error" in err and "please report it" in err


def test_a_config_error_names_the_key(tmp_path, capsys):
    code = cli.main(["train", str(tmp_path / "none.yaml")])
    err = capsys.readouterr().err
    assert code == 2 and "none.yaml" in err and "Traceback" not in err
