"""Parse a normalised answer string (normalize.py) into an answer value (values.py): the structure (lists,
sets, tuples, intervals, inequalities, equations, ratios, quantities, matrices, text) around expression trees
(expression.py). Everything here is our own code and runs inline: no SymPy. This module never imports the
comparison (equivalence.py); exact arithmetic for bounds comes from exact.py.
"""

from __future__ import annotations

import re
from fractions import Fraction
from collections.abc import Callable

from rlvr.verifiers.math.exact import NotPolynomial, NotRational, exact_value, polynomial_form
from rlvr.verifiers.math.expression import INF, MAX_ANSWER_CHARS, NEG_INF, ParseError, TooComplex, number_node
from rlvr.verifiers.math.expression import parse_expr
from rlvr.verifiers.math.normalize import FUNCTION_NAMES as _FUNCS
from rlvr.verifiers.math.normalize import PLAIN_NUMBER as _PLAIN_NUMBER
from rlvr.verifiers.math.normalize import normalize
from rlvr.verifiers.math.numeric import NotNumeric, evaluate
from rlvr.verifiers.math.units import SIZES, TEMPERATURE_ZERO, canonical, mark_trailing
from rlvr.verifiers.math.words import number_in_words
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
    is_multi,
)

MAX_ITEMS = 64  # elements in a set/tuple/matrix


# ----------------------------------------------------------------------------------------------- structures

_OPEN = "([{"
_CLOSE = ")]}"


def split_top(s: str, sep: re.Pattern[str], seps: list[str] | None = None) -> list[str]:
    """Split ``s`` at matches of ``sep`` that are not inside any bracket (the matches go to ``seps``)."""
    if sep.search(s) is None:  # the common case: nothing to split at, so no need to track brackets
        return [s]
    parts, depth, start, i, n = [], 0, 0, 0, len(s)
    while i < n:
        c = s[i]
        if c == "\\" and s.startswith("\\begin", i):
            depth += 1
        elif c == "\\" and s.startswith("\\end", i):
            depth -= 1
        if c in _OPEN:
            depth += 1
        elif c in _CLOSE:
            depth -= 1
        elif depth == 0:
            m = sep.match(s, i)
            if m and m.end() > i:
                if seps is not None:
                    seps.append(m.group(0))
                parts.append(s[start:i])
                start = i = m.end()
                continue
        i += 1
    parts.append(s[start:])
    return parts


def _wrapped(s: str) -> bool:
    """True when s[0] is a bracket whose match is the last character (so "(1)(2)" is not wrapped)."""
    depth = 0
    for i, c in enumerate(s):
        if c in _OPEN:
            depth += 1
        elif c in _CLOSE:
            depth -= 1
            if depth == 0:
                return i == len(s) - 1
    return False


_COMMA = re.compile(r",")
_SEMICOLON = re.compile(r";")
_OR = re.compile(r"\s+or\s+|\s*\\lor\s*|(?<=[)}\]\d])\s*or\s*(?=[({\[A-Z])")
_LIST_SEP = re.compile(r"\s*;\s*|\s*,?\s+and\s+")
_CUP = re.compile(r"\s*\\cup\s*|\s+U\s+")
_SET_MINUS = re.compile(r"\s*\\(?:setminus|backslash|smallsetminus)(?![a-zA-Z])\s*")
_REL = re.compile(r"<=|>=|!=|<|>")
_EQ = re.compile(r"=")
_RATIO = re.compile(r":")
_VAR = re.compile(r"^\s*(?:[a-zA-Z]|\\[a-zA-Z]+)(?:_\{?\w+\}?)?(?:\s*\(\s*[a-zA-Z]\s*\))?\s*$")
_FUNCTION_DEF = re.compile(r"^\s*([a-zA-Z])\s*\(\s*([a-zA-Z](?:\s*,\s*[a-zA-Z])*)\s*\)\s*$")
# digits a label may hold: subscripts (V_1, S_{10}) and a function's argument (f(3))
_LABEL_DIGITS = re.compile(r"_\{[^{}]*\}|_\w|(?<![a-zA-Z])[a-zA-Z]\s*\(\s*-?\d+\s*\)")
_MATRIX = re.compile(r"^\\begin\{([pbBvV]?matrix)\}(.*)\\end\{\1\}$", re.S)
_PLUS_MINUS = re.compile(r"\\(?:pm|mp)(?![a-zA-Z])")
_IN = re.compile(r"^\s*[a-zA-Z]\s*\\in\s*")
_SPACE = re.compile(r"\s+")
_CONDITION_SEP = re.compile(r"\s*,\s*|\s+and\s+")
_ALL_REALS = re.compile(r"^\s*[a-zA-Z]\s*\\in\s*\(-\\infty\s*,\s*\\infty\s*\)\s*$")
_SET_BUILDER = re.compile(r"^\{\s*[a-zA-Z](?:_\w)?\s*(?:\\in\s*[^|:{}]*?)?\s*(?:\||\\mid|:)\s*(.+)\}$", re.S)
_RANGE_WORDS = re.compile(r"^(?:from\s+)?(\S+)\s+(?:to|through|thru)\s+(\S+)$|^between\s+(\S+)\s+and\s+(\S+)$", re.I)
_STRUCTURE = re.compile(
    r"[,;=<>:!]|\s(?:or|and|to|through|thru|U)\s|\\(?:cup|pm|mp|in|lor|setminus|backslash|smallsetminus)(?![a-zA-Z])"
    r"|^between\s"
)
_FUNCTION_CALL = re.compile(r"\\(?:" + "|".join(sorted(_FUNCS)) + r")(?![a-zA-Z])")
_UNIT = re.compile(r"^(.*?)\s*\\unit\{([^{}]*)\}$", re.S)
_NUMBER_WORDS = re.compile(r"^(-?\d+(?:\.\d+)?)\s+([a-zA-Z][a-zA-Z\s'-]*)$", re.ASCII)
MULTIPLIERS = {"hundred": 100, "thousand": 10**3, "million": 10**6, "billion": 10**9, "trillion": 10**12,
               "dozen": 12}
