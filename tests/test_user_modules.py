"""A user's own module named in a config (`tools: ["my_tools:double"]`) resolves from the working directory the way
`python` resolves it, in the caller and in the supervised workers, even under the `rlvr` console script or a
notebook (neither puts the working directory on the import path the way `python script.py` does); a module that
cannot be imported is said to be one."""

import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent("""
    import sys
    assert "" not in sys.path and "." not in sys.path  # as under the console script (python -I here)
    from rlvr.envs.parsers import ToolCall
    from rlvr.envs.tool_env import resolve_tool
    tool = resolve_tool("my_tools:double")
    result = tool.run(ToolCall("double", {"x": 21}), timeout_s=60)
    print("RESULT", result.text, result.error)
    try:
        resolve_tool("no_such_tools_module:f")
    except ValueError as exc:
        print("MISSING", exc)
""")


def test_a_tool_module_in_the_working_directory_runs_in_the_worker(tmp_path):
    (tmp_path / "my_tools.py").write_text("def double(x: int) -> int:\n    '''Twice x.'''\n    return 2 * x\n")
    proc = subprocess.run([sys.executable, "-I", "-c", SCRIPT], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "RESULT 42 False" in proc.stdout  # run supervised, in a worker process that imported my_tools too
    assert "MISSING" in proc.stdout and "cannot import 'no_such_tools_module'" in proc.stdout
