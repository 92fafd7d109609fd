"""`rlvr demo --agent` end to end in miniature (the full demo is measured by running it, not in the suite)."""

import json
import re
import subprocess
import sys

from rlvr.demo.agent import run_agent_demo

LAST_LINE = re.compile(r"^demo: pass@1 before=\d+\.\d% after=\d+\.\d% on \d+ held-out tasks \(agent\)$")


def test_agent_demo_pipeline_in_miniature(tmp_path, capsys):
    result = run_agent_demo(tmp_path, seed=0, progress=False, sft_steps=3, rl_steps=2, heldout_tasks=8,
                            sft_transcripts_n=50)
    lines = capsys.readouterr().out.strip().splitlines()
    assert LAST_LINE.match(lines[-1]), lines[-1]
    assert lines[-1].endswith("on 8 held-out tasks (agent)")
    saved = json.loads((tmp_path / "result.json").read_text())
    assert saved["n_heldout"] == 8 and 0.0 <= saved["after_without_tools"] <= 1.0
    summary = json.loads((tmp_path / "heldout" / "heldout-after-rl.json").read_text())
    assert {"turns", "tool_calls", "tool_error_rate"} <= set(summary)
    rows = [json.loads(line) for line in (tmp_path / "rl" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2] and all("turns_mean" in r for r in rows)
    assert 0.0 <= result.before <= 1.0 and (tmp_path / "rl" / "checkpoint-2").is_dir()


def test_agent_flag_on_the_command_line():
    out = subprocess.run([sys.executable, "-m", "rlvr.cli", "demo", "--help"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "--agent" in out.stdout
