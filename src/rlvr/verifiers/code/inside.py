"""The half of the code harness that runs INSIDE the sandbox, next to the model's program.

It is executed as a script (``python -I inside.py MODE LIMITS``), or loaded by the fork server
(``zygote.py``), and imports nothing but the standard library and ``codec.py`` from its own folder. It
holds no tests and no expected outputs, so a program that reads it, its frames or its memory learns
nothing about how it is judged.

Modes:
  ``run``: apply the limits, then run the program as ``__main__`` (stdin/stdout tests).
  ``serve``: apply the limits, run the program's definitions (as module ``solution``, so a ``__main__``
  block does not start), then answer requests from the checker on the channel fds it was given: call this
  function, get this attribute, iterate this object... Every answer is a plain value (exact builtin
  types, see ``codec.py``) or a numbered reference to an object that stays here. The checker evaluates the
  tests itself and compares plain values, so nothing the program does to ``__eq__``, builtins or
  ``assert`` in this process changes a verdict.

Messages are frames (a 4-byte big-endian length, then the body); a body is a tuple encoded with
``codec.py``, which is copied next to this file:
    checker -> here:  (op, target reference number, *arguments), op in call, getattr, getitem, iter, next,
                      len, bool, repr, str, eq, hash, isinstance, issubclass
    here -> checker:  ("hello", {name: value}) or ("load_error", type, program type, message) first; then
                      one reply per request: ("ok", value), ("error", type, program type, message),
                      ("ok", value, {position or keyword: contents}) to a call that changed list, dict or
                      set arguments in place,
                      ("stop",) (only to "next"), or ("too_large", why) when the value cannot be carried.
    callbacks:        an object the test passed (a lambda, a key function, an instance of the test's class)
                      stays in the checker's judge and arrives here as a ``Callback``; using it sends
                      ("cb", op, its number, *arguments) and waits for the judge's reply, answering the
                      judge's own requests meanwhile (the callback may call the program again).
References: the checker's objects arrive tagged "r" (a ``Callback``), the program's own objects handed back
are tagged "y" (its number here), modules "m" (imported here by name).
"""

from __future__ import annotations

import json
import os
import struct
import sys

MAX_REPLY_TEXT = 10_000


