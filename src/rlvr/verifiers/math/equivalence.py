"""Is the response's answer equivalent to the reference? Cheapest test first.

1. identical normalised strings (done by the caller) or identical trees
2. exact rational arithmetic (exact.py) when both sides are rational constants
3. numeric comparison when both sides are constants: floats refute; equality is confirmed with 60 digits
   (to ``rel_tol``/``abs_tol`` only when one side IS a decimal the answer wrote, which is inexact by nature:
   ``1.41421356237`` for ``\\sqrt{2}``; an exact form built from decimals, ``\\sqrt{9.0000000002}``, is exact)
4. polynomials in their variables: exact normal forms (expanded, rational coefficients), inline
5. other expressions with variables: random-point probing over several scales (numeric.py) only ever
   refutes; the symbolic stage decides (``Comparison.prover``, SymPy in a supervised worker). When SymPy can
   neither prove nor refute the identity, 60-digit agreement at every probe accepts (reason "numeric_probe").

Answer values (values.py) are compared by one function per pair of kinds, found in the table ``_BY_KINDS``;
equations, sets and alternatives are unwrapped first (``_equivalent``). Every comparison answers True / False /
None, None meaning "only the symbolic stage can tell" (never None when ``Comparison.prover`` is set).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from rlvr.verifiers.math import budget
from rlvr.verifiers.math.exact import (
    NotRational,
    exact_value,
    guard_size,
    polynomial_identity,
    proportional,
)
from rlvr.verifiers.math.expression import INF, TooComplex, free_symbols
from rlvr.verifiers.math.numeric import FLOATS, NotNumeric, evaluate, precise
from rlvr.verifiers.math.units import SIZES, TEMPERATURE_ZERO
from rlvr.verifiers.math.values import (
    Alternatives,
    AnswerValue,
    ClockTime,
    Equation,
    Expression,
    FiniteSet,
    IntegerRange,
    Interval,
    IntervalUnion,
    Matrix,
    OrderedTuple,
    Quantity,
    Ratio,
    Text,
    Tree,
    members,
)

# magnitudes of the probe points: floats refute on moderate ones (where float error stays small); the 60-digit
# probes that may accept also cover tiny and huge ones, so expressions that differ only there are told apart
PROBE_SCALES = ((0.3, 2.7), (3.0, 30.0))
PRECISE_SCALES = ((0.001, 0.3), (0.3, 2.7), (3.0, 30.0), (30.0, 3000.0), (3000.0, 1e6), (1e6, 1e12))
PROBE_POINTS = 12
PROBE_REL = 1e-7  # float probing tolerance (float error accumulates in arbitrary expressions)
PRECISE_REL = 1e-45  # 60-digit agreement that counts as equality
INTEGER_PARAMETERS = ("k", "n", "m")  # x = k\pi and x = n\pi name the same solutions
# names of an arbitrary constant: y = Ce^x and y = ce^x name the same family
ARBITRARY_CONSTANTS = ("C", "c", "K", "A", "C_1", "c_1", "C_0", "c_0", "k")

Prover = Callable[[Tree, Tree], "bool | None"]


@dataclass
class Comparison:
    """The policy of one comparison and what it found (``notes``: how equality was shown)."""

    rel_tol: float = 1e-9
    abs_tol: float = 1e-12
    percent: str = "auto"
    tuple_order: bool = True
    inexact: bool = False  # an answer holds a decimal literal: irrational constants compare to rel_tol/abs_tol
    # probe with floats before expanding polynomials: cheaper for values that differ (the hedge check's
    # boxes), at the risk of float error calling a cancelling expansion different
    refute_first: bool = False
    # the symbolic stage: proves or refutes an identity of two trees (None: it cannot tell); without one, a
    # comparison only the symbolic stage can decide answers None
    prover: Prover | None = None
    notes: list[str] = field(default_factory=list)


def _inf_sign(a: tuple) -> int:
    """+1 / -1 for +-infinity, 0 otherwise."""
    sign = 1
    while a[0] == "neg":
        a, sign = a[1], -sign
    return sign if a == INF else 0


def _close(x: Any, y: Any, rel: float, abs_: float) -> bool:
    return abs(x - y) <= max(rel * max(abs(x), abs(y)), abs_)


def _pct(v: Any, pct: bool, mode: str) -> list[Any]:
    if mode == "strict":
        return [v / 100] if pct else [v]
    return [v / 100, v] if pct else [v]


def _scales(x: Any, y: Any, px: bool, py: bool, mode: str) -> list[tuple[Any, Any]]:
    """The pairs to compare for percent signs: both or neither carrying one compare as written
    (5000% is not 50%); with one sign, "auto" also reads 50% as 50."""
    if px == py:
        return [(x, y)]
    return [(a, b) for a in _pct(x, px, mode) for b in _pct(y, py, mode)]


def _points(names: list[str], rng: random.Random, scales: tuple[tuple[float, float], ...]) -> list[dict[str, float]]:
    """Probe points: every scale, either sign."""
    out = []
    for j in range(PROBE_POINTS):
        lo, hi = scales[j % len(scales)]
        out.append({n: rng.choice((-1, 1)) * math.exp(rng.uniform(math.log(lo), math.log(hi))) for n in names})
    return out


def probe(x: tuple, y: tuple, names: set[str], precise_check: bool = False) -> str:
    """"agree", "disagree" or "unknown" from evaluating both trees at random points (of either sign); with
    ``precise_check`` agreement must hold to 60 digits, not to float accuracy. A point where one side is real
    and the other is not lies outside the common real domain and is skipped: ``2\\ln x`` equals ``\\ln(x^2)``
    where both are defined."""
    rng = random.Random(0x5EED + len(names))
    ordered = sorted(names)
    agree = 0
    nums = precise() if precise_check else FLOATS
    rel = PRECISE_REL if precise_check else PROBE_REL
    for point in _points(ordered, rng, PRECISE_SCALES if precise_check else PROBE_SCALES):
        budget.check()
        env = {n: nums.num(Fraction(v)) for n, v in point.items()}
        try:
            vx, vy = evaluate(x, env, nums), evaluate(y, env, nums)
        except (NotNumeric, TooComplex):
            continue
        tiny = 1e-50 if precise_check else 1e-9
        if _real(vx, tiny, rel) != _real(vy, tiny, rel):
            continue  # outside one side's real domain (\ln x at x < 0): the identity is not tested there
        if not _close(vx, vy, rel, tiny):
            return "disagree"
        agree += 1
    return "agree" if agree >= 3 else "unknown"


def _real(z: Any, tiny: float, rel: float) -> bool:
    """``z`` is real up to the arithmetic's error (its imaginary part below ``tiny`` or ``rel`` of its size)."""
    return abs(z.imag) <= max(tiny, rel * abs(z.real))


