"""The python tool: code runs in the code verifier's sandbox (rlvr.verifiers.code: no network, its own folder,
time, memory, process and output limits, killed with all its children at the deadline), with the state of an
episode kept across turns.

State is kept by replay: each call runs the episode's earlier successful cells again with their output muted,
then the new cell, so names defined in one turn exist in the next. Earlier cells therefore run again (their
side effects inside the sandbox repeat, and code that draws random numbers without a seed may see others). As in a
notebook, a cell that ends with an expression shows its value.

A cell counts as run only when the program reaches a mark written after it (a random token per call, on the
sandbox's stderr): a cell that leaves the interpreter early (``sys.exit``, ``os._exit``, ``raise SystemExit``,
even with status 0) is an error for the model and is not kept, so it cannot cut short the replay of later calls.

Each episode gets a fresh session (``Tool.per_episode``): no state crosses from one episode to the next, even when
one Tool object is shared, unless the environment keeps it (the ``tools`` environment's ``keep_tool_state``).
"""

from __future__ import annotations

import ast
import secrets

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

    def run(self, code: str, timeout_s: float | None = None) -> str:
        """Run one cell; ``timeout_s`` (the caller's remaining budget) may shorten the session's deadline."""
        from rlvr.verifiers.code.sandbox import Limits, Sandbox, SandboxUnavailable

        timeout = self.timeout_s if timeout_s is None else max(0.01, min(self.timeout_s, timeout_s))
        try:
            cell = show_last_value(code)
        except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:  # ValueError: e.g. a null byte
            raise ValueError(f"SyntaxError: {getattr(exc, 'msg', exc)} (line {getattr(exc, 'lineno', '?')})") from None
        if len(self.cells) >= self.max_cells:
            raise ValueError(f"this episode already ran {self.max_cells} cells")
        mark = f"rlvr-cell-done-{secrets.token_hex(16)}"
        program = ((MUTE + "\n".join(self.cells) + "\n" + UNMUTE if self.cells else "") + cell
                   + f"\nimport os as _rlvr_os\n_rlvr_os.write(2, b'\\n{mark}\\n')\n")
        limits = Limits(timeout_s=timeout, memory_mb=self.memory_mb, output_bytes=64 * 1024)
        try:
            with Sandbox(program, limits) as box:
                result = box.run(timeout_s=timeout)
        except SandboxUnavailable as exc:
            raise RuntimeError(f"no sandbox on this machine: {exc}") from None
        out = result.stdout.decode("utf-8", "replace")
        err = result.stderr.decode("utf-8", "replace")
        finished = mark in err
        err = err.replace(mark, "").strip().splitlines()
        # killed at its deadline: by the wall clock, or by the CPU limit when the cell ran flat out (which fires
        # first on an idle machine)
        if result.timed_out or (result.returncode < 0 and not finished and result.wall_s >= 0.9 * timeout):
            raise TimeoutError(f"the code ran past {timeout:.3g} s and was stopped")
        if result.returncode != 0 and err:
            raise RuntimeError((out + "\n" if out else "") + err[-1])
        if result.returncode != 0 or not finished:
            raise RuntimeError((out + "\n" if out else "") + f"the code left the interpreter (exit status "
                               f"{result.returncode}) before the cell finished; the cell is not kept")
        self.cells.append(cell)
        return out.rstrip("\n") or "(no output)"


def python_tool(name: str = "python", timeout_s: float = 5.0, memory_mb: int = 512) -> Tool:
    """A fresh session per tool; ``per_episode`` builds another, so environments start every episode empty."""
    session = PythonSession(timeout_s, memory_mb)
    return Tool(name, "Run Python code; variables persist across calls in this conversation. The value of a final "
                      "expression is shown.",
                {"type": "object", "properties": {"code": {"type": "string"}}, "required": ["code"]},
                session.run, isolation="inline", timeout_s=timeout_s, takes_timeout=True,
                per_episode=lambda: python_tool(name, timeout_s, memory_mb))
