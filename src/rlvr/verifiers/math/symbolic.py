"""The SymPy stage. It only ever runs inside a supervised worker (``compare_in_worker`` is sent through
``rlvr.verifiers.runner`` as a CallableRequest), where a hard deadline can kill it; SymPy is imported lazily.

Trees come from our own parser (parse.py) after the size guards of exact.guard_size; when our parser cannot read
one side, latex2sympy2_extended gets a try.
"""

from __future__ import annotations

import importlib.util
import logging
import warnings
from typing import Any

from rlvr.verifiers.base import Verdict


def to_sympy(a: tuple) -> Any:
    import sympy

    k = a[0]
    if k == "num":
        return sympy.Rational(a[1].numerator, a[1].denominator)
    if k == "sym":
        return sympy.Symbol(a[1])
    if k == "const":
        return {"pi": sympy.pi, "e": sympy.E, "i": sympy.I, "inf": sympy.oo}[a[1]]
    if k == "neg":
        return -to_sympy(a[1])
    if k == "add":
        return sympy.Add(*[to_sympy(t) for t in a[1]])
    if k == "mul":
        return sympy.Mul(*[to_sympy(t) for t in a[1]])
    if k == "div":
        return to_sympy(a[1]) / to_sympy(a[2])
    if k == "pow":
        return sympy.Pow(to_sympy(a[1]), to_sympy(a[2]))
    if k == "root":
        x, n = to_sympy(a[1]), to_sympy(a[2])
        if n == 2:
            return sympy.sqrt(x)
        if x.is_number and x.is_negative and n.is_integer and n.is_odd:
            return sympy.real_root(x, n)
        return sympy.root(x, n)
    if k == "fact":
        return sympy.factorial(to_sympy(a[1]))
    if k == "abs":
        return sympy.Abs(to_sympy(a[1]))
    if k == "fn":
        name = {"arcsin": "asin", "arccos": "acos", "arctan": "atan", "ceil": "ceiling"}.get(a[1], a[1])
        return getattr(sympy, name)(to_sympy(a[2]))
    if k == "log":
        base, x = to_sympy(a[1]), to_sympy(a[2])
        return sympy.log(x) if base == sympy.E else sympy.log(x, base)
    raise ValueError(f"unknown node {k!r}")


def _zero(d: Any) -> bool | None:
    """True when SymPy shows ``d`` is zero, False when it shows it is not, None when it cannot tell."""
    import sympy

    if d == 0:
        return True
    last = d
    for f in (sympy.expand, sympy.cancel, sympy.simplify):
        try:
            last = f(d)
            if last == 0:
                return True
        except Exception:
            continue
    try:
        if last.is_number and last.is_zero is False:
            return False
    except Exception:
        pass
    return None


def sympy_equal(x: tuple, y: tuple) -> bool | None:
    """True / False when SymPy proves ``x`` = ``y`` or ``x`` != ``y``, None when it cannot."""
    try:
        return _zero(to_sympy(x) - to_sympy(y))
    except Exception:
        return None


def compare_in_worker(response: str, reference: Any, **options: Any) -> Verdict:
    """Run the whole comparison again with the SymPy stage switched on (module-level: picklable by reference)."""
    from rlvr.verifiers.math import Stage, decide

    options.pop("timeout_s", None)
    return decide(response, reference, stage=Stage.SYMBOLIC, **options)


FALLBACK_PACKAGE = "latex2sympy2_extended"
MISSING_FALLBACK = (
    f"{FALLBACK_PACKAGE} is not installed, so the math verifier cannot read answers its own parser does not "
    f"(they are judged unparseable). It is a dependency of rlvr: reinstall rlvr, or `pip install {FALLBACK_PACKAGE}`."
)
_warned = False
_installed: bool | None = None  # found once, not looked up again


def fallback_installed() -> bool:
    """Whether latex2sympy2_extended can be imported; says so once (a warning and the "rlvr" log) when not."""
    global _warned, _installed
    if _installed:
        return True
    _installed = importlib.util.find_spec(FALLBACK_PACKAGE) is not None
    if _installed:
        return True
    if not _warned:
        _warned = True
        warnings.warn(MISSING_FALLBACK, RuntimeWarning, stacklevel=2)
        logging.getLogger("rlvr").warning(MISSING_FALLBACK)
    return False


def latex2sympy_equal(response: str, reference: str) -> bool | None:
    """The fallback for text our parser cannot read: True/False, None when latex2sympy cannot read it either
    (or is not installed, which is said once: ``fallback_installed``)."""
    if not fallback_installed():
        return None
    try:
        from latex2sympy2_extended import latex2sympy

        a = latex2sympy(response)
        b = latex2sympy(reference)
    except Exception:
        return None
    try:
        return bool(_zero(a - b))
    except Exception:
        try:
            return bool(a == b)
        except Exception:
            return None


__all__ = ["compare_in_worker", "fallback_installed", "latex2sympy_equal", "sympy_equal", "to_sympy"]
