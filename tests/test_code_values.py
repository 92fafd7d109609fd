"""Honest programs are judged on any value a test can build: lists nested far deeper than Python's recursion
limit, millions of elements, tens of megabytes, huge integers, all carried both ways. A value beyond the
channel's caps is a test the harness could not judge (status "error", reason "value_too_large"), never a
failure of the program, and the tests after it still run."""

from __future__ import annotations

import pytest

from code_sandbox_checks import assert_no_trace, sandbox_base  # noqa: F401 - a fixture
from rlvr.verifiers import Status, verify
from rlvr.verifiers.code import codec

PROGRAM = """```python
def depth(x):
    return 1 + (depth(x[0]) if x else 0)

def echo(x):
    return x

def total(xs):
    return sum(xs)

def text(n):
    return "ab" * (n // 2)

def square_keys(n):
    return {i: i * i for i in range(n)}

def deep(n):
    x = []
    for _ in range(n):
        x = [x]
    return x
```"""

MEASURE = (
    "def measure(x):\n"
    "    n = 0\n"
    "    while x:\n"
    "        x, n = x[0], n + 1\n"
    "    return n\n"
)


def run(*tests: str, **options):
    return verify("code", PROGRAM, {"language": "python", "tests": list(tests)}, timeout_s=30, **options)


def test_deep_and_large_values_cross_both_ways():
    v = run(
        "x = []\nfor _ in range(800):\n    x = [x]\nassert depth(x) == 801",  # the nesting of issue 22
        MEASURE + "x = []\nfor _ in range(200_000):\n    x = [x]\nassert measure(echo(x)) == 200_000",
        MEASURE + "assert measure(deep(300_000)) == 300_000",
        "assert total(list(range(1_000_000))) == 499_999_500_000",
        "back = echo(list(range(4_000_000)))\nassert len(back) == 4_000_000 and back[-1] == 3_999_999",
        "back = echo([i / 7 for i in range(1_000_000)] + [float('nan')])\nassert back[7] == 1.0 and back[-1] != back[-1]",
        "assert len(text(20_000_000)) == 20_000_000",
        "assert square_keys(100_000)[99_999] == 99_999 ** 2",
        "assert echo(7 ** 200_000) == 7 ** 200_000",
        "assert echo(b'\\x00' * 10_000_000) == bytes(10_000_000)",
        MEASURE + "t = ()\nfor _ in range(5_000):\n    t = (t,)\n"
        "back = echo({t: frozenset({t})})\nassert len(back) == 1 and measure(next(iter(back))) == 5_000",
        "assert echo([1.5, float('inf'), -0.0, 2j, None, True, 'é\\ud800']) == "
        "[1.5, float('inf'), -0.0, 2j, None, True, 'é\\ud800']",
    )
    assert (v.status, v.score) == (Status.CORRECT, 1.0), v.details["tests"]
    assert_no_trace()


def test_a_value_too_large_to_carry_is_not_judged_and_the_run_goes_on():
    over = codec.MAX_FRAME + 1
    v = run(
        f"assert len(echo(b'x' * {over})) == {over}",  # the test's value cannot be sent
        f"assert len(text({over + 2})) == {over + 2}",  # the program's answer cannot come back
        "t = ()\nfor _ in range(20_000):\n    t = (t,)\necho(t)",  # deeper than any tuple can safely be hashed
        "assert total([1, 2, 3]) == 6",
    )
    statuses = [(t["status"], t.get("reason")) for t in v.details["tests"]]
    assert statuses == [("error", "value_too_large")] * 3 + [("passed", None)], v.details["tests"]
    assert (v.status, v.reason, v.score) == (Status.PARTIAL, "some_not_judged", pytest.approx(0.25))
    assert v.details["not_judged"] == 3
    assert_no_trace()


def test_standard_library_values_arrive_as_the_checkers_own():
    """Fractions, decimals, dates, deques, ranges, Counters and OrderedDicts cross both ways as values of the
    receiver's own types (rebuilt from plain fields), not as proxies the program answers for."""
    program = ("```python\nfrom fractions import Fraction\n"
               "def echo(x):\n    return x\n"
               "def half():\n    return Fraction(1, 2)\n```")
    values = ("Fraction(1, 3)", "Decimal('1.10')", "date(2024, 2, 29)", "datetime(2024, 2, 29, 23, 59, 58, 7)",
              "time(1, 2, 3)", "timedelta(days=-1, seconds=5)", "deque([1, [2]], maxlen=4)", "Counter('hello')",
              "OrderedDict([(2, 'b'), (1, 'a')])", "range(1, 10, 3)", "[Fraction(1, 2), {'d': Decimal('2')}]")
    setup = ("from fractions import Fraction\nfrom decimal import Decimal\n"
             "from datetime import date, datetime, time, timedelta\n"
             "from collections import Counter, OrderedDict, deque\n")
    tests = [setup + f"v = {value}\nback = echo(v)\nassert back == v and type(back) is type(v) and repr(back) == repr(v)"
             for value in values]
    tests.append(setup + "assert half() + Fraction(1, 2) == 1 and type(half()) is Fraction")
    v = verify("code", program, {"language": "python", "tests": tests}, timeout_s=10)
    assert (v.status, v.score) == (Status.CORRECT, 1.0), v.details["tests"]
    assert_no_trace()
