"""Judge a program against its tests. The checker's half of the harness: the tests live only here.

Assert-style tests run in ONE sandboxed process per task (``inside.py serve``): the program's definitions
are loaded there, and each test statement is executed here, in the checker, with every name the program
defines standing for a proxy (``Remote``). Calling a proxy sends the call to the sandbox and brings back a
plain value (exact builtin types) or another proxy. So:
  - ``assert`` and the comparisons run here, on plain values: an object whose ``__eq__`` lies, or a
    subclass of ``int`` or ``str``, arrives as the builtin it claims to be, and tampering with builtins or
    ``assert`` in the sandbox changes nothing here;
  - the program never sees a test or an expected value, so printing "PASSED", reading its own process or
    files, or inspecting frames gains nothing;
  - modules the program imported (``math``) are resolved to the checker's own copies, so patching
    ``math.isclose`` in the sandbox does not change how a test is judged;
  - ``x in obj`` on a program object is decided here by iterating it, so an always-true ``__contains__``
    gains nothing; program functions named like builtins (``len``, ``sorted``) are not given to the tests;
  - a program that exits (``sys.exit``, ``os._exit``, a crash) fails the test in progress and every test
    after it; a test that runs past ``timeout_s`` is "timeout", the sandbox is killed and the tests after
    it fail without being run, so an infinite loop costs one time budget, not one per test.

Stdin/stdout tests run the program once per test (a fresh process: the program reads its input at start),
stopping after the first timeout for the same reason.
"""

from __future__ import annotations

import builtins
import importlib
import os
import select
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from rlvr.verifiers.code import inside
from rlvr.verifiers.code.sandbox import Limits, Sandbox, communicate

_NOT_IMPORTED = {"antigravity", "this", "idlelib", "tkinter", "turtle", "turtledemo", "webbrowser", "pydoc"}


@dataclass
class TestResult:
    status: str  # passed / failed / timeout / error
    reason: str = ""
    message: str = ""

    def as_dict(self) -> dict:
        out = {"status": self.status}
        if self.reason:
            out["reason"] = self.reason
        if self.message:
            out["message"] = self.message[:500]
        return out


class ProgramExited(Exception):
    """The sandboxed process ended (exit, crash, kill) while a test needed it."""


class TestTimeout(Exception):
    pass


class HarnessError(Exception):
    """The harness could not judge a test (e.g. it passes something the sandbox cannot receive)."""


class RemoteError(Exception):
    """An exception the program raised that has no builtin counterpart (its type name is in the message)."""


# --------------------------------------------------------------------------------------------- session


