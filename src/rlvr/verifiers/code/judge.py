"""The judge: the process where assert tests are executed, apart from the checker that asked for the verdict.

The checker (``harness.run_assert_tests``) asks its judge server (``serve``: one per checker process, started on
first use) for a judge per task: a forked child that gets the tests and the channel to the sandboxed program,
and reports one frame per test back to the checker. Everything a test does with a value the program returned
(compare it, hash it, sum it, sort it, print it) happens here, in a process with an address-space limit of its
own (``memory_bytes`` on top of its size at start) and a watchdog of its own (``_watchdog``), which the checker
also kills when a test's report is late. So a compact value whose comparison expands it (``range(10**18)``, a
decimal with a huge exponent, keys that share one hash, a deep nest, a huge integer) can cost at most one test's
time and this process's memory: the checker's own time and memory are never at stake, and the verdict for that
test is "timeout" or "failed", never credit.

Inside the judge (see ``Session`` and ``Remote``):
  - every name the program defines is a ``Remote`` proxy; calling it sends the call to the sandbox, and the
    result comes back as a plain value (exact builtin types, ``codec.py``) or another proxy;
  - the tests see the libraries they use, never the program's objects under those names (``test_namespace``):
    a program name that is one of the libraries in ``PRELOADED`` (or the alias ``np``) is the judge's own copy
    of that library, whatever the program bound to it;
  - what the test passes to the program travels as Python would pass it: plain values are copied, and any other
    object (a lambda, a key function, an instance of a class the test defines) stays here and reaches the
    program as a proxy; when the program uses that proxy, the sandbox asks the judge (a "callback"), which
    answers with the test's own object, under the test's deadline. The program may call such an object, and
    read attributes (not dunder names) of objects whose class the tests define: nothing else of the judge is
    reachable through it.
The judge imports a few standard modules and ``codec.py`` and ``channel.py`` from its own folder, nothing else
(the libraries of PRELOADED on first use), so it starts in a few tens of milliseconds.
"""

from __future__ import annotations

import builtins
import importlib
import os
import struct
import sys
import time
import types
from typing import Any


def _sibling(name: str):
    """A module of this folder, loaded by its path (run as a script, the package is not imported: it would
    bring every verifier with it)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"rlvr_judge_{name}",
                                                  os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                               f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


if __package__:
    from rlvr.verifiers.code import channel as _channel
    from rlvr.verifiers.code import codec
else:  # pragma: no cover - the judge process
    codec = _sibling("codec")
    _channel = _sibling("channel")
Channel, ChannelClosed = _channel.Channel, _channel.ChannelClosed
ChannelTimeout, ChannelViolation = _channel.ChannelTimeout, _channel.ChannelViolation

# Libraries a program's reference resolves to (``import math`` at its top gives the tests the judge's own
# ``math``), and the names under which the tests always see the library itself, whatever the program bound to
# them. A module outside this list is never imported because the sandbox names it.
PRELOADED = ("math", "cmath", "re", "string", "collections", "itertools", "functools", "heapq", "bisect",
             "random", "statistics", "fractions", "decimal", "operator", "copy", "datetime", "json", "hashlib",
             "typing", "numpy")
LIBRARY_NAMES = {**{name: name for name in PRELOADED}, "np": "numpy"}
MIN_JUDGE_MEMORY = 256 << 20  # bytes of address space beyond its size at start, at least (numpy's import)
TESTS_MODULE = "rlvr_tests"  # the tests' ``__name__``: classes they define carry it as ``__module__``


def library(name: str) -> types.ModuleType | None:
    """The judge's own copy of module ``name``: imported here if it is in PRELOADED, else only if the judge
    already has it; None otherwise."""
    module = sys.modules.get(name)
    if module is None and name in PRELOADED:
        try:
            module = importlib.import_module(name)
        except (ImportError, MemoryError):  # not installed, or beyond the judge's memory limit
            return None
    return module if isinstance(module, types.ModuleType) else None


class TestResult:
    """One test's outcome: status passed / failed / timeout / error, a reason, a message."""

    __slots__ = ("status", "reason", "message")

    def __init__(self, status: str, reason: str = "", message: str = ""):
        self.status, self.reason, self.message = status, reason, message

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TestResult) and (self.status, self.reason, self.message) == (
            other.status, other.reason, other.message)

    def __repr__(self) -> str:
        return f"TestResult({self.status!r}, {self.reason!r}, {self.message!r})"

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
    """Stands for a module of the program's that the judge does not share with the tests (see PRELOADED)."""

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
# what the program may ask of an object the test passed it, and how many arguments each op takes
_CALLBACK_ARGS = {"call": 2, "getattr": 1, "getitem": 1, "iter": 0, "next": 0, "len": 0, "bool": 0, "repr": 0,
                  "str": 0}
