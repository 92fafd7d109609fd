"""The kinds of answer value: what parse.py makes of an answer and equivalence.py compares.

One small frozen dataclass per kind. Expressions inside them are the trees of expression.py (``("num", 3)``,
``("add", (a, b))`` ...); a value never holds a bare string except Text's key and Quantity's unit. Every
sequence is a tuple, so values are hashable and can be cached.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Union

Tree = tuple  # an expression tree (expression.py)


@dataclass(frozen=True, slots=True)
class Expression:
    """A number or an expression; ``percent`` when it was written with a percent sign (50\\%); ``noun`` the word
    after a number that is no unit we know ("12 cookies"): equal to the bare number, never to a quantity."""

    tree: Tree
    percent: bool = False
    noun: str = ""


@dataclass(frozen=True, slots=True)
class Quantity:
    """A value with a unit of measure (units.py names the unit: "min", "cm^2", "deg", ...)."""

    value: Tree
    unit: str


@dataclass(frozen=True, slots=True)
class Equation:
    """``a = b = ... = z``: the value of every side (None for a side only a label can be, such as
    ``m_{\\max}``), the function it defines as (name, parameters) or None (``f(x) = ...``), and for each side
    but the last whether it reads as a label (no digits outside subscripts)."""

    sides: tuple[AnswerValue | None, ...]
    function: tuple[str, tuple[str, ...]] | None
    labels: tuple[bool, ...]


@dataclass(frozen=True, slots=True)
class Interval:
    """An interval of the reals; an infinite end is open whatever was written."""

    lo_closed: bool
    lo: Tree
    hi: Tree
    hi_closed: bool


@dataclass(frozen=True, slots=True)
class IntervalUnion:
    """A union of intervals (a part may be a finite set of points: ``[0, 1) \\cup \\{3\\}``)."""

    parts: tuple[AnswerValue, ...]


@dataclass(frozen=True, slots=True)
class FiniteSet:
    """An unordered collection of values: ``\\{1, 2\\}``, a bare list ``1, 2``, ``x = \\pm 3``."""

    items: tuple[AnswerValue, ...]


@dataclass(frozen=True, slots=True)
class Alternatives:
    """Values joined by "or": ``x = 1 \\text{ or } x = 2`` (a union when every one is an interval)."""

    items: tuple[AnswerValue, ...]


@dataclass(frozen=True, slots=True)
class OrderedTuple:
    """A tuple or point: ``(1, 2)``; order matters unless the policy says otherwise."""

    items: tuple[AnswerValue, ...]


@dataclass(frozen=True, slots=True)
class IntegerRange:
    """A range written in words: "2 to 7", "between 2 and 7" (the closed range of its ends)."""

    lo: Tree
    hi: Tree


@dataclass(frozen=True, slots=True)
class Ratio:
    """``a : b : ...``: equal to another ratio when every term is in the same proportion."""

    terms: tuple[Tree, ...]


@dataclass(frozen=True, slots=True)
class ClockTime:
    """A time of day (``2:00``, ``10:30 pm``, ``14:05:30``) in seconds after midnight; ``half_day_known`` when
    am/pm was written or the hour says it (13-23, 0): otherwise 2:00 may be 14:00."""

    seconds: int
    half_day_known: bool


@dataclass(frozen=True, slots=True)
class Matrix:
    """A matrix's rows of cell expressions."""

    rows: tuple[tuple[Tree, ...], ...]


@dataclass(frozen=True, slots=True)
class Text:
    """Words: compared case- and space-insensitively by ``key``."""

    key: str


AnswerValue = Union[
    Expression, Quantity, Equation, Interval, IntervalUnion, FiniteSet, Alternatives, OrderedTuple,
    IntegerRange, Ratio, ClockTime, Matrix, Text,
]


def members(v: AnswerValue) -> tuple[AnswerValue, ...] | None:
    """The values of a multi-valued answer (a set, or alternatives), None for any other kind."""
    if isinstance(v, (FiniteSet, Alternatives)):
        return v.items
    return None


def is_multi(v: AnswerValue) -> bool:
    """A multi-valued answer (a set or bare list of values, or "a or b"; "x < -1 or x > 1" is one set)."""
    return isinstance(v, FiniteSet) or (
        isinstance(v, Alternatives) and not all(isinstance(x, Interval) for x in v.items)
    )


__all__ = [
    "Alternatives", "AnswerValue", "ClockTime", "Equation", "Expression", "FiniteSet", "IntegerRange", "Interval",
    "IntervalUnion", "Matrix", "OrderedTuple", "Quantity", "Ratio", "Text", "Tree", "is_multi", "members",
]
