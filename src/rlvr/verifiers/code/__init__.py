"""The "code" verifier (docs/api.md, "Code verifier"): run the response's program in a local sandbox against tests.

    verify("code", "```python\\ndef add(a, b):\\n    return a + b\\n```",
           {"language": "python", "tests": ["assert add(1, 2) == 3", "assert add(-1, 1) == 0"]})
    verify("code", response, {"language": "python", "io": [{"input": "1 2\\n", "output": "3\\n"}]})

score = fraction of tests passed; details["tests"] has one entry per test; details["isolation"] says how
the program was isolated (sandbox.py). Options: timeout_s (per test, default 5), memory_mb (1024),
processes (64), disk_bytes (256 MiB), output_bytes (1 MiB per stream), open_files (64), network (False:
the program must get no network; where that cannot be enforced the verdict is status "error"),
isolation (None = the strongest available, or "bwrap" / "process"), sandbox_dir (where sandbox folders are
made: default $RLVR_SANDBOX_DIR, else the system temp dir; folders left by dead checkers are removed there,
see folders.py), fork_server (default True, or $RLVR_FORK_SERVER=0 to turn off: at the bubblewrap level as
root, fork each program inside a pooled long-lived sandbox instead of starting one, see pool.py).

Assert tests run in a judge process of their own (judge.py), never in the caller's: whatever a test does with a
program's value costs that process's time and memory, not the caller's. How tests are judged, and why a program
cannot fool them, is in harness.py; the threat model and what each
isolation level blocks are in docs/security.md.
"""

from __future__ import annotations

import os
import re
import time
from typing import Any

from rlvr.verifiers.base import Status, Verdict
from rlvr.verifiers.code.harness import TestResult, run_assert_tests, run_io_tests
from rlvr.verifiers.code.sandbox import Limits, Sandbox, SandboxUnavailable, isolation_level
from rlvr.verifiers.registry import register_verifier

MAX_PROGRAM_CHARS = 200_000
_FENCE = re.compile(r"^[ \t]*```[ \t]*([A-Za-z0-9_+-]*)[^\n]*$", re.M)
_PYTHON_TAGS = {"python", "py", "python3", ""}


def extract_program(response: str) -> str:
    """The LAST fenced Python code block (```python, ```py, ```python3 or a bare ```); an unclosed final fence
    runs to the end of the response; with no such block, the whole response. As in CommonMark, only a bare
    fence line closes a block."""
    blocks: list[tuple[str, str]] = []
    open_at, language = -1, ""
    for fence in _FENCE.finditer(response):
        if open_at < 0:
            open_at, language = fence.end() + 1, fence.group(1).lower()
        elif fence.group(1) == "":
            blocks.append((language, response[open_at : fence.start()]))
            open_at = -1
    if open_at >= 0:
        blocks.append((language, response[open_at:]))
    python = [body for language, body in blocks if language in _PYTHON_TAGS]
    return python[-1] if python else response


def _bad_reference(message: str) -> Verdict:
    return Verdict(0.0, Status.ERROR, "bad_reference", None, {"error": message})


def _parse_reference(reference: Any) -> tuple[str, list] | Verdict:
    if not isinstance(reference, dict):
        return _bad_reference(f"reference must be a dict with 'tests' or 'io', got {type(reference).__name__}")
    language = reference.get("language", "python")
    if language != "python":
        return _bad_reference(f"language {language!r} is not supported (only 'python')")
    if "tests" in reference and "io" in reference:
        return _bad_reference("reference has both 'tests' and 'io'; give one")
    if "tests" in reference:
        tests = reference["tests"]
        if not isinstance(tests, list) or not tests or not all(isinstance(t, str) for t in tests):
            return _bad_reference("'tests' must be a non-empty list of strings")
        return "tests", tests
    if "io" in reference:
        cases = reference["io"]
        if not isinstance(cases, list) or not cases or not all(
            isinstance(c, dict) and isinstance(c.get("input", ""), str) and isinstance(c.get("output"), str)
            for c in cases
        ):
            return _bad_reference("'io' must be a non-empty list of {'input': str, 'output': str}")
        return "io", cases
    return _bad_reference("reference needs 'tests' (assert style) or 'io' (stdin/stdout style)")