MAX_CALLBACK_TEXT = 10_000


def _shares_attributes(obj: Any) -> bool:
    """Objects whose attributes the program may read: instances of classes the tests define, and those
    classes. Functions, frames, generators, modules and the judge's other objects are never walked."""
    cls = obj if isinstance(obj, type) else type(obj)
    return getattr(cls, "__module__", None) == TESTS_MODULE


def describe(exc: BaseException) -> tuple[str, str, str]:
    name = type(exc).__name__
    builtin = isinstance(getattr(builtins, name, None), type) and issubclass(getattr(builtins, name), BaseException)
    try:
        message = str(exc)[:2000]
    except Exception:  # noqa: BLE001
        message = "<unprintable>"
    return (name if builtin else "Exception", name, message)


# every Session of this process by its key: a pickled (or copied) proxy comes back as the same proxy
_SESSIONS: dict[int, "Session"] = {}


def _proxy(session_key: int, number: int) -> "Remote":
    session = _SESSIONS.get(session_key)
    remote = (session._remotes or {}).get(number) if session is not None else None
    if remote is None:
        import pickle

        raise pickle.UnpicklingError(f"no object {number} of the program in this judge")
    return remote


class Session:
    """The channel to one ``inside.py serve`` process, with the current test's deadline. ``sandbox.kill(proc)``
    is called when the sandbox must be ended (a timeout, a violation)."""

    def __init__(self, channel: Channel, sandbox: Any, proc: Any, timeout_s: float):
        self.sandbox, self.proc, self.channel = sandbox, proc, channel
        self.key = len(_SESSIONS) + 1
        _SESSIONS[self.key] = self
        self.deadline = time.monotonic() + timeout_s
        self.dead = False
        self.requests = 0

    # the test's objects the program holds proxies for, by number (made on first use)
    _objects: dict | None = None
    _numbers: dict | None = None
    _remotes: dict | None = None  # the program's objects by number: their proxies

    def close(self) -> None:
        self.channel.close()

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
            # imports: the modules of codec's fixed table of kinds (fractions, decimal...), on first use
            message = codec.decode(frame, self._deref, deadline=self.deadline, clock=time.monotonic, imports=True)
        except codec.TooSlow:
            raise self._end(TestTimeout()) from None
        except codec.TooLarge as exc:  # well-formed, but beyond what the judge rebuilds
            raise ValueTooLarge(f"the program's value cannot be carried: {exc}") from None
        except codec.CodecError as exc:
            raise self._end(ProtocolViolation(f"malformed reply: {exc}")) from None
        if type(message) is not tuple or not message or type(message[0]) is not str:
            raise self._end(ProtocolViolation("a reply that is not a message"))
        return message

    def _send(self, message: tuple) -> None:
        try:
            body = codec.encode(message, self._ref, modules=True)
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

    def request(self, op: str, target: int, *args: Any) -> Any:
        if self.dead:
            raise ProgramExited
        self.requests += 1
        self._send((op, target, *args))
        while True:
            reply = self.receive()
            kind = reply[0]
            if kind == "cb":  # the program uses an object the test passed it; its answer comes after
                self._answer_callback(reply)
                continue
            if kind == "stop" and op == "next" and len(reply) == 1:
                raise StopIteration
            if kind == "ok" and op == "call" and len(reply) == 3:
                self._write_back(args[0], args[1], reply[2])
                return reply[1]
            if _REPLY_FIELDS.get(kind) != len(reply):
                raise self._end(ProtocolViolation(f"reply {kind!r} to a {op!r} request"))
            if kind == "ok":
                return reply[1]
            if not all(type(x) is str for x in reply[1:]):  # texts only: nothing here may call into the sandbox
                raise self._end(ProtocolViolation(f"a {kind!r} reply that is not text"))
            if kind == "too_large":
                raise ValueTooLarge(f"the program's value cannot be carried: {reply[1][:200]}")
            raise _exception(*reply[1:])

    def _write_back(self, positional: tuple, named: dict, changes: object) -> None:
        """The program changed list, dict or set arguments in place: the test's own objects change alike."""
        if type(changes) is not dict or not changes:
            raise self._end(ProtocolViolation("malformed changes to the arguments"))
        updates = []
        for key, new in changes.items():
            if type(key) is int and 0 <= key < len(positional):
                original = positional[key]
            elif type(key) is str and key in named:
                original = named[key]
            else:
                raise self._end(ProtocolViolation("a change to an argument that was not passed"))
            if type(original) not in (list, dict, set) or type(new) is not type(original):
                raise self._end(ProtocolViolation("a change that turns an argument into another type"))
            updates.append((original, new))
        for original, new in updates:
            if type(original) is list:
                original[:] = new
            else:
                original.clear()
                original.update(new)

    def _answer_callback(self, message: tuple) -> None:
        """Answer ("cb", op, number, *args): the program uses one of the test's objects."""
        if len(message) < 3:
            raise self._end(ProtocolViolation("a callback without a target"))
        op, number, args = message[1], message[2], message[3:]
        objects = self._objects or {}
        if type(op) is not str or _CALLBACK_ARGS.get(op) != len(args) or type(number) is not int \
                or number not in objects:
            raise self._end(ProtocolViolation(f"a malformed callback {str(op)[:40]!r}"))
        target = objects[number]
        try:
            if op == "call":
                positional, named = args
                if type(positional) is not tuple or type(named) is not dict \
                        or not all(type(k) is str for k in named):
                    raise self._end(ProtocolViolation("a malformed call"))
                reply: tuple = ("ok", target(*positional, **named))
            elif op == "getattr":
                name = args[0]
                if type(name) is not str or name.startswith("__") or not _shares_attributes(target):
                    raise AttributeError(f"{type(target).__name__!r} object has no attribute {str(name)[:80]!r} "
                                         "visible to the program")
                reply = ("ok", getattr(target, name))
            elif op == "getitem":
                reply = ("ok", target[args[0]])
            elif op == "iter":
                reply = ("ok", iter(target))
            elif op == "next":
                try:
                    reply = ("ok", next(target))
                except StopIteration:
                    reply = ("stop",)
            elif op == "len":
                reply = ("ok", len(target))
            elif op == "bool":
                reply = ("ok", bool(target))
            elif op == "repr":
                reply = ("ok", repr(target)[:MAX_CALLBACK_TEXT])
            else:
                reply = ("ok", str(target)[:MAX_CALLBACK_TEXT])
        except Exception as exc:  # noqa: BLE001 - the test's exception is the program's to handle
            reply = ("error", *describe(exc))
        try:
            self._send(reply)
        except ValueTooLarge as exc:
            self._send(("too_large", str(exc)))

    # values ------------------------------------------------------------------------------------------

    def _deref(self, tag: str, number: int, name: str) -> Any:
        if tag == "r":  # one proxy per remote object, so that ``is`` holds as it does in the program
            if self._remotes is None:
                self._remotes = {}
            remote = self._remotes.get(number)
            if remote is None:
                remote = self._remotes[number] = Remote(self, number, name)
            return remote
        if tag == "y":  # one of the test's own objects, handed back
            objects = self._objects or {}
            if number not in objects:
                raise codec.CodecError(f"no object {number} was given to the program")
            return objects[number]
        module = library(name)  # never imported on the sandbox's word beyond PRELOADED
        return module if module is not None else UnsharedModule(name)

    def _ref(self, obj: Any) -> tuple[str, int]:
        if isinstance(obj, Remote):
            if obj._session is not self:
                raise codec.Unencodable("a proxy of another program cannot be passed to this one")
            return ("y", obj._id)
        if self._objects is None:
            self._objects, self._numbers = {}, {}
        key = id(obj)
        if key not in self._numbers:
            number = len(self._objects) + 1
            self._objects[number] = obj  # kept alive, so its id stays its own
            self._numbers[key] = number
        return ("r", self._numbers[key])


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
    as plain values or further proxies. One remote object has one proxy (``is`` holds); two proxies are
    equal when they are the same object or the program's ``==`` says so with a bool; a proxy never equals a
    test's own value."""

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

    def _same_program(self, other: Any) -> bool:
        return type(other) is Remote and other._session is self._session

    def __eq__(self, other: Any) -> bool:
        # Only the program's own objects are compared by the program (two of them, say two instances of its
        # dataclass): against a test's value a proxy is never equal, whatever its ``__eq__`` would answer.
        if not self._same_program(other):
            return False
        return other._id == self._id or self._req("eq", other) is True

    def __ne__(self, other: Any) -> bool:
        return not self.__eq__(other)

    def __hash__(self) -> int:
        value = self._req("hash")  # equal objects of the program hash alike, as ``__eq__`` needs
        if type(value) is not int:
            raise TypeError("hash() of a remote object did not return an int")
        return value

    def __reduce_ex__(self, protocol: Any) -> tuple:
        # The object stays in the program's process: pickling (or copying) a proxy gives the same proxy back.
        return (_proxy, (self._session.key, self._id))

    # isinstance(x, C) and issubclass(K, C) for a class C of the program's: asked of the program's process
    def __instancecheck__(self, instance: Any) -> bool:
        if type(instance) is Remote and instance._session is not self._session:
            return False
        return self._req("isinstance", instance) is True

    def __subclasscheck__(self, subclass: Any) -> bool:
        if type(subclass) is Remote and subclass._session is not self._session:
            return False
        return self._req("issubclass", subclass) is True

    def __repr__(self) -> str:
        try:
            text = self._req("repr")
        except Exception:  # noqa: BLE001 - the program's own error; the harness's signals pass
            text = None
        return text if type(text) is str else f"<{self._type} in the sandbox>"

    def __str__(self) -> str:
        text = self._req("str")
        return text if type(text) is str else repr(self)


