"""The values that cross between the checker and the sandbox, as bytes.

Both halves of the harness use this module (it imports only the standard library, and is copied into the
sandbox next to ``inside.py``). The sandbox's half is under the program's control, so everything the
checker decodes is hostile input, and decoding is built for that:

- iterative, never recursive: a list nested a million levels deep decodes like a long flat one;
- linear time: integers travel as two's-complement bytes (never as decimal text, whose conversion is
  quadratic), and a set, frozenset or dict may hold at most ``MAX_EQUAL_HASHES`` members with one hash
  value, so a flood of colliding hashes cannot make building it quadratic;
- bounded memory: a frame holds at most ``max_frame`` bytes, and decoding stops once the objects it has
  built would take about ``max_cost`` bytes (an empty list is two bytes on the wire and 64 in memory);
- it builds exact builtin types, and the standard-library kinds of ``_KINDS`` from plain fields with
  classes already imported, and calls no code the sandbox chose: tuples nest at most ``MAX_TUPLE_DEPTH``
  deep (hashing a deeper one overflows the C stack), references to objects that stay in the sandbox are
  handed to the caller's ``deref``.

Format: one tag byte per value, sizes as LEB128 varints.
    N None  T True  F False  i int (size, two's-complement little-endian bytes)  f float (8 bytes)
    c complex (16 bytes)  s str (size, UTF-8 with lone surrogates kept)  b bytes (size, raw)
    l list  t tuple  S set  z frozenset (count, then the members)  d dict (count, then key, value, ...)
    I list of 64-bit ints  D list of floats (count, then 8 little-endian bytes each): large numeric lists
      decode at C speed
    x a standard-library value (2 members: its kind, a tuple of plain fields; see ``_KINDS``): fractions,
      decimals, dates and times, deques, ranges, Counters and OrderedDicts arrive as the receiver's own
      objects of those types, rebuilt from plain fields, never as objects the sender controls; named tuples
      (kind "namedtuple") arrive as instances of the receiver's class when it owns it, else of a named-tuple
      class of the receiver's own
    B a builtin type, Ellipsis or NotImplemented (0, its name in ``builtins``): the receiver's own object, so
      ``f() is int`` and ``g() is NotImplemented`` hold across the channel (builtin functions never travel so:
      a program must not hand the checker its ``eval``)
    r ref (id, type name)  m module (id, module name): objects that stay on the sender's side
    y yours (id, type name): an object of the RECEIVER's side, by the receiver's own number, handed back
    (``ref(obj)`` returns a number for "r", or a (tag, number) pair)
"""

from __future__ import annotations

import builtins
import struct
import sys
import types
from array import array

MAX_FRAME = 64 << 20  # bytes of one message on the channel
MAX_COST = 256 << 20  # about the bytes of Python objects one decoded message may build
MAX_EQUAL_HASHES = 32  # members of one set (keys of one dict) that share a hash value
MAX_TUPLE_DEPTH = 10_000  # tuples inside tuples; lists, dicts and sets may nest without limit
MAX_NAME = 512  # bytes of a type or module name in a reference


class CodecError(ValueError):
    """Bytes that are not a well-formed value (only a tampered channel produces them)."""


class TooLarge(CodecError):
    """A well-formed value beyond the caps: too many bytes, too costly to build, or nested too deep."""


class TooSlow(CodecError):
    """Decoding ran past the caller's deadline (a reply built to be slow to rebuild)."""


class Unencodable(TypeError):
    """A value that cannot travel (an object with no reference number, a list that contains itself)."""


_TAGS = {name: ord(name) for name in "NTFifcsblStzdrmyIDxB"}
_PACKED = {ord("I"): "q", ord("D"): "d"}
_PACK_FROM = 8  # lists at least this long are sent packed when they can be
_CONTAINERS = {ord("l"), ord("t"), ord("S"), ord("z"), ord("d"), ord("x")}
MAX_DECIMAL_DIGITS = 10_000  # text of a decimal (its conversion is not linear beyond)
MAX_FRACTION_BITS = 1 << 16

