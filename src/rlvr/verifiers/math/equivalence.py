"""Is the response's answer equivalent to the reference? Cheapest test first.

1. identical normalised strings (done by the caller) or identical trees
2. exact rational arithmetic (fractions.Fraction) when both sides are rational constants
3. numeric comparison when both sides are constants: floats refute; equality is confirmed with 60 digits
   (to ``rel_tol``/``abs_tol`` only when an answer holds a decimal literal, which is inexact by nature)
4. polynomials in their variables: exact normal forms (expanded, rational coefficients), inline
5. other expressions with variables: random-point probing over several scales (numeric.py) only ever
   refutes; the symbolic stage decides (``Ctx.symbolic``, SymPy in a supervised worker). When SymPy can
   neither prove nor refute the identity, 60-digit agreement at every probe accepts (reason "numeric_probe").

Every evaluator here is guarded before the work (exponent size, bits of an operand, factorial argument,
terms of a product) and raises TooComplex instead of doing unbounded work; loops call budget.check(), so a
call stops at its deadline. ``tri`` answers True / False / None, None meaning "only the symbolic stage
can tell" (it never returns None when ``Ctx.symbolic`` is set).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from rlvr.verifiers.math import budget
from rlvr.verifiers.math.numeric import FLOATS, NotNumeric, evaluate, precise
from rlvr.verifiers.math.expression import TooComplex, free_symbols
from rlvr.verifiers.math.parse import INF

MAX_EXPONENT = 10000  # |n| in an exact power b^n
MAX_BITS = 40_000  # bits of an exact value (an operation on two such numbers takes about a millisecond)
MAX_FACTORIAL = 2000  # n! computed exactly up to this n
# magnitudes of the probe points: floats refute on moderate ones (where float error stays small); the 60-digit
# probes that may accept also cover tiny and huge ones, so expressions that differ only there are told apart
PROBE_SCALES = ((0.3, 2.7), (3.0, 30.0))
PRECISE_SCALES = ((0.001, 0.3), (0.3, 2.7), (3.0, 30.0), (30.0, 3000.0), (3000.0, 1e6), (1e6, 1e12))
PROBE_POINTS = 12
PROBE_REL = 1e-7  # float probing tolerance (float error accumulates in arbitrary expressions)
PRECISE_REL = 1e-45  # 60-digit agreement that counts as equality
MAX_POLY_TERMS = 400  # a polynomial normal form with more terms is left to the symbolic stage
MAX_POLY_POWER = 64
MAX_POLY_WORK = 20_000  # term products per comparison (about 10 ms), so no input makes this stage slow
MAX_COEFFICIENT_BITS = 2048  # a product of coefficients past this size is left to the other stages
INTEGER_PARAMETERS = ("k", "n", "m")  # x = k\pi and x = n\pi name the same solutions


class NotRational(Exception):
    pass


class NotPolynomial(Exception):
    pass


@dataclass
class Ctx:
    rel_tol: float = 1e-9
    abs_tol: float = 1e-12
    percent: str = "auto"
    tuple_order: bool = True
    inexact: bool = False  # an answer holds a decimal literal: irrational constants compare to rel_tol/abs_tol
    # probe with floats before expanding polynomials: cheaper for values that differ (the hedge check's
    # boxes), at the risk of float error calling a cancelling expansion different
    refute_first: bool = False
    symbolic: Callable[[tuple, tuple], bool | None] | None = None
    notes: list[str] = field(default_factory=list)


# -------------------------------------------------------------------------------------------- evaluators


def _exact_root(x: Fraction, q: int) -> Fraction:
    """x ** (1/q) when it is rational, else NotRational."""
    if q < 1 or q > 100:
        raise NotRational
    neg = x < 0
    if neg and q % 2 == 0:
        raise NotRational
    x = abs(x)

    def iroot(n: int) -> int:
        if n.bit_length() > MAX_BITS:
            raise TooComplex("number_too_large")
        r = round(n ** (1.0 / q)) if n.bit_length() < 1000 else _int_root(n, q)
        for c in (r - 1, r, r + 1):
            if c >= 0 and c**q == n:
                return c
        raise NotRational

    v = Fraction(iroot(x.numerator), iroot(x.denominator))
    return -v if neg else v


def _int_root(n: int, q: int) -> int:
    """floor(n ** (1/q)) by Newton's method (a number of steps logarithmic in n's bits)."""
    if q == 2:
        return math.isqrt(n)
    x = 1 << (n.bit_length() // q + 1)  # above the root; Newton's steps descend to it
    while True:
        budget.check()
        y = ((q - 1) * x + n // x ** (q - 1)) // q
        if y >= x:
            return x
        x = y


def _rpow(b: Fraction, e: Fraction) -> Fraction:
    if b in (0, 1) and e > 0:
        return b
    if b == 1:
        return b
    if b == -1 and e.denominator == 1:
        return Fraction(1 if e.numerator % 2 == 0 else -1)
    n = abs(e.numerator)
    if n > MAX_EXPONENT:
        raise TooComplex("exponent_too_large")
    bits = max(b.numerator.bit_length(), b.denominator.bit_length())
    if bits * n > MAX_BITS:
        raise TooComplex("number_too_large")
    if b == 0:
        raise NotRational  # 0 ** negative
    v = b**n
    if e.denominator != 1:
        v = _exact_root(v, e.denominator)
    return 1 / v if e < 0 else v


def _bits(v: Fraction) -> int:
    return max(v.numerator.bit_length(), v.denominator.bit_length())


def _sized(v: Fraction) -> Fraction:
    if _bits(v) > MAX_BITS:
        raise TooComplex("number_too_large")
    return v


def rat(a: tuple) -> Fraction:
    """The exact rational value of a constant tree; NotRational / TooComplex otherwise."""
    k = a[0]
    if k == "num":
        return a[1]
    if k == "neg":
        return -rat(a[1])
    if k == "add":
        total = Fraction(0)
        for t in a[1]:
            budget.check()
            total += _sized(rat(t))
            _sized(total)
        return total
    if k == "mul":
        v = Fraction(1)
        for t in a[1]:
            budget.check()
            w = _sized(rat(t))
            if _bits(v) + _bits(w) > MAX_BITS:
                raise TooComplex("number_too_large")
            v *= w
        return v
    if k == "div":
        d = rat(a[2])
        n = rat(a[1])
        if d == 0:
            raise NotRational
        if _bits(n) + _bits(d) > MAX_BITS:
            raise TooComplex("number_too_large")
        return n / d
    if k == "pow":
        e = rat(a[2])
        return _rpow(rat(a[1]), e)
    if k == "root":
        n = rat(a[2])
        if n.denominator != 1:
            raise NotRational
        return _exact_root(rat(a[1]), int(n))
    if k == "fact":
        n = rat(a[1])
        if n.denominator != 1 or n < 0:
            raise NotRational
        if n > MAX_FACTORIAL:
            raise TooComplex("factorial_too_large")
        return Fraction(math.factorial(int(n)))
    if k == "abs":
        return abs(rat(a[1]))
    raise NotRational


def guard(a: tuple) -> None:
    """Raise TooComplex if evaluating any constant part of ``a`` (in SymPy too) would be huge."""
    stack = [a]
    while stack:
        n = stack.pop()
        k = n[0]
        if k in ("num", "sym", "const"):
            continue
        if k in ("pow", "fact", "root"):
            try:
                rat(n)
            except NotRational:
                pass
            if k == "pow":
                try:
                    e = rat(n[2])
                    if abs(e.numerator) > MAX_EXPONENT and not (n[1][0] == "num" and n[1][1] in (0, 1, -1)):
                        raise TooComplex("exponent_too_large")
                except NotRational:
                    pass
            if k == "fact":
                try:
                    if rat(n[1]) > MAX_FACTORIAL:
                        raise TooComplex("factorial_too_large")
                except NotRational:
                    pass
        for c in n[1:]:
            if isinstance(c, tuple) and c and isinstance(c[0], str):
                stack.append(c)
            elif isinstance(c, tuple):
                stack.extend(c)


# ------------------------------------------------------------------------------- polynomial normal form
# A polynomial with rational coefficients as {monomial: coefficient}, a monomial being a sorted tuple of
# (variable, exponent). Two polynomials are equal as functions iff their normal forms are equal, so the
# commonest symbolic answers ((x+1)^2 vs x^2+2x+1) are proved exactly, inline, without SymPy.

Poly = dict[tuple[tuple[str, int], ...], Fraction]


def _poly_mul(p: Poly, q: Poly, work: list[int]) -> Poly:
    budget.check()
    work[0] -= len(p) * len(q)
    if work[0] < 0:
        raise NotPolynomial
    if max(map(_bits, p.values()), default=0) + max(map(_bits, q.values()), default=0) > MAX_COEFFICIENT_BITS:
        raise NotPolynomial
    out: Poly = {}
    for m1, c1 in p.items():
        budget.check()
        for m2, c2 in q.items():
            powers = dict(m1)
            for name, e in m2:
                powers[name] = powers.get(name, 0) + e
            m = tuple(sorted(powers.items()))
            out[m] = out.get(m, 0) + c1 * c2
    out = {m: c for m, c in out.items() if c}
    if len(out) > MAX_POLY_TERMS:
        raise NotPolynomial
    return out


def poly(a: tuple, work: list[int] | None = None) -> Poly:
    """The normal form of ``a`` when it is a polynomial in its variables (``pi`` and ``e`` count as
    variables: equal forms are then still equal numbers); NotPolynomial otherwise, also once ``work``
    (a one-element budget of term products) runs out."""
    if work is None:
        work = [MAX_POLY_WORK]
    k = a[0]
    if k == "num":
        if _bits(a[1]) > MAX_COEFFICIENT_BITS:
            raise NotPolynomial
        return {(): a[1]} if a[1] else {}
    if k == "sym" or (k == "const" and a[1] in ("pi", "e")):
        return {((a[1] if k == "sym" else "\\" + a[1], 1),): Fraction(1)}
    if k == "neg":
        return {m: -c for m, c in poly(a[1], work).items()}
    if k == "add":
        out: Poly = {}
        for t in a[1]:
            for m, c in poly(t, work).items():
                out[m] = out.get(m, 0) + c
        return {m: c for m, c in out.items() if c}
    if k == "mul":
        out = {(): Fraction(1)}
        for t in a[1]:
            out = _poly_mul(out, poly(t, work), work)
        return out
    if k == "div":
        try:
            d = rat(a[2])
        except NotRational:
            raise NotPolynomial from None
        if d == 0 or _bits(d) > MAX_COEFFICIENT_BITS:
            raise NotPolynomial
        return {m: c / d for m, c in poly(a[1], work).items()}
    if k == "pow":
        try:
            n = rat(a[2])
        except NotRational:
            raise NotPolynomial from None
        if n.denominator != 1 or not 0 <= n <= MAX_POLY_POWER:
            raise NotPolynomial
        base, out = poly(a[1], work), {(): Fraction(1)}
        for _ in range(int(n)):
            out = _poly_mul(out, base, work)
        return out
    raise NotPolynomial


def polynomial_identity(x: tuple, y: tuple) -> bool | None:
    """True when ``x`` and ``y`` are the same polynomial; False when they are different polynomials in
    variables only (then they differ at some point); None when this cannot tell."""
    try:
        work = [MAX_POLY_WORK]
        px, py = poly(x, work), poly(y, work)
    except (NotPolynomial, NotRational, TooComplex):
        return None
    if px == py:
        return True
    has_constants = any(name.startswith("\\") for m in (*px, *py) for name, _ in m)
    return None if has_constants else False


def proportional(x: tuple, y: tuple) -> bool | None:
    """True when polynomials ``x`` and ``y`` are nonzero rational multiples of each other (the equations
    x = 0 and y = 0 are then the same), False when they are polynomials that are not, None when either is
    no polynomial."""
    try:
        work = [MAX_POLY_WORK]
        px, py = poly(x, work), poly(y, work)
    except (NotPolynomial, NotRational, TooComplex):
        return None
    if not px or not py or px.keys() != py.keys():
        return not px and not py
    m = next(iter(py))
    ratio = px[m] / py[m]
    return all(px[k] == ratio * c for k, c in py.items())


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
    """"agree", "disagree" or "unknown" from evaluating both trees at random points; with
    ``precise_check`` agreement must hold to 60 digits, not to float accuracy."""
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
        if not _close(vx, vy, rel, 1e-50 if precise_check else 1e-9):
            return "disagree"
        agree += 1
    return "agree" if agree >= 3 else "unknown"


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
    """``y`` with its integer parameter named as ``x``'s (x = k\\pi and x = n\\pi are the same solutions)."""
    only_x, only_y = nx - ny, ny - nx
    if len(only_x) == 1 == len(only_y) and {*only_x, *only_y} <= set(INTEGER_PARAMETERS):
        return _rename(y, {next(iter(only_y)): next(iter(only_x))})
    return y


