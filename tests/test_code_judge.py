"""The judge process (judge.py): assert tests run apart from the checker, so

- what a test does with a program's value (expand a range, convert a decimal with a huge exponent, hash keys
  that collide, recurse into a deep nest) costs the judge's time and memory, never the checker's, and such a
  test earns nothing;
- the tests see the libraries they use, never the program's objects under those names;
- what a test builds reaches the program as Python would pass it: callables, key functions, the test's own
  classes, named tuples, and every structured value whose type or identity the test relies on.
Each program runs for real in the sandbox."""

from __future__ import annotations

import resource
import time

import pytest

from code_sandbox_checks import assert_no_trace, sandbox_base  # noqa: F401 - a fixture
from rlvr.verifiers import Status, verify

TIMEOUT_S = 2.0


def judge(program: str, *tests: str, **options):
    return verify("code", f"```python\n{program}\n```", {"language": "python", "tests": list(tests)},
                  **{"timeout_s": TIMEOUT_S, **options})


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()


def peak_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


# ------------------------------------------------------------------ 1. unbounded work on returned values

# (program, test): each value is cheap for the program to make and send, and the test's work on it expands it
COSTLY = {
    "sum_of_a_huge_range": ("def f(): return range(10 ** 18)", "assert sum(f()) == 1"),
    "list_of_a_huge_range": ("def f(): return range(10 ** 12)", "assert list(f()) == [1]"),
    "sorted_huge_range": ("def f(): return range(10 ** 10)", "assert sorted(f(), reverse=True)[0] == 1"),
    "set_of_a_huge_range": ("def f(): return range(10 ** 9)", "assert set(f()) == {1}"),
    "range_membership_scan": ("def f(): return range(0, 10 ** 18, 1)", "assert 1.5 in f()"),
    "int_of_a_huge_decimal": ("from decimal import Decimal\ndef f(): return Decimal('1e999999999')",
                              "assert int(f()) == 1"),
    "decimal_to_integral": ("from decimal import Decimal\ndef f(): return Decimal('9e99999999')",
                            "assert f().to_integral_exact() % 7 == 1"),
    "fraction_of_a_huge_decimal": ("from decimal import Decimal\ndef f(): return Decimal('1e-99999999')",
                                   "from fractions import Fraction\nassert Fraction(f()) == 1"),
    "huge_int_multiplied": ("def f(): return 7 ** 20_000_000", "assert f() * f() * f() == 1"),
    "huge_int_as_text": ("import sys\nsys.set_int_max_str_digits(0)\ndef f(): return 3 ** 10_000_000",
                         "import sys\nsys.set_int_max_str_digits(0)\nassert str(f()) == '1'"),
    "deep_nest_compared": ("def f():\n    x = []\n    for _ in range(1_000_000):\n        x = [x]\n    return x",
                           "import copy\nassert copy.deepcopy(f()) == 1"),
    "keys_sharing_one_hash_multiplied": (
        # 32 members per hash value is within the channel's cap; the test's own product of them is not
        "def f(): return [{i * (2 ** 61 - 1) for i in range(32)} for _ in range(2000)]",
        "import itertools\nassert len({frozenset(a) | {j} for a in f() for j in range(300)}) == 1",
    ),
    "many_colliding_tuples": ("def f(): return [(i * (2 ** 61 - 1), -1) for i in range(200_000)]",
                              "assert len(set(f())) == 1"),
    "string_blowup": ("def f(): return 'ab' * 1_000_000", "assert f() * 4000 == 'x'"),
}


@pytest.mark.parametrize("case", sorted(COSTLY))
def test_a_test_expanding_a_returned_value_costs_the_checker_nothing(case):
    program, test = COSTLY[case]
    before, peak_before = rss_bytes(), peak_bytes()
    t0 = time.monotonic()
    v = judge(program, test, "assert f is not None")
    took = time.monotonic() - t0
    first = v.details["tests"][0]
    assert first["status"] in ("failed", "timeout", "error"), first  # no credit for the costly test
    assert v.score <= 0.5 and v.status != Status.CORRECT, v.details["tests"]
    assert took < TIMEOUT_S + 12, took  # one test's time, the judge's grace, start-up: never the expansion
    assert rss_bytes() - before < 64 << 20
    assert peak_bytes() - peak_before < 64 << 20, "the checker's own memory grew"
    assert_no_trace()


