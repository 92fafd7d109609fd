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


def test_rewards_doc_trl_snippet_runs_on_cpu_as_written(tiny_model_dir, tmp_path, monkeypatch):
    """The TRL example, executed with only the model path filled in (TRL defaults to bf16, which a CPU run must
    turn off: the snippet does)."""
    block = next(b for b in python_blocks("rewards.md") if "GRPOTrainer" in b)
    monkeypatch.chdir(tmp_path)
    exec(block.replace("path/to/local/model", str(tiny_model_dir)), {"__name__": "__doc_example__"})
    assert (tmp_path / "out").is_dir()


def test_readme_python_examples_run():
    """Each README example runs, and the verdict it shows (the block's last expression) is the one its comment
    promises: correct."""
    import ast

    blocks = re.findall(r"^```python\n(.*?)^```$", (DOCS.parent / "README.md").read_text(), re.S | re.M)
    assert len(blocks) >= 2
    for block in blocks:
        tree = ast.parse(block)
        last = tree.body.pop()
        namespace = {"__name__": "__readme__"}
        exec(compile(tree, "README.md", "exec"), namespace)
        shown = eval(compile(ast.Expression(last.value), "README.md", "eval"), namespace)
        assert shown.score == 1.0 and shown.status.value == "correct", shown


def test_readme_names_every_config_key_a_user_sets():
    """The README's key table covers every config key (a key missing from it is undocumented)."""
    from rlvr.config import _ALL_KEYS

    readme = (DOCS.parent / "README.md").read_text()
    missing = [key for key in _ALL_KEYS if f"`{key}`" not in readme]
    assert missing == []


def test_agents_doc_tool_and_environment_examples_run(capsys):
    from rlvr.envs import make_env, unregister_env, unregister_tool
    from rlvr.tasks import Task

    tool_block, env_block = python_blocks("agents.md")
    try:
        exec(tool_block, {"__name__": "__doc_example__"})
        promised = tool_block.strip().splitlines()[-1].lstrip("# ")
        assert capsys.readouterr().out.strip() == promised
        exec(env_block, {"__name__": "__doc_example__"})
        env = make_env("guess")
        env.reset(Task("", "42", "t"))
        assert env.step("50").observations == [{"role": "user", "content": "lower"}]
        assert env.step("x").rewards == {"format": -0.1}
        assert env.step("42").done
    finally:
        unregister_tool("population")
        unregister_env("guess")


def test_scaling_doc_configs_are_valid_layouts(tmp_path):
    """Every config of docs/scaling.md, laid over examples/arithmetic.yaml, validates and passes the layout checks
    `rlvr train` makes before it starts anything."""
    import yaml

    from rlvr.cluster import check_layout
    from rlvr.config import load_config

    blocks = re.findall(r"```yaml\n(.*?)```", (DOCS / "scaling.md").read_text(), re.S)
    assert len(blocks) == 4
    for i, block in enumerate(blocks):
        overrides = [f"{section}.{key}={yaml.safe_dump(value, default_flow_style=True).strip().removesuffix('...').strip()}"
                     for section, keys in yaml.safe_load(block).items() for key, value in keys.items()]
        cfg = load_config(DOCS.parent / "examples" / "arithmetic.yaml", overrides)
        check_layout(cfg)
        assert cfg.model.device == "cuda" and cfg.model.dtype == "bfloat16", i