def _constants_equal(x: tuple, y: tuple, px: bool, py: bool, ctx: Ctx) -> bool | None:
    """Compare two constant trees numerically: floats refute; equality needs 60 digits (or the tolerances
    when an answer is an inexact decimal)."""
    try:
        cx, cy = evaluate(x, {}), evaluate(y, {})
    except NotNumeric:
        return None
    pairs = _scales(cx, cy, px, py, ctx.percent)
    if not any(_close(a, b, max(ctx.rel_tol, 1e-12), max(ctx.abs_tol, 1e-300)) for a, b in pairs):
        return False
    if ctx.inexact:
        return any(_close(a, b, ctx.rel_tol, ctx.abs_tol) for a, b in pairs)
    budget.check()
    nums = precise()
    try:
        mx, my = evaluate(x, {}, nums), evaluate(y, {}, nums)
    except NotNumeric:
        return None
    return any(_close(a, b, PRECISE_REL, 1e-50) for a, b in _scales(mx, my, px, py, ctx.percent))


def scalar(x: tuple, y: tuple, ctx: Ctx, px: bool = False, py: bool = False) -> bool | None:
    budget.check()
    if x == y and px == py:
        return True
    sx, sy = _inf_sign(x), _inf_sign(y)
    if sx or sy:
        return sx == sy
    guard(x)
    guard(y)
    try:
        rx, ry = rat(x), rat(y)
    except NotRational:
        pass
    else:
        return any(a == b for a, b in _scales(rx, ry, px, py, ctx.percent))
    nx, ny = free_symbols(x), free_symbols(y)
    if nx != ny:
        y = _same_parameter(x, y, nx, ny)
        ny = free_symbols(y)
    names = nx | ny
    if not names:
        same = _constants_equal(x, y, px, py, ctx)
        if same is not None:
            return same
    result = probe(x, y, names) if names and ctx.refute_first else "unknown"
    if result == "disagree":
        return False
    if names:
        same = polynomial_identity(x, y)
        if same is not None:
            if same:
                ctx.notes.append("polynomial_equal")
            return same
    if names and not ctx.refute_first:
        result = probe(x, y, names)
    if result == "disagree":
        return False
    if ctx.symbolic is None:
        return None
    verdict = ctx.symbolic(x, y)
    if verdict:
        ctx.notes.append("symbolic_equal")
        return True
    if verdict is None and names and probe(x, y, names, precise_check=True) == "agree":
        ctx.notes.append("numeric_probe")
        return True
    return False