def hello(session: Session) -> tuple:
    """The first message: ("hello", names) or ("load_error", type, program type, message)."""
    message = session.receive()
    texts = all(type(x) is str for x in message[1:])
    if (message[0] == "hello" and len(message) == 2 and type(message[1]) is dict) or (
        message[0] == "load_error" and len(message) == 4 and texts
    ) or (message[0] == "too_large" and len(message) == 2 and texts):
        return message
    raise session._end(ProtocolViolation(f"{message[0]!r} as the first message"))


def test_namespace(names: dict) -> dict:
    """The namespace the tests run in: the program's names as proxies, except names of builtins and dunders
    (a program's ``len`` never replaces the tests'), modules the tests are not given, and the names of the
    libraries in LIBRARY_NAMES, which are always the judge's own library (a program that binds ``math`` or
    ``np`` to an object of its own cannot answer for ``math.isclose`` in a test)."""
    module = types.ModuleType(TESTS_MODULE)  # registered, so that dataclasses and pickle find the tests' classes
    sys.modules[TESTS_MODULE] = module
    namespace: dict[str, Any] = module.__dict__
    namespace["__builtins__"] = builtins
    for key, value in names.items():
        if type(key) is not str or key.startswith("__") or hasattr(builtins, key) or isinstance(value, UnsharedModule):
            continue
        if key in LIBRARY_NAMES:
            module = library(LIBRARY_NAMES[key])
            if module is not None:
                namespace[key] = module
            continue
        namespace[key] = value
    return namespace


