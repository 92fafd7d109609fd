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

Everything the sandbox sends is hostile input: the channel (channel.py) has the test's deadline and a size
cap on every read and write, replies are decoded by codec.py (linear time, bounded memory, builtin types
only) under the same deadline, a reply counts only where the protocol allows it (``Session.request``), and
a module the program names resolves only to one the checker imported itself (``PRELOADED``).
"""

from __future__ import annotations

import builtins
import importlib
import os
import sys
import threading
import time
import types
from dataclasses import dataclass, field
from typing import Any

from rlvr.verifiers.code import codec
from rlvr.verifiers.code.channel import Channel, ChannelClosed, ChannelTimeout, ChannelViolation
from rlvr.verifiers.code.sandbox import Limits, Sandbox, communicate

# Modules the checker imports itself, once, before judging assert tests: a program's reference to one of them
# (``import math`` at its top) is given to the tests as the checker's own copy. A module the checker has not
# imported is never imported because the sandbox names it, and never becomes a proxy the program controls.
PRELOADED = ("math", "cmath", "re", "string", "collections", "itertools", "functools", "heapq", "bisect",
             "random", "statistics", "fractions", "decimal", "operator", "copy", "datetime", "json", "hashlib",
             "typing", "numpy")
_preloaded = threading.Lock()
_preloaded_done = False


def _preload() -> None:
    global _preloaded_done
    with _preloaded:
        if _preloaded_done:
            return
        for name in PRELOADED:
            try:
                importlib.import_module(name)
            except ImportError:
                pass
        _preloaded_done = True


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


# The harness's own signals derive from BaseException, so a test's ``except Exception`` cannot swallow them.


class ProgramExited(BaseException):
    """The sandboxed process ended (exit, crash, kill) while a test needed it."""


class ProtocolViolation(ProgramExited):
    """The sandbox sent something the honest harness never sends: the program tampered with the channel."""


class TestTimeout(BaseException):
    pass


class HarnessError(BaseException):
    """The harness could not judge a test (e.g. it passes something the sandbox cannot receive)."""

    reason = "harness"


class ValueTooLarge(HarnessError):
    """A value too large (or too deep, or too costly to rebuild) to carry across the channel."""

    reason = "value_too_large"


class RemoteError(Exception):
    """An exception the program raised that has no builtin counterpart (its type name is in the message)."""


class UnsharedModule:
    """Stands for a module of the program's that the checker has not imported (see PRELOADED)."""

    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name

    def __getattr__(self, attr: str) -> Any:
        raise AttributeError(f"module {self.name!r} of the program is not shared with the tests; "
                             "import it in the test")

    def __repr__(self) -> str:
        return f"<module {self.name!r} of the program, not shared with the tests>"


# --------------------------------------------------------------------------------------------- session

# the replies valid for each request, and how many fields each has (a "stop" answers only "next")
_REPLY_FIELDS = {"ok": 2, "error": 4, "too_large": 2}


class Session:
    """The channel to one ``inside.py serve`` process, with the current test's deadline."""

    def __init__(self, sandbox: Sandbox, cpu_s: float):
        self.sandbox = sandbox
        child_reads, to_child = os.pipe()
        from_child, child_writes = os.pipe()
        try:
            self.proc = sandbox.start("serve", cpu_s=cpu_s, channel=(child_reads, child_writes))
        except BaseException:
            for fd in (to_child, from_child):
                os.close(fd)
            raise
        finally:
            os.close(child_reads)
            os.close(child_writes)
        self.proc.stdin.close()
        self.channel = Channel(from_child, to_child, [self.proc.stdout.fileno(), self.proc.stderr.fileno()],
                               sandbox.limits.output_bytes)
        self.deadline = time.monotonic() + sandbox.limits.timeout_s
        self.dead = False
        self.requests = 0

    def close(self) -> None:
        self.channel.close()

    def stderr(self) -> bytes:
        return self.channel.captured(self.proc.stderr.fileno())[-4000:]

    def _end(self, error: BaseException) -> BaseException:
        """Kill the sandbox: after a timeout or a violation, its state is unknown."""
        self.dead = True
        self.sandbox.kill(self.proc)
        return error

    def receive(self) -> tuple:
        if self.dead:
            raise ProgramExited
        try:
            frame = self.channel.receive(self.deadline)
        except ChannelTimeout:
            raise self._end(TestTimeout()) from None
        except ChannelClosed:
            raise self._end(ProgramExited()) from None
        except ChannelViolation as exc:
            raise self._end(ProtocolViolation(str(exc))) from None
        try:
            message = codec.decode(frame, self._deref, deadline=self.deadline, clock=time.monotonic)
        except codec.TooSlow:
            raise self._end(TestTimeout()) from None
        except codec.TooLarge as exc:  # well-formed, but beyond what the checker rebuilds
            raise ValueTooLarge(f"the program's value cannot be carried: {exc}") from None
        except codec.CodecError as exc:
            raise self._end(ProtocolViolation(f"malformed reply: {exc}")) from None
        if type(message) is not tuple or not message or type(message[0]) is not str:
            raise self._end(ProtocolViolation("a reply that is not a message"))
        return message

    def request(self, op: str, target: int, *args: Any) -> Any:
        if self.dead:
            raise ProgramExited
        self.requests += 1
        try:
            body = codec.encode((op, target, *args), self._ref)
        except codec.TooLarge as exc:
            raise ValueTooLarge(f"the test's value cannot be carried to the program: {exc}") from None
        except codec.Unencodable as exc:
            raise HarnessError(str(exc)) from None
        try:
            self.channel.send(body, self.deadline)
        except ChannelTimeout:
            raise self._end(TestTimeout()) from None
        except ChannelClosed:
            raise self._end(ProgramExited()) from None
        reply = self.receive()
        kind = reply[0]
        if kind == "stop" and op == "next" and len(reply) == 1:
            raise StopIteration
        if _REPLY_FIELDS.get(kind) != len(reply):
            raise self._end(ProtocolViolation(f"reply {kind!r} to a {op!r} request"))
        if kind == "ok":
            return reply[1]
        if not all(type(x) is str for x in reply[1:]):  # texts only: nothing here may call into the sandbox
            raise self._end(ProtocolViolation(f"a {kind!r} reply that is not text"))
        if kind == "too_large":
            raise ValueTooLarge(f"the program's value cannot be carried: {reply[1][:200]}")
        raise _exception(*reply[1:])

    def hello(self) -> tuple:
        """The first message: ("hello", names) or ("load_error", type, program type, message)."""
        message = self.receive()
        texts = all(type(x) is str for x in message[1:])
        if (message[0] == "hello" and len(message) == 2 and type(message[1]) is dict) or (
            message[0] == "load_error" and len(message) == 4 and texts
        ) or (message[0] == "too_large" and len(message) == 2 and texts):
            return message
        raise self._end(ProtocolViolation(f"{message[0]!r} as the first message"))

    # values ------------------------------------------------------------------------------------------

    def _deref(self, tag: str, number: int, name: str) -> Any:
        if tag == "r":
            return Remote(self, number, name)
        module = sys.modules.get(name)  # never imported on the sandbox's word (see PRELOADED)
        return module if isinstance(module, types.ModuleType) else UnsharedModule(name)

    def _ref(self, obj: Any) -> int:
        if isinstance(obj, Remote) and obj._session is self:
            return obj._id
        raise codec.Unencodable(f"a test passes a {type(obj).__name__} to the program, which cannot receive it")


