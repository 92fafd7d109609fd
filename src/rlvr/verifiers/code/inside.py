"""The half of the code harness that runs INSIDE the sandbox, next to the model's program.

It is executed as a script (``python -I inside.py MODE LIMITS``) and imports nothing but the standard
library. It holds no tests and no expected outputs, so a program that reads it, its frames or its memory
learns nothing about how it is judged.

Modes:
  ``run``: apply the limits, then run the program as ``__main__`` (stdin/stdout tests).
  ``serve``: apply the limits, run the program's definitions (as module ``solution``, so a ``__main__``
  block does not start), then answer requests from the checker on the channel fds it was given: call this
  function, get this attribute, iterate this object... Every answer is a plain value (exact builtin
  types, see ``encode``) or a numbered reference to an object that stays here. The checker evaluates the
  tests itself and compares plain values, so nothing the program does to ``__eq__``, builtins or
  ``assert`` in this process changes a verdict.

Messages are length-prefixed JSON (4-byte big-endian length).
"""

from __future__ import annotations

import json
import os
import struct
import sys

MAX_MESSAGE = 16 * 1024 * 1024
MAX_DEPTH = 100

# ------------------------------------------------------------------------------------------- the codec
# A plain value is encoded as JSON where possible; anything else is a tagged object {"#": tag, ...}:
#   {"#": "tuple" | "set" | "frozenset", "v": [...]}   (a list is a JSON array)
#   {"#": "dict", "v": [[k, v], ...]}   {"#": "float", "v": "nan" | "inf" | "-inf"}
#   {"#": "bytes", "v": hex}   {"#": "complex", "v": [re, im]}   {"#": "ref", "id": n, "type": name}
#   {"#": "module", "v": name, "id": n}   (the checker uses its own copy of the module when it has one)


class EncodeError(TypeError):
    pass


def _float(x: float) -> object:
    if x != x:
        return {"#": "float", "v": "nan"}
    if x in (float("inf"), float("-inf")):
        return {"#": "float", "v": "inf" if x > 0 else "-inf"}
    return x


def encode(x: object, ref=None, depth: int = 0) -> object:
    """``x`` as JSON-able data. ``ref(obj) -> int`` numbers an object that is not a plain value; without
    it such an object raises EncodeError. Subclasses of builtins and numeric types are converted to the
    builtin they claim to be, so a custom ``__eq__`` never travels."""
    if depth > MAX_DEPTH:
        raise EncodeError("value nested too deeply")
    t = type(x)
    if x is None or t is bool or t is str:
        return x
    if t is int:
        return x
    if t is float:
        return _float(x)
    if t is list:
        return [encode(v, ref, depth + 1) for v in x]
    if t is tuple or t is set or t is frozenset:
        return {"#": t.__name__, "v": [encode(v, ref, depth + 1) for v in x]}
    if t is dict:
        return {"#": "dict", "v": [[encode(k, ref, depth + 1), encode(v, ref, depth + 1)] for k, v in x.items()]}
    if t is bytes:
        return {"#": "bytes", "v": x.hex()}
    if t is complex:
        return {"#": "complex", "v": [_float(x.real), _float(x.imag)]}
    converted = _as_builtin(x)
    if converted is not _NOT_BUILTIN:
        return encode(converted, ref, depth + 1)
    if ref is None:
        raise EncodeError(f"cannot send a {t.__name__}")
    return {"#": "ref", "id": ref(x), "type": t.__name__}


_NOT_BUILTIN = object()


def _as_builtin(x: object) -> object:
    """A subclass of a builtin (or a numpy scalar/array) as the builtin value it stands for."""
    for base in (bool, int, float, complex, str, bytes, tuple, frozenset, set, list, dict):
        if isinstance(x, base):
            return base(x) if base is not bool else bool(int(x))
    module = type(x).__module__ or ""
    if module.split(".")[0] == "numpy" and hasattr(x, "tolist"):
        return x.tolist()
    return _NOT_BUILTIN


def decode(data: object, deref=None) -> object:
    if isinstance(data, list):
        return [decode(v, deref) for v in data]
    if not isinstance(data, dict):
        return data
    tag = data.get("#")
    if tag == "tuple":
        return tuple(decode(v, deref) for v in data["v"])
    if tag == "set":
        return {decode(v, deref) for v in data["v"]}
    if tag == "frozenset":
        return frozenset(decode(v, deref) for v in data["v"])
    if tag == "dict":
        return {decode(k, deref): decode(v, deref) for k, v in data["v"]}
    if tag == "float":
        return float(data["v"])
    if tag == "bytes":
        return bytes.fromhex(data["v"])
    if tag == "complex":
        re_, im = (decode(v) for v in data["v"])
        return complex(re_, im)
    if deref is not None:
        return deref(data)
    raise EncodeError(f"unexpected tag {tag!r}")


def send(fd: int, message: object) -> None:
    body = json.dumps(message, separators=(",", ":")).encode()
    data = struct.pack(">I", len(body)) + body
    while data:
        n = os.write(fd, data)
        data = data[n:]


