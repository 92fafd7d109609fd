"""Numeric values of expression trees, in two arithmetics: complex floats (fast; used to refute) and
60-digit mpmath numbers (used to confirm, so that 10^{20}+\\pi is not 10^{20} and e^{-30} is not 0).

Every operation is guarded before it runs: a power whose result would pass 10^250 in size, a factorial past
170 and a value past 10^250 raise TooComplex; a value that does not exist (division by zero, log 0) raises
NotNumeric.
"""

from __future__ import annotations

import cmath
import math
from fractions import Fraction
from typing import Any

from rlvr.verifiers.math import budget
from rlvr.verifiers.math.expression import TooComplex

_BIG = 1e250
_BIG_LOG = math.log(_BIG)


class NotNumeric(Exception):
    pass


class Floats:
    """Complex floats through ``cmath``."""

    digits = 15
    zero = 0j

    def num(self, f: Fraction) -> Any:
        return complex(float(f))

    def const(self, name: str) -> Any:
        return {"pi": complex(math.pi), "e": complex(math.e), "i": 1j}[name]

    def fn(self, name: str, z: Any) -> Any:
        if name in ("cot", "sec", "csc"):
            return 1 / self.fn({"cot": "tan", "sec": "cos", "csc": "sin"}[name], z)
        return getattr(cmath, {"arcsin": "asin", "arccos": "acos", "arctan": "atan"}.get(name, name))(z)

    def log(self, z: Any) -> Any:
        return cmath.log(z)

    def integer_part(self, name: str, x: float) -> Any:
        return complex(math.floor(x) if name == "floor" else math.ceil(x))

    def real_pow(self, b: float, e: float) -> Any:
        return complex(math.pow(b, e))

    def pow(self, b: Any, e: Any) -> Any:
        return b**e

    def gamma(self, x: float) -> Any:
        return complex(math.gamma(x))

    def finite(self, z: Any) -> bool:
        return math.isfinite(z.real) and math.isfinite(z.imag)


class Precise:
    """60-digit complex numbers through a private mpmath context (its precision is never changed, so the
    context is safe to share between threads)."""

    digits = 60

    def __init__(self) -> None:
        import mpmath

        self.mp = mpmath.MPContext()
        self.mp.dps = self.digits
        self.zero = self.mp.mpc(0)

    def num(self, f: Fraction) -> Any:
        return self.mp.mpc(self.mp.mpf(f.numerator) / f.denominator)

    def const(self, name: str) -> Any:
        return {"pi": self.mp.mpc(self.mp.pi), "e": self.mp.mpc(self.mp.e), "i": self.mp.mpc(0, 1)}[name]

    def fn(self, name: str, z: Any) -> Any:
        return getattr(self.mp, {"arcsin": "asin", "arccos": "acos", "arctan": "atan"}.get(name, name))(z)

    def log(self, z: Any) -> Any:
        if z == 0:
            raise NotNumeric
        return self.mp.log(z)

    def integer_part(self, name: str, x: Any) -> Any:
        return self.mp.mpc(self.mp.floor(x) if name == "floor" else self.mp.ceil(x))

    def real_pow(self, b: Any, e: Any) -> Any:
        return self.mp.mpc(self.mp.power(self.mp.mpf(b), self.mp.mpf(e)))

    def pow(self, b: Any, e: Any) -> Any:
        return self.mp.power(b, e)

    def gamma(self, x: Any) -> Any:
        return self.mp.mpc(self.mp.gamma(x))

    def finite(self, z: Any) -> bool:
        return bool(self.mp.isfinite(z.real) and self.mp.isfinite(z.imag))


FLOATS = Floats()
_precise: Precise | None = None


def precise() -> Precise:
    global _precise
    if _precise is None:
        _precise = Precise()
    return _precise