POWERS = {"squared": 2, "cubed": 3}
# shares written in units smaller than a percent: the size of one in percent
PERCENT_SCALES = {
    **dict.fromkeys(("basis point", "basis points", "bp", "bps", "bip", "bips", "permyriad"), Fraction(1, 100)),
    **dict.fromkeys(("per mille", "per mil", "per mill", "permille", "permil", "per thousand"), Fraction(1, 10)),
    **dict.fromkeys(("ppm", "parts per million"), Fraction(1, 10**4)),
    **dict.fromkeys(("ppb", "parts per billion"), Fraction(1, 10**7)),
}
# words after a number that change, qualify or withdraw it: such an answer is text, never the bare number
CHANGERS = {
    "wrong", "incorrect", "false", "not", "no", "never", "invalid", "impossible", "undefined", "unknown",
    "approximately", "approx", "about", "around", "roughly", "nearly", "almost", "circa", "over", "under",
    "above", "below", "less", "more", "fewer", "greater", "larger", "smaller", "least", "most", "than", "or",
    "and", "plus", "minus", "times", "divided", "over", "to", "power", "root", "roots", "half", "halves",
    "third", "thirds", "quarter", "quarters", "fourths", "fifths", "tenths", "hundredths", "thousandths", "off",
    "maybe", "perhaps", "probably", "possibly", "if", "unless", "except", "but", "then", "is", "isn't", "was",
    "wait", "hmm", "percent", "per", "factorial", "mod", "modulo", "plus", "remainder", "ish", "hundredth",
    "squared", "cubed", "hundred", "thousand", "million", "billion", "trillion", "dozen", "degrees", "radians",
    # words that invert or negate the value, or make it a rate or a rank
    "reciprocal", "inverse", "inverted", "negative", "negated", "opposite", "short", "deficit", "loss", "debt",
    "owed", "beneath", "fold", "percentile",
}


Parse = Callable[[str], AnswerValue]  # parse_answer one level deeper, for the parts of a structure


def parse_answer(s: str, *, units: bool = True, _depth: int = 0, _normalized: bool = False) -> AnswerValue:
    """The answer value of ``s`` (values.py); raises ParseError / TooComplex."""
    if _depth > 8:
        raise TooComplex("too_deep")
    if len(s) > MAX_ANSWER_CHARS:
        raise TooComplex("answer_too_long")
    if not _normalized:
        s = normalize(s, units=units)
    elif units and _depth > 0 and "\\unit" not in s and s[-1:].isalpha():
        s = mark_trailing(s)  # a part of a list: "35 cm" in {35 cm, 4}
    s = s.strip()
    if not s:
        raise ParseError("empty")
    plain = _PLAIN_NUMBER.fullmatch(s)
    if plain:  # the commonest answer: skip the tokenizer, build the tree the parser would build
        node = number_node(plain.group(2))
        return Expression(("neg", node) if plain.group(1) else node)

    def rec(x: str) -> AnswerValue:
        return parse_answer(x, units=units, _depth=_depth + 1, _normalized=True)

    if s[0].isalpha():  # "one hundred and five": before "and" splits it into a list
        worded = number_in_words(s)
        if worded is not None:
            return Expression(("num", worded) if worded >= 0 else ("neg", ("num", -worded)))
    if s[0].isdigit() and _COMPOUND.fullmatch(s):  # "3 hours and 15 minutes": before "and" splits it
        compound = _compound_quantity(s)
        if compound is not None:
            return compound

    if "\\begin{" in s and s.count("\\begin{") > 1 or s[:1].isdigit() and "matrix}" in s:
        product = _matrix_expression(s)
        if product is not None:
            return product
    m = _MATRIX.match(s)
    if m:
        matrix = _matrix(m.group(2))
        return _determinant(matrix) if m.group(1) == "vmatrix" else matrix
    # every structure below needs one of a few characters or words: a plain expression skips them all
    if "\\approx" in s:
        return _approximated(s, rec)
    if _STRUCTURE.search(s) or s[0] in "([{":
        value = _joined(s, rec)
        if value is None:
            s = _IN.sub("", s)  # "x \in [0, 1]": the set after it
            if not s.strip():
                raise ParseError("empty")
            value = _structure(s, rec)
        if value is not None:
            return value
    return _quantity_or_expression(s, rec)