def recv_exact(fd: int, n: int) -> bytes:
    chunks = []
    while n:
        chunk = os.read(fd, min(n, 1 << 20))
        if not chunk:
            raise EOFError
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def recv(fd: int) -> object:
    (n,) = struct.unpack(">I", recv_exact(fd, 4))
    if n > MAX_MESSAGE:
        raise ValueError("message too large")
    return json.loads(recv_exact(fd, n))


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


# ------------------------------------------------------------------------------------------- the server


class _Objects:
    """The objects the checker holds references to, by number."""

    def __init__(self):
        self.by_id: dict[int, object] = {}
        self.ids: dict[int, int] = {}

    def ref(self, obj: object) -> int:
        key = id(obj)
        if key not in self.ids:
            n = len(self.by_id) + 1
            self.by_id[n] = obj
            self.ids[key] = n
        return self.ids[key]


def _library_object(obj: object, objects: _Objects):
    """A module travels by name: the checker uses its own copy when it has one, so a program that patches
    ``math.isclose`` here changes nothing there. (Only modules: a name can be claimed by any object, and a
    module is harmless whatever name it claims.)"""
    import types

    if isinstance(obj, types.ModuleType) and isinstance(getattr(obj, "__name__", None), str):
        return {"#": "module", "v": obj.__name__, "id": objects.ref(obj)}
    return None


def _reply_value(objects: _Objects, value: object) -> object:
    lib = _library_object(value, objects)
    if lib is not None:
        return lib
    return encode(value, objects.ref)


def _serve(program: str, rfd: int, wfd: int) -> None:
    import builtins

    objects = _Objects()

    def deref(data: dict) -> object:
        if data.get("#") == "ref":
            return objects.by_id[data["id"]]
        raise EncodeError(f"unexpected tag {data.get('#')!r}")

    namespace: dict = {"__name__": "solution", "__builtins__": builtins}
    try:
        exec(compile(program, "solution.py", "exec"), namespace)
    except BaseException as exc:  # noqa: BLE001 - the program's failure is reported, not raised
        send(wfd, {"error": _describe(exc)})
        return
    names = []
    for key, value in list(namespace.items()):
        if key.startswith("__") or key in dir(builtins):
            continue
        try:
            names.append([key, _reply_value(objects, value)])
        except Exception:  # noqa: BLE001
            continue
    send(wfd, {"ok": {"#": "dict", "v": names}})

    while True:
        try:
            request = recv(rfd)
        except EOFError:
            return
        op = request.get("op")
        try:
            target = deref(request["target"]) if "target" in request else None
            if op == "call":
                args = decode(request.get("args", []), deref)
                kwargs = decode(request.get("kwargs", {"#": "dict", "v": []}), deref)
                result = target(*args, **kwargs)
            elif op == "getattr":
                result = getattr(target, request["name"])
            elif op == "getitem":
                result = target[decode(request["key"], deref)]
            elif op == "iter":
                result = iter(target)
            elif op == "next":
                try:
                    result = next(target)
                except StopIteration:
                    send(wfd, {"stop": True})
                    continue
            elif op == "len":
                result = len(target)
            elif op == "bool":
                result = bool(target)
            elif op == "repr":
                result = repr(target)[:10_000]
            elif op == "str":
                result = str(target)[:10_000]
            elif op == "plain":  # the builtin value of an object (a list subclass, a numpy array...)
                result = _as_builtin(target)
                if result is _NOT_BUILTIN:
                    raise TypeError(f"{type(target).__name__} is not a plain value")
            else:
                raise ValueError(f"unknown request {op!r}")
            reply = {"ok": _reply_value(objects, result)}
        except BaseException as exc:  # noqa: BLE001 - the program's exception is the answer
            if isinstance(exc, SystemExit):
                raise
            reply = {"error": _describe(exc)}
        send(wfd, reply)


def _describe(exc: BaseException) -> dict:
    import builtins

    name = type(exc).__name__
    builtin = isinstance(getattr(builtins, name, None), type) and issubclass(getattr(builtins, name), BaseException)
    try:
        message = str(exc)[:2000]
    except Exception:  # noqa: BLE001
        message = "<unprintable>"
    return {"type": name if builtin else "Exception", "program_type": name, "message": message}


def drop_privileges(uid: int | None) -> None:
    """Become the sandbox's own unprivileged uid (the checker starts us as root only to allow this)."""
    if uid is None or os.getuid() != 0:
        return
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)
    if os.getuid() != uid or os.geteuid() != uid:
        raise SystemExit("could not drop privileges")


def main() -> None:
    mode, limits = sys.argv[1], json.loads(sys.argv[2])
    drop_privileges(limits.get("uid"))
    sys.path.extend(limits.get("sys_path", []))
    program_path = limits["program"]
    with open(program_path, encoding="utf-8") as f:
        program = f.read()
    if mode == "serve":
        rfd, wfd = limits["channel"]
        apply_limits(limits)
        _serve(program, rfd, wfd)
        return
    apply_limits(limits)
    sys.argv = [program_path]
    namespace = {"__name__": "__main__", "__file__": program_path}
    code = compile(program, program_path, "exec")
    del program
    exec(code, namespace)


if __name__ == "__main__":
    main()