def test_the_test_after_a_costly_one_is_not_run_and_the_next_task_is_judged():
    v = judge("def f(): return range(10 ** 18)\ndef g(): return 2", "assert sum(f()) == 1", "assert g() == 2")
    assert [t["status"] for t in v.details["tests"]] == ["timeout", "failed"]
    assert v.details["tests"][1]["reason"] == "not_run"
    assert judge("def g(): return 2", "assert g() == 2").status == Status.CORRECT


def test_memory_a_test_spends_on_a_value_is_the_judges_and_limited():
    v = judge("def f(): return range(10 ** 9)", "assert len(list(f())) == 1", memory_mb=256)
    assert v.details["tests"][0]["status"] in ("failed", "timeout"), v.details["tests"]
    assert v.score == 0.0


# ------------------------------------------------------------------ 2. names the tests rely on


# each program binds a library's name to an object of its own that says yes; the tests use the name unimported
REBOUND = [
    ("math", "class math:\n    isclose = staticmethod(lambda *a, **k: True)\n", "assert math.isclose(f(), 3.0)"),
    ("math_as_module", "import types\nmath = types.ModuleType('math')\nmath.isclose = lambda *a, **k: True\n",
     "assert math.isclose(f(), 3.0)"),
    ("json", "class json:\n    loads = staticmethod(lambda s: 3.0)\n", "assert json.loads(f()) == 3.0"),
    ("re", "class re:\n    fullmatch = staticmethod(lambda *a: True)\n", "assert re.fullmatch(r'3\\.0', str(f()))"),
    ("collections", "class collections:\n    Counter = staticmethod(lambda x: 1)\n",
     "assert collections.Counter(f()) == 1"),
    ("itertools", "class itertools:\n    chain = staticmethod(lambda *a: [3.0])\n",
     "assert list(itertools.chain([f()])) == [3.0]"),
    ("numpy_alias", "class np:\n    allclose = staticmethod(lambda *a, **k: True)\n",
     "assert np.allclose(f(), 3.0)"),
    ("numpy", "class numpy:\n    isclose = staticmethod(lambda *a, **k: True)\n", "assert numpy.isclose(f(), 3.0)"),
    ("another_module_under_the_name", "import operator as math\n", "assert math.isclose(f(), 3.0)"),
    ("statistics", "statistics = type('S', (), {'mean': staticmethod(lambda xs: 3.0)})\n",
     "assert statistics.mean([f()]) == 3.0"),
]


@pytest.mark.parametrize("name,binding,test", REBOUND, ids=[r[0] for r in REBOUND])
def test_a_library_name_the_program_rebinds_is_the_library_in_the_tests(name, binding, test):
    wrong = binding + "def f():\n    return 0.0\n"  # the wrong answer
    v = judge(wrong, test)
    assert v.score == 0.0 and v.status != Status.CORRECT, v.details["tests"]


@pytest.mark.parametrize("library,test", [
    ("import math", "assert math.isclose(f(), 3.0)"),
    ("import numpy as np", "assert np.allclose(f(), 3.0)"),
    ("import json", "assert json.loads(json.dumps(f())) == 3.0"),
    ("import itertools", "assert list(itertools.chain([f()])) == [3.0]"),
])
def test_an_honest_programs_libraries_are_the_tests_libraries(library, test):
    v = judge(f"{library}\ndef f():\n    return 3.0\n", test)
    assert v.status == Status.CORRECT, v.details["tests"]


# ------------------------------------------------------------------ 4. values reach the program as Python passes them

HONEST = """
from collections import namedtuple
Pair = namedtuple("Pair", "a b")

def apply(f, x):
    return f(x)

def double(x):
    return 2 * x

def compose(f, g):
    return lambda x: f(g(x))

def sort_by(xs, key=None, reverse=False):
    return sorted(xs, key=key, reverse=reverse)

def count_if(pred, xs):
    return sum(1 for x in xs if pred(x))

def norm1(p):
    return abs(p.x) + abs(p.y)

def midpoint(p, q):
    return type(p)((p.x + q.x) / 2, (p.y + q.y) / 2)

def same(x):
    return x

def kind(x):
    return type(x).__name__

def field(o, name):
    return getattr(o, name)

def build(cls, *args):
    return cls(*args)

def make_pair():
    return Pair(1, 2)

def swap(pair):
    return Pair(pair.b, pair.a)

def nothing():
    return None

def specials():
    return float("nan"), float("inf"), -float("inf"), -0.0

def total(it):
    return sum(it)

def sort_in_place(xs):
    xs.sort()

def fill(d, seen=None):
    d["a"] = 1
    if seen is not None:
        seen.add(5)
    return len(d)

def transpose(m):
    for i in range(len(m)):
        for j in range(i + 1, len(m)):
            m[i][j], m[j][i] = m[j][i], m[i][j]
"""

