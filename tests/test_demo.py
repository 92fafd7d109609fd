"""`rlvr demo` end to end in miniature (the full demo is measured by running it, not in the suite)."""

import json
import re
import subprocess
import sys

from transformers import AutoModelForCausalLM, AutoTokenizer

from rlvr.demo import run_demo

LAST_LINE = re.compile(r"^demo: pass@1 before=\d+\.\d% after=\d+\.\d% on \d+ held-out tasks$")


def test_demo_pipeline_in_miniature(tmp_path, capsys):
    result = run_demo(tmp_path, seed=0, progress=False, sft_steps=5, rl_steps=2, heldout_tasks=20)
    lines = capsys.readouterr().out.strip().splitlines()
    assert LAST_LINE.match(lines[-1]), lines[-1]
    assert lines[-1].endswith("on 20 held-out tasks")
    assert 0.0 <= result.before <= 1.0 and 0.0 <= result.after <= 1.0
    assert json.loads((tmp_path / "result.json").read_text())["n_heldout"] == 20
    report = (tmp_path / "report" / "report.html").read_text()
    assert report.count("data:image/png;base64,") >= 2  # the training curves
    assert "heldout-before-rl.json" in report and "heldout-after-rl.json" in report  # both held-out evaluations
    final = tmp_path / "rl" / "checkpoint-2"
    AutoModelForCausalLM.from_pretrained(final)
    AutoTokenizer.from_pretrained(final)


def test_demo_command_line_flags():
    out = subprocess.run([sys.executable, "-m", "rlvr.cli", "demo", "--help"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "--out" in out.stdout and "--seed" in out.stdout