# ----------------------------------------------------------------------------------------------- values


def _any(results: list[bool | None]) -> bool | None:
    if any(r is True for r in results):
        return True
    return None if any(r is None for r in results) else False


def _all(results: list[bool | None]) -> bool | None:
    if any(r is False for r in results):
        return False
    return None if any(r is None for r in results) else True


def _matching(xs: list, ys: list, ctx: Ctx) -> bool | None:
    """An unordered one-to-one match of xs onto ys (an equivalence, so greedy suffices)."""
    if len(xs) != len(ys):
        return False
    unsure = False
    free = list(range(len(ys)))
    for x in xs:
        hit = None
        maybe = False
        for j in free:
            r = tri(x, ys[j], ctx)
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


def _elements(v: tuple) -> list[tuple] | None:
    if v[0] in ("set", "or"):
        return v[1]
    return None


def _interval_eq(a: tuple, b: tuple, ctx: Ctx) -> bool | None:
    _, lc1, lo1, hi1, rc1 = a
    _, lc2, lo2, hi2, rc2 = b
    if _inf_sign(lo1) == 0 and lc1 != lc2:
        return False
    if _inf_sign(hi1) == 0 and rc1 != rc2:
        return False
    return _all([scalar(lo1, lo2, ctx), scalar(hi1, hi2, ctx)])