# kind -> (module, class name, the plain fields of an instance)
_KINDS = {
    "fraction": ("fractions", "Fraction", lambda x: (x.numerator, x.denominator)),
    "decimal": ("decimal", "Decimal", lambda x: (str(x),)),
    "date": ("datetime", "date", lambda x: (x.year, x.month, x.day)),
    "datetime": ("datetime", "datetime", lambda x: (x.year, x.month, x.day, x.hour, x.minute, x.second,
                                                     x.microsecond, x.fold)),
    "time": ("datetime", "time", lambda x: (x.hour, x.minute, x.second, x.microsecond, x.fold)),
    "timedelta": ("datetime", "timedelta", lambda x: (x.days, x.seconds, x.microseconds)),
    "deque": ("collections", "deque", lambda x: (list(x), x.maxlen)),
    "Counter": ("collections", "Counter", lambda x: (dict(x),)),
    "OrderedDict": ("collections", "OrderedDict", lambda x: (list(x.items()),)),
    "range": ("builtins", "range", lambda x: (x.start, x.stop, x.step)),
}
_FIELD_TYPES = {  # what each kind's fields must be, checked before anything is built
    "fraction": (int, int), "decimal": (str,), "date": (int,) * 3, "datetime": (int,) * 8, "time": (int,) * 5,
    "timedelta": (int,) * 3, "deque": (list, (int, type(None))), "Counter": (dict,), "OrderedDict": (list,),
    "range": (int,) * 3,
}


def _kind_of(x: object) -> str | None:
    """The kind of a standard-library value of exactly one of the types in ``_KINDS`` (naive dates only)."""
    t = type(x)
    for kind, (module, name, _) in _KINDS.items():
        cls = getattr(sys.modules.get(module), name, None)
        if t is cls:
            if kind in ("datetime", "time") and x.tzinfo is not None:
                return None
            return kind
    return None


# Named tuples cross as kind "namedtuple": (their class, type name, field names, values). The class travels as
# a reference: the side that owns it rebuilds the value with it (``_make``); the other side rebuilds it with a
# named-tuple class of its own, made once per (reference, name, fields), that travels back as that reference.
MAX_NAMEDTUPLE_CLASSES = 1024
_LOCAL_NAMEDTUPLES: dict[tuple, type] = {}
_ORIGIN: dict[type, object] = {}  # a local named-tuple class -> the reference it stands for


def _is_namedtuple(t: type) -> bool:
    fields = getattr(t, "_fields", None)
    return issubclass(t, tuple) and t is not tuple and type(fields) is tuple and callable(getattr(t, "_make", None))


def _namedtuple_fields(x: tuple) -> tuple:
    t = type(x)
    return (_ORIGIN.get(t, t), t.__name__, tuple(str(f) for f in t._fields), tuple(x))


def _rebuild_namedtuple(fields: object) -> tuple:
    import keyword

    if type(fields) is not tuple or len(fields) != 4:
        raise CodecError("malformed 'namedtuple' value")
    cls, name, names, values = fields
    if type(name) is not str or type(names) is not tuple or type(values) is not tuple or len(names) != len(values) \
            or len(name) > 200 or len(names) > 255 or len(set(names)) != len(names) or not all(
                type(n) is str and n.isidentifier() and not keyword.iskeyword(n) and not n.startswith("_")
                for n in (name, *names)):
        raise CodecError("malformed 'namedtuple' value")
    if isinstance(cls, type) and _is_namedtuple(cls) and tuple(cls._fields) == names:
        try:
            return cls._make(values)  # the receiver's own class, handed back
        except (TypeError, ValueError) as exc:
            raise CodecError(f"malformed 'namedtuple' value: {exc}") from None
    try:
        key = (cls, name, names)
        hash(key)
    except TypeError:
        raise CodecError("malformed 'namedtuple' value") from None
    local = _LOCAL_NAMEDTUPLES.get(key)
    if local is None:
        if len(_LOCAL_NAMEDTUPLES) >= MAX_NAMEDTUPLE_CLASSES:
            raise TooLarge(f"more than {MAX_NAMEDTUPLE_CLASSES} kinds of named tuple")
        import collections

        local = collections.namedtuple(name, names)
        _LOCAL_NAMEDTUPLES[key] = local
        _ORIGIN[local] = cls
    return local._make(values)