HONEST_TESTS = {
    "lambda": "assert apply(lambda x: x + 1, 2) == 3",
    "builtin_callable": "assert apply(abs, -4) == 4 and apply(len, 'abc') == 3",
    "callback_calls_the_program": "assert apply(lambda x: double(x) + 1, 3) == 7",
    "key_function": "assert sort_by(['bb', 'a', 'ccc'], key=len) == ['a', 'bb', 'ccc']",
    "method_as_key": "assert sort_by(['B', 'a', 'C'], key=str.lower) == ['a', 'B', 'C']",
    "predicate": "assert count_if(lambda v: v % 2 == 0, range(10)) == 5",
    "a_callable_returned_and_called_here": "h = compose(lambda x: x * 10, lambda x: x + 1)\nassert h(2) == 30",
    "a_function_the_test_defines": "def inc(x):\n    return x + 1\nassert apply(inc, 1) == 2",
    "an_exception_raised_in_the_callback": "def bad(x):\n    raise KeyError(x)\ntry:\n    apply(bad, 1)\n"
                                           "    assert False\nexcept KeyError:\n    pass",
    "a_generator_the_test_passes": "assert total(x * x for x in range(4)) == 14",
    "namedtuple_of_the_test": "from collections import namedtuple\nP = namedtuple('P', 'x y')\n"
                              "assert norm1(P(3, -4)) == 7\nr = midpoint(P(0, 0), P(2, 4))\n"
                              "assert r == P(1, 2) and type(r) is P and r.x == 1",
    "namedtuple_identity_of_type": "from collections import namedtuple\nP = namedtuple('P', 'x y')\n"
                                   "assert type(same(P(1, 2))) is P and kind(P(1, 2)) == 'P'",
    "namedtuple_of_the_program": "p = make_pair()\nassert p == (1, 2) and p.a == 1 and swap(p).b == 1",
    "dataclass_of_the_test": "from dataclasses import dataclass\n@dataclass\nclass D:\n    x: int\n    y: int = 0\n"
                             "d = D(5)\nassert field(d, 'x') == 5 and same(d) is d and build(D, 3, 4) == D(3, 4)",
    "class_of_the_test": "class C:\n    def __init__(self, v):\n        self.v = v\n    def twice(self):\n"
                         "        return 2 * self.v\nassert field(C(4), 'twice')() == 8",
    "tuple_stays_tuple": "assert same((1, 2)) == (1, 2) and type(same((1, [2]))) is tuple and kind((1,)) == 'tuple'",
    "list_stays_list": "assert type(same([1, (2,)])) is list and kind([]) == 'list'",
    "sets_and_frozensets": "assert same({1, 2}) == {1, 2} and type(same(frozenset({1}))) is frozenset "
                           "and kind(frozenset()) == 'frozenset'",
    "dict_with_tuple_keys": "d = {(1, 2): 'a', (3,): frozenset({4})}\nassert same(d) == d and kind(d) == 'dict'",
    "ordered_dict": "from collections import OrderedDict\no = OrderedDict([(2, 'b'), (1, 'a')])\n"
                    "assert same(o) == o and type(same(o)) is OrderedDict and kind(o) == 'OrderedDict'",
    "fraction_decimal_complex_bytes": "from fractions import Fraction\nfrom decimal import Decimal\n"
                                      "vals = [Fraction(1, 3), Decimal('1.10'), 2 - 3j, b'\\x00x']\n"
                                      "assert [type(same(v)) for v in vals] == [type(v) for v in vals]\n"
                                      "assert [kind(v) for v in vals] == ['Fraction', 'Decimal', 'complex', 'bytes']",
    "list_sorted_in_place": "a = [3, 1, 2]\nsort_in_place(a)\nassert a == [1, 2, 3]",
    "dict_and_set_filled_in_place": "d, s = {}, set()\nassert fill(d, seen=s) == 1 and d == {'a': 1} and s == {5}",
    "nested_lists_changed_in_place": "m = [[1, 2], [3, 4]]\ntranspose(m)\nassert m == [[1, 3], [2, 4]]",
    "an_argument_left_alone_keeps_its_identity": "a = [1, 2]\nb = a\nassert total(a) == 3 and a is b and a == [1, 2]",
    "none_identity": "assert nothing() is None and same(None) is None",
    "nan_and_infinities": "import math\nn, i, m, z = specials()\n"
                          "assert math.isnan(n) and i == math.inf and m == -math.inf and math.copysign(1, z) == -1",
}