class Session:
    """The channel to one ``inside.py serve`` process, with the current test's deadline."""

    def __init__(self, sandbox: Sandbox, cpu_s: float):
        self.sandbox = sandbox
        child_reads, self.to_child = os.pipe()
        self.from_child, child_writes = os.pipe()
        try:
            self.proc = sandbox.start("serve", cpu_s=cpu_s, channel=(child_reads, child_writes))
        finally:
            os.close(child_reads)
            os.close(child_writes)
        self.proc.stdin.close()
        # the program's own output is drained (and capped) so a chatty program never blocks on a full pipe
        self.output = {self.proc.stdout.fileno(): bytearray(), self.proc.stderr.fileno(): bytearray()}
        self.finished: dict[int, bytearray] = {}  # streams that reached EOF
        self.deadline = time.monotonic() + sandbox.limits.timeout_s
        self.dead = False
        self.requests = 0

    def close(self) -> None:
        for fd in (self.to_child, self.from_child):
            try:
                os.close(fd)
            except OSError:
                pass

    def _wait_readable(self) -> None:
        cap = self.sandbox.limits.output_bytes
        while True:
            remaining = self.deadline - time.monotonic()
            if remaining <= 0:
                self.sandbox.kill(self.proc)
                self.dead = True
                raise TestTimeout
            ready, _, _ = select.select([self.from_child, *self.output], [], [], min(remaining, 0.5))
            for fd in ready:
                if fd == self.from_child:
                    continue
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    self.finished[fd] = self.output.pop(fd)
                    continue
                buf = self.output[fd]
                if len(buf) < cap:
                    buf += chunk[: cap - len(buf)]
            if self.from_child in ready:
                return

    def stderr(self) -> bytes:
        fd = self.proc.stderr.fileno()
        return bytes(self.output.get(fd) or self.finished.get(fd) or b"")[-4000:]

    def receive(self) -> dict:
        if self.dead:
            raise ProgramExited
        try:
            self._wait_readable()
            message = inside.recv(self.from_child)
        except (EOFError, OSError, ValueError, RecursionError) as exc:
            self.dead = True  # a closed channel, or bytes on it that are not our protocol
            raise ProgramExited from exc
        if not isinstance(message, dict):
            self.dead = True
            raise ProgramExited
        return message

    def request(self, message: dict) -> Any:
        if self.dead:
            raise ProgramExited
        self.requests += 1
        try:
            inside.send(self.to_child, message)
        except OSError as exc:
            self.dead = True
            raise ProgramExited from exc
        reply = self.receive()
        if "error" in reply:
            raise _exception(reply["error"])
        if reply.get("stop"):
            raise StopIteration
        return self.decode(reply.get("ok"))

    # values ------------------------------------------------------------------------------------------

    def decode(self, data: Any) -> Any:
        try:
            return inside.decode(data, self._deref)
        except (inside.EncodeError, TypeError, ValueError, KeyError, RecursionError) as exc:
            self.dead = True  # the program wrote something that is not our protocol on the channel
            raise ProgramExited(f"malformed reply: {exc}") from exc

    def _deref(self, data: dict) -> Any:
        tag = data.get("#")
        if tag == "ref":
            return Remote(self, int(data["id"]), str(data.get("type", "object")))
        if tag == "module":
            local = _checker_module(data.get("v"))
            if local is not None:
                return local
            return Remote(self, int(data["id"]), "module")
        raise inside.EncodeError(f"unexpected tag {tag!r}")

    def encode(self, value: Any) -> Any:
        def ref(obj):
            if isinstance(obj, Remote) and obj._session is self:
                return obj._id
            raise HarnessError(f"a test passes a {type(obj).__name__} to the program, which cannot receive it")

        try:
            data = inside.encode(value, ref)
        except inside.EncodeError as exc:
            raise HarnessError(str(exc)) from exc
        return data


def _checker_module(name: Any) -> Any:
    """The checker's own copy of a module the program refers to: standard library or already imported."""
    if not isinstance(name, str) or not name:
        return None
    top = name.split(".")[0]
    if top in _NOT_IMPORTED or top in ("solution", "__main__"):
        return None
    if name not in sys.modules and top not in sys.stdlib_module_names:
        return None
    try:
        return importlib.import_module(name)
    except Exception:  # noqa: BLE001
        return None


def _exception(error: Any) -> BaseException:
    if not isinstance(error, dict):
        return RemoteError(str(error))
    name = str(error.get("type", "Exception"))
    message = str(error.get("message", ""))
    cls = getattr(builtins, name, None)
    if isinstance(cls, type) and issubclass(cls, Exception) and cls not in (StopIteration,):
        try:
            return cls(message)
        except Exception:  # noqa: BLE001 - e.g. UnicodeDecodeError needs more arguments
            pass
    return RemoteError(f"{error.get('program_type', name)}: {message}")