def _rebuild(kind: object, fields: object, imports: bool) -> object:
    """A value of ``kind`` from its plain fields, with classes the receiver already imported (or, with
    ``imports``, imports: only the sandbox's side, whose modules are the program's business)."""
    if kind == "namedtuple":
        return _rebuild_namedtuple(fields)
    expected = _FIELD_TYPES.get(kind) if type(kind) is str else None
    if expected is None or type(fields) is not tuple or len(fields) != len(expected) or not all(
        isinstance(f, want) and (type(f) is not bool or want is bool) for f, want in zip(fields, expected)
    ):
        raise CodecError(f"malformed {kind!r} value")
    module, name = _KINDS[kind][0], _KINDS[kind][1]
    if imports and module not in sys.modules:
        import importlib

        importlib.import_module(module)
    cls = getattr(sys.modules.get(module), name, None)
    if cls is None:  # never imported on the sender's word
        raise TooLarge(f"{module}.{name} is not available here")
    if kind == "decimal" and len(fields[0]) > MAX_DECIMAL_DIGITS:
        raise TooLarge(f"a decimal longer than {MAX_DECIMAL_DIGITS} characters")
    if kind == "fraction" and max(abs(fields[0]), fields[1]).bit_length() > MAX_FRACTION_BITS:
        raise TooLarge(f"a fraction of more than {MAX_FRACTION_BITS} bits")  # its gcd is not linear
    try:
        if kind == "datetime":
            *parts, fold = fields
            return cls(*parts, fold=fold)
        if kind == "time":
            *parts, fold = fields
            return cls(*parts, fold=fold)
        if kind == "OrderedDict":
            _no_hash_flood([pair[0] for pair in fields[0] if type(pair) is tuple and pair])
            return cls(fields[0])
        return cls(*fields)
    except (TypeError, ValueError, OverflowError, ArithmeticError) as exc:
        raise CodecError(f"malformed {kind!r} value: {exc}") from None
# The builtins that travel by name (tag "B"), taken when this module loads, before a program can rebind them.
_BUILTINS: dict[str, object] = {
    name: value for name, value in vars(builtins).items()
    if (isinstance(value, type) or value is Ellipsis or value is NotImplemented) and not name.startswith("_")
}
_BUILTIN_NAMES: dict[int, str] = {id(value): name for name, value in _BUILTINS.items()}


def _builtin_name(x: object) -> str | None:
    name = _BUILTIN_NAMES.get(id(x))
    return name if name is not None and _BUILTINS[name] is x else None


_DOUBLE = struct.Struct("<d")
_COMPLEX = struct.Struct("<dd")
_NOT_BUILTIN = object()


# ----------------------------------------------------------------------------------------------- encode


def _varint(out: bytearray, n: int) -> None:
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def as_builtin(x: object) -> object:
    """A subclass of a builtin (or a numpy scalar or array) as the builtin value it stands for."""
    for base in (bool, int, float, complex, str, bytes, tuple, frozenset, set, list, dict):
        if isinstance(x, base):
            return base(x) if base is not bool else bool(int(x))
    module = type(x).__module__ or ""
    if module.split(".")[0] == "numpy" and hasattr(x, "tolist"):
        return x.tolist()
    return _NOT_BUILTIN