def evaluate(a: tuple, env: dict[str, Any], nums: Any = FLOATS) -> Any:
    """The value of ``a`` with the symbols in ``env`` in the arithmetic ``nums``; NotNumeric when it has
    none, TooComplex past a guard."""
    try:
        return _eval(a, env, nums)
    except OverflowError:
        raise TooComplex("overflow") from None
    except (ZeroDivisionError, ValueError, KeyError):
        raise NotNumeric from None


def _fin(z: Any, nums: Any) -> Any:
    if not nums.finite(z):
        raise NotNumeric
    if abs(z) > _BIG:
        raise TooComplex("overflow")
    return z


def _pow(b: Any, e: Any, nums: Any) -> Any:
    size = abs(b)
    if size != 1 and size != 0 and abs(e) * abs(math.log(float(size))) > _BIG_LOG:
        raise TooComplex("exponent_too_large")
    if b.imag == 0 and e.imag == 0:
        br, er = b.real, e.real
        if br > 0 or float(er).is_integer():
            if br == 0 and er < 0:
                raise NotNumeric
            return _fin(nums.real_pow(br, er), nums)
        if br < 0:  # (-8)^(1/3): the real root when the exponent's denominator is odd
            q = Fraction(float(er)).limit_denominator(1000)
            if abs(float(q) - float(er)) < 1e-12 and q.denominator % 2 == 1:
                return _fin((-1) ** (q.numerator % 2) * nums.real_pow(-br, er), nums)
    if b == 0:
        raise NotNumeric
    return _fin(nums.pow(b, e), nums)


def _eval(a: tuple, env: dict[str, Any], nums: Any) -> Any:
    k = a[0]
    if k == "num":
        return nums.num(a[1])
    if k == "sym":
        if a[1] not in env:
            raise NotNumeric
        return env[a[1]]
    if k == "const":
        if a[1] == "inf":
            raise NotNumeric
        return nums.const(a[1])
    if k == "neg":
        return -_eval(a[1], env, nums)
    if k == "add":
        budget.check()
        total = nums.zero
        for t in a[1]:
            total += _eval(t, env, nums)
        return _fin(total, nums)
    if k == "mul":
        budget.check()
        v = nums.zero + 1
        for t in a[1]:
            v = _fin(v * _eval(t, env, nums), nums)
        return v
    if k == "div":
        return _fin(_eval(a[1], env, nums) / _eval(a[2], env, nums), nums)
    if k == "pow":
        return _pow(_eval(a[1], env, nums), _eval(a[2], env, nums), nums)
    if k == "root":
        x, n = _eval(a[1], env, nums), _eval(a[2], env, nums)
        if n == 0:
            raise NotNumeric
        if x.imag == 0 and n.imag == 0 and float(n.real).is_integer() and int(n.real) % 2 == 1 and x.real < 0:
            return -nums.real_pow(-x.real, 1 / n.real)
        if x.imag == 0 and x.real >= 0 and n.imag == 0:
            return nums.real_pow(x.real, 1 / n.real)
        return _fin(nums.pow(x, 1 / n), nums)
    if k == "fact":
        x = _eval(a[1], env, nums)
        if x.imag != 0:
            raise NotNumeric
        if x.real > 170:
            raise TooComplex("factorial_too_large")
        return nums.gamma(x.real + 1)
    if k == "abs":
        return nums.zero + abs(_eval(a[1], env, nums))
    if k == "fn":
        x = _eval(a[2], env, nums)
        if a[1] in ("floor", "ceil"):
            if x.imag != 0:
                raise NotNumeric
            return nums.integer_part(a[1], x.real)
        if a[1] in ("exp", "sinh", "cosh") and abs(x.real) > 570:
            raise TooComplex("overflow")
        return _fin(nums.fn(a[1], x), nums)
    if k == "log":
        b, x = _eval(a[1], env, nums), _eval(a[2], env, nums)
        return _fin(nums.log(x) / nums.log(b), nums)
    raise NotNumeric


__all__ = ["FLOATS", "NotNumeric", "evaluate", "precise"]
