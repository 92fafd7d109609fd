"""`rlvr demo --vlm`: the run report's held-out images with the model's answers, and the demo in miniature (slow):
its line, its files, a final checkpoint that AutoModelForImageTextToText + AutoProcessor load and `rlvr eval`
answers image prompts with."""

from __future__ import annotations

import base64
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from rlvr.train.run import schedule_factor
from rlvr.eval.run_report import write_run_report
from rlvr.jsonl import write_jsonl
from rlvr.tasks import load_tasks

ROOT = Path(__file__).resolve().parents[1]
LINE = re.compile(r"^demo: pass@1 before=\d+\.\d% after=\d+\.\d% on (\d+) held-out tasks \(vlm\)$")


def test_report_shows_heldout_images_with_the_answers_before_and_after(tmp_path):
    run = tmp_path / "run"
    tasks = load_tasks("vision:classify:n=3")
    write_jsonl(run / "eval" / "heldout.images.jsonl",
                [{"task_id": t.id, "question": "What colour is the only object?", "reference": t.reference,
                  "png_base64": base64.b64encode(t.images[0]).decode()} for t in tasks[:2]])
    for name, answers in (("heldout-before-rl", ["blue", "red"]), ("heldout-after-rl", ["green", "<b>x</b>"])):
        summary = {"pass@1": {"value": 0.5, "ci95": [0.0, 1.0]}}
        (run / "eval" / f"{name}.json").write_text(json.dumps(summary))
        write_jsonl(run / "eval" / f"{name}.tasks.jsonl",
                    [{"task_id": t.id, "samples": [{"response": a}]} for t, a in zip(tasks, answers)])
    page = write_run_report(run).read_text()
    section = page[page.index("Held-out images"):]
    assert section.count('class="shown"') == 2
    assert base64.b64encode(tasks[0].images[0]).decode() in section
    row = section[section.index(tasks[1].id):]
    row = row[:row.index("</tr>")]
    assert "red" in row and "&lt;b&gt;x&lt;/b&gt;" in row  # each eval's answer, escaped
    assert section.index("heldout-after-rl") > 0 and section.index("heldout-before-rl") > 0
    (run / "eval" / "heldout.images.jsonl").unlink()
    assert "Held-out images" not in write_run_report(run).read_text()  # nothing to show: no section


@pytest.mark.parametrize("step, steps, warmup, factor", [
    (0, 200, 10, 0.1),  # the first step already learns, at 1/warmup of the peak
    (9, 200, 10, 1.0),  # the warm-up ends at the peak
    (10, 200, 10, 1.0),  # the cosine starts at the peak
    (105, 200, 10, 0.5),  # half-way through the cosine
    (199, 200, 10, 0.5 * (1 + math.cos(math.pi * 189 / 190))),  # the last step is just above 0
    (3, 5, 10, 0.4),  # fewer steps than the warm-up: a ramp only
    (0, 1, 0, 1.0),  # no warm-up, one step: the peak
])
def test_warm_start_learning_rate_is_a_warmup_then_a_cosine(step, steps, warmup, factor):
    assert schedule_factor(step, steps, warmup=warmup, schedule="cosine") == pytest.approx(factor)


def _env():
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT / "src")}


@pytest.mark.slow
def test_vlm_demo_in_miniature_and_its_checkpoint(tmp_path):
    from transformers import AutoModelForImageTextToText, AutoProcessor

    code = ("from pathlib import Path\nfrom rlvr.demo.vlm import run_vlm_demo\n"
            f"run_vlm_demo(Path({str(tmp_path / 'demo')!r}), seed=0, progress=False, sft_steps=5, rl_steps=2, "
            "heldout_tasks_n=10)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_env(), timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    match = LINE.match(done.stdout.strip().splitlines()[-1])
    assert match and match.group(1) == "10", done.stdout
    result = json.loads((tmp_path / "demo" / "result.json").read_text())
    final = Path(result["final_checkpoint"])
    assert final.name == "checkpoint-2"
    AutoModelForImageTextToText.from_pretrained(final)
    assert type(AutoProcessor.from_pretrained(final)).__name__ == "LlavaProcessor"
    report = (tmp_path / "demo" / "report" / "report.html").read_text()
    assert report.count('class="shown"') == 8  # four images of each question, with the answers before and after

    spec = "vision:classify:split=eval,colours=6,max_size=2,heldout_percent=30,n=4"
    done = subprocess.run([sys.executable, "-m", "rlvr.cli", "eval", "--model", str(final), "--data", spec,
                           "--samples", "1", "--max-new-tokens", "10", "--out", str(tmp_path / "eval.json")],
                          capture_output=True, text=True, env=_env(), timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [json.loads(line) for line in (tmp_path / "eval.tasks.jsonl").read_text().splitlines()]
    assert len(rows) == 4 and all(row["verifier"] == "exact" and row["samples"][0]["response"] for row in rows)
