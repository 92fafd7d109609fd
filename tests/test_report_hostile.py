"""`rlvr report` over a run whose files hold hostile content finishes with a bounded page that shows it all as
escaped text; a malformed file is one error line naming it (and the line) and a non-zero exit, never a traceback."""

from __future__ import annotations

import base64
import io
import json
import re
from pathlib import Path

import pytest

from rlvr.cli import main
from rlvr.eval import run_report
from rlvr.eval.run_report import MAX_ROWS, MAX_SERIES

INJECT = '</script><script>alert("x")</script><img src=x onerror=alert(1)>'
CONTROL = "\x00\x07\x1b[31m\x7f\x9b"
DEEP = "<div>" * 20_000
DOLLAR = r"$\frac{$ _hidden {{bad"
NAME = "<script>\"x'&"  # markup that can be part of a file name


def tiny_png() -> str:
    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", (2, 2), (255, 0, 0)).save(buffer, format="PNG")
    return base64.b64encode(buffer.getvalue()).decode()


def nested(depth: int):
    value: object = INJECT
    for _ in range(depth):
        value = [value]
    return value


def write_lines(path: Path, lines: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")


def hostile_run(root: Path) -> Path:
    run = root / f"run{NAME}"
    big_int = "9" * 5000
    lines = []
    for step in range(1, 301):
        row = {"step": step, "reward_mean": [0.5, float("nan"), float("inf")][step % 3], "loss": 1.0 / step,
               "kl": 1e308 if step % 7 else -1e308, "note": INJECT * 200 + DEEP + CONTROL + "\ud800",
               **{f"reward/{INJECT}{k}{DOLLAR}": step * k for k in range(400)}}
        lines.append(json.dumps(row, ensure_ascii=True).replace('"loss"', f'"big": {big_int}, "loss"'))
    lines.append(json.dumps({"step": INJECT, "entropy": {"nested": nested(300)}}))
    write_lines(run / "metrics.jsonl", lines)
    (run / "config.yaml").write_text(("model: {path: '" + INJECT + "'}\n") * 20_000 + CONTROL)
    summary = {"model": INJECT * 1000, "data": nested(200), "step": float("nan"),
               **{f"pass@{k}{INJECT}": {"value": 0.5, "ci95": [0.4, 0.6]} for k in range(3 * MAX_ROWS)},
               "pass@1": {"value": 1e400, "ci95": ["<b>", None]}}
    for step in (1, 2, 3):
        (run / "eval").mkdir(parents=True, exist_ok=True)
        stepped = {"step": step, **{f"pass@{k}": {"value": k / 100, "ci95": [0, float("inf")]} for k in range(1, 50)}}
        (run / "eval" / f"step{step}.json").write_text(json.dumps(stepped))
    (run / "eval" / "hostile.json").write_text(json.dumps(summary).replace("1e+400", "1e400"))
    comparison = {"models": {f"m{i}": f"{DOLLAR}{INJECT}" for i in range(2 * MAX_ROWS)},
                  "curve": {f"m{i}": {"1": 0.1, "2": "<i>", "x": 3, "4": float("nan"), "8": 0.4}
                            for i in range(2 * MAX_ROWS)},
                  "ci95": {"m0": {"1": [0, 1], "2": "bad"}}, "difference": {INJECT: {"value": 0.1}},
                  "n_tasks": INJECT}
    (run / "eval" / f"compare{NAME}.json").write_text(json.dumps(comparison))
    png = tiny_png()
    write_lines(run / "eval" / "shown.images.jsonl", [
        json.dumps({"task_id": "t1", "question": INJECT + CONTROL, "reference": nested(400), "png_base64": png}),
        json.dumps({"task_id": "t2", "question": "q", "png_base64": '"><script>alert(2)</script>'}),
        json.dumps({"task_id": "t3", "question": "q", "png_base64": "A" * (run_report.MAX_IMAGE_BASE64 + 4)}),
    ])
    write_lines(run / "eval" / f"before{NAME}.tasks.jsonl", [
        json.dumps({"task_id": "t1", "samples": [{"response": INJECT * 5000 + DEEP}]})])
    return run


def test_a_hostile_run_gives_a_bounded_page_with_no_markup_of_its_own(tmp_path, capsys):
    run = hostile_run(tmp_path)
    assert main(["report", str(run), "--out", str(tmp_path / "out")]) == 0
    page = (tmp_path / "out" / "report.html").read_text(encoding="utf-8")
    assert len(page) < 8_000_000  # the inputs hold far more than that
    assert page.count("<script>") == 1  # the page's own
    assert "<script>alert" not in page and "<img src=x" not in page and "<div><div>" not in page
    assert "onerror=alert" not in page.replace("&lt;img src=x onerror=alert(1)&gt;", "")
    assert "&lt;/script&gt;&lt;script&gt;alert(&quot;x&quot;)" in page  # shown, as text
    assert not re.search(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff]", page)
    assert "\\x1b[31m" in page  # control characters shown as escapes
    assert "more characters)" in page and "more metrics left out" in page and "more models left out" in page
    assert page.count("<tr>") <= 6 * MAX_ROWS
    images = re.findall(r'src="data:image/png;base64,([^"]*)"', page)
    assert all(re.fullmatch(r"[A-Za-z0-9+/]*={0,2}", data) for data in images)
    shown = [i for i in re.findall(r'<img class="shown"[^>]*>', page)]
    assert len(shown) == 1  # the valid image only
    assert len(list((tmp_path / "out").glob("*.png"))) <= 14
    assert "Traceback" not in capsys.readouterr().err


def test_many_components_are_capped_per_chart(tmp_path, monkeypatch):
    plotted = []
    real = run_report.plot_metrics_by_step
    monkeypatch.setattr(run_report, "plot_metrics_by_step",
                        lambda path, series, **kw: plotted.append(series) or real(path, series, **kw))
    rows = [{"step": s, **{f"reward/c{k}": k * s for k in range(100)}} for s in range(1, 10_001)]
    write_lines(tmp_path / "run" / "metrics.jsonl", [json.dumps(r) for r in rows])
    run_report.write_run_report(tmp_path / "run")
    assert plotted and all(len(series) <= MAX_SERIES for series in plotted)
    assert all(len(steps) <= run_report.MAX_POINTS for series in plotted for steps, _ in series.values())


# (file in the run, its content, what the one error line names): truncated, binary, empty, too deep, wrong shape
MALFORMED = [
    ("metrics.jsonl", '{"step": 1, "loss": 0.5}\n{"step": 2, "lo', "metrics.jsonl:2: invalid JSON"),
    ("metrics.jsonl", b"\xff\xfe\x00garbage\x80\n", "metrics.jsonl: not valid UTF-8"),
    ("metrics.jsonl", "[" * 100_000 + "\n", "metrics.jsonl:1: invalid JSON: nested too deeply"),
    ("metrics.jsonl", "\n\n", "metrics.jsonl is empty"),
    ("eval/a.json", '{"pass@1": {"value": 0.5', "eval/a.json: invalid JSON"),
    ("eval/a.json", "", "eval/a.json: invalid JSON"),
    ("eval/a.json", bytes(range(256)), "eval/a.json: not valid UTF-8"),
    ("eval/a.json", "{" * 50_000, "eval/a.json: invalid JSON"),
    ("eval/a.json", '{"models": {"a": "x"}, "curve": {"a": {"k": "v"}}}', "eval/a.json: no curve"),
    ("eval/b.tasks.jsonl", '{"task_id": "t", "samples": [\n', "eval/b.tasks.jsonl:1: invalid JSON"),
    ("eval/b.images.jsonl", '{"task_id": 1}\n{"png_base64": "AA==", "question": tru\n', "eval/b.images.jsonl:2"),
]


def test_a_fifo_among_the_eval_files_is_named_not_read(tmp_path, capsys):
    import os

    run = tmp_path / "run"
    write_lines(run / "metrics.jsonl", [json.dumps({"step": 1, "loss": 0.5})])
    write_lines(run / "eval" / "s.images.jsonl", [json.dumps({"task_id": "t", "png_base64": tiny_png()})])
    (run / "eval" / "s.json").write_text(json.dumps({"pass@1": {"value": 0.5}}))
    os.mkfifo(run / "eval" / "b.tasks.jsonl")
    assert main(["report", str(run)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "b.tasks.jsonl: not a regular file" in err


@pytest.mark.parametrize("name, content, names", MALFORMED)
def test_a_malformed_file_is_one_line_naming_it(tmp_path, capsys, name, content, names):
    run = tmp_path / "run"
    if not name.startswith("metrics"):
        write_lines(run / "metrics.jsonl", [json.dumps({"step": 1, "loss": 0.5})])
    if name.endswith("jsonl") and name.startswith("eval/"):
        (run / "eval").mkdir(parents=True, exist_ok=True)
        (run / "eval" / "s.json").write_text(json.dumps({"pass@1": {"value": 0.5}}))
        if name.endswith(".tasks.jsonl"):  # answers are read for the images shown
            write_lines(run / "eval" / "s.images.jsonl", [json.dumps({"task_id": "t", "png_base64": tiny_png()})])
    path = run / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    assert main(["report", str(run)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert names.replace("/", "/") in err.replace(str(run) + "/", ""), err