def _load_codec():
    """codec.py from this file's folder, without putting that folder on sys.path."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("rlvr_codec", os.path.join(os.path.dirname(__file__), "codec.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


codec = _load_codec()


def send(fd: int, message: tuple) -> None:
    """Write one frame; a reply too large to carry becomes ("too_large", why)."""
    try:
        body = codec.encode(message, _OBJECTS.number, modules=True, max_size=codec.MAX_FRAME - 1024)
    except codec.TooLarge as exc:
        body = codec.encode(("too_large", str(exc)))
    except Exception as exc:  # noqa: BLE001 - e.g. a list subclass whose __iter__ raises
        body = codec.encode(("error", *_describe(exc)))
    data = struct.pack(">I", len(body)) + body
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def recv(fd: int) -> bytes:
    (n,) = struct.unpack(">I", _recv_exact(fd, 4))
    return _recv_exact(fd, n)


def _recv_exact(fd: int, n: int) -> bytes:
    chunks = []
    while n:
        chunk = os.read(fd, min(n, 1 << 20))
        if not chunk:
            raise EOFError
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


# ------------------------------------------------------------------------------------------ the limits


def apply_limits(limits: dict) -> None:
    import resource

    pairs = [
        (resource.RLIMIT_AS, limits.get("memory_bytes")),
        (resource.RLIMIT_CPU, limits.get("cpu_s")),
        (resource.RLIMIT_NPROC, limits.get("processes")),
        (resource.RLIMIT_FSIZE, limits.get("file_bytes")),
        (resource.RLIMIT_NOFILE, limits.get("open_files")),
        (resource.RLIMIT_CORE, 0),
    ]
    for res, value in pairs:
        if value is not None:
            value = int(value)
            hard = resource.getrlimit(res)[1]
            if hard != resource.RLIM_INFINITY:
                value = min(value, hard)
            resource.setrlimit(res, (value, value))


# The kernel's keyrings are kept per uid (and per session), not per process or mount namespace: a key a program
# adds would be read by the next program of the same uid. The three system calls that reach them fail with
# EPERM instead, through a seccomp filter, on each ABI the architecture runs: (audit arch, syscall numbers,
# a bit to mask off the number first: x32's).
_KEYRING_SYSCALLS = {
    "x86_64": [(0xC000003E, (248, 249, 250), 0x40000000), (0x40000003, (286, 287, 288), 0)],
    "aarch64": [(0xC00000B7, (217, 218, 219), 0), (0x40000028, (309, 310, 311), 0)],
}


def _keyring_filter(abis: list) -> bytes:
    """A classic-BPF seccomp program: EPERM for the keyring calls of ``abis``, every other call allowed."""
    import struct

    ld, jeq, alu_and, ret = 0x20, 0x15, 0x54, 0x06
    allow, deny = 0x7FFF0000, 0x00050000 | 1  # SECCOMP_RET_ALLOW, SECCOMP_RET_ERRNO | EPERM
    code: list[tuple[int, int, int, int]] = []
    for arch, numbers, mask_bit in abis:
        block = [(ld, 0, 0, 0)]  # seccomp_data.nr
        if mask_bit:
            block.append((alu_and, 0, 0, 0xFFFFFFFF & ~mask_bit))
        for i, number in enumerate(numbers):
            # to the deny below this block's checks, else on to the next check
            block.append((jeq, len(numbers) - i, 0, number))
        block.append((ret, 0, 0, allow))
        block.append((ret, 0, 0, deny))
        code.append((ld, 0, 0, 4))  # seccomp_data.arch
        code.append((jeq, 0, len(block), arch))
        code.extend(block)
    code.append((ret, 0, 0, allow))
    return b"".join(struct.pack("<HBBI", *op) for op in code)


def deny_keyrings() -> None:
    """Install the keyring filter on this process and all it starts (no_new_privs first, as seccomp needs
    without CAP_SYS_ADMIN). Raises OSError where the kernel refuses; does nothing off Linux or on an
    architecture it has no numbers for."""
    if not sys.platform.startswith("linux"):
        return
    abis = _KEYRING_SYSCALLS.get(os.uname().machine)
    if abis is None:
        return
    import ctypes

    program = _keyring_filter(abis)
    libc = ctypes.CDLL(None, use_errno=True)
    buffer = ctypes.create_string_buffer(program, len(program))

    class _Program(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    prog = _Program(len(program) // 8, ctypes.cast(buffer, ctypes.c_void_p))
    if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
        raise OSError(ctypes.get_errno(), "no_new_privs refused")
    if libc.prctl(22, 2, ctypes.byref(prog), 0, 0) != 0:  # PR_SET_SECCOMP, SECCOMP_MODE_FILTER
        raise OSError(ctypes.get_errno(), "seccomp filter refused")


# ------------------------------------------------------------------------------------------- the server


class _Objects:
    """The objects the checker holds references to, by number."""

    def __init__(self):
        self.by_id: dict[int, object] = {}
        self.ids: dict[int, int] = {}
        self.callbacks: dict[int, Callback] = {}  # the checker's objects, one proxy each (so ``is`` holds)

    def ref(self, obj: object) -> int:
        key = id(obj)
        if key not in self.ids:
            n = len(self.by_id) + 1
            self.by_id[n] = obj
            self.ids[key] = n
        return self.ids[key]

    def deref(self, tag: str, number: int, name: str) -> object:
        if tag == "y":
            return self.by_id[number]
        if tag == "m":
            import importlib

            return importlib.import_module(name)
        if tag == "r":
            if number not in self.callbacks:
                self.callbacks[number] = Callback(number, name)
            return self.callbacks[number]
        raise codec.CodecError(f"unexpected reference tag {tag!r}")

    def number(self, obj: object):
        """What ``codec.encode`` sends for ``obj``: a Callback goes back as the checker's own object."""
        if type(obj) is Callback:
            return ("y", obj._number)
        return self.ref(obj)