def _matrix(body: str) -> Matrix:
    rows = [r for r in re.split(r"\\\\", body) if r.strip()]
    if not rows or len(rows) > MAX_ITEMS:
        raise ParseError("unparseable")
    table = tuple(tuple(parse_expr(c.strip()) for c in r.split("&")) for r in rows)
    if len({len(r) for r in table}) != 1:
        raise ParseError("unparseable")
    return Matrix(table)


def _approximated(s: str, rec: Parse) -> AnswerValue:
    """``x = 2/3 \\approx 0.67``: the exact value, when the approximation rounds it (to the approximation's
    last digit); an approximation that contradicts it (``x = 1/3 \\approx 11``) makes the answer text that
    matches no value."""
    left, _, right = s.partition("\\approx")
    value = rec(left)
    approx = _PLAIN_NUMBER.fullmatch(right.strip())
    exact = value.sides[-1] if isinstance(value, Equation) else value
    if approx is None or not isinstance(exact, Expression):
        return value
    try:
        x = evaluate(exact.tree, {})
    except (NotNumeric, TooComplex):
        return value
    digits = len(approx.group(2).partition(".")[2])
    written = float(approx.group(0))
    if x.imag == 0 and abs(x.real - written) <= 0.5 * 10.0 ** -digits * (1 + 1e-9) + 1e-12 * abs(written):
        return value
    return Text(text_key(s))


def _joined(s: str, rec: Parse) -> AnswerValue | None:
    """A set-builder, a range in words, or parts joined by "or", by ";" / "and", or by \\cup; None when ``s``
    is none of them."""
    builder = _SET_BUILDER.match(s) if s[0] == "{" and _wrapped(s) else None
    if builder:  # {x | -1 < x < 1}: the solution set of the condition
        return _conditions(split_top(builder.group(1), _CONDITION_SEP), rec)
    words = _RANGE_WORDS.match(s)
    if words:  # "2 to 7", "between 2 and 7": the closed range
        lo, hi = (words.group(1), words.group(2)) if words.group(1) else (words.group(3), words.group(4))
        return IntegerRange(parse_expr(lo), parse_expr(hi))
    parts = split_top(s, _OR)
    if len(parts) > 1:  # a list among the alternatives ("21, 16 or 11") offers each of its values
        values = [rec(p) for p in parts]
        return Alternatives(tuple(x for v in values for x in (v.items if isinstance(v, FiniteSet) else (v,))))
    parts = split_top(s, _LIST_SEP)
    if len(parts) > 1 and all("=" in p and "," in p for p in parts):  # p=5, q=2; p=7, q=2: a list of points
        return FiniteSet(tuple(dict.fromkeys(rec(p) for p in parts)))
    if len(parts) > 1:
        if all(_REL.search(p) for p in parts) and " and " in s:  # x > -1 and x < 1: both hold
            return _conditions(parts, rec)
        # "2, 3 and 5": the commas inside the parts separate items too
        return FiniteSet(_items([q for p in parts for q in split_top(p, _COMMA)], rec))
    parts = split_top(s, _SET_MINUS)
    if len(parts) == 2:  # \mathbb{R} \setminus \{0\}: the set without those points
        return _without_points(rec(parts[0]), rec(parts[1]))
    parts = split_top(s, _CUP)
    if len(parts) > 1:
        vals = [rec(p) for p in parts]
        if all(p.strip().startswith("{") for p in parts):  # \{2\} \cup \{5\}: the set of their points
            return FiniteSet(tuple(x for v in vals for x in (v.items if isinstance(v, FiniteSet) else (v,))))
        return IntervalUnion(tuple(_as_interval(v) for v in vals))
    return None


_MATRIX_ENV = re.compile(r"\\begin\{([pbB]?matrix)\}(.*?)\\end\{\1\}", re.S)
_MATRIX_TOKEN = re.compile(r"\s*(?:@(\d+)|(\d+(?:\.\d+)?)|(\+|-|\*|\\cdot|\\times))")
MAX_MATRIX_SIDE = 8


