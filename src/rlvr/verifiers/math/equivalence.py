"""Is the response's answer equivalent to the reference? Cheapest test first.

1. identical normalised strings (done by the caller) or identical trees
2. exact rational arithmetic (fractions.Fraction) when both sides are rational constants
3. numeric comparison (complex floats, ``rel_tol``/``abs_tol``) when both sides are constants
4. polynomials in their variables: exact normal forms (expanded, rational coefficients), inline
5. other expressions with variables: random-point probing (our own evaluator, inline); a clear
   disagreement at one point rejects; otherwise the symbolic stage decides (``Ctx.symbolic``, SymPy in a
   supervised worker). When SymPy cannot prove the identity but every probe agreed, the answer is
   accepted (reason "numeric_probe").

Every evaluator here is guarded (exponent size, factorial argument, float overflow) and raises TooComplex
instead of doing unbounded work. ``tri`` answers True / False / None, None meaning "only the symbolic stage
can tell" (it never returns None when ``Ctx.symbolic`` is set).
"""

from __future__ import annotations

import cmath
import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from rlvr.verifiers.math.parse import INF, TooComplex, free_symbols

MAX_EXPONENT = 10000  # |n| in an exact power b^n
MAX_BITS = 200_000  # bits of an exact power's result
MAX_FACTORIAL = 2000  # n! computed exactly up to this n
PROBE_POINTS = 8
PROBE_REL = 1e-7  # probing tolerance (float error accumulates in arbitrary expressions)
MAX_POLY_TERMS = 400  # a polynomial normal form with more terms is left to the symbolic stage
MAX_POLY_POWER = 64
MAX_POLY_WORK = 20_000  # term products per comparison (about 10 ms), so no input makes this stage slow


class NotRational(Exception):
    pass


class NotNumeric(Exception):
    pass


class NotPolynomial(Exception):
    pass