def _as_union(v: tuple) -> tuple:
    """"x < -1 or x > 1" (an "or" of intervals) as the union it describes; other values unchanged."""
    if v[0] == "or" and v[1] and all(x[0] == "interval" for x in v[1]):
        return ("union", v[1])
    return v


def _range_values(r: tuple) -> list[tuple] | None:
    """The integers of a range written in words, when both ends are integers and they are few."""
    try:
        lo, hi = rat(r[1]), rat(r[2])
    except NotRational:
        return None
    if lo.denominator != 1 or hi.denominator != 1 or not 0 <= hi - lo < 64:
        return None
    return [("expr", ("num", Fraction(n)) if n >= 0 else ("neg", ("num", Fraction(-n))), False)
            for n in range(int(lo), int(hi) + 1)]


def _side(v: tuple | None) -> tuple | None:
    return v[1] if v is not None and v[0] == "expr" and not v[2] else None


def _eq_value(a: tuple, ctx: Ctx) -> tuple | None:
    """The value an equation commits to when it answers a question that is not an equation: the last side
    of ``label = ... = value`` (``AB = 4``, ``2 + 3 = 5``). None when a constant side contradicts it
    (``x = 13 = 12``) or a side is neither a label nor a constant (``3x = 6`` is no labelled 6)."""
    _, sides, _, labels = a
    last = _side(sides[-1])
    for value, label in zip(sides[:-1], labels):
        side = _side(value)
        if side is not None and not free_symbols(side):
            if last is None or scalar(side, last, ctx) is not True:
                return None
        elif not label:
            return None
    return sides[-1]


