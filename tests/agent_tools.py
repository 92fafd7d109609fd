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