@dataclass
class Ctx:
    rel_tol: float = 1e-9
    abs_tol: float = 1e-12
    percent: str = "auto"
    tuple_order: bool = True
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
    lo, hi = 0, 1 << (n.bit_length() // q + 1)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if mid**q <= n:
            lo = mid
        else:
            hi = mid - 1
    return lo


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


def rat(a: tuple) -> Fraction:
    """The exact rational value of a constant tree; NotRational / TooComplex otherwise."""
    k = a[0]
    if k == "num":
        return a[1]
    if k == "neg":
        return -rat(a[1])
    if k == "add":
        return sum((rat(t) for t in a[1]), Fraction(0))
    if k == "mul":
        v = Fraction(1)
        for t in a[1]:
            v *= rat(t)
            if max(v.numerator.bit_length(), v.denominator.bit_length()) > MAX_BITS:
                raise TooComplex("number_too_large")
        return v
    if k == "div":
        d = rat(a[2])
        n = rat(a[1])
        if d == 0:
            raise NotRational
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


_CFUNCS: dict[str, Callable[[complex], complex]] = {
    "sin": cmath.sin, "cos": cmath.cos, "tan": cmath.tan, "arcsin": cmath.asin, "arccos": cmath.acos,
    "arctan": cmath.atan, "sinh": cmath.sinh, "cosh": cmath.cosh, "tanh": cmath.tanh, "exp": cmath.exp,
    "cot": lambda z: 1 / cmath.tan(z), "sec": lambda z: 1 / cmath.cos(z), "csc": lambda z: 1 / cmath.sin(z),
}
_BIG = 1e250


# ------------------------------------------------------------------------------- polynomial normal form
# A polynomial with rational coefficients as {monomial: coefficient}, a monomial being a sorted tuple of
# (variable, exponent). Two polynomials are equal as functions iff their normal forms are equal, so the
# commonest symbolic answers ((x+1)^2 vs x^2+2x+1) are proved exactly, inline, without SymPy.

Poly = dict[tuple[tuple[str, int], ...], Fraction]


def _poly_mul(p: Poly, q: Poly, work: list[int]) -> Poly:
    work[0] -= len(p) * len(q)
    if work[0] < 0:
        raise NotPolynomial
    out: Poly = {}
    for m1, c1 in p.items():
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
        if d == 0:
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


def _fin(z: complex) -> complex:
    if not (math.isfinite(z.real) and math.isfinite(z.imag)) or abs(z) > _BIG:
        raise TooComplex("overflow")
    return z


def cval(a: tuple, env: dict[str, complex]) -> complex:
    """A complex float value of ``a`` with the symbols in ``env``; NotNumeric / TooComplex when it has none."""
    try:
        return _cval(a, env)
    except OverflowError:
        raise TooComplex("overflow") from None
    except (ZeroDivisionError, ValueError):
        raise NotNumeric from None


def _cval(a: tuple, env: dict[str, complex]) -> complex:
    k = a[0]
    if k == "num":
        return complex(float(a[1]))
    if k == "sym":
        if a[1] not in env:
            raise NotNumeric
        return env[a[1]]
    if k == "const":
        c = {"pi": math.pi, "e": math.e, "i": 1j}.get(a[1])
        if c is None:
            raise NotNumeric  # infinity
        return complex(c)
    if k == "neg":
        return -_cval(a[1], env)
    if k == "add":
        return _fin(sum((_cval(t, env) for t in a[1]), 0j))
    if k == "mul":
        v = 1 + 0j
        for t in a[1]:
            v = _fin(v * _cval(t, env))
        return v
    if k == "div":
        return _fin(_cval(a[1], env) / _cval(a[2], env))
    if k == "pow":
        b, e = _cval(a[1], env), _cval(a[2], env)
        if abs(e) > 1e6 and abs(b) != 1:
            raise TooComplex("exponent_too_large")
        if b.imag == 0 and e.imag == 0 and (b.real > 0 or float(e.real).is_integer()):
            if b.real == 0 and e.real < 0:
                raise NotNumeric
            return _fin(complex(math.pow(b.real, e.real)))
        if b == 0:
            raise NotNumeric
        if b.imag == 0 and e.imag == 0 and b.real < 0:  # (-8)^(1/3): the real root when the denominator is odd
            q = Fraction(e.real).limit_denominator(1000)
            if abs(float(q) - e.real) < 1e-12 and q.denominator % 2 == 1:
                return _fin(complex((-1) ** (q.numerator % 2) * math.pow(-b.real, e.real)))
        return _fin(b**e)
    if k == "root":
        x, n = _cval(a[1], env), _cval(a[2], env)
        if x.imag == 0 and n.imag == 0 and float(n.real).is_integer() and n.real % 2 == 1 and x.real < 0:
            return complex(-((-x.real) ** (1 / n.real)))
        if x.imag == 0 and x.real >= 0 and n.imag == 0:
            return complex(x.real ** (1 / n.real))
        return _fin(x ** (1 / n))
    if k == "fact":
        x = _cval(a[1], env)
        if x.imag != 0:
            raise NotNumeric
        if x.real > 170:
            raise TooComplex("factorial_too_large")
        return complex(math.gamma(x.real + 1))
    if k == "abs":
        return complex(abs(_cval(a[1], env)))
    if k == "fn":
        x = _cval(a[2], env)
        if a[1] == "exp" and x.real > 700:
            raise TooComplex("overflow")
        return _fin(_CFUNCS[a[1]](x))
    if k == "log":
        b, x = _cval(a[1], env), _cval(a[2], env)
        return _fin(cmath.log(x) / cmath.log(b))
    raise NotNumeric


def _inf_sign(a: tuple) -> int:
    """+1 / -1 for +-infinity, 0 otherwise."""
    sign = 1
    while a[0] == "neg":
        a, sign = a[1], -sign
    return sign if a == INF else 0


def _close(x: complex, y: complex, rel: float, abs_: float) -> bool:
    return abs(x - y) <= max(rel * max(abs(x), abs(y)), abs_)


def _pct(v: Any, pct: bool, mode: str) -> list[Any]:
    if mode == "strict":
        return [v / 100] if pct else [v]
    return [v / 100, v] if pct else [v]


def probe(x: tuple, y: tuple, names: set[str]) -> str:
    """"agree", "disagree" or "unknown" from evaluating both trees at random points."""
    rng = random.Random(0x5EED + len(names))
    ordered = sorted(names)
    agree = 0
    for _ in range(PROBE_POINTS * 2):
        env = {n: complex(rng.choice((-1, 1)) * rng.uniform(0.3, 2.7)) for n in ordered}
        try:
            vx, vy = cval(x, env), cval(y, env)
        except NotNumeric:
            continue
        if not _close(vx, vy, PROBE_REL, 1e-9):
            return "disagree"
        agree += 1
        if agree >= PROBE_POINTS:
            break
    return "agree" if agree >= 3 else "unknown"


def scalar(x: tuple, y: tuple, ctx: Ctx, px: bool = False, py: bool = False) -> bool | None:
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
        return any(a == b for a in _pct(rx, px, ctx.percent) for b in _pct(ry, py, ctx.percent))
    names = free_symbols(x) | free_symbols(y)
    if not names:
        try:
            cx, cy = cval(x, {}), cval(y, {})
        except NotNumeric:
            pass
        else:
            return any(
                _close(a, b, ctx.rel_tol, ctx.abs_tol)
                for a in _pct(cx, px, ctx.percent)
                for b in _pct(cy, py, ctx.percent)
            )
    if names:
        same = polynomial_identity(x, y)
        if same is not None:
            if same:
                ctx.notes.append("polynomial_equal")
            return same
    result = probe(x, y, names) if names else "unknown"
    if result == "disagree":
        return False
    if ctx.symbolic is None:
        return None
    verdict = ctx.symbolic(x, y)
    if verdict:
        ctx.notes.append("symbolic_equal")
        return True
    if result == "agree":
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


def tri(a: tuple, b: tuple, ctx: Ctx) -> bool | None:
    """Is response value ``a`` equivalent to reference value ``b``? (None: needs the symbolic stage.)"""
    ka, kb = a[0], b[0]
    if ka == "assign" and kb == "assign":
        if a[1] != b[1]:
            return False
        return tri(a[2], b[2], ctx)
    if ka == "assign":
        return tri(a[2], b, ctx)
    if kb == "assign":
        return tri(a, b[2], ctx)
    ea, eb = _elements(a), _elements(b)
    if ea is not None or eb is not None:
        ea = ea if ea is not None else [a]
        eb = eb if eb is not None else [b]
        return _matching(ea, eb, ctx)
    if ka == "expr" and kb == "expr":
        return scalar(a[1], b[1], ctx, a[2], b[2])
    if ka == "text" or kb == "text":
        return ka == kb and a[1] == b[1]
    if ka == "eq" and kb == "eq":
        d1 = ("add", (a[1], ("neg", a[2])))
        d2 = ("add", (b[1], ("neg", b[2])))
        return _any([
            _all([scalar(a[1], b[1], ctx), scalar(a[2], b[2], ctx)]),
            scalar(d1, d2, ctx),
            scalar(d1, ("neg", d2), ctx),
        ])
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