@register_verifier("code", isolation="threads")
def code_verifier(
    response: str,
    reference: Any,
    *,
    timeout_s: float = 5.0,
    memory_mb: int = 1024,
    processes: int = 64,
    disk_bytes: int = 256 * 1024 * 1024,
    output_bytes: int = 1024 * 1024,
    open_files: int = 64,
    network: bool = False,
    isolation: str | None = None,
    sandbox_dir: str | None = None,
    fork_server: bool | None = None,
) -> Verdict:
    """See the module docstring."""
    if not isinstance(response, str):
        return Verdict(0.0, Status.ERROR, "bad_response", None, {"error": f"response is {type(response).__name__}"})
    parsed = _parse_reference(reference)
    if isinstance(parsed, Verdict):
        return parsed
    style, tests = parsed
    try:
        limits = Limits(timeout_s=timeout_s, memory_mb=memory_mb, processes=processes, disk_bytes=disk_bytes,
                        output_bytes=output_bytes, open_files=open_files)
    except ValueError as exc:
        return Verdict(0.0, Status.ERROR, "bad_options", None, {"error": str(exc)})
    program = extract_program(response)
    shown = program if len(program) <= 2000 else program[:2000] + "..."
    if len(program) > MAX_PROGRAM_CHARS:
        return Verdict(0.0, Status.INCORRECT, "program_too_long", shown,
                       {"tests": [{"status": "failed", "reason": "program_too_long"}] * len(tests)})
    start = time.monotonic()
    try:
        if fork_server is None:
            fork_server = os.environ.get("RLVR_FORK_SERVER", "1") != "0"
        with Sandbox(program, limits, network=bool(network), level=isolation, base_dir=sandbox_dir,
                     fork_server=bool(fork_server)) as sandbox:
            details: dict[str, Any] = {**sandbox.details(), "style": style}
            if style == "tests":
                run = run_assert_tests(tests, sandbox)
                results = run.results
                if run.load_error:
                    details["load_error"] = run.load_error[:500]
                if run.stderr:
                    details["stderr"] = run.stderr[-1000:].decode("utf-8", "replace")
            else:
                results = run_io_tests(tests, sandbox)
    except SandboxUnavailable as exc:
        return Verdict(0.0, Status.ERROR, "isolation_unavailable", shown,
                       {"error": str(exc), "available": isolation_level()})
    except (OSError, ValueError) as exc:
        return Verdict(0.0, Status.ERROR, "sandbox_failed", shown, {"error": repr(exc)})
    details["tests"] = [r.as_dict() for r in results]
    details["elapsed_s"] = round(time.monotonic() - start, 4)
    return _verdict(results, shown, details)


def _verdict(results: list[TestResult], shown: str, details: dict) -> Verdict:
    """score = passed / all tests. A test the harness could not judge ("error", e.g. a value too large to
    carry) earns nothing, and the verdict says so: reason "some_not_judged", details["not_judged"]."""
    passed = sum(r.status == "passed" for r in results)
    not_judged = sum(r.status == "error" for r in results)
    if not_judged == len(results):
        return Verdict(0.0, Status.ERROR, "harness_error", shown, details)
    score = passed / len(results)
    if not_judged:
        details["not_judged"] = not_judged
        status = Status.PARTIAL if passed else Status.INCORRECT
        return Verdict(score, status, "some_not_judged", shown, details)
    if passed == len(results):
        return Verdict(1.0, Status.CORRECT, "all_passed", shown, details)
    if passed:
        return Verdict(score, Status.PARTIAL, "some_passed", shown, details)
    return Verdict(0.0, Status.INCORRECT, "none_passed", shown, details)


__all__ = ["code_verifier", "extract_program", "isolation_level"]