_OBJECTS = _Objects()
_CHANNEL: list[int] = []  # the fds of the channel to the checker, once serving


class Callback:
    """An object of the test's that stays in the checker's judge; every use asks it (see the docstring)."""

    __slots__ = ("_number", "_type")

    def __init__(self, number: int, type_name: str):
        self._number, self._type = number, type_name

    def _ask(self, op: str, *args: object) -> object:
        return _ask(op, self._number, *args)

    def __call__(self, *args, **kwargs):
        return self._ask("call", args, kwargs)

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        return self._ask("getattr", name)

    def __getitem__(self, key):
        return self._ask("getitem", key)

    def __iter__(self):
        iterator = self._ask("iter")
        return iterator if type(iterator) is Callback else iter(iterator)

    def __next__(self):
        return self._ask("next")

    def __len__(self):
        return self._ask("len")

    def __bool__(self):
        return self._ask("bool") is True

    def __repr__(self):
        text = self._ask("repr")
        return text if type(text) is str else f"<{self._type} of the test>"

    def __str__(self):
        text = self._ask("str")
        return text if type(text) is str else repr(self)


def _ask(op: str, number: int, *args: object) -> object:
    """Send a callback and wait for its answer, answering the checker's requests that come first."""
    import builtins

    rfd, wfd = _CHANNEL
    send(wfd, ("cb", op, number, *args))
    while True:
        message = _decode(recv(rfd))
        kind = message[0] if type(message) is tuple and message else None
        if kind == "ok":
            return message[1]
        if kind == "stop":
            raise StopIteration
        if kind == "too_large":
            raise ValueError(f"the test's value cannot be carried: {message[1]}")
        if kind == "error":
            cls = getattr(builtins, message[1], None)
            if isinstance(cls, type) and issubclass(cls, Exception):
                try:
                    raise cls(message[3])
                except TypeError:
                    pass
            raise RuntimeError(f"{message[2]}: {message[3]}")
        send(wfd, _reply(message))


_MUTABLE = (list, dict, set)