def one_test(test: str, index: int, namespace: dict, session: Session) -> TestResult:
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
    except MemoryError:
        return TestResult("failed", "judge_memory", "the test's values took more memory than the judge may use")
    except Exception as exc:  # noqa: BLE001 - the program's exception, or the test's own on its values
        return TestResult("failed", "exception", f"{type(exc).__name__}: {exc}")
    return TestResult("passed")


# ------------------------------------------------------------------------------------------- the process


class _Reporter:
    """The judge's stdout towards the checker: one frame per report (a 4-byte big-endian length, then a dict
    of plain values encoded by codec.py; json would cost the judge's start-up the import of ``re``)."""

    def __init__(self, fd: int):
        self.fd = fd

    def write(self, **fields: Any) -> None:
        body = codec.encode(fields)
        data = memoryview(struct.pack(">I", len(body)) + body)
        while data:
            data = data[os.write(self.fd, data):]

    def kill(self, proc: Any) -> None:  # Session's sandbox: the checker kills the program at once
        self.write(kill=True)


def _limit_memory(extra_bytes: int) -> None:
    import resource

    with open("/proc/self/statm") as f:
        size = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    hard = resource.getrlimit(resource.RLIMIT_AS)[1]
    limit = size + max(int(extra_bytes), MIN_JUDGE_MEMORY)
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))