def encode(value: object, ref=None, *, modules: bool = False, max_size: int = MAX_FRAME) -> bytes:
    """``value`` as bytes. ``ref(obj) -> int`` numbers an object that is not a plain value (without it
    such an object raises Unencodable); with ``modules`` a module travels by name. Subclasses of builtins
    are sent as the builtin they claim to be, so a custom ``__eq__`` never travels. Raises TooLarge past
    ``max_size`` bytes or ``MAX_TUPLE_DEPTH`` nested tuples."""
    out = bytearray()
    # (members still to send, the container: kept alive so its id stays its own, is it a tuple)
    stack: list[tuple] = [(iter((value,)), None, False)]
    on_path: set[int] = set()
    tuple_depth = 0
    while stack:
        members, container, is_tuple = stack[-1]
        x = next(members, _NOT_BUILTIN)
        if x is _NOT_BUILTIN:
            stack.pop()
            on_path.discard(id(container))
            tuple_depth -= is_tuple
            continue
        if len(out) > max_size:
            raise TooLarge(f"the value is larger than {max_size} bytes")
        t = type(x)
        kind = None if t in _PLAIN else _kind_of(x)
        if kind is None and ref is not None and t not in _PLAIN and _is_namedtuple(t):
            kind = "namedtuple"
        if kind is not None:
            if id(x) in on_path:
                if ref is None:
                    raise Unencodable("a value that contains itself cannot be sent")
                _reference(out, *_numbered(ref, x), t.__name__)
                continue
            out.append(_TAGS["x"])
            _varint(out, 2)
            on_path.add(id(x))
            fields = _namedtuple_fields(x) if kind == "namedtuple" else _KINDS[kind][2](x)
            stack.append((iter((kind, fields)), x, False))
            continue
        if t not in _PLAIN and not (modules and t is types.ModuleType):
            converted = as_builtin(x)
            if converted is not _NOT_BUILTIN:
                x, t = converted, type(converted)
        if x is None:
            out.append(_TAGS["N"])
        elif t is bool:
            out.append(_TAGS["T"] if x else _TAGS["F"])
        elif t is int:
            body = x.to_bytes((x.bit_length() + 8) // 8, "little", signed=True)
            out.append(_TAGS["i"])
            _varint(out, len(body))
            out += body
        elif t is float:
            out.append(_TAGS["f"])
            out += _DOUBLE.pack(x)
        elif t is complex:
            out.append(_TAGS["c"])
            out += _COMPLEX.pack(x.real, x.imag)
        elif t is str or t is bytes:
            body = x.encode("utf-8", "surrogatepass") if t is str else x
            out.append(_TAGS["s" if t is str else "b"])
            _varint(out, len(body))
            out += body
        elif t is list and len(x) >= _PACK_FROM and _pack(out, x):
            pass
        elif t in _SEQUENCES:
            if id(x) in on_path:  # a value that contains itself
                if ref is None:
                    raise Unencodable("a value that contains itself cannot be sent")
                _reference(out, *_numbered(ref, x), t.__name__)
                continue
            if t is tuple:
                tuple_depth += 1
                if tuple_depth > MAX_TUPLE_DEPTH:
                    raise TooLarge(f"tuples nested more than {MAX_TUPLE_DEPTH} deep")
            members = [m for pair in x.items() for m in pair] if t is dict else list(x)
            out.append(_SEQUENCES[t])
            _varint(out, len(members) // 2 if t is dict else len(members))
            on_path.add(id(x))
            stack.append((iter(members), x, t is tuple))
        elif (t is type or x is Ellipsis or x is NotImplemented) and _builtin_name(x) is not None:
            _reference(out, "B", 0, _builtin_name(x))
        elif modules and t is types.ModuleType and isinstance(getattr(x, "__name__", None), str):
            _reference(out, "m", 0, x.__name__)  # resolved by name on the other side: no number to keep
        elif ref is None:
            raise Unencodable(f"a {t.__name__} cannot be sent")
        else:
            _reference(out, *_numbered(ref, x), t.__name__)
    if len(out) > max_size:
        raise TooLarge(f"the value is larger than {max_size} bytes")
    return bytes(out)


def _pack(out: bytearray, x: list) -> bool:
    """Append ``x`` as a packed list if every member is an exact int that fits 64 bits, or every member an
    exact float; False (nothing appended) otherwise."""
    if all(type(v) is int for v in x):
        try:
            packed, tag = array("q", x), "I"
        except OverflowError:
            return False
    elif all(type(v) is float for v in x):
        packed, tag = array("d", x), "D"
    else:
        return False
    if sys.byteorder == "big":
        packed.byteswap()
    out.append(_TAGS[tag])
    _varint(out, len(packed))
    out += packed.tobytes()
    return True


def _numbered(ref, x: object) -> tuple[str, int]:
    number = ref(_ORIGIN.get(x, x) if isinstance(x, type) else x)
    if type(number) is tuple and len(number) == 2 and number[0] in ("r", "y"):
        return number
    return ("r", number)


def _reference(out: bytearray, tag: str, number: int, name: str) -> None:
    out.append(_TAGS[tag])
    _varint(out, int(number))
    body = name.encode("utf-8", "replace")[:MAX_NAME]
    _varint(out, len(body))
    out += body


_PLAIN = {type(None), bool, int, float, complex, str, bytes, list, tuple, set, frozenset, dict}
_SEQUENCES = {list: _TAGS["l"], tuple: _TAGS["t"], set: _TAGS["S"], frozenset: _TAGS["z"], dict: _TAGS["d"]}


# ----------------------------------------------------------------------------------------------- decode


def _read_varint(view: memoryview, pos: int) -> tuple[int, int]:
    n = shift = 0
    for _ in range(10):
        if pos >= len(view):
            raise CodecError("truncated size")
        byte = view[pos]
        pos += 1
        n |= (byte & 0x7F) << shift
        if byte < 0x80:
            return n, pos
        shift += 7
    raise CodecError("size too long")


def _take(view: memoryview, pos: int, n: int) -> tuple[memoryview, int]:
    if n > len(view) - pos:
        raise CodecError("truncated value")
    return view[pos : pos + n], pos + n


class _Frame:
    """A container being decoded: its tag, how many members are still to come, the members so far."""

    __slots__ = ("tag", "left", "members", "depth")

    def __init__(self, tag: int, left: int):
        self.tag, self.left, self.members, self.depth = tag, left, [], 0


def _no_hash_flood(members: list) -> None:
    counts: dict[int, int] = {}
    for m in members:
        h = hash(m)
        counts[h] = counts.get(h, 0) + 1
        if counts[h] > MAX_EQUAL_HASHES:
            raise TooLarge(f"more than {MAX_EQUAL_HASHES} members share one hash value")


def _build(frame: _Frame, imports: bool = False) -> object:
    members, tag = frame.members, frame.tag
    if tag == _TAGS["l"]:
        return members
    if tag == _TAGS["x"]:
        if len(members) != 2:
            raise CodecError("a standard-library value has two members")
        return _rebuild(*members, imports)
    if tag == _TAGS["t"]:
        return tuple(members)
    try:
        if tag == _TAGS["d"]:
            keys = members[0::2]
            _no_hash_flood(keys)
            return dict(zip(keys, members[1::2]))
        _no_hash_flood(members)
        return set(members) if tag == _TAGS["S"] else frozenset(members)
    except TypeError as exc:  # an unhashable member
        raise CodecError(f"unhashable member: {exc}") from None


def decode(data: bytes | memoryview, deref=None, *, max_cost: int = MAX_COST, deadline: float | None = None,
           clock=None, imports: bool = False) -> object:
    """The value ``data`` holds. ``deref(tag, number, name)`` turns a reference ("r" or "m") into an
    object; without it a reference raises CodecError. Raises CodecError on malformed bytes, TooLarge on a
    value that would cost more than ``max_cost`` bytes of memory (see the module docstring), and TooSlow
    once ``clock()`` passes ``deadline``."""
    view = memoryview(data).cast("B")
    pos, end, cost = 0, len(view), 0
    stack: list[_Frame] = []
    steps = 0
    while True:
        steps += 1
        if deadline is not None and not steps & 0xFFF and clock() > deadline:
            raise TooSlow("the reply took too long to decode")
        if pos >= end:
            raise CodecError("truncated message")
        tag = view[pos]
        pos += 1
        depth = 0
        if tag in _CONTAINERS:
            n, pos = _read_varint(view, pos)
            count = 2 * n if tag == _TAGS["d"] else n
            if count > end - pos:  # every member takes at least one byte
                raise CodecError("container larger than the message")
            cost += 64 + (8 if tag in (_TAGS["l"], _TAGS["t"]) else 48) * count
            if cost > max_cost:
                raise TooLarge(f"the value would take more than {max_cost} bytes of memory")
            if count:
                stack.append(_Frame(tag, count))
                continue
            value: object = _build(_Frame(tag, 0))
        elif tag in _PACKED:
            n, pos = _read_varint(view, pos)
            body, pos = _take(view, pos, 8 * n)
            cost += 64 + 40 * n
            if cost > max_cost:
                raise TooLarge(f"the value would take more than {max_cost} bytes of memory")
            packed = array(_PACKED[tag])
            packed.frombytes(body)
            if sys.byteorder == "big":
                packed.byteswap()
            value = packed.tolist()
        elif tag == _TAGS["N"]:
            value = None
        elif tag == _TAGS["T"] or tag == _TAGS["F"]:
            value = tag == _TAGS["T"]
        elif tag == _TAGS["i"]:
            n, pos = _read_varint(view, pos)
            body, pos = _take(view, pos, n)
            value = int.from_bytes(body, "little", signed=True)
            cost += 32 + n
        elif tag == _TAGS["f"]:
            body, pos = _take(view, pos, 8)
            (value,) = _DOUBLE.unpack(body)
            cost += 24
        elif tag == _TAGS["c"]:
            body, pos = _take(view, pos, 16)
            value = complex(*_COMPLEX.unpack(body))
            cost += 32
        elif tag == _TAGS["s"] or tag == _TAGS["b"]:
            n, pos = _read_varint(view, pos)
            body, pos = _take(view, pos, n)
            try:
                value = bytes(body).decode("utf-8", "surrogatepass") if tag == _TAGS["s"] else bytes(body)
            except UnicodeDecodeError as exc:
                raise CodecError(f"bad text: {exc.reason}") from None
            cost += 64 + n
        elif tag == _TAGS["r"] or tag == _TAGS["m"] or tag == _TAGS["y"]:
            number, pos = _read_varint(view, pos)
            n, pos = _read_varint(view, pos)
            if n > MAX_NAME:
                raise CodecError("reference name too long")
            body, pos = _take(view, pos, n)
            if deref is None:
                raise CodecError("unexpected reference")
            value = deref(chr(tag), number, bytes(body).decode("utf-8", "replace"))
            cost += 128 + n
        elif tag == _TAGS["B"]:
            _, pos = _read_varint(view, pos)
            n, pos = _read_varint(view, pos)
            if n > MAX_NAME:
                raise CodecError("reference name too long")
            body, pos = _take(view, pos, n)
            value = _BUILTINS.get(bytes(body).decode("utf-8", "replace"), _NOT_BUILTIN)
            if value is _NOT_BUILTIN:
                raise CodecError("an unknown builtin")
        else:
            raise CodecError(f"unknown tag {tag}")
        if cost > max_cost:
            raise TooLarge(f"the value would take more than {max_cost} bytes of memory")
        # hand the value to the containers it completes
        while True:
            if not stack:
                if pos != end:
                    raise CodecError("bytes after the value")
                return value
            frame = stack[-1]
            frame.members.append(value)
            frame.depth = max(frame.depth, depth)
            frame.left -= 1
            if frame.left:
                break
            stack.pop()
            depth = frame.depth + 1 if frame.tag == _TAGS["t"] else 0
            if depth > MAX_TUPLE_DEPTH:
                raise TooLarge(f"tuples nested more than {MAX_TUPLE_DEPTH} deep")
            value = _build(frame, imports)
