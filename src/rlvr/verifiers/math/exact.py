"""Exact arithmetic on expression trees (expression.py): the rational value of a constant tree and the
normal form of a polynomial. Both the parser (inequalities, bounds of intervals) and the comparison
(equivalence.py) use them; this module imports neither.

Every evaluator is guarded before the work (exponent size, bits of an operand, factorial argument, terms of a
product) and raises TooComplex instead of doing unbounded work; loops call budget.check(), so a call stops at
its deadline.
"""

from __future__ import annotations

import math
from fractions import Fraction

from rlvr.verifiers.math import budget
from rlvr.verifiers.math.expression import TooComplex

MAX_EXPONENT = 10000  # |n| in an exact power b^n
MAX_BITS = 40_000  # bits of an exact value (an operation on two such numbers takes about a millisecond)
MAX_FACTORIAL = 2000  # n! computed exactly up to this n
MAX_POLY_TERMS = 400  # a polynomial normal form with more terms is left to the symbolic stage
MAX_POLY_POWER = 64
MAX_POLY_WORK = 20_000  # term products per comparison (about 10 ms), so no input makes this stage slow
MAX_COEFFICIENT_BITS = 2048  # a product of coefficients past this size is left to the other stages


class NotRational(Exception):
    pass


class NotPolynomial(Exception):
    pass


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


def _exact_power(b: Fraction, e: Fraction) -> Fraction:
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


def bit_size(v: Fraction) -> int:
    return max(v.numerator.bit_length(), v.denominator.bit_length())


def _within_bits(v: Fraction) -> Fraction:
    if bit_size(v) > MAX_BITS:
        raise TooComplex("number_too_large")
    return v


def exact_value(a: tuple) -> Fraction:
    """The exact rational value of a constant tree; NotRational / TooComplex otherwise."""
    k = a[0]
    if k == "num":
        return a[1]
    if k == "neg":
        return -exact_value(a[1])
    if k == "add":
        total = Fraction(0)
        for t in a[1]:
            budget.check()
            total += _within_bits(exact_value(t))
            _within_bits(total)
        return total
    if k == "mul":
        v = Fraction(1)
        for t in a[1]:
            budget.check()
            w = _within_bits(exact_value(t))
            if bit_size(v) + bit_size(w) > MAX_BITS:
                raise TooComplex("number_too_large")
            v *= w
        return v
    if k == "div":
        d = exact_value(a[2])
        n = exact_value(a[1])
        if d == 0:
            raise NotRational
        if bit_size(n) + bit_size(d) > MAX_BITS:
            raise TooComplex("number_too_large")
        return n / d
    if k == "pow":
        e = exact_value(a[2])
        return _exact_power(exact_value(a[1]), e)
    if k == "root":
        n = exact_value(a[2])
        if n.denominator != 1:
            raise NotRational
        return _exact_root(exact_value(a[1]), int(n))
    if k == "fact":
        n = exact_value(a[1])
        if n.denominator != 1 or n < 0:
            raise NotRational
        if n > MAX_FACTORIAL:
            raise TooComplex("factorial_too_large")
        return Fraction(math.factorial(int(n)))
    if k == "abs":
        return abs(exact_value(a[1]))
    if k == "fn" and a[1] in ("floor", "ceil"):
        x = exact_value(a[2])
        return Fraction(math.floor(x) if a[1] == "floor" else math.ceil(x))
    raise NotRational


def guard_size(a: tuple) -> None:
    """Raise TooComplex if evaluating any constant part of ``a`` (in SymPy too) would be huge."""
    stack = [a]
    while stack:
        n = stack.pop()
        k = n[0]
        if k in ("num", "sym", "const"):
            continue
        if k in ("pow", "fact", "root"):
            try:
                exact_value(n)
            except NotRational:
                pass
            if k == "pow":
                try:
                    e = exact_value(n[2])
                    if abs(e.numerator) > MAX_EXPONENT and not (n[1][0] == "num" and n[1][1] in (0, 1, -1)):
                        raise TooComplex("exponent_too_large")
                except NotRational:
                    pass
            if k == "fact":
                try:
                    if exact_value(n[1]) > MAX_FACTORIAL:
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

Polynomial = dict[tuple[tuple[str, int], ...], Fraction]


def _polynomial_product(p: Polynomial, q: Polynomial, work: list[int]) -> Polynomial:
    budget.check()
    work[0] -= len(p) * len(q)
    if work[0] < 0:
        raise NotPolynomial
    if max(map(bit_size, p.values()), default=0) + max(map(bit_size, q.values()), default=0) > MAX_COEFFICIENT_BITS:
        raise NotPolynomial
    out: Polynomial = {}
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


def polynomial_form(a: tuple, work: list[int] | None = None) -> Polynomial:
    """The normal form of ``a`` when it is a polynomial in its variables (``pi`` and ``e`` count as
    variables: equal forms are then still equal numbers); NotPolynomial otherwise, also once ``work``
    (a one-element budget of term products) runs out."""
    if work is None:
        work = [MAX_POLY_WORK]
    k = a[0]
    if k == "num":
        if bit_size(a[1]) > MAX_COEFFICIENT_BITS:
            raise NotPolynomial
        return {(): a[1]} if a[1] else {}
    if k == "sym" or (k == "const" and a[1] in ("pi", "e")):
        return {((a[1] if k == "sym" else "\\" + a[1], 1),): Fraction(1)}
    if k == "neg":
        return {m: -c for m, c in polynomial_form(a[1], work).items()}
    if k == "add":
        out: Polynomial = {}
        for t in a[1]:
            for m, c in polynomial_form(t, work).items():
                out[m] = out.get(m, 0) + c
        return {m: c for m, c in out.items() if c}
    if k == "mul":
        out = {(): Fraction(1)}
        for t in a[1]:
            out = _polynomial_product(out, polynomial_form(t, work), work)
        return out
    if k == "div":
        try:
            d = exact_value(a[2])
        except NotRational:
            raise NotPolynomial from None
        if d == 0 or bit_size(d) > MAX_COEFFICIENT_BITS:
            raise NotPolynomial
        return {m: c / d for m, c in polynomial_form(a[1], work).items()}
    if k == "pow":
        try:
            n = exact_value(a[2])
        except NotRational:
            raise NotPolynomial from None
        if n.denominator != 1 or not 0 <= n <= MAX_POLY_POWER:
            raise NotPolynomial
        base, out = polynomial_form(a[1], work), {(): Fraction(1)}
        for _ in range(int(n)):
            out = _polynomial_product(out, base, work)
        return out
    raise NotPolynomial


def polynomial_identity(x: tuple, y: tuple) -> bool | None:
    """True when ``x`` and ``y`` are the same polynomial; False when they are different polynomials in
    variables only (then they differ at some point); None when this cannot tell."""
    try:
        work = [MAX_POLY_WORK]
        px, py = polynomial_form(x, work), polynomial_form(y, work)
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
        px, py = polynomial_form(x, work), polynomial_form(y, work)
    except (NotPolynomial, NotRational, TooComplex):
        return None
    if not px or not py or px.keys() != py.keys():
        return not px and not py
    m = next(iter(py))
    ratio = px[m] / py[m]
    return all(px[k] == ratio * c for k, c in py.items())


__all__ = [
    "MAX_BITS", "NotPolynomial", "NotRational", "Polynomial", "bit_size", "exact_value", "guard_size",
    "polynomial_form", "polynomial_identity", "proportional",
]