def _die_with_parent() -> None:
    try:
        import ctypes
        import signal

        ctypes.CDLL(None).prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def judge(job: dict, reporter: _Reporter, arm=lambda: None) -> None:
    """Run ``job``'s tests against the program on ``job["fds"]`` (channel read, channel write, the program's
    stdout and stderr), reporting each result; ``arm()`` is called as the load and each test begin."""
    arm()
    timeout_s = float(job["timeout_s"])
    read_fd, write_fd, *outputs = job["fds"]
    channel = Channel(read_fd, write_fd, outputs, int(job["output_bytes"]), max_frame=codec.MAX_FRAME)
    session = Session(channel, reporter, None, timeout_s)
    tests = job["tests"]

    def all_tests(result: TestResult, load: str) -> None:
        reporter.write(load=load, results=[result.as_dict()] * len(tests), stderr=_tail(channel, outputs))

    try:
        first = hello(session)
    except TestTimeout:
        return all_tests(TestResult("timeout", "program_load_timeout"), "timeout")
    except ProtocolViolation as exc:
        return all_tests(TestResult("failed", "protocol_violation", str(exc)), "malformed")
    except ProgramExited:
        return all_tests(TestResult("failed", "program_exited_on_load"), "exited")
    except ValueTooLarge as exc:
        return all_tests(TestResult("error", exc.reason, str(exc)), "too_large")
    if first[0] == "load_error":
        message = f"{first[2]}: {first[3]}"
        return all_tests(TestResult("failed", "program_raised_on_load", message), message)
    if first[0] == "too_large":
        message = f"the program's names cannot be carried: {str(first[1])[:200]}"
        return all_tests(TestResult("error", ValueTooLarge.reason, message), "too_large")
    reporter.write(loaded=True)
    namespace = test_namespace(first[1])
    stopped: TestResult | None = None
    for i, test in enumerate(tests):
        if stopped is not None:
            reporter.write(result=stopped.as_dict())
            continue
        arm()
        session.deadline = time.monotonic() + timeout_s
        result = one_test(test, i, namespace, session)
        reporter.write(result=result.as_dict())
        if result.status == "timeout":
            stopped = TestResult("failed", "not_run", f"test {i} timed out")
        elif result.reason in ("program_exited", "protocol_violation"):
            stopped = TestResult("failed", result.reason, f"the sandbox ended during test {i}")
    reporter.write(end=True, requests=session.requests, stderr=_tail(channel, outputs))