def _function_renamed(a: tuple, b: tuple) -> dict[str, str]:
    """Parameter names of b's function mapped to a's (f(z) = z and f(x) = x define the same function)."""
    fa, fb = a[2], b[2]
    if fa and fb and fa[0] == fb[0] and len(fa[1]) == len(fb[1]):
        return dict(zip(fb[1], fa[1]))
    return {}


def _eq_equal(a: tuple, b: tuple, ctx: Ctx) -> bool | None:
    """Two equations are the same when lhs - rhs of one is a nonzero multiple of the other's (after renaming
    a function's parameters)."""
    l1, r1 = _side(a[1][0]), _side(a[1][-1])
    l2, r2 = _side(b[1][0]), _side(b[1][-1])
    if None in (l1, r1, l2, r2):
        return _all([tri(a[1][0], b[1][0], ctx), tri(a[1][-1], b[1][-1], ctx)]) \
            if None not in (a[1][0], b[1][0]) else False
    names = _function_renamed(a, b)
    if names:
        l2, r2 = _rename(l2, names), _rename(r2, names)
    d1, d2 = ("add", (l1, ("neg", r1))), ("add", (l2, ("neg", r2)))
    d2 = _same_parameter(d1, d2, free_symbols(d1), free_symbols(d2))
    same = proportional(d1, d2)
    if same is not None:
        if same:
            ctx.notes.append("polynomial_equal")
        return same
    return _any([scalar(d1, d2, ctx), scalar(d1, ("neg", d2), ctx)])


def _quantity(q: tuple) -> tuple[str, tuple]:
    """(dimension, the value in the dimension's base unit) of a quantity."""
    from rlvr.verifiers.math.units import SIZES

    unit = q[2]
    dim, size = SIZES.get(unit, (unit, Fraction(1)))
    if unit == "deg":
        return dim, ("mul", (q[1], ("div", ("const", "pi"), ("num", Fraction(180)))))
    return dim, ("mul", (q[1], ("num", size)))


def _quantity_vs_bare(q: tuple, e: tuple, ctx: Ctx) -> bool | None:
    """A bare number against a quantity is read in the quantity's unit; against degrees, also as radians."""
    if e[2]:
        return False
    same = scalar(q[1], e[1], ctx)
    if same is not True and q[2] == "deg":
        return scalar(_quantity(q)[1], e[1], ctx)
    return same


def _ratio_eq(a: tuple, b: tuple, ctx: Ctx) -> bool | None:
    """a1:a2:... equals b1:b2:... when every term is in the same proportion."""
    xs, ys = a[1], b[1]
    if len(xs) != len(ys):
        return False
    return _all([scalar(("mul", (xs[i], ys[0])), ("mul", (ys[i], xs[0])), ctx) for i in range(1, len(xs))])