def _rename(a: tuple, names: dict[str, str]) -> tuple:
    """``a`` with its symbols renamed."""
    if a[0] == "sym":
        return ("sym", names.get(a[1], a[1]))
    if a[0] in ("num", "const"):
        return a
    return tuple(
        _rename(c, names) if isinstance(c, tuple) and c and isinstance(c[0], str)
        else tuple(_rename(t, names) for t in c) if isinstance(c, tuple) else c
        for c in a
    )


def _same_parameter(x: tuple, y: tuple, nx: set[str], ny: set[str]) -> tuple:
    """``y`` with its integer parameter or arbitrary constant named as ``x``'s (x = k\\pi and x = n\\pi are the
    same solutions; y = Cx^2 and y = cx^2 the same family)."""
    only_x, only_y = nx - ny, ny - nx
    names = {*only_x, *only_y}
    if len(only_x) == 1 == len(only_y) and (names <= set(INTEGER_PARAMETERS) or names <= set(ARBITRARY_CONSTANTS)):
        return _rename(y, {next(iter(only_y)): next(iter(only_x))})
    return y


MIN_GOLD_DIGITS = 4  # significant digits of a decimal reference that is read as rounded
MIN_ANSWER_DIGITS = 6  # significant digits of a decimal answer that may round a longer decimal reference


