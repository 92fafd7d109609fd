"""Judge a program against its tests. The checker's half of the harness: the tests never enter the sandbox.

Assert-style tests run against ONE sandboxed process per task (``inside.py serve``), where the program's
definitions are loaded, and each test statement is executed in a JUDGE process of its own (``judge.py``),
neither in the sandbox nor in the checker: the checker only starts the two, connects them, and reads one report
per test from the judge. In the judge every name the program defines stands for a proxy (``Remote``):
calling it sends the call to the sandbox and brings back a plain value (exact builtin types) or another proxy.
So:
  - ``assert`` and the comparisons run in the judge, on plain values: an object whose ``__eq__`` lies, or a
    subclass of ``int`` or ``str``, arrives as the builtin it claims to be, and tampering with builtins or
    ``assert`` in the sandbox changes nothing there;
  - whatever a test does with the program's values (compare, hash, sum, sort: ``range(10**18)``, a decimal
    with a huge exponent, keys that share one hash) costs the judge, which has a memory limit of its own and
    is killed by its own watchdog, or by the checker once a test's report is ``JUDGE_GRACE_S`` past
    ``timeout_s``: the checker's time and memory are never spent on a program's value, and such a test is
    "timeout" or "failed";
  - the program never sees a test or an expected value, so printing "PASSED", reading its own process or
    files, or inspecting frames gains nothing;
  - the tests see the libraries they use (``math``, ``np``...) as the judge's own copies, never the program's
    objects under those names, so patching or rebinding ``math.isclose`` in the sandbox changes nothing;
  - ``x in obj`` on a program object is decided in the judge by iterating it, so an always-true
    ``__contains__`` gains nothing; program functions named like builtins (``len``, ``sorted``) are not
    given to the tests;
  - what a test passes to the program (a lambda, a key function, an instance of its own class) stays in the
    judge and reaches the program as a proxy that calls back (judge.py);
  - a program that exits (``sys.exit``, ``os._exit``, a crash) fails the test in progress and every test
    after it; a test that runs past ``timeout_s`` is "timeout", the sandbox is killed and the tests after
    it fail without being run, so an infinite loop costs one time budget, not one per test.

Stdin/stdout tests run the program once per test (a fresh process: the program reads its input at start),
stopping after the first timeout for the same reason; their output is compared here, as bounded text.

Everything the sandbox sends is hostile input: the channel (channel.py) has the test's deadline and a size
cap on every read and write, replies are decoded by codec.py (linear time, bounded memory, builtin types
only) under the same deadline, a reply counts only where the protocol allows it (``Session.request``), and
a module the program names resolves only to one of the judge's own libraries (``PRELOADED``).
"""

from __future__ import annotations

import itertools
import os
import select
import socket
import struct
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from rlvr.verifiers.code import codec
from rlvr.verifiers.code.judge import (  # noqa: F401 - the judge's parts, importable from here
    PRELOADED,
    HarnessError,
    ProgramExited,
    ProtocolViolation,
    Remote,
    RemoteError,
    Session,
    TestResult,
    TestTimeout,
    UnsharedModule,
    ValueTooLarge,
    one_test as _one_test,
)
from rlvr.verifiers.code.sandbox import Limits, Sandbox, communicate

JUDGE = Path(__file__).with_name("judge.py")
JUDGE_GRACE_S = 2.0  # past a test's timeout_s, the judge itself is killed (its own deadline has failed)
JUDGE_START_S = 10.0  # time for the judge's interpreter to start, beside the program's load
MAX_REPORT = 64 << 20  # bytes of one report from the judge
# judge.py's server, loaded by its path as a module, without -B: its compiled form is cached and reused (a script,
# or a module under PYTHONDONTWRITEBYTECODE, would be compiled again at every start: tens of milliseconds)
_JUDGE_MAIN = ("import importlib.util, sys\n"
               "spec = importlib.util.spec_from_file_location('rlvr_judge', sys.argv[1])\n"
               "judge = importlib.util.module_from_spec(spec)\n"
               "sys.modules['rlvr_judge'] = judge\n"
               "spec.loader.exec_module(judge)\n"
               "judge.serve(int(sys.argv[2]))\n")
# the judge's libraries use one thread each: its memory limit counts every thread's reserved address space
_JUDGE_ENV = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


# ---------------------------------------------------------------------------------------------- assert