def _matrix_expression(s: str) -> Matrix | None:
    """Sums, differences and products of matrices and numbers (``A + B``, ``A B``, ``2 A - B``) as the matrix
    they evaluate to (cells are trees, compared as expressions); None when ``s`` is no such expression."""
    envs = list(_MATRIX_ENV.finditer(s))
    if not envs:
        return None
    text, matrices, last = "", [], 0
    for k, m in enumerate(envs):
        text += s[last : m.start()] + f" @{k} "
        matrices.append(_matrix(m.group(2)))
        last = m.end()
    text += s[last:]
    tokens, pos = [], 0
    while pos < len(text.rstrip()):
        t = _MATRIX_TOKEN.match(text, pos)
        if t is None:
            return None
        tokens.append(t.groups())
        pos = t.end()
    if any(len(m.rows) > MAX_MATRIX_SIDE or len(m.rows[0]) > MAX_MATRIX_SIDE for m in matrices):
        return None
    total: list[list[Tree]] | None = None
    i, sign = 0, 1
    while i < len(tokens):
        if tokens[i][2] in ("+", "-"):
            sign = -1 if tokens[i][2] == "-" else 1
            i += 1
        scalar: Tree = ("num", Fraction(sign))
        product: list[list[Tree]] | None = None
        while i < len(tokens) and tokens[i][2] not in ("+", "-"):
            index, number, op = tokens[i]
            if index is not None:
                cells = [list(r) for r in matrices[int(index)].rows]
                product = cells if product is None else _matrix_product(product, cells)
                if product is None:
                    return None
            elif number is not None:
                scalar = ("mul", (scalar, number_node(number)))
            i += 1
        if product is None:
            return None
        term = [[("mul", (scalar, c)) for c in r] for r in product]
        if total is not None and [len(r) for r in total] != [len(r) for r in term]:
            return None
        total = term if total is None else [[("add", (a, b)) for a, b in zip(ra, rb)] for ra, rb in zip(total, term)]
    if total is None or len(envs) == 1 and len(tokens) == 1:
        return None
    return Matrix(tuple(tuple(r) for r in total))


def _matrix_product(a: list[list[Tree]], b: list[list[Tree]]) -> list[list[Tree]] | None:
    if len(a[0]) != len(b):
        return None
    return [[("add", tuple(("mul", (a[i][k], b[k][j])) for k in range(len(b)))) for j in range(len(b[0]))]
            for i in range(len(a))]


MAX_DETERMINANT = 4  # the size up to which a determinant (vmatrix) is expanded


def _determinant(m: Matrix) -> AnswerValue:
    """``\\begin{vmatrix}...\\end{vmatrix}``: the determinant's expression (cofactor expansion)."""
    n = len(m.rows)
    if any(len(r) != n for r in m.rows) or n > MAX_DETERMINANT:
        raise ParseError("unparseable")

    def det(rows: tuple[tuple[Tree, ...], ...]) -> Tree:
        if len(rows) == 1:
            return rows[0][0]
        terms = []
        for j, cell in enumerate(rows[0]):
            minor = tuple(r[:j] + r[j + 1 :] for r in rows[1:])
            term = ("mul", (cell, det(minor)))
            terms.append(term if j % 2 == 0 else ("neg", term))
        return ("add", tuple(terms))

    return Expression(det(m.rows))


def _structure(s: str, rec: Parse) -> AnswerValue | None:
    """A list or bracketed value, an inequality, an equation or a ratio; None when ``s`` is none of them."""
    value = _listed_or_bracketed(s, rec)
    if value is not None:
        return value
    rel = split_top(s, _REL)
    if len(rel) > 1:
        return _inequality(s)
    eq = split_top(s, _EQ)
    if len(eq) > 1:
        return _equation(eq, rec)
    ratio = split_top(s, _RATIO)
    if len(ratio) > 1:
        clock = _CLOCK.match(s)
        if clock and (clock.group(2).startswith("0") or clock.group(3) or clock.group(4)):
            return _clock_time(clock)
        return Ratio(tuple(parse_expr(p) for p in ratio))
    return None


# a time of day; "2:00", "10:05", "3:15 pm" and "14:30:00" are times, "10:30" may be a ratio (equivalence.py)
_CLOCK = re.compile(r"^([01]?\d|2[0-4]):([0-5]\d)(?::([0-5]\d))?\s*([ap]\.?\s?m\.?)?$", re.I)


def _clock_time(m: re.Match) -> ClockTime:
    hours = int(m.group(1))
    meridiem = m.group(4)
    if meridiem:
        if hours > 12:
            raise ParseError("unparseable")
        hours = hours % 12 + (12 if meridiem[0].lower() == "p" else 0)
    known = bool(meridiem) or hours == 0 or hours > 12
    return ClockTime(hours * 3600 + int(m.group(2)) * 60 + int(m.group(3) or 0), known)