def _decimal_places(v: Fraction) -> int:
    """Decimal places of a terminating fraction (0.0666668 has 7)."""
    d, twos, fives = v.denominator, 0, 0
    while d % 2 == 0:
        d, twos = d // 2, twos + 1
    while d % 5 == 0:
        d, fives = d // 5, fives + 1
    return max(twos, fives)


def _significant_digits(v: Fraction) -> int:
    places = _decimal_places(v)
    return len(str(abs(v.numerator * 10**places // v.denominator)).lstrip("0"))


def _rounded_gold(y: Tree) -> tuple[Fraction, int] | None:
    """(value, decimal places) of a reference written as a decimal of at least MIN_GOLD_DIGITS significant
    digits (0.6666667, 3.1416): such a reference was rounded, so an answer is compared at its precision."""
    if not written_decimal(y):
        return None
    try:
        v = exact_value(y)
    except (NotRational, TooComplex):
        return None
    if not _terminates(v) or _significant_digits(v) < MIN_GOLD_DIGITS:
        return None
    return v, _decimal_places(v)


def _rounds_reference(rx: Fraction, x: Tree, y: Tree) -> bool:
    """A rounded decimal reference (0.6666667) is met by any answer it rounds (2/3); a decimal reference with
    more places (0.066666793) by a decimal answer of at least MIN_ANSWER_DIGITS digits that rounds it
    (0.0666668)."""
    gold = _rounded_gold(y)
    if gold is None:
        return False
    value, places = gold
    if abs(rx - value) * 2 * 10**places <= 1:
        return True
    if written_decimal(x) and _terminates(rx) and _significant_digits(rx) >= MIN_ANSWER_DIGITS:
        answer_places = _decimal_places(rx)
        return answer_places < places and abs(value - rx) * 2 * 10**answer_places <= 1
    return False


def _terminates(v: Fraction) -> bool:
    """``v`` has a finite decimal expansion (its denominator has no prime factor but 2 and 5)."""
    d = v.denominator
    for p in (2, 5):
        while d % p == 0:
            d //= p
    return d == 1


def written_decimal(a: Tree) -> bool:
    """``a`` is a decimal as written (``1.414``, ``-2.5``, ``1.5 \times 10^{3}``), possibly scaled by rational
    constants (a quantity in its base unit): the one kind of value a tolerance applies to."""
    while a[0] == "neg":
        a = a[1]
    if a[0] == "num":
        return a[1].denominator != 1
    if a[0] == "mul":
        decimals = [t for t in a[1] if written_decimal(t)]
        return len(decimals) == 1 and all(t is decimals[0] or _rational_literal(t) for t in a[1])
    return False


def _rational_literal(a: Tree) -> bool:
    """A number, or a power of numbers (10^{3})."""
    if a[0] == "num":
        return True
    return a[0] == "pow" and a[1][0] == "num" and (a[2][0] == "num" or a[2][0] == "neg" and a[2][1][0] == "num")


def _constants_equal(x: tuple, y: tuple, px: bool, py: bool, cmp: Comparison) -> bool | None:
    """Compare two constant trees numerically: floats refute; equality needs 60 digits (or the tolerances
    when an answer is an inexact decimal)."""
    try:
        cx, cy = evaluate(x, {}), evaluate(y, {})
    except NotNumeric:
        return None
    pairs = _scales(cx, cy, px, py, cmp.percent)
    gold = _rounded_gold(y) if px == py and cy.imag == 0 and cx.imag == 0 else None
    if gold is not None and abs(cx.real - float(gold[0])) <= 0.5 * 10.0 ** -gold[1] * (1 + 1e-9):
        return True  # a reference rounded to its last digit (3.1416 for \pi)
    if not any(_close(a, b, max(cmp.rel_tol, 1e-12), max(cmp.abs_tol, 1e-300)) for a, b in pairs):
        return False
    if cmp.inexact and (written_decimal(x) or written_decimal(y)):
        return any(_close(a, b, cmp.rel_tol, cmp.abs_tol) for a, b in pairs)
    budget.check()
    nums = precise()
    try:
        mx, my = evaluate(x, {}, nums), evaluate(y, {}, nums)
    except NotNumeric:
        return None
    return any(_close(a, b, PRECISE_REL, 1e-50) for a, b in _scales(mx, my, px, py, cmp.percent))


def expressions_equal(x: Tree, y: Tree, cmp: Comparison, px: bool = False, py: bool = False) -> bool | None:
    """Are two expression trees equal (``px``/``py``: written with a percent sign)? See the module docstring."""
    budget.check()
    if x == y and px == py:
        return True
    sx, sy = _inf_sign(x), _inf_sign(y)
    if sx or sy:
        return sx == sy
    guard_size(x)
    guard_size(y)
    try:
        rx, ry = exact_value(x), exact_value(y)
    except NotRational:
        pass
    else:
        if any(a == b for a, b in _scales(rx, ry, px, py, cmp.percent)):
            return True
        # a decimal as written against a value no decimal can write (1/12): the tolerance, as for irrationals
        if cmp.inexact and (written_decimal(x) and not _terminates(ry) or written_decimal(y) and not _terminates(rx)):
            if any(_close(a, b, cmp.rel_tol, cmp.abs_tol) for a, b in _scales(rx, ry, px, py, cmp.percent)):
                return True
        return px == py and _rounds_reference(rx, x, y)
    nx, ny = free_symbols(x), free_symbols(y)
    if nx != ny:
        y = _same_parameter(x, y, nx, ny)
        ny = free_symbols(y)
    names = nx | ny
    if not names:
        same = _constants_equal(x, y, px, py, cmp)
        if same is not None:
            return same
    result = probe(x, y, names) if names and cmp.refute_first else "unknown"
    if result == "disagree":
        return False
    if names:
        same = polynomial_identity(x, y)
        if same is not None:
            if same:
                cmp.notes.append("polynomial_equal")
            return same
    if names and not cmp.refute_first:
        result = probe(x, y, names)
    if result == "disagree":
        return False
    if cmp.prover is None:
        return None
    verdict = cmp.prover(x, y)
    if verdict:
        cmp.notes.append("symbolic_equal")
        return True
    if verdict is None and names and probe(x, y, names, precise_check=True) == "agree":
        cmp.notes.append("numeric_probe")
        return True
    return False



# ----------------------------------------------------------------------------------------------- values


def _any(results: Sequence[bool | None]) -> bool | None:
    if any(r is True for r in results):
        return True
    return None if any(r is None for r in results) else False


def _all(results: Sequence[bool | None]) -> bool | None:
    if any(r is False for r in results):
        return False
    return None if any(r is None for r in results) else True


def _matching(xs: Sequence[AnswerValue], ys: Sequence[AnswerValue], cmp: Comparison) -> bool | None:
    """An unordered one-to-one match of xs onto ys (an equivalence, so greedy suffices)."""
    if len(xs) != len(ys):
        return False
    unsure = False
    free = list(range(len(ys)))
    for x in xs:
        hit = None
        maybe = False
        for j in free:
            r = _equivalent(x, ys[j], cmp)
            if r is True:
                hit = j
                break
            if r is None:
                maybe = True
        if hit is None:
            if not maybe:
                return False
            unsure = True
        else:
            free.remove(hit)
    return None if unsure else True


def _as_union(v: AnswerValue) -> AnswerValue:
    """"x < -1 or x > 1" (alternatives that are all intervals) as the union it describes; others unchanged."""
    if isinstance(v, Alternatives) and v.items and all(isinstance(x, Interval) for x in v.items):
        return IntervalUnion(v.items)
    return v


def _range_values(r: IntegerRange) -> list[AnswerValue] | None:
    """The integers of a range written in words, when both ends are integers and they are few."""
    try:
        lo, hi = exact_value(r.lo), exact_value(r.hi)
    except NotRational:
        return None
    if lo.denominator != 1 or hi.denominator != 1 or not 0 <= hi - lo < 64:
        return None
    return [Expression(("num", Fraction(n)) if n >= 0 else ("neg", ("num", Fraction(-n))))
            for n in range(int(lo), int(hi) + 1)]


def _side(v: AnswerValue | None) -> Tree | None:
    """The tree of an equation's side when it is a plain expression."""
    return v.tree if isinstance(v, Expression) and not v.percent else None


def _equation_value(a: Equation, cmp: Comparison) -> AnswerValue | None:
    """The value an equation commits to when it answers a question that is not an equation: the last side
    of ``label = ... = value`` (``AB = 4``, ``2 + 3 = 5``). None when a constant side contradicts it
    (``x = 13 = 12``) or a side is neither a label nor a constant (``3x = 6`` is no labelled 6)."""
    last = _side(a.sides[-1])
    if len(a.sides) == 2 and last is not None and last[0] == "sym":  # 7 = y: the value is on the left
        first = _side(a.sides[0])
        if first is not None and not free_symbols(first):
            return a.sides[0]
    for value, label in zip(a.sides[:-1], a.labels):
        side = _side(value)
        if side is not None and not free_symbols(side):
            if last is None or expressions_equal(side, last, cmp) is not True:
                return None
        elif not label and value is not None:  # a side we cannot read (a determinant, 17 \bmod 5) names it
            return None
    return a.sides[-1]


def _parameter_as(eq: Equation, value: AnswerValue, other: AnswerValue) -> AnswerValue:
    """The value of ``f(t) = t^2 + 1`` with its parameter named as the other answer's one variable (x^2 + 1)."""
    if eq.function is None or len(eq.function[1]) != 1 or not isinstance(value, Expression):
        return value
    if not isinstance(other, Expression):
        return value
    theirs, ours = free_symbols(other.tree), free_symbols(value.tree)
    parameter = eq.function[1][0]
    if len(theirs) != 1 or parameter not in ours or theirs <= ours:
        return value
    return Expression(_rename(value.tree, {parameter: next(iter(theirs))}), value.percent, value.noun)


def _function_renamed(a: Equation, b: Equation) -> dict[str, str]:
    """Parameter names of b's function mapped to a's (f(z) = z and f(x) = x define the same function)."""
    fa, fb = a.function, b.function
    if fa and fb and fa[0] == fb[0] and len(fa[1]) == len(fb[1]):
        return dict(zip(fb[1], fa[1]))
    return {}


def equations_equal(a: Equation, b: Equation, cmp: Comparison) -> bool | None:
    """Two equations are the same when lhs - rhs of one is a nonzero multiple of the other's (after renaming
    a function's parameters)."""
    l1, r1 = _side(a.sides[0]), _side(a.sides[-1])
    l2, r2 = _side(b.sides[0]), _side(b.sides[-1])
    if None in (l1, r1, l2, r2):
        if a.sides[0] is None or b.sides[0] is None:
            return False
        return _all([_equivalent(a.sides[0], b.sides[0], cmp), _equivalent(a.sides[-1], b.sides[-1], cmp)])
    names = _function_renamed(a, b)
    if names:
        l2, r2 = _rename(l2, names), _rename(r2, names)
    d1, d2 = ("add", (l1, ("neg", r1))), ("add", (l2, ("neg", r2)))
    d2 = _same_parameter(d1, d2, free_symbols(d1), free_symbols(d2))
    same = proportional(d1, d2)
    if same is not None:
        if same:
            cmp.notes.append("polynomial_equal")
        return same
    return _any([expressions_equal(d1, d2, cmp), expressions_equal(d1, ("neg", d2), cmp)])


def _in_base_unit(q: Quantity) -> tuple[str, Tree]:
    """(dimension, the value in the dimension's base unit) of a quantity."""
    dim, size = SIZES.get(q.unit, (q.unit, Fraction(1)))
    if q.unit == "deg":
        return dim, ("mul", (q.value, ("div", ("const", "pi"), ("num", Fraction(180)))))
    if q.unit in TEMPERATURE_ZERO:  # kelvins: a scale's zero plus its degrees
        return dim, ("add", (("mul", (q.value, ("num", size))), ("num", TEMPERATURE_ZERO[q.unit])))
    return dim, ("mul", (q.value, ("num", size)))


def quantities_equal(a: Quantity, b: Quantity, cmp: Comparison) -> bool | None:
    """Same dimension, and equal values once converted to its base unit."""
    (da, va), (db, vb) = _in_base_unit(a), _in_base_unit(b)
    return da == db and expressions_equal(va, vb, cmp)


def quantity_vs_bare(q: Quantity, e: Expression, cmp: Comparison) -> bool | None:
    """A bare number against a quantity is read in the quantity's unit; against degrees, also as radians."""
    if e.percent or e.noun:  # "4 tons" is no "4 kg": a word we do not know is no missing unit
        return False
    same = expressions_equal(q.value, e.tree, cmp)
    if same is not True and q.unit == "deg":
        return expressions_equal(_in_base_unit(q)[1], e.tree, cmp)
    return same


def expression_values_equal(a: Expression, b: Expression, cmp: Comparison) -> bool | None:
    return expressions_equal(a.tree, b.tree, cmp, a.percent, b.percent)


def _as_clock(r: Ratio) -> ClockTime | None:
    """``H:MM`` (an hour up to 24, two-digit minutes) read as a time of day, None for any other ratio."""
    if len(r.terms) != 2 or any(t[0] != "num" or t[1].denominator != 1 for t in r.terms):
        return None
    hours, minutes = int(r.terms[0][1]), int(r.terms[1][1])
    if not (0 <= hours <= 24 and 10 <= minutes < 60):
        return None
    return ClockTime(hours * 3600 + minutes * 60, hours == 0 or hours > 12)


def clock_times_equal(a: ClockTime, b: ClockTime, cmp: Comparison) -> bool | None:
    """The same time of day; 2:00 is also 14:00 unless both say am or pm."""
    if a.seconds == b.seconds:
        return True
    return not (a.half_day_known and b.half_day_known) and (a.seconds - b.seconds) % (12 * 3600) == 0


def clock_vs_ratio(a: ClockTime, b: Ratio, cmp: Comparison) -> bool | None:
    clock = _as_clock(b)
    return False if clock is None else clock_times_equal(a, clock, cmp)


def ratios_equal(a: Ratio, b: Ratio, cmp: Comparison) -> bool | None:
    """a1:a2:... equals b1:b2:... when every term is in the same proportion; two ``H:MM`` are times of day
    (2:00 is not 10:00)."""
    ca, cb = _as_clock(a), _as_clock(b)
    if ca is not None and cb is not None:
        return clock_times_equal(ca, cb, cmp)
    xs, ys = a.terms, b.terms
    if len(xs) != len(ys):
        return False
    return _all([expressions_equal(("mul", (xs[i], ys[0])), ("mul", (ys[i], xs[0])), cmp)
                 for i in range(1, len(xs))])


def ratio_vs_number(r: Ratio, e: Expression, cmp: Comparison) -> bool | None:
    """a : b against a number: the quotient a / b."""
    if len(r.terms) != 2 or e.percent:
        return False
    return expressions_equal(("div", r.terms[0], r.terms[1]), e.tree, cmp)


def texts_equal(a: Text, b: Text, cmp: Comparison) -> bool | None:
    return a.key == b.key


def tuples_equal(a: OrderedTuple, b: OrderedTuple, cmp: Comparison) -> bool | None:
    if len(a.items) != len(b.items):
        return False
    if not cmp.tuple_order:
        return _matching(a.items, b.items, cmp)
    return _all([_equivalent(x, y, cmp) for x, y in zip(a.items, b.items)])


def intervals_equal(a: Interval, b: Interval, cmp: Comparison) -> bool | None:
    """Same ends, and the same brackets at every finite end."""
    if _inf_sign(a.lo) == 0 and a.lo_closed != b.lo_closed:
        return False
    if _inf_sign(a.hi) == 0 and a.hi_closed != b.hi_closed:
        return False
    return _all([expressions_equal(a.lo, b.lo, cmp), expressions_equal(a.hi, b.hi, cmp)])


def tuple_vs_interval(t: OrderedTuple, iv: Interval, cmp: Comparison) -> bool | None:
    """(a, b) written for an open interval."""
    if len(t.items) != 2 or iv.lo_closed or iv.hi_closed or any(not isinstance(x, Expression) for x in t.items):
        return False
    return intervals_equal(Interval(False, t.items[0].tree, t.items[1].tree, False), iv, cmp)  # type: ignore[union-attr]


def _merged(v: Interval | IntervalUnion) -> list[Interval] | None:
    """The disjoint intervals of a union whose ends are all rational or infinite ([0, 1) and [1, 2] touch: [0, 2];
    a point is [p, p]), in order; None when an end is irrational (then the parts are matched as written)."""
    parts: list[tuple[Fraction | float, Fraction | float, Interval]] = []
    for part in (v.parts if isinstance(v, IntervalUnion) else (v,)):
        points = part.items if isinstance(part, FiniteSet) else (part,)
        for p in points:
            if isinstance(p, Expression) and not p.percent:
                p = Interval(True, p.tree, p.tree, True)
            if not isinstance(p, Interval):
                return None
            try:
                parts.append((_end_value(p.lo), _end_value(p.hi), p))
            except (NotRational, TooComplex):
                return None
    parts.sort(key=lambda t: (t[0], not t[2].lo_closed))
    out: list[tuple[Fraction | float, Fraction | float, Interval]] = []
    for lo, hi, iv in parts:
        if out:
            plo, phi, prev = out[-1]
            if lo < phi or lo == phi and (prev.hi_closed or iv.lo_closed):
                if hi > phi or hi == phi and iv.hi_closed:
                    out[-1] = (plo, hi, Interval(prev.lo_closed, prev.lo, iv.hi, iv.hi_closed))
                continue
        out.append((lo, hi, iv))
    return [iv for _, _, iv in out]


def _end_value(a: Tree) -> Fraction | float:
    sign = _inf_sign(a)
    return sign * math.inf if sign else exact_value(a)


def union_vs_tuple(a: IntervalUnion, t: OrderedTuple, cmp: Comparison) -> bool | None:
    """(a, b) written for the open interval a union may merge into."""
    if len(t.items) != 2 or any(not isinstance(x, Expression) or x.percent for x in t.items):
        return False
    return unions_equal(a, Interval(False, t.items[0].tree, t.items[1].tree, False), cmp)  # type: ignore[union-attr]


def unions_equal(a: Interval | IntervalUnion, b: Interval | IntervalUnion, cmp: Comparison) -> bool | None:
    """The same set of reals: unions are merged first when their ends are exact ([0,1) \\cup [1,2] = [0,2])."""
    ma, mb = _merged(a), _merged(b)
    if ma is not None and mb is not None:
        return len(ma) == len(mb) and _all([intervals_equal(x, y, cmp) for x, y in zip(ma, mb)])
    if isinstance(a, Interval) or isinstance(b, Interval):
        return False
    return _matching(a.parts, b.parts, cmp)


def matrices_equal(a: Matrix, b: Matrix, cmp: Comparison) -> bool | None:
    if [len(r) for r in a.rows] != [len(r) for r in b.rows]:
        return False
    return _all([expressions_equal(x, y, cmp) for ra, rb in zip(a.rows, b.rows) for x, y in zip(ra, rb)])


def matrix_vs_tuple(m: Matrix, t: OrderedTuple, cmp: Comparison) -> bool | None:
    """A row or column vector against a tuple of its entries."""
    cells = [c for r in m.rows for c in r]
    if not (len(m.rows) == 1 or all(len(r) == 1 for r in m.rows)) or len(cells) != len(t.items):
        return False
    if any(not isinstance(x, Expression) for x in t.items):
        return False
    return _all([expressions_equal(c, x.tree, cmp) for c, x in zip(cells, t.items)])  # type: ignore[union-attr]


def _closed(v: IntegerRange | Interval) -> Interval:
    """A range in words is the closed interval of its ends."""
    return Interval(True, v.lo, v.hi, True) if isinstance(v, IntegerRange) else v


def ranges_equal(a: IntegerRange | Interval, b: IntegerRange | Interval, cmp: Comparison) -> bool | None:
    return intervals_equal(_closed(a), _closed(b), cmp)


Compare = Callable[[Any, Any, Comparison], "bool | None"]
# (response kind, reference kind) -> comparison; a pair of two kinds is registered both ways (the comparison
# is symmetric), a missing pair is "not equivalent"
_BY_KINDS: dict[tuple[type, type], Compare] = {}


def _register(ka: type, kb: type, fn: Compare) -> None:
    _BY_KINDS[(ka, kb)] = fn
    if ka is not kb:
        _BY_KINDS[(kb, ka)] = lambda a, b, cmp: fn(b, a, cmp)


for _ka, _kb, _fn in (
    (Expression, Expression, expression_values_equal),
    (Quantity, Quantity, quantities_equal),
    (Quantity, Expression, quantity_vs_bare),
    (Ratio, Ratio, ratios_equal),
    (Ratio, Expression, ratio_vs_number),
    (ClockTime, ClockTime, clock_times_equal),
    (ClockTime, Ratio, clock_vs_ratio),
    (Text, Text, texts_equal),
    (OrderedTuple, OrderedTuple, tuples_equal),
    (Interval, Interval, intervals_equal),
    (OrderedTuple, Interval, tuple_vs_interval),
    (IntervalUnion, IntervalUnion, unions_equal),
    (IntervalUnion, Interval, unions_equal),
    (IntervalUnion, OrderedTuple, union_vs_tuple),
    (Matrix, Matrix, matrices_equal),
    (Matrix, OrderedTuple, matrix_vs_tuple),
):
    _register(_ka, _kb, _fn)
for _pair in ((IntegerRange, IntegerRange), (IntegerRange, Interval), (Interval, IntegerRange)):
    _BY_KINDS[_pair] = ranges_equal


def _unwrapped(a: AnswerValue, b: AnswerValue, cmp: Comparison) -> bool | None | type[NotImplemented]:
    """Comparisons that look through one side's structure before any pair of kinds: equations, coordinates
    written as equations, ranges against lists, sets and alternatives. NotImplemented when none applies."""
    if isinstance(a, Equation) and isinstance(b, Equation):
        return equations_equal(a, b, cmp)
    if isinstance(a, Equation):
        value = _equation_value(a, cmp)
        return False if value is None else _equivalent(_parameter_as(a, value, b), b, cmp)
    if isinstance(b, Equation):
        value = _equation_value(b, cmp)
        return False if value is None else _equivalent(a, _parameter_as(b, value, a), cmp)
    # x = 1, y = 2 answers (1, 2): the values in the order written
    if isinstance(a, FiniteSet) and isinstance(b, OrderedTuple) or isinstance(a, OrderedTuple) and isinstance(b, FiniteSet):
        s, t = (a, b) if isinstance(a, FiniteSet) else (b, a)
        if len(s.items) == len(t.items) and all(isinstance(v, Equation) for v in s.items):
            pairs = zip(s.items, t.items) if s is a else zip(t.items, s.items)
            return _all([_equivalent(x, y, cmp) for x, y in pairs])
    if isinstance(a, IntegerRange) != isinstance(b, IntegerRange):
        r, other = (a, b) if isinstance(a, IntegerRange) else (b, a)
        if not isinstance(other, Interval):
            values = _range_values(r)  # type: ignore[arg-type]
            if values is None or members(other) is None:
                return False
            return _matching(values, other.items, cmp) if r is a else _matching(other.items, values, cmp)  # type: ignore[union-attr]
    ea, eb = members(a), members(b)
    if ea is not None or eb is not None:
        return _matching(ea if ea is not None else (a,), eb if eb is not None else (b,), cmp)
    return NotImplemented


def _equivalent(a: AnswerValue, b: AnswerValue, cmp: Comparison) -> bool | None:
    """Is response value ``a`` equivalent to reference value ``b``? (None: needs the symbolic stage.)"""
    budget.check()
    a, b = _as_union(a), _as_union(b)
    result = _unwrapped(a, b, cmp)
    if result is not NotImplemented:
        return result  # type: ignore[return-value]
    compare = _BY_KINDS.get((type(a), type(b)))
    return False if compare is None else compare(a, b, cmp)


def equivalent(a: AnswerValue, b: AnswerValue, cmp: Comparison) -> bool | None:
    """Is response value ``a`` equivalent to reference value ``b``? True / False / None (None: only the
    symbolic stage can tell); TooComplex past a guard (also for nesting too deep to follow)."""
    try:
        return _equivalent(a, b, cmp)
    except RecursionError:
        raise TooComplex("too_deep") from None


__all__ = ["Comparison", "Prover", "equivalent", "expressions_equal"]