class Remote:
    """A proxy for an object that lives in the sandbox. Every operation is a request; results come back
    as plain values or further proxies. Two proxies are equal only if they are the same remote object."""

    __slots__ = ("_session", "_id", "_type")

    def __init__(self, session: Session, ref_id: int, type_name: str):
        object.__setattr__(self, "_session", session)
        object.__setattr__(self, "_id", ref_id)
        object.__setattr__(self, "_type", type_name)

    def _req(self, op: str, **kw: Any) -> Any:
        return self._session.request({"op": op, "target": {"#": "ref", "id": self._id}, **kw})

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        enc = self._session.encode
        return self._req("call", args=[enc(a) for a in args],
                         kwargs={"#": "dict", "v": [[k, enc(v)] for k, v in kwargs.items()]})

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return self._req("getattr", name=name)

    def __getitem__(self, key: Any) -> Any:
        return self._req("getitem", key=self._session.encode(key))

    def __iter__(self):
        iterator = self._req("iter")
        if not isinstance(iterator, Remote):
            yield from iterator
            return
        while True:
            try:
                yield iterator._req("next")
            except StopIteration:
                return

    def __len__(self) -> int:
        n = self._req("len")
        if type(n) is not int:
            raise TypeError("len() of a remote object did not return an int")
        return n

    def __contains__(self, item: Any) -> bool:
        # decided here on the values the object yields: a __contains__ that always says yes is never asked
        return any(value is item or value == item for value in self)

    def __bool__(self) -> bool:
        return self._req("bool") is True

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, Remote) and other._session is self._session and other._id == self._id

    def __ne__(self, other: Any) -> bool:
        return not self.__eq__(other)

    def __hash__(self) -> int:
        return hash((id(self._session), self._id))

    def __repr__(self) -> str:
        try:
            text = self._req("repr")
        except Exception:  # noqa: BLE001
            text = None
        return text if type(text) is str else f"<{self._type} in the sandbox>"

    def __str__(self) -> str:
        text = self._req("str")
        return text if type(text) is str else repr(self)


# ---------------------------------------------------------------------------------------------- assert


@dataclass
class AssertRun:
    results: list[TestResult]
    load_error: str = ""
    stderr: bytes = b""
    details: dict = field(default_factory=dict)


def run_assert_tests(tests: list[str], sandbox: Sandbox) -> AssertRun:
    limits = sandbox.limits
    cpu_s = limits.timeout_s * (len(tests) + 1)
    session = Session(sandbox, cpu_s)
    results: list[TestResult] = []
    load_error = ""
    try:
        session.deadline = time.monotonic() + limits.timeout_s
        try:
            hello = session.receive()
        except TestTimeout:
            return AssertRun([TestResult("timeout", "program_load_timeout")] * len(tests), "timeout")
        except ProgramExited:
            return AssertRun([TestResult("failed", "program_exited_on_load")] * len(tests), "exited",
                             session.stderr())
        if "error" in hello:
            err = hello["error"] if isinstance(hello["error"], dict) else {}
            load_error = f"{err.get('program_type', 'Exception')}: {err.get('message', '')}"
            return AssertRun([TestResult("failed", "program_raised_on_load", load_error)] * len(tests), load_error)
        try:
            names = session.decode(hello.get("ok") or {"#": "dict", "v": []})
        except ProgramExited:
            return AssertRun([TestResult("failed", "program_exited_on_load")] * len(tests), "malformed")
        if not isinstance(names, dict):
            names = {}
        namespace: dict[str, Any] = {"__builtins__": builtins, "__name__": "rlvr_tests"}
        for key, value in names.items():
            if isinstance(key, str) and not key.startswith("__") and not hasattr(builtins, key):
                namespace[key] = value
        stopped: TestResult | None = None
        for i, test in enumerate(tests):
            if stopped is not None:
                results.append(stopped)
                continue
            session.deadline = time.monotonic() + limits.timeout_s
            results.append(_one_test(test, i, namespace, session))
            last = results[-1]
            if last.status == "timeout":
                stopped = TestResult("failed", "not_run", f"test {i} timed out")
            elif last.reason == "program_exited":
                stopped = TestResult("failed", "program_exited", f"the program exited during test {i}")
        return AssertRun(results, load_error, session.stderr(), {"requests": session.requests})
    finally:
        session.close()


def _one_test(test: str, index: int, namespace: dict, session: Session) -> TestResult:
    try:
        code = compile(test, f"<test {index}>", "exec")
    except SyntaxError as exc:
        return TestResult("error", "test_syntax_error", str(exc))
    try:
        exec(code, namespace)
    except TestTimeout:
        return TestResult("timeout", "timeout")
    except ProgramExited as exc:
        return TestResult("failed", "program_exited", str(exc))
    except HarnessError as exc:
        return TestResult("error", "harness", str(exc))
    except AssertionError as exc:
        return TestResult("failed", "assertion", str(exc))
    except RecursionError as exc:
        return TestResult("failed", "exception", f"RecursionError: {exc}")
    except Exception as exc:  # noqa: BLE001 - the program's exception, or the test's own on its values
        return TestResult("failed", "exception", f"{type(exc).__name__}: {exc}")
    return TestResult("passed")


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