def tri(a: tuple, b: tuple, ctx: Ctx) -> bool | None:
    """Is response value ``a`` equivalent to reference value ``b``? (None: needs the symbolic stage.)"""
    budget.check()
    if a[0] == "or":
        a = _as_union(a)
    if b[0] == "or":
        b = _as_union(b)
    ka, kb = a[0], b[0]
    if ka == "eq" and kb == "eq":
        return _eq_equal(a, b, ctx)
    if ka == "eq":
        value = _eq_value(a, ctx)
        return False if value is None else tri(value, b, ctx)
    if kb == "eq":
        value = _eq_value(b, ctx)
        return False if value is None else tri(a, value, ctx)
    if {ka, kb} == {"set", "tuple"}:  # x = 1, y = 2 answers (1, 2): the values in the order written
        s, t = (a, b) if ka == "set" else (b, a)
        if len(s[1]) == len(t[1]) and all(v[0] == "eq" for v in s[1]):
            pairs = zip(s[1], t[1]) if s is a else zip(t[1], s[1])
            return _all([tri(x, y, ctx) for x, y in pairs])
    if ka == "range" or kb == "range":
        r, other = (a, b) if ka == "range" else (b, a)
        if other[0] in ("range", "interval"):
            closed = ("interval", True, r[1], r[2], True)
            lhs, rhs = (closed, other) if r is a else (other, closed)
            return tri(lhs, rhs if rhs[0] != "range" else ("interval", True, rhs[1], rhs[2], True), ctx)
        values = _range_values(r)
        if values is None or _elements(other) is None:
            return False
        return _matching(values, other[1], ctx) if r is a else _matching(other[1], values, ctx)
    ea, eb = _elements(a), _elements(b)
    if ea is not None or eb is not None:
        ea = ea if ea is not None else [a]
        eb = eb if eb is not None else [b]
        return _matching(ea, eb, ctx)
    if ka == "expr" and kb == "expr":
        return scalar(a[1], b[1], ctx, a[2], b[2])
    if ka == "qty" and kb == "qty":
        (da, va), (db, vb) = _quantity(a), _quantity(b)
        return da == db and scalar(va, vb, ctx)
    if ka == "qty" and kb == "expr":
        return _quantity_vs_bare(a, b, ctx)
    if kb == "qty" and ka == "expr":
        return _quantity_vs_bare(b, a, ctx)
    if ka == "ratio" and kb == "ratio":
        return _ratio_eq(a, b, ctx)
    if {ka, kb} == {"ratio", "expr"}:
        r, e = (a, b) if ka == "ratio" else (b, a)
        if len(r[1]) != 2 or e[2]:
            return False
        return scalar(("div", r[1][0], r[1][1]), e[1], ctx)
    if ka == "text" or kb == "text":
        return ka == kb and a[1] == b[1]
    if ka == "tuple" and kb == "tuple":
        if len(a[1]) != len(b[1]):
            return False
        if not ctx.tuple_order:
            return _matching(a[1], b[1], ctx)
        return _all([tri(x, y, ctx) for x, y in zip(a[1], b[1])])
    if ka == "interval" and kb == "interval":
        return _interval_eq(a, b, ctx)
    if {ka, kb} == {"tuple", "interval"}:
        t, iv = (a, b) if ka == "tuple" else (b, a)
        if len(t[1]) != 2 or iv[1] or iv[4] or any(x[0] != "expr" for x in t[1]):
            return False
        return _interval_eq(("interval", False, t[1][0][1], t[1][1][1], False), iv, ctx)
    if ka == "union" and kb == "union":
        return _matching(a[1], b[1], ctx)
    if ka == "matrix" and kb == "matrix":
        if [len(r) for r in a[1]] != [len(r) for r in b[1]]:
            return False
        return _all([scalar(x, y, ctx) for ra, rb in zip(a[1], b[1]) for x, y in zip(ra, rb)])
    if {ka, kb} == {"matrix", "tuple"}:
        m, t = (a, b) if ka == "matrix" else (b, a)
        cells = [c for r in m[1] for c in r]
        if not (len(m[1]) == 1 or all(len(r) == 1 for r in m[1])) or len(cells) != len(t[1]):
            return False
        if any(x[0] != "expr" for x in t[1]):
            return False
        return _all([scalar(c, x[1], ctx) for c, x in zip(cells, t[1])])
    return False


def check(a: tuple, b: tuple, ctx: Ctx) -> bool | None:
    try:
        return tri(a, b, ctx)
    except RecursionError:
        raise TooComplex("too_deep") from None