def _tail(channel: Channel, outputs: list[int]) -> str:
    if len(outputs) < 2:
        return ""
    return channel.captured(outputs[1])[-4000:].decode("latin-1")


def _watchdog(seconds: float) -> None:
    """The judge's own wall clock: SIGALRM with its default action ends the process even inside a C loop
    (``sum(range(10**18))``), so a test's work is bounded without the checker's help."""
    import signal

    signal.signal(signal.SIGALRM, signal.SIG_DFL)
    signal.setitimer(signal.ITIMER_REAL, max(0.001, seconds))


def run_job(job: dict, job_fds: list[int]) -> None:
    """One judge, in a process of its own: ``job_fds`` are the channel's read and write ends, the program's
    stdout and stderr, and the pipe the reports go to."""
    *fds, report_fd = job_fds
    job["fds"] = fds
    _limit_memory(job["memory_bytes"])
    grace = float(job.get("grace_s", 2.0))
    judge(job, _Reporter(report_fd), lambda: _watchdog(float(job["timeout_s"]) + grace))


def serve(control_fd: int) -> None:
    """The judge server: one long-lived process per checker that forks a judge per task (a fork costs about
    a millisecond, an interpreter's start tens). Requests arrive on a SOCK_SEQPACKET socket, each with its fds:
    ("judge", token) with a memory file holding the job (codec bytes) first among its fds, or ("kill", token). It exits when the checker's end closes. It runs no
    test itself: each judge is a child that reports straight to the checker and is killed by its own watchdog,
    or by the server on the checker's word while it has not been reaped (so its pid is still its own)."""
    import select
    import signal
    import socket

    # what every judge needs, imported once here rather than in each forked judge: the standard libraries of
    # PRELOADED (numpy, with threads of its own, is imported by the judge that needs it), ctypes, resource
    import ctypes  # noqa: F401 - _die_with_parent
    import resource  # noqa: F401 - _limit_memory

    for name in PRELOADED:
        if name != "numpy":
            library(name)
    import gc

    gc.freeze()  # a judge's collections skip what it inherited, so its pages stay shared with the server
    control = socket.socket(fileno=control_fd)
    alive: dict[int, int] = {}  # token -> pid, until reaped
    poller = select.poll()
    poller.register(control, select.POLLIN)
    while True:
        while alive:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            for token, child in list(alive.items()):
                if child == pid:
                    del alive[token]
        if not poller.poll(200 if alive else 5000):
            continue
        message, fds, _, _ = socket.recv_fds(control, 1 << 16, 16)
        if not message:
            return  # the checker is gone
        try:
            request = codec.decode(message)
            op, token = request[0], int(request[1])
            if op == "kill":
                if token in alive:
                    os.kill(alive[token], signal.SIGKILL)
                continue
            pid = os.fork()
            if pid == 0:
                code = 0
                try:
                    control.close()
                    _die_with_parent()
                    job_fd, *job_fds = fds
                    with os.fdopen(job_fd, "rb") as f:
                        f.seek(0)
                        job = codec.decode(f.read())
                    run_job(job, job_fds)
                except BaseException:  # noqa: BLE001 - the checker sees the reports stop
                    code = 1
                finally:
                    os._exit(code)
            alive[token] = pid
        except (codec.CodecError, IndexError, TypeError, ValueError, OSError):
            pass
        finally:
            for fd in fds:
                os.close(fd)


if __name__ == "__main__":
    serve(int(sys.argv[1]))
