"""Command-line frictions: overrides after a flag, and `rlvr verify --output` keeping each verdict's details."""

import json

from rlvr.cli import main
from rlvr.train.metrics import read_metrics


def test_overrides_may_follow_resume(tiny_model_dir, tmp_path):
    args = ["train", "examples/arithmetic.yaml", f"model.path={tiny_model_dir}", f"train.out={tmp_path}",
            "train.progress=false", "data.prompts_per_step=2", "rollout.group_size=2", "rollout.max_new_tokens=3"]
    assert main(args + ["train.steps=1"]) == 0
    assert main(args + ["--resume", "train.steps=2"]) == 0
    assert [r["step"] for r in read_metrics(tmp_path)] == [1, 2]


def test_an_unknown_flag_is_still_refused(capsys):
    try:
        main(["train", "examples/arithmetic.yaml", "--resume", "--no-such-flag"])
    except SystemExit as exc:
        assert exc.code == 2
    assert "unrecognized arguments: --no-such-flag" in capsys.readouterr().err


def test_verify_output_keeps_the_details(tmp_path):
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps({"response": "```python\ndef add(a, b):\n    return a + b\n```",
                                "reference": {"language": "python", "tests": ["assert add(1, 2) == 3",
                                                                              "assert add(2, 2) == 5"]}}) + "\n")
    assert main(["verify", "--verifier", "code", "--input", str(rows), "--output", str(tmp_path / "out.jsonl")]) == 0
    out = json.loads((tmp_path / "out.jsonl").read_text())
    assert out["status"] == "partial"
    assert [t["status"] for t in out["details"]["tests"]] == ["passed", "failed"]


def test_an_engine_whose_package_is_missing_is_one_line_before_work(tiny_model_dir, tmp_path, capsys):
    from rlvr.rollout import register_engine, unregister_engine

    register_engine("test.needs_missing", requires=("rlvr_no_such_package",), install="pip install it")(
        lambda model, tokenizer, **options: None)
    try:
        for argv in (["train", "examples/arithmetic.yaml", f"model.path={tiny_model_dir}", f"train.out={tmp_path / 'run'}",
                      "rollout.engine=test.needs_missing"],
                     ["eval", "--model", str(tiny_model_dir), "--data", "arithmetic:eval:n=2", "--engine",
                      "test.needs_missing"]):
            assert main(argv) == 2
            err = capsys.readouterr().err
            assert err.count("\n") == 1 and "needs rlvr_no_such_package" in err and "pip install it" in err
        assert not (tmp_path / "run").exists()
    finally:
        unregister_engine("test.needs_missing")