def _listed_or_bracketed(s: str, rec: Parse) -> AnswerValue | None:
    """A bare list (``1, 2``), ``a \\pm b``, a run of bracketed groups, or one bracketed value (a set, an
    interval, a tuple); None for anything else."""
    parts = split_top(s, _COMMA)
    if len(parts) > MAX_ITEMS:
        raise TooComplex("too_many_items")
    if len(parts) > 1:
        return FiniteSet(_items(parts, rec))
    pm = _PLUS_MINUS.findall(s) if "\\pm" in s or "\\mp" in s else ()
    if len(pm) == 1:  # a \pm b: both values
        return FiniteSet(_items([s], rec))
    groups = split_top(s, _SPACE) if s[0] in "([{" and s[-1] in ")]}" and " " in s else [s]
    if len(groups) > 1 and all(g[0] in "([{" and _wrapped(g) for g in groups):  # (1,2) \quad (2,1): a list
        return FiniteSet(_items(groups, rec))
    if not (s[0] in "([{" and s[-1] in ")]}" and _wrapped(s)):
        return None
    inner = s[1:-1]
    items = split_top(inner, _COMMA)
    if len(items) == 1 and ";" in inner:  # (0; -2; 6): coordinates separated by semicolons
        items = split_top(inner, _SEMICOLON)
    if len(items) > MAX_ITEMS:
        raise TooComplex("too_many_items")
    if s[0] == "{" and s[-1] == "}":
        if len(items) > 1:  # a set: an element written twice is there once
            return FiniteSet(tuple(dict.fromkeys(_items(items, rec))))
        return rec(inner) if inner.strip() else FiniteSet(())
    if len(items) == 2 and (s[0] == "[" or s[-1] == "]") and s[0] != "{" and s[-1] != "}":
        lo, hi = (_tree_of(rec(p)) for p in items)
        return Interval(s[0] == "[", lo, hi, s[-1] == "]")
    if len(items) > 1:
        if s[0] == "(" and s[-1] == ")" or s[0] == "[" and s[-1] == "]":
            return OrderedTuple(tuple(rec(p) for p in items))
        raise ParseError("unparseable")
    return None


def _quantity_or_expression(s: str, rec: Parse) -> AnswerValue:
    """A value with a unit, an expression (with a percent sign), a number with words, a number in words, or
    text."""
    unit = _UNIT.match(s) if "\\unit{" in s else None
    if unit and unit.group(2) == "deg" and (_FUNCTION_CALL.search(unit.group(1)) or "\\unit{" in unit.group(1)):
        unit = None  # \sin 30^\circ, 30^\circ + 15^\circ: the degree signs belong to the terms
    if unit:
        value = rec(unit.group(1)) if unit.group(1).strip() else None
        if not isinstance(value, Expression) or value.percent:
            raise ParseError("unparseable")
        return Quantity(value.tree, unit.group(2))
    if "\\unit{deg}" in s:  # a degree sign inside an expression (\sin 30^\circ): a factor of pi/180, written
        s = s.replace("\\unit{deg}", " \\frac{\\pi}{180}")  # next to its number so it joins a function's argument

    pct = False
    if s.endswith("%"):
        pct, s = True, s[:-1].strip()
    try:
        return Expression(parse_expr(s), pct)
    except ParseError as exc:
        if exc.args and exc.args[0] == "text" and not pct:
            worded = number_in_words(s)
            if worded is not None:
                return Expression(("num", worded) if worded >= 0 else ("neg", ("num", -worded)))
            return _number_with_words(s) or Text(text_key(s))
        raise


_COMPOUND_PART = re.compile(r"\s*(?:and\s+|,\s*)?(\d+(?:\.\d+)?)\s*(?:\\unit\{([^{}]+)\}|([a-zA-Z]+))")
_COMPOUND = re.compile(r"(?:" + _COMPOUND_PART.pattern + r"){2,6}\s*")


def _compound_quantity(s: str) -> Quantity | None:
    """``2 m 50 cm``, ``1 hour and 30 minutes``: one quantity in the smallest of its units, None unless every
    part has a unit of one dimension (temperatures and angles in degrees never add up this way)."""
    values, names = [], []
    for m in _COMPOUND_PART.finditer(s):
        unit = m.group(2) or canonical(m.group(3))
        if not unit or unit not in SIZES or unit in TEMPERATURE_ZERO or unit == "deg":
            return None
        values.append(Fraction(m.group(1)) if "." in m.group(1) else Fraction(int(m.group(1))))
        names.append(unit)
    if len({SIZES[u][0] for u in names}) != 1 or len(set(names)) != len(names):
        return None
    smallest = min(names, key=lambda u: SIZES[u][1])
    total = sum(v * SIZES[u][1] / SIZES[smallest][1] for v, u in zip(values, names))
    return Quantity(("num", Fraction(total)), smallest)