def _snapshot(value: object) -> bytes | None:
    try:
        return codec.encode(value, _OBJECTS.number, modules=True, max_size=codec.MAX_FRAME // 4)
    except Exception:  # noqa: BLE001 - too large to send back anyway
        return None


def _call(target, args: tuple, kwargs: dict) -> tuple:
    """Call, and say which list, dict or set arguments the call changed in place: ("ok", value) or ("ok",
    value, {position or keyword: new contents}), so the test's own objects change as Python's would."""
    watched = {i: a for i, a in enumerate(args) if type(a) in _MUTABLE}
    watched.update({k: a for k, a in kwargs.items() if type(a) in _MUTABLE})
    before = {key: _snapshot(a) for key, a in watched.items()}
    value = target(*args, **kwargs)
    changed = {key: a for key, a in watched.items() if before[key] is not None and _snapshot(a) != before[key]}
    return ("ok", value, changed) if changed else ("ok", value)


def _answer(request: tuple) -> tuple:
    op, target = request[0], _OBJECTS.by_id[request[1]]
    if op == "call":
        return _call(target, request[2], request[3])
    if op == "getattr":
        return ("ok", getattr(target, request[2]))
    if op == "getitem":
        return ("ok", target[request[2]])
    if op == "iter":
        return ("ok", iter(target))
    if op == "next":
        try:
            return ("ok", next(target))
        except StopIteration:
            return ("stop",)
    if op == "len":
        return ("ok", len(target))
    if op == "bool":
        return ("ok", bool(target))
    if op == "repr":
        return ("ok", repr(target)[:MAX_REPLY_TEXT])
    if op == "str":
        return ("ok", str(target)[:MAX_REPLY_TEXT])
    # comparisons of the program's objects with each other, and type tests against its classes: Python's own
    # answer here, as a plain bool (a value the program's ``__eq__`` returns never travels)
    if op == "eq":
        result = target == request[2]
        return ("ok", type(result) is bool and result)
    if op == "hash":
        return ("ok", int(hash(target)))
    if op == "isinstance":
        return ("ok", isinstance(request[2], target) is True)
    if op == "issubclass":
        return ("ok", issubclass(request[2], target) is True)
    raise ValueError(f"unknown request {op!r}")


_CODEC_ERRORS = ("too_large_request", "error_request")


def _decode(frame: bytes) -> tuple:
    """A request from the checker; what could not be decoded becomes the reply to send instead."""
    try:
        return codec.decode(frame, _OBJECTS.deref, max_cost=1 << 62, imports=True)
    except MemoryError:
        return ("too_large_request", "the sandbox could not hold the value the test sent")
    except codec.TooLarge as exc:
        return ("too_large_request", str(exc))
    except Exception as exc:  # noqa: BLE001
        return ("error_request", *_describe(exc))


def _reply(request: tuple) -> tuple:
    """The reply to a decoded request (or the error its decoding gave)."""
    if request[0] == "too_large_request":
        return ("too_large", request[1])
    if request[0] == "error_request":
        return ("error", *request[1:])
    try:
        return _answer(request)
    except BaseException as exc:  # noqa: BLE001 - the program's exception is the answer
        if isinstance(exc, SystemExit):
            raise
        return ("error", *_describe(exc))


def _serve(program: str, rfd: int, wfd: int) -> None:
    import builtins
    import types

    _CHANNEL[:] = [rfd, wfd]
    # a real module, so that what looks its classes up by module works: dataclasses, enum, typing, pickle
    module = types.ModuleType("solution")
    module.__file__ = "solution.py"
    sys.modules["solution"] = module
    namespace: dict = module.__dict__
    namespace["__builtins__"] = builtins
    try:
        exec(compile(program, "solution.py", "exec"), namespace)
    except BaseException as exc:  # noqa: BLE001 - the program's failure is reported, not raised
        send(wfd, ("load_error", *_describe(exc)))
        return
    shown = {}
    for key, value in list(namespace.items()):
        if key.startswith("__") or key in dir(builtins):
            continue
        try:  # a name whose value is too large to carry (a big table the tests do not use) is left out
            codec.encode(value, _OBJECTS.number, modules=True, max_size=codec.MAX_FRAME // 4)
        except Exception:  # noqa: BLE001
            continue
        shown[key] = value
    send(wfd, ("hello", shown))

    while True:
        try:
            frame = recv(rfd)
        except EOFError:
            return
        send(wfd, _reply(_decode(frame)))


def _describe(exc: BaseException) -> tuple[str, str, str]:
    import builtins

    name = type(exc).__name__
    builtin = isinstance(getattr(builtins, name, None), type) and issubclass(getattr(builtins, name), BaseException)
    try:
        message = str(exc)[:2000]
    except Exception:  # noqa: BLE001
        message = "<unprintable>"
    return (name if builtin else "Exception", name, message)


def drop_privileges(uid: int | None) -> None:
    """Become the sandbox's own unprivileged uid (the checker starts us as root only to allow this)."""
    if uid is None or os.getuid() != 0:
        return
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)
    if os.getuid() != uid or os.geteuid() != uid:
        raise SystemExit("could not drop privileges")


def execute(mode: str, program: str, limits: dict) -> None:
    """Apply the limits, then run the program: as ``__main__`` ("run") or as the server ("serve")."""
    apply_limits(limits)
    deny_keyrings()
    if mode == "serve":
        rfd, wfd = limits["channel"]
        _serve(program, rfd, wfd)
        return
    program_path = limits["program"]
    sys.argv = [program_path]
    namespace = {"__name__": "__main__", "__file__": program_path}
    code = compile(program, program_path, "exec")
    del program
    exec(code, namespace)


def main() -> None:
    mode, limits = sys.argv[1], json.loads(sys.argv[2])
    drop_privileges(limits.get("uid"))
    sys.path.extend(limits.get("sys_path", []))
    with open(limits["program"], encoding="utf-8") as f:
        program = f.read()
    execute(mode, program, limits)


if __name__ == "__main__":
    main()