def _exception(name: str, program_type: str, message: str) -> BaseException:
    cls = getattr(builtins, name, None)
    if isinstance(cls, type) and issubclass(cls, Exception) and cls not in (StopIteration, StopAsyncIteration):
        try:
            return cls(message)
        except Exception:  # noqa: BLE001 - e.g. UnicodeDecodeError needs more arguments
            pass
    return RemoteError(f"{program_type}: {message}")


class Remote:
    """A proxy for an object that lives in the sandbox. Every operation is a request; results come back
    as plain values or further proxies. Two proxies are equal only if they are the same remote object."""

    __slots__ = ("_session", "_id", "_type")

    def __init__(self, session: Session, ref_id: int, type_name: str):
        object.__setattr__(self, "_session", session)
        object.__setattr__(self, "_id", ref_id)
        object.__setattr__(self, "_type", type_name)

    def _req(self, op: str, *args: Any) -> Any:
        return self._session.request(op, self._id, *args)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._req("call", args, kwargs)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return self._req("getattr", name)

    def __getitem__(self, key: Any) -> Any:
        return self._req("getitem", key)

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
        except Exception:  # noqa: BLE001 - the program's own error; the harness's signals pass
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
    _preload()
    session = Session(sandbox, cpu_s)
    results: list[TestResult] = []
    load_error = ""
    try:
        session.deadline = time.monotonic() + limits.timeout_s
        try:
            hello = session.hello()
        except TestTimeout:
            return AssertRun([TestResult("timeout", "program_load_timeout")] * len(tests), "timeout")
        except ProtocolViolation as exc:
            return AssertRun([TestResult("failed", "protocol_violation", str(exc))] * len(tests), "malformed",
                             session.stderr())
        except ProgramExited:
            return AssertRun([TestResult("failed", "program_exited_on_load")] * len(tests), "exited",
                             session.stderr())
        except ValueTooLarge as exc:
            return AssertRun([TestResult("error", exc.reason, str(exc))] * len(tests), "too_large")
        if hello[0] == "load_error":
            load_error = f"{hello[2]}: {hello[3]}"
            return AssertRun([TestResult("failed", "program_raised_on_load", load_error)] * len(tests), load_error)
        if hello[0] == "too_large":
            message = f"the program's names cannot be carried: {str(hello[1])[:200]}"
            return AssertRun([TestResult("error", ValueTooLarge.reason, message)] * len(tests), "too_large")
        namespace: dict[str, Any] = {"__builtins__": builtins, "__name__": "rlvr_tests"}
        for key, value in hello[1].items():
            if type(key) is str and not key.startswith("__") and not hasattr(builtins, key) \
                    and not isinstance(value, UnsharedModule):
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
            elif last.reason in ("program_exited", "protocol_violation"):
                stopped = TestResult("failed", last.reason, f"the sandbox ended during test {i}")
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
    except ProtocolViolation as exc:
        return TestResult("failed", "protocol_violation", str(exc))
    except ProgramExited as exc:
        return TestResult("failed", "program_exited", str(exc))
    except HarnessError as exc:
        return TestResult("error", exc.reason, str(exc))
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
