"""An honest program keeps its credit when the tests use the program's objects as Python would: identity
(``is``) of enum members, singletons and classes, ``isinstance`` / ``issubclass`` against the program's classes,
equality and hashing of its dataclasses and named tuples, pickling and copying; and none of this lets a lying
program gain credit (its objects never equal a test's own values)."""

from __future__ import annotations

import pytest

from code_sandbox_checks import sandbox_base  # noqa: F401 - a fixture
from rlvr.verifiers import Status, verify
from rlvr.verifiers.code import codec

PROGRAM = '''```python
import enum
from dataclasses import dataclass, field
from typing import NamedTuple

class Color(enum.Enum):
    RED = 1
    GREEN = 2

class Level(enum.IntEnum):
    LOW = 1
    HIGH = 2

Flag = enum.Enum("Flag", "ON OFF")

@dataclass(frozen=True)
class Point:
    x: int
    y: int = 0

@dataclass
class Box:
    items: list = field(default_factory=list)

class Pair(NamedTuple):
    a: int
    b: str

class Shape:
    pass

class Square(Shape):
    def __init__(self, side):
        self.side = side

SENTINEL = object()
MISSING = None

def color(name="RED"):
    return Color[name]

def level():
    return Level.HIGH

def flag():
    return Flag.ON

def point(x, y=0):
    return Point(x, y)

def box():
    return Box([1, 2])

def pair():
    return Pair(1, "one")

def square(n):
    return Square(n)

def sentinel():
    return SENTINEL

def nothing():
    return None

def dots():
    return ...

def not_implemented():
    return NotImplemented

def a_builtin_type():
    return int

def shape_class():
    return Shape

def make_class():
    class Local:
        pass
    return Local

def same(x):
    return x
```'''

HONEST_TESTS = [
    # identity of the program's own objects
    "assert color() is Color.RED",
    "assert color('GREEN') is Color.GREEN and color() is not Color.GREEN",
    "assert flag() is Flag.ON",
    "assert level() is Level.HIGH",
    "assert sentinel() is SENTINEL",
    "assert shape_class() is Shape",
    "K = make_class()\nassert K is K and isinstance(K(), K)",
    "assert same(color()) is Color.RED",
    # singletons and builtin types come back as the tests' own
    "assert nothing() is None and MISSING is None",
    "assert dots() is Ellipsis and dots() is ...",
    "assert not_implemented() is NotImplemented",
    "assert a_builtin_type() is int",
    "assert same(str) is str and same(ValueError) is ValueError",
    # isinstance / issubclass against the program's classes
    "assert isinstance(color(), Color)",
    "assert isinstance(point(1), Point) and not isinstance(point(1), Box)",
    "assert isinstance(square(2), Shape) and isinstance(square(2), (Box, Square))",
    "assert issubclass(Square, Shape) and not issubclass(Shape, Square)",
    "assert not isinstance(3, Shape)",
    # equality and hashing of values the program builds
    "assert point(1, 2) == Point(1, 2) and point(1, 2) != Point(2, 1)",
    "assert box() == Box([1, 2])",
    "assert {point(1): 'a'}[Point(1)] == 'a'",
    "assert point(3) in [Point(1), Point(3)] and point(4) not in {Point(1), Point(3)}",
    "assert color() == Color.RED and color() != Color.GREEN",
    "assert pair() == Pair(1, 'one') and pair() == (1, 'one') and pair().b == 'one'",
    "assert isinstance(pair(), tuple) and isinstance(pair(), Pair)",
    # pickling and copying of the program's objects (module ``solution`` is a real module in the sandbox)
    "import pickle\nassert pickle.loads(pickle.dumps(point(5))) == Point(5)",
    "import copy\nassert copy.deepcopy(color()) is Color.RED and copy.copy(point(1)) == Point(1)",
    # classes the tests define, passed through the program and back
    "import enum\nclass T(enum.Enum):\n    A = 1\nassert same(T.A) is T.A and same(T) is T",
    "from dataclasses import dataclass\n@dataclass\nclass D:\n    v: int\nassert same(D(3)) == D(3) and isinstance(same(D(3)), D)",
    "import pickle\nfrom dataclasses import dataclass\n@dataclass\nclass E:\n    v: int\n"
    "assert pickle.loads(pickle.dumps(same(E(4)))) == E(4)",
]


@pytest.mark.parametrize("test", HONEST_TESTS)
def test_honest_identity_and_type_tests_pass(test):
    v = verify("code", PROGRAM, {"tests": [test]}, timeout_s=10.0)
    assert v.status == Status.CORRECT, (test, v.details["tests"], v.details.get("load_error"))


LIARS = '''```python
class Anything:
    def __eq__(self, other):
        return True
    def __hash__(self):
        return 0

class Truthy:
    def __eq__(self, other):
        return 1  # truthy, not a bool

class Meta(type):
    def __instancecheck__(cls, obj):
        return True

class Everything(metaclass=Meta):
    pass

def add(a, b):
    return Anything()

def total(xs):
    return Truthy()

def builtin_fn():
    return eval
```'''

LYING_TESTS = [
    "assert add(1, 2) == 3",
    "assert add(1, 2) == Anything() == 3",
    "assert 3 == add(1, 2)",
    "assert add(1, 2) in [3]",
    "assert {3: 'x'}[add(1, 2)] == 'x'",
    "assert total([1]) == total([2])",
    "assert isinstance(add(1, 2), int)",
    "assert add(1, 2) is 3",
    "assert builtin_fn() is eval",
]


@pytest.mark.parametrize("test", LYING_TESTS)
def test_lying_objects_still_get_no_credit(test):
    v = verify("code", LIARS, {"tests": [test]}, timeout_s=10.0)
    assert v.score == 0.0, (test, v.details["tests"])


def test_only_builtin_types_and_singletons_travel_by_name():
    for value in (int, str, type, ValueError, Ellipsis, NotImplemented):
        assert codec.decode(codec.encode(value, lambda obj: 1)) is value
    refs = []
    for value in (eval, exec, open, __import__, len):  # functions never: the checker must not get its own eval
        body = codec.encode(value, lambda obj: 7)
        assert codec.decode(body, lambda tag, n, name: refs.append((tag, n)) or "proxy") == "proxy"
    assert refs == [("r", 7)] * 5


@pytest.mark.parametrize("name", [b"eval", b"open", b"__import__", b"nonexistent", b"__builtins__"])
def test_a_forged_builtin_name_is_refused(name):
    frame = b"B" + bytes([0, len(name)]) + name
    with pytest.raises(codec.CodecError):
        codec.decode(frame)