def test_honest_programs_get_what_the_test_passes():
    names = sorted(HONEST_TESTS)
    v = judge(HONEST, *(HONEST_TESTS[n] for n in names), timeout_s=5.0)
    failed = {n: t for n, t in zip(names, v.details["tests"]) if t["status"] != "passed"}
    assert not failed, failed
    assert v.status == Status.CORRECT
    assert_no_trace()


def test_what_a_program_reaches_through_a_callback_is_only_what_the_test_gave():
    """The program holds proxies for the test's objects; it may call them and read attributes of the test's own
    classes, but never walk into the judge (a function's globals, a generator's frame, a class's subclasses)."""
    program = (
        "def probe(f, g, obj):\n"
        "    found = []\n"
        "    for target, name in ((f, '__globals__'), (f, 'func_globals'), (g, 'gi_frame'), (g, 'gi_code'),\n"
        "                         (obj, '__dict__'), (f, '__code__'), (obj.m, '__func__'), (obj.m, 'im_func')):\n"
        "        try:\n"
        "            getattr(target, name)\n"
        "            found.append(name)\n"
        "        except Exception:\n"
        "            pass\n"
        "    return found\n"
    )
    v = judge(program, "class C:\n    def m(self):\n        return 1\n"
                       "found = probe(lambda: 1, (x for x in [1]), C())\nassert found == [], found")
    assert v.status == Status.CORRECT, v.details["tests"]


def test_a_program_cannot_forge_a_callback_to_an_object_it_was_not_given():
    program = (
        "import __main__\n"
        "def forge():\n"
        "    return __main__.Callback(1, 'function')()\n"  # the judge's object number 1, never handed over
    )
    v = judge(program, "assert forge() == 1", "assert forge is not None")
    assert v.details["tests"][0]["status"] == "failed", v.details["tests"]
    assert v.score < 1.0


# ------------------------------------------------------------------ the judge server


def test_tests_larger_than_a_socket_message_are_judged():
    text = "x" * 300_000
    v = judge("def f(x):\n    return x\n", *[f"assert f({text!r}) == {text!r}"] * 2)
    assert v.status == Status.CORRECT, v.details["tests"]


def test_a_judge_server_that_died_is_started_again():
    from rlvr.verifiers.code.harness import JUDGES

    assert judge("def f():\n    return 1\n", "assert f() == 1").status == Status.CORRECT
    JUDGES.proc.kill()
    JUDGES.proc.wait()
    v = judge("def f():\n    return 1\n", "assert f() == 1")
    assert v.status == Status.CORRECT, v.details["tests"]
    assert JUDGES.proc.poll() is None


@pytest.mark.parametrize("program,test", [
    # callbacks bouncing between the judge and the program without end
    ("def bounce(f):\n    return f(bounce)\n", "def t(g):\n    return g(t)\nassert bounce(t) == 1"),
    # a flood of callbacks past the test's deadline
    ("def spin(f):\n    while True:\n        f(1)\n", "assert spin(lambda x: x) == 1"),
    # a callback handed a value too large to carry
    ("def big(f):\n    return f(b'x' * (65 << 20))\n", "assert big(len) == 1"),
    # the program keeps the test's endless generator and drains it later
    ("kept = []\ndef keep(g):\n    kept.append(g)\n    return 0\ndef drain():\n    return sum(1 for _ in kept[0])\n",
     "keep(x for x in range(10 ** 12))\nassert drain() == 1"),
])
def test_hostile_use_of_callbacks_is_bounded(program, test):
    before = peak_bytes()
    t0 = time.monotonic()
    v = judge(program, test)
    assert v.score == 0.0 and v.details["tests"][0]["status"] != "passed", v.details["tests"]
    assert time.monotonic() - t0 < TIMEOUT_S + 12
    assert peak_bytes() - before < 64 << 20
    assert_no_trace()


@pytest.mark.parametrize("changes", ["{0: 'text'}", "{5: [1]}", "{'nope': [1]}", "[1]", "{}"])
def test_forged_changes_to_the_arguments_are_a_violation(changes):
    program = ("import __main__\n"
               f"__main__._call = lambda target, args, kwargs: ('ok', 3, {changes})\n"
               "def f(xs):\n    return 3\n")
    v = judge(program, "a = [1]\nassert f(a) == 3", "assert f([2]) == 3")
    assert [t.get("reason") for t in v.details["tests"]] == ["protocol_violation"] * 2, v.details["tests"]