def _without_points(base: AnswerValue, removed: AnswerValue) -> IntervalUnion:
    """An interval or union of intervals without a finite set of points (rational ones)."""
    points = removed.items if isinstance(removed, FiniteSet) else (removed,)
    if isinstance(base, OrderedTuple):  # (a, b): the open interval
        base = _as_interval(base)
    if not isinstance(base, (Interval, IntervalUnion)) or not points:
        raise ParseError("unparseable")
    parts = [base] if isinstance(base, Interval) else list(base.parts)
    for point in points:
        if not isinstance(point, Expression) or point.percent:
            raise ParseError("unparseable")
        at = _bound(point.tree)
        split: list[AnswerValue] = []
        for iv in parts:
            if not isinstance(iv, Interval):
                raise ParseError("unparseable")
            lo, hi = _bound(iv.lo), _bound(iv.hi)
            if lo < at < hi:
                split += [Interval(iv.lo_closed, iv.lo, point.tree, False), Interval(False, point.tree, iv.hi, iv.hi_closed)]
            elif at == lo and iv.lo_closed or at == hi and iv.hi_closed:
                split.append(Interval(iv.lo_closed and at != lo, iv.lo, iv.hi, iv.hi_closed and at != hi))
            else:
                split.append(iv)
        parts = split
    return IntervalUnion(tuple(parts))


def _items(parts: list[str], rec: Parse) -> tuple[AnswerValue, ...]:
    """The values of a list's parts: ``a \\pm b`` gives two, ``1, 2, \\ldots, 9`` is written out."""
    if any(not p.strip() for p in parts):
        raise ParseError("unparseable")
    out: list[AnswerValue | None] = []
    for p in parts:
        if p.strip() == "...":
            out.append(None)
            continue
        pm = _PLUS_MINUS.findall(p) if "\\pm" in p or "\\mp" in p else ()
        if len(pm) == 1:
            plus, minus = ("+", "-") if pm[0] == "\\pm" else ("-", "+")
            out.extend(rec(_PLUS_MINUS.sub(sign, p)) for sign in (plus, minus))
        else:
            out.append(rec(p))
    if None in out:
        out = _written_out(out)  # type: ignore[assignment]
    if len(out) > MAX_ITEMS:
        raise TooComplex("too_many_items")
    return tuple(dict.fromkeys(out))  # type: ignore[arg-type]  # a value listed twice is one solution


def integer_tree(n: int) -> Tree:
    """The tree of an integer literal (a negative one is negated)."""
    return ("neg", ("num", Fraction(-n))) if n < 0 else ("num", Fraction(n))


def _int_of(v: AnswerValue | None) -> int | None:
    if not isinstance(v, Expression) or v.percent:
        return None
    a, sign = v.tree, 1
    if a[0] == "neg":
        a, sign = a[1], -1
    if a[0] == "num" and a[1].denominator == 1:
        return sign * int(a[1])
    return None


def _written_out(items: list[AnswerValue | None]) -> list[AnswerValue]:
    """``a, b, ..., z`` (integers, one ellipsis) as every term of the arithmetic progression."""
    k = items.index(None)
    before, after = [_int_of(v) for v in items[:k]], [_int_of(v) for v in items[k + 1 :]]
    if items.count(None) != 1 or not before or len(after) != 1 or None in before or None in after:
        raise ParseError("unparseable")
    step = before[-1] - before[-2] if len(before) > 1 else (1 if after[0] >= before[-1] else -1)  # type: ignore[operator]
    if step == 0 or (after[0] - before[-1]) % step or (after[0] - before[-1]) // step < 0:  # type: ignore[operator]
        raise ParseError("unparseable")
    count = (after[0] - before[-1]) // step  # type: ignore[operator]
    if len(before) + count > MAX_ITEMS:
        raise TooComplex("too_many_items")
    values = before + [before[-1] + step * j for j in range(1, count + 1)]  # type: ignore[operator]
    return [Expression(integer_tree(n)) for n in values]  # type: ignore[arg-type]


def _equation(sides: list[str], rec: Parse) -> Equation:
    """``a = b = ... = z``: the values of its sides (None for a side only a label can be), the function
    ``f(x)`` it defines, and which sides read as labels (values.Equation)."""
    if any(not p.strip() for p in sides) or len(sides) > MAX_ITEMS:
        raise ParseError("unparseable")
    fn = _FUNCTION_DEF.match(sides[0])
    values: list[AnswerValue | None] = []
    for p in sides[:-1]:
        try:
            values.append(rec(p))
        except ParseError:
            values.append(None)
    values.append(rec(sides[-1]))
    labels = tuple(not re.search(r"\d", _LABEL_DIGITS.sub("", p)) for p in sides[:-1])
    function = (fn.group(1), tuple(x.strip() for x in fn.group(2).split(","))) if fn else None
    return Equation(tuple(values), function, labels)


