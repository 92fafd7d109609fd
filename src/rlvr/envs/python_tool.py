"""The python tool: code runs in the code verifier's sandbox (rlvr.verifiers.code: no network, its own folder,
time, memory, process and output limits, killed with all its children at the deadline), with the state of an
episode kept across turns.

State is kept by replay: each call runs the episode's earlier successful cells again with their output muted,
then the new cell, so names defined in one turn exist in the next. Earlier cells therefore run again (their
side effects inside the sandbox repeat, and code that draws random numbers without a seed may see others). As in a
notebook, a cell that ends with an expression shows its value.
"""

from __future__ import annotations

import ast

from rlvr.envs.tools import Tool

MUTE = "import io as _rlvr_io, sys as _rlvr_sys\n_rlvr_out = _rlvr_sys.stdout\n_rlvr_sys.stdout = _rlvr_io.StringIO()\n"
UNMUTE = "_rlvr_sys.stdout = _rlvr_out\n"


def show_last_value(code: str) -> str:
    """The cell with its final expression printed (when it is not None), as a notebook shows it."""
    tree = ast.parse(code)
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = tree.body[-1].value
        tree.body[-1] = ast.parse(f"_rlvr_value = {ast.unparse(last)}\nif _rlvr_value is not None: "
                                  "print(repr(_rlvr_value))").body
        tree.body = tree.body[:-1] + tree.body[-1]
    return ast.unparse(tree)


class PythonSession:
    """The cells of one episode; ``run`` is the tool's function."""

    def __init__(self, timeout_s: float = 5.0, memory_mb: int = 512, max_cells: int = 32):
        self.timeout_s, self.memory_mb, self.max_cells = timeout_s, memory_mb, max_cells
        self.cells: list[str] = []

    def run(self, code: str) -> str:
        from rlvr.verifiers.code.sandbox import Limits, Sandbox, SandboxUnavailable

        try:
            cell = show_last_value(code)
        except SyntaxError as exc:
            raise ValueError(f"SyntaxError: {exc.msg} (line {exc.lineno})") from None
        if len(self.cells) >= self.max_cells:
            raise ValueError(f"this episode already ran {self.max_cells} cells")
        program = (MUTE + "\n".join(self.cells) + "\n" + UNMUTE if self.cells else "") + cell + "\n"
        limits = Limits(timeout_s=self.timeout_s, memory_mb=self.memory_mb, output_bytes=64 * 1024)
        try:
            with Sandbox(program, limits) as box:
                result = box.run(timeout_s=self.timeout_s)
        except SandboxUnavailable as exc:
            raise RuntimeError(f"no sandbox on this machine: {exc}") from None
        out = result.stdout.decode("utf-8", "replace")
        if result.timed_out:
            raise TimeoutError(f"the code ran past {self.timeout_s:g} s and was stopped")
        if result.returncode != 0:
            err = result.stderr.decode("utf-8", "replace").strip().splitlines()
            raise RuntimeError((out + "\n" if out else "") + (err[-1] if err else f"exit status {result.returncode}"))
        self.cells.append(cell)
        return out.rstrip("\n") or "(no output)"


def python_tool(name: str = "python", timeout_s: float = 5.0, memory_mb: int = 512) -> Tool:
    """A fresh session per tool, and environments build their tools per episode: state never leaks across episodes."""
    session = PythonSession(timeout_s, memory_mb)
    return Tool(name, "Run Python code; variables persist across calls in this conversation. The value of a final "
                      "expression is shown.",
                {"type": "object", "properties": {"code": {"type": "string"}}, "required": ["code"]},
                session.run, isolation="inline", timeout_s=timeout_s)
