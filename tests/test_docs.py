"""The examples in docs/ run as written."""

import os
import re
import subprocess
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent.parent / "docs"


def python_blocks(name):
    return re.findall(r"```python\n(.*?)```", (DOCS / name).read_text(), re.S)


def test_rewards_doc_verify_examples():
    from rlvr.verifiers import verify

    block = python_blocks("rewards.md")[0]
    for line in block.splitlines():
        if line.startswith("verify("):
            call, comment = line.split("#")
            status, reason = [w.strip(",") for w in comment.split()[:3] if w != "reason"][:2]
            verdict = eval(call, {"verify": verify})
            assert (verdict.status.value, verdict.reason) == (status, reason), line


def test_rewards_doc_custom_verifier_registers():
    namespace = {}
    exec(python_blocks("rewards.md")[1], namespace)
    from rlvr.verifiers import verify

    assert verify("starts_with_yes", "Yes, it is.", None).score == 1.0


def test_rewards_doc_runner_script_runs(tmp_path):
    script = tmp_path / "runner_example.py"
    script.write_text(python_blocks("rewards.md")[2])
    (tmp_path / "my_rewards.py").write_text("def my_reward(response, reference):\n    return float(reference in response)\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(DOCS.parent / "src"), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[:2] == ["['correct', 'correct']", "correct"]