def _number_with_words(s: str) -> Expression | None:
    """``3 thousand`` = 3000, ``5 squared`` = 25, ``12 cookies`` = 12; None when a word changes or withdraws
    the number in a way not read here ("5 wrong", "about 5", "5 or more")."""
    m = _NUMBER_WORDS.fullmatch(s)
    if m is None:
        return None
    number = number_node(m.group(1).lstrip("-"))
    if m.group(1).startswith("-"):
        number = ("neg", number)
    words = m.group(2).lower().replace("-", " ").split()
    first, rest = words[0], words[1:]
    if any(w in CHANGERS for w in rest) or any(w in _FUNCS or w == "pi" for w in words):
        return None
    if first in MULTIPLIERS:
        return Expression(("mul", (number, ("num", Fraction(MULTIPLIERS[first])))))
    if first in POWERS and not rest:
        return Expression(("pow", number, ("num", Fraction(POWERS[first]))))
    if first == "percent" and not rest:
        return Expression(number, True)
    scale = PERCENT_SCALES.get(" ".join(words))
    if scale is not None:  # 250 basis points = 2.5%: a unit of a different size, never dropped as a noun
        return Expression(("mul", (number, ("num", scale))), True)
    if first in CHANGERS:
        return None
    return Expression(number, noun=" ".join(words))


def text_key(s: str) -> str:
    s = s.replace("\\", " ")
    s = re.sub(r"[{}]", "", s)
    return " ".join(s.casefold().split()).strip(" .!,;:")


def _tree_of(v: AnswerValue) -> Tree:
    """The tree of a plain expression (an interval's end); ParseError for any other value."""
    if isinstance(v, Expression) and not v.percent:
        return v.tree
    raise ParseError("unparseable")


def _as_interval(v: AnswerValue) -> AnswerValue:
    """A part of a union as an interval ((a, b) is open; a number is a point); a set of points stays."""
    if isinstance(v, (Interval, FiniteSet)):
        return v
    if isinstance(v, OrderedTuple) and len(v.items) == 2:  # (a, b) read as an open interval in a union
        return Interval(False, _tree_of(v.items[0]), _tree_of(v.items[1]), False)
    if isinstance(v, Expression):
        return Interval(True, v.tree, v.tree, True)
    raise ParseError("unparseable")


def _conditions(parts: list[str], rec: Parse) -> AnswerValue:
    """The set of reals where every condition holds (a set-builder's "x \\in \\mathbb{R}" adds nothing)."""
    values = [rec(p) for p in parts if not _ALL_REALS.match(p)]
    if not values:
        raise ParseError("unparseable")
    sets = [_solution_set(v) for v in values]
    if len(sets) == 1:
        return sets[0]
    if any(not isinstance(v, Interval) for v in sets):
        raise ParseError("unparseable")
    return _intersection(sets)  # type: ignore[arg-type]


def _bound(a: Tree) -> Fraction | float:
    """A bound's value for ordering: +-inf as floats, others as exact rationals."""
    if a == INF:
        return float("inf")
    if a == NEG_INF:
        return float("-inf")
    try:
        return exact_value(a)
    except NotRational:
        raise ParseError("unparseable") from None


def _intersection(intervals: list[Interval]) -> Interval:
    """The interval common to all of ``intervals`` (rational or infinite bounds)."""
    first = intervals[0]
    lc, lo, hi, hc = first.lo_closed, first.lo, first.hi, first.hi_closed
    for iv in intervals[1:]:
        a, b = _bound(lo), _bound(iv.lo)
        if b > a or (b == a and not iv.lo_closed):
            lo, lc = iv.lo, iv.lo_closed
        a, b = _bound(hi), _bound(iv.hi)
        if b < a or (b == a and not iv.hi_closed):
            hi, hc = iv.hi, iv.hi_closed
    if _bound(lo) > _bound(hi):
        raise ParseError("unparseable")
    return Interval(lc, lo, hi, hc)


def _solution_set(v: AnswerValue) -> AnswerValue:
    """A condition's value as a set of reals: an interval or a union ("x < -1 or x > 1" is a union)."""
    if isinstance(v, (Interval, IntervalUnion)):
        return v
    if isinstance(v, Alternatives) and all(isinstance(x, Interval) for x in v.items):
        return IntervalUnion(v.items)
    raise ParseError("unparseable")


def _linear(a: Tree) -> tuple[str, Fraction, Fraction] | None:
    """(x, c, d) when ``a`` is c*x + d with rational c != 0 and d, else None."""
    try:
        p = polynomial_form(a)
    except (NotPolynomial, TooComplex, ArithmeticError):
        return None
    var = [m for m in p if m]
    if len(var) != 1 or len(var[0]) != 1 or var[0][0][1] != 1 or var[0][0][0].startswith("\\"):
        return None
    return var[0][0][0], p[var[0]], p.get((), Fraction(0))


_FLIP = {"<": ">", ">": "<", "<=": ">=", ">=": "<="}


def _bounds(op: str, bound: Tree) -> Interval:
    """The interval of ``x op bound``."""
    if op in ("<", "<="):
        return Interval(False, NEG_INF, bound, op == "<=")
    return Interval(op == ">=", bound, INF, False)