@dataclass
class AssertRun:
    results: list[TestResult]
    load_error: str = ""
    stderr: bytes = b""
    details: dict = field(default_factory=dict)


class _JudgeServer:
    """The checker's end of its judge server (judge.serve): started on first use, once per checker process
    (a forked checker starts its own), and again if it died. Each task sends one request with its fds."""

    def __init__(self):
        self.lock = threading.Lock()
        self.sock: socket.socket | None = None
        self.proc: subprocess.Popen | None = None
        self.owner = 0
        self.tokens = itertools.count(1)

    def _start(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self.proc = subprocess.Popen([sys.executable, "-I", "-c", _JUDGE_MAIN, str(JUDGE), str(theirs.fileno())],
                                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                         stderr=subprocess.DEVNULL, pass_fds=[theirs.fileno()], close_fds=True,
                                         env={**os.environ, **_JUDGE_ENV}, start_new_session=True)
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        self.sock, self.owner = ours, os.getpid()

    def _send(self, message: tuple, fds: list[int]) -> None:
        with self.lock:
            for attempt in range(2):
                if self.sock is None or self.owner != os.getpid() or self.proc.poll() is not None:
                    if self.sock is not None and self.owner == os.getpid():
                        self.sock.close()
                    self._start()
                try:
                    socket.send_fds(self.sock, [codec.encode(message)], fds)
                    return
                except OSError:
                    if attempt:
                        raise
                    self.sock.close()
                    self.sock = None

    def judge(self, job: dict, fds: list[int]) -> int:
        """Start a judge for ``job`` on ``fds``; the job travels in a memory file (a task's tests may be larger
        than one socket message)."""
        token = next(self.tokens)
        job_fd = os.memfd_create("rlvr-judge-job", os.MFD_CLOEXEC)
        try:
            body = memoryview(codec.encode(job))
            while body:
                body = body[os.write(job_fd, body):]
            self._send(("judge", token), [job_fd, *fds])
        finally:
            os.close(job_fd)
        return token

    def kill(self, token: int) -> None:
        try:
            self._send(("kill", token), [])
        except OSError:
            pass


JUDGES = _JudgeServer()


class _Reports:
    """The judge's reports (length-prefixed frames of codec.py), each read by a deadline."""

    def __init__(self, fd: int):
        self.fd = fd
        os.set_blocking(fd, False)
        self.buf = bytearray()

    def next(self, deadline: float) -> dict | None:
        """The next report; None when the judge has ended (or sent what it never sends); TimeoutError past
        ``deadline``."""
        while True:
            if len(self.buf) >= 4:
                (n,) = struct.unpack(">I", self.buf[:4])
                if n > MAX_REPORT:
                    return None
                if len(self.buf) >= 4 + n:
                    body = bytes(self.buf[4 : 4 + n])
                    del self.buf[: 4 + n]
                    try:
                        report = codec.decode(body, max_cost=16 * MAX_REPORT)
                    except codec.CodecError:
                        return None
                    return report if isinstance(report, dict) else None
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError
            poller = select.poll()
            poller.register(self.fd, select.POLLIN)
            if not poller.poll(min(remaining, 0.5) * 1000):
                continue
            try:
                chunk = os.read(self.fd, 1 << 16)
            except BlockingIOError:
                continue
            if not chunk:
                return None
            self.buf += chunk


def _result(fields: object) -> TestResult:
    if not isinstance(fields, dict) or not isinstance(fields.get("status"), str):
        return TestResult("error", "judge_failed", "the judge sent a malformed result")
    return TestResult(fields["status"], str(fields.get("reason", "")), str(fields.get("message", "")))


def run_assert_tests(tests: list[str], sandbox: Sandbox) -> AssertRun:
    limits = sandbox.limits
    cpu_s = limits.timeout_s * (len(tests) + 1)
    child_reads, to_child = os.pipe()
    from_child, child_writes = os.pipe()
    try:
        proc = sandbox.start("serve", cpu_s=cpu_s, channel=(child_reads, child_writes))
    except BaseException:
        for fd in (to_child, from_child):
            os.close(fd)
        raise
    finally:
        os.close(child_reads)
        os.close(child_writes)
    proc.stdin.close()
    report_r, report_w = os.pipe()
    fds = [from_child, to_child, proc.stdout.fileno(), proc.stderr.fileno(), report_w]
    job = {"tests": tests, "timeout_s": limits.timeout_s, "output_bytes": limits.output_bytes,
           "memory_bytes": int(limits.memory_mb) * 1024 * 1024, "grace_s": JUDGE_GRACE_S + 1.0}
    try:
        token = JUDGES.judge(job, fds)
    except BaseException:
        os.close(report_r)
        raise
    finally:  # the judge holds the channel now: the sandbox sees it close when the judge ends
        for fd in (from_child, to_child, report_w):
            os.close(fd)
    try:
        return _read_reports(tests, _Reports(report_r), sandbox, proc, lambda: JUDGES.kill(token))
    finally:
        os.close(report_r)


def _read_reports(tests: list[str], reports: _Reports, sandbox: Sandbox, proc, kill_judge) -> AssertRun:
    """Follow the judge: each test must be reported within ``timeout_s`` (plus a grace) of the one before."""
    timeout_s = sandbox.limits.timeout_s
    deadline = time.monotonic() + timeout_s + JUDGE_GRACE_S + JUDGE_START_S
    results: list[TestResult] = []
    loaded = False
    requests = 0
    stderr = b""
    while True:
        try:
            report = reports.next(deadline)
        except TimeoutError:
            report = {"timeout": True}
        if report is not None and report.get("kill"):
            sandbox.kill(proc)
            continue
        if report is not None and "results" in report:  # the program never got to its tests
            results = [_result(r) for r in report["results"]][: len(tests)]
            return AssertRun(results, str(report.get("load", "")), str(report.get("stderr", "")).encode("latin-1"))
        if report is not None and report.get("loaded"):
            loaded = True
        elif report is not None and "result" in report:
            results.append(_result(report["result"]))
        elif report is not None and report.get("end"):
            requests = int(report.get("requests", 0))
            stderr = str(report.get("stderr", "")).encode("latin-1")
            break
        else:  # the judge ended early, or is stuck in a test's own work on the program's values
            kill_judge()
            sandbox.kill(proc)
            if report is not None and report.get("timeout"):
                first = TestResult("timeout", "timeout" if loaded else "program_load_timeout",
                                   "the test ran past its time limit in the judge")
            else:
                first = TestResult("failed", "judge_died", "the judge ended while running this test")
            if not loaded:
                return AssertRun([first] * len(tests), first.reason)
            if len(results) < len(tests):
                results.append(first)
            while len(results) < len(tests):
                results.append(TestResult("failed", "not_run", f"test {len(results) - 1} did not finish"))
            break
        deadline = time.monotonic() + timeout_s + JUDGE_GRACE_S
    results += [TestResult("failed", "not_run", "the judge ended")] * (len(tests) - len(results))
    return AssertRun(results[: len(tests)], "", stderr, {"requests": requests})


# -------------------------------------------------------------------------------------------------- io


def normalize_output(text: str) -> str:
    """C1b: trailing whitespace stripped on every line, trailing blank lines dropped."""
    lines = [line.rstrip() for line in text.replace("\r\n", "\n").split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    return "\n".join(lines)


def run_io_tests(cases: list[dict], sandbox: Sandbox) -> list[TestResult]:
    results: list[TestResult] = []
    stopped: TestResult | None = None
    for i, case in enumerate(cases):
        if stopped is not None:
            results.append(stopped)
            continue
        stdin = str(case.get("input", "")).encode()
        proc = sandbox.start("run", cpu_s=sandbox.limits.timeout_s)
        run = communicate(proc, stdin, sandbox.limits.timeout_s, sandbox.limits.output_bytes,
                          kill=lambda p=proc: sandbox.kill(p))
        if run.timed_out:
            results.append(TestResult("timeout", "timeout"))
            stopped = TestResult("failed", "not_run", f"test {i} timed out")
            continue
        if run.returncode != 0:
            reason = "killed_by_signal" if run.returncode < 0 else "nonzero_exit"
            results.append(TestResult("failed", reason, run.stderr[-500:].decode("utf-8", "replace")))
            continue
        got = normalize_output(run.stdout.decode("utf-8", "replace"))
        want = normalize_output(str(case.get("output", "")))
        if run.stdout_dropped:
            results.append(TestResult("failed", "output_too_long"))
        elif got == want:
            results.append(TestResult("passed"))
        else:
            results.append(TestResult("failed", "wrong_output", got[:200]))
    return results


__all__ = ["AssertRun", "Limits", "Remote", "TestResult", "normalize_output", "run_assert_tests", "run_io_tests"]
