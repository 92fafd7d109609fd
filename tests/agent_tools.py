"""Tool functions for tests, in a module light enough for the supervised workers to import quickly."""

import time


def slow_tool(seconds: float) -> str:
    """Sleep, then answer (a tool that outlives its deadline)."""
    time.sleep(seconds)
    return "awake"


def failing_tool(x: int) -> str:
    """Always raises."""
    raise RuntimeError(f"no luck with {x}")


def population(city: str, year: int = 2024) -> str:
    """Population of a city.

    More text."""
    return f"{city}:{year}"


def exiting_tool(code: int) -> str:
    """Leaves the interpreter the polite way (SystemExit)."""
    import sys

    sys.exit(code)


def dying_tool(code: int) -> str:
    """Leaves the interpreter at once, skipping every handler (os._exit)."""
    import os

    os._exit(code)


def surrogate_tool(text: str) -> str:
    """Answers with a lone surrogate, which no UTF-8 encoder accepts."""
    return text + "\ud800"


def shared_python():
    """One python Tool object for every environment that names it ("agent_tools:SHARED_PYTHON" below)."""
    from rlvr.envs import python_tool

    return python_tool(timeout_s=5)


SHARED_PYTHON = shared_python()