def _absolute(inner: Tree, op: str, bound: Tree) -> AnswerValue:
    """``|c*x + d| op bound`` as an interval (< and <=) or a union of two rays (> and >=)."""
    lin = _linear(inner)
    try:
        r = exact_value(bound)
    except NotRational:
        raise ParseError("unparseable") from None
    if lin is None or r < 0:
        raise ParseError("unparseable")
    _, c, d = lin
    lo, hi = sorted(((-r - d) / c, (r - d) / c))
    closed = op in ("<=", ">=")
    if op in ("<", "<="):
        return Interval(closed, ("num", lo), ("num", hi), closed)
    return IntervalUnion((Interval(False, NEG_INF, ("num", lo), closed), Interval(closed, ("num", hi), INF, False)))


def _absolute_between(inner: Tree, lo: Tree, o1: str, hi: Tree, o2: str) -> AnswerValue:
    """``lo o1 |c x + d| o2 hi`` (o1, o2 among < and <=) as the union of the two intervals it describes."""
    outer = _absolute(inner, o2, hi)
    try:
        low = exact_value(lo)
    except NotRational:
        raise ParseError("unparseable") from None
    if low < 0 or (low == 0 and o1 == "<="):
        return outer
    gap = _absolute(inner, "<" if o1 == "<=" else "<=", lo)  # the values excluded in the middle
    if not isinstance(outer, Interval) or not isinstance(gap, Interval):
        raise ParseError("unparseable")
    return IntervalUnion((Interval(outer.lo_closed, outer.lo, gap.lo, not gap.lo_closed),
                          Interval(not gap.hi_closed, gap.hi, outer.hi, outer.hi_closed)))


def _inequality(s: str) -> AnswerValue:
    """``a < x <= b`` / ``x > 2`` / ``2 >= x`` / ``-x > -1`` / ``0 < 2x+1 < 3`` / ``x != 1`` as a set of reals."""
    ops: list[str] = []
    pieces = [p.strip() for p in split_top(s, _REL, ops)]
    if len(pieces) != len(ops) + 1 or any(not p for p in pieces):
        raise ParseError("unparseable")
    if "!=" in ops:
        if ops != ["!="] or not _VAR.match(pieces[0]):
            raise ParseError("unparseable")
        b = parse_expr(pieces[1])
        return IntervalUnion((Interval(False, NEG_INF, b, False), Interval(False, b, INF, False)))
    if len(ops) == 1:
        return _one_sided(pieces[0], ops[0], pieces[1])
    if len(ops) == 2 and ops[0][0] == ops[1][0]:
        return _two_sided(pieces, ops)
    raise ParseError("unparseable")


def _one_sided(a: str, op: str, b: str) -> AnswerValue:
    """``x op b``, ``a op x``, ``|c x + d| op b`` or ``c x + d op b``."""
    if _VAR.match(a) and not _VAR.match(b):
        return _bounds(op, parse_expr(b))
    if _VAR.match(b) and not _VAR.match(a):
        return _bounds(_FLIP[op], parse_expr(a))
    if _VAR.match(a):
        return _bounds(op, parse_expr(b))
    left = parse_expr(a)
    if left[0] == "abs":
        return _absolute(left[1], op, parse_expr(b))
    lin = _linear(("add", (left, ("neg", parse_expr(b)))))  # c*x + d op 0
    if lin is None:
        raise ParseError("unparseable")
    _, c, d = lin
    return _bounds(op if c > 0 else _FLIP[op], ("num", -d / c))


def _two_sided(pieces: list[str], ops: list[str]) -> AnswerValue:
    """``lo < x <= hi`` (or ``hi > x >= lo``; the middle may be c x + d)."""
    lo, hi = parse_expr(pieces[0]), parse_expr(pieces[2])
    o1, o2 = ops
    if o1[0] == ">":
        lo, hi, o1, o2 = hi, lo, _FLIP[o2], _FLIP[o1]
    middle = parse_expr(pieces[1]) if not _VAR.match(pieces[1]) else None
    if middle is not None and middle[0] == "abs":  # 1 <= |z| <= 3/2: two intervals
        return _absolute_between(middle[1], lo, o1, hi, o2)
    if middle is not None:  # lo < c*x + d < hi
        lin = _linear(middle)
        if lin is None:
            raise ParseError("unparseable")
        _, c, d = lin
        try:
            lo, hi = ("num", (exact_value(lo) - d) / c), ("num", (exact_value(hi) - d) / c)
        except NotRational:
            raise ParseError("unparseable") from None
        if c < 0:
            lo, hi, o1, o2 = hi, lo, o2, o1
    return Interval(o1 == "<=", lo, hi, o2 == "<=")


__all__ = ["INF", "NEG_INF", "ParseError", "TooComplex", "is_multi", "normalize", "parse_answer", "parse_expr",
           "split_top", "text_key"]
