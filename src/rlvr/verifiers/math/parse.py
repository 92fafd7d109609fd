"""Parse a normalised answer string (normalize.py) into a small structure of expression trees.

Everything here is our own code and runs inline: no SymPy. Expressions become plain tuples (an AST) that the
evaluators in equivalence.py read with hard guards, and that symbolic.py turns into SymPy only inside a
supervised worker.

AST nodes::

    ("num", Fraction)      ("sym", "x_1")         ("const", "pi" | "e" | "i" | "inf")
    ("add", (a, b, ...))   ("mul", (a, b, ...))   ("neg", a)      ("div", a, b)     ("pow", a, b)
    ("fn", name, a)        ("log", base, a)       ("fact", a)     ("root", a, n)    ("abs", a)

Answer values::

    ("expr", ast, percent: bool)    ("set", [values])         ("tuple", [values])       ("or", [values])
    ("interval", lo_closed, lo, hi, hi_closed)                  ("union", [intervals])    ("range", lo, hi)
    ("eq", [side values], function, labels)  (see _equation)    ("ratio", [ast])          ("matrix", [[ast]])
    ("qty", ast, unit)  (units.py)                              ("text", str)
"""

from __future__ import annotations

import re
from fractions import Fraction
from typing import Any

from rlvr.verifiers.math.normalize import FUNCTION_NAMES as _FUNCS
from rlvr.verifiers.math.normalize import PLAIN_NUMBER as _PLAIN_NUMBER
from rlvr.verifiers.math.normalize import normalize

MAX_ANSWER_CHARS = 1500  # longer answers are "too_complex"
MAX_DEPTH = 60  # nesting depth of the expression grammar
MAX_NODES = 3000
MAX_DIGITS = 500  # digits in one number literal
MAX_ITEMS = 64  # elements in a set/tuple/matrix


class ParseError(Exception):
    """The text is not an expression we can read (reason in args[0]: "text", "unparseable")."""


class TooComplex(Exception):
    """Past a guard (length, depth, exponent, factorial ...): the answer is "undecidable", reason "too_complex"."""


# ------------------------------------------------------------------------------------------------ tokenizer

_GREEK = {
    "alpha", "beta", "gamma", "delta", "epsilon", "varepsilon", "zeta", "eta", "theta", "vartheta", "iota",
    "kappa", "lambda", "mu", "nu", "xi", "rho", "sigma", "tau", "upsilon", "phi", "varphi", "chi", "psi", "omega",
    "Gamma", "Delta", "Theta", "Lambda", "Xi", "Sigma", "Phi", "Psi", "Omega",
}
_TOKEN = re.compile(
    r"\s*(?:(?P<num>\d+\.?\d*|\.\d+)|(?P<cmd>\\[a-zA-Z]+)|(?P<word>[a-zA-Z]+)|(?P<op><=|>=|!=|[-+*/^!()\[\]{}|,=<>_']))"
)


def tokenize(s: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    i, n = 0, len(s)
    while i < n:
        m = _TOKEN.match(s, i)
        if m is None or m.end() == i:
            if s[i:].strip() == "":
                break
            raise ParseError("unparseable")
        i = m.end()
        kind = m.lastgroup
        text = m.group(kind)
        if kind == "num":
            if len(text) > MAX_DIGITS:
                raise TooComplex("number_too_long")
            out.append(("num", text))
        elif kind == "cmd":
            name = text[1:]
            if name in ("cdot", "times", "ast"):
                out.append(("op", "*"))
            elif name == "div":
                out.append(("op", "/"))
            elif name in _FUNCS:
                out.append(("fn", name))
            elif name in ("pi", "infty"):
                out.append(("const", "inf" if name == "infty" else "pi"))
            elif name in _GREEK:
                out.append(("sym", name))
            elif name in ("frac", "sqrt", "cup", "in"):
                out.append(("cmd", name))
            else:
                raise ParseError("unparseable")
        elif kind == "word":
            if text in _FUNCS:
                out.append(("fn", text))
            elif text == "pi":
                out.append(("const", "pi"))
            elif len(text) <= 2:
                for ch in text:
                    out.append(("sym", ch))
            else:
                raise ParseError("text")
        else:
            out.append(("op", text))
    return out


# --------------------------------------------------------------------------------------------------- parser


def decimal_value(text: str) -> Fraction:
    """A number literal ("42", "-3.50", "4.", ".5") as an exact Fraction (built from ints: Fraction(str) is
    several times slower)."""
    sign, digits = (-1, text[1:]) if text.startswith("-") else (1, text)
    whole, _, frac = digits.partition(".")
    if not frac:
        return Fraction(sign * int(whole or "0"))
    return Fraction(sign * int((whole or "0") + frac), 10 ** len(frac))


def _num(text: str) -> tuple:
    """A number literal's node."""
    return ("num", decimal_value(text))


class _Parser:
    def __init__(self, tokens: list[tuple[str, str]]):
        self.t = tokens
        self.i = 0
        self.depth = 0
        self.nodes = 0
        self.in_abs = 0

    def peek(self, k: int = 0) -> tuple[str, str] | None:
        j = self.i + k
        return self.t[j] if j < len(self.t) else None

    def take(self) -> tuple[str, str]:
        tok = self.peek()
        if tok is None:
            raise ParseError("unparseable")
        self.i += 1
        return tok

    def expect(self, op: str) -> None:
        tok = self.take()
        if tok != ("op", op):
            raise ParseError("unparseable")

    def node(self, n: tuple) -> tuple:
        self.nodes += 1
        if self.nodes > MAX_NODES:
            raise TooComplex("too_many_nodes")
        return n

    def enter(self) -> None:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise TooComplex("too_deep")

    def parse(self) -> tuple:
        e = self.expr()
        if self.i != len(self.t):
            raise ParseError("unparseable")
        return e

    def expr(self) -> tuple:
        self.enter()
        terms = [self.term()]
        while True:
            tok = self.peek()
            if tok in (("op", "+"), ("op", "-")):
                self.i += 1
                t = self.term()
                terms.append(t if tok[1] == "+" else self.node(("neg", t)))
            else:
                break
        self.depth -= 1
        return terms[0] if len(terms) == 1 else self.node(("add", tuple(terms)))

    def _starts_atom(self, tok: tuple[str, str] | None) -> bool:
        if tok is None:
            return False
        kind, text = tok
        if kind in ("num", "sym", "const", "fn"):
            return True
        if kind == "cmd":
            return text in ("frac", "sqrt")
        if kind == "op":
            return text in ("(", "{") or (text == "|" and not self.in_abs)
        return False

    def term(self) -> tuple:
        factors = [self.unary()]
        while True:
            tok = self.peek()
            if tok in (("op", "*"), ("op", "/")):
                self.i += 1
                f = self.unary()
                factors.append(f if tok[1] == "*" else self.node(("div", ("num", Fraction(1)), f)))
            elif self._starts_atom(tok):
                prev = factors[-1]
                sign = prev[0] == "neg" and prev[1][0] == "num"
                if sign:
                    prev = prev[1]
                f = self.postfix()
                if (
                    tok == ("cmd", "frac")
                    and prev[0] == "num"
                    and prev[1].denominator == 1
                    and f[0] == "div"
                    and f[1][0] == "num"
                    and f[2][0] == "num"
                    and f[1][1].denominator == 1
                    and f[2][1].denominator == 1
                    and len(factors) == 1
                ):  # mixed number 3\frac{1}{2}
                    mixed = self.node(("add", (prev, f)))
                    factors[-1] = self.node(("neg", mixed)) if sign else mixed
                    continue
                prev = factors[-1]
                if prev[0] == "num" and f[0] == "num":
                    raise ParseError("unparseable")  # "2 3"
                factors.append(f)
            else:
                break
        if len(factors) == 1:
            return factors[0]
        # a*(1/b) -> div for readability of the tree
        return self.node(("mul", tuple(factors)))

    def unary(self) -> tuple:
        tok = self.peek()
        if tok in (("op", "-"), ("op", "+")):
            self.i += 1
            self.enter()
            u = self.unary()
            self.depth -= 1
            return self.node(("neg", u)) if tok[1] == "-" else u
        return self.postfix()

    def postfix(self) -> tuple:
        a = self.atom()
        while True:
            tok = self.peek()
            if tok == ("op", "^"):
                self.i += 1
                a = self.node(("pow", a, self.exponent()))
            elif tok == ("op", "!"):
                self.i += 1
                a = self.node(("fact", a))
            elif tok == ("op", "'"):
                raise ParseError("unparseable")
            else:
                return a

    def exponent(self) -> tuple:
        self.enter()
        tok = self.peek()
        if tok in (("op", "-"), ("op", "+")):
            self.i += 1
            e = self.exponent()
            self.depth -= 1
            return self.node(("neg", e)) if tok[1] == "-" else e
        a = self.atom()
        if self.peek() == ("op", "^"):
            self.i += 1
            a = self.node(("pow", a, self.exponent()))
        self.depth -= 1
        return a

    def group(self) -> tuple:
        """A {...} group, or a single atom (\\sqrt2, \\frac{1}2)."""
        if self.peek() == ("op", "{"):
            self.i += 1
            e = self.expr()
            self.expect("}")
            return e
        tok = self.peek()
        if tok is not None and tok[0] == "num":
            self.i += 1
            return self.node(_num(tok[1]))
        return self.atom()

    def atom(self) -> tuple:
        self.enter()
        try:
            return self._atom()
        finally:
            self.depth -= 1

    def _atom(self) -> tuple:
        kind, text = self.take()
        if kind == "num":
            return self.node(_num(text))
        if kind == "sym":
            name = text
            if self.peek() == ("op", "_"):
                self.i += 1
                if self.peek() == ("op", "{"):
                    self.i += 1
                    parts = []
                    while self.peek() not in (None, ("op", "}")):
                        parts.append(self.take()[1])
                    self.expect("}")
                    sub = "".join(parts)
                else:
                    sub = self.take()[1]
                name = f"{name}_{sub}"
            elif name == "e":
                return self.node(("const", "e"))
            elif name == "i":
                return self.node(("const", "i"))
            return self.node(("sym", name))
        if kind == "const":
            return self.node(("const", text))
        if kind == "op":
            if text == "(":
                e = self.expr()
                self.expect(")")
                return e
            if text == "{":
                e = self.expr()
                self.expect("}")
                return e
            if text == "|" and not self.in_abs:
                self.in_abs += 1
                e = self.expr()
                self.in_abs -= 1
                self.expect("|")
                return self.node(("abs", e))
            raise ParseError("unparseable")
        if kind == "cmd":
            if text == "frac":
                a = self.group()
                b = self.group()
                return self.node(("div", a, b))
            if text == "sqrt":
                n = None
                if self.peek() == ("op", "["):
                    self.i += 1
                    n = self.expr()
                    self.expect("]")
                a = self.group()
                return self.node(("root", a, n if n is not None else ("num", Fraction(2))))
            raise ParseError("unparseable")
        if kind == "fn":
            return self.function(text)
        raise ParseError("unparseable")

    def function(self, name: str) -> tuple:
        power = None
        base = None
        if name in ("log", "lg") and self.peek() == ("op", "_"):
            self.i += 1
            base = self.group()
        if self.peek() == ("op", "^"):
            self.i += 1
            power = self.exponent()
        if self.peek() == ("op", "("):
            self.i += 1
            arg = self.expr()
            self.expect(")")
        else:
            arg = self.postfix()
            while self._starts_atom(self.peek()) and self.peek()[0] != "fn":
                arg = self.node(("mul", (arg, self.postfix())))
        if name in ("log", "lg", "ln"):
            if base is None:
                base = ("num", Fraction(10)) if name == "lg" else ("const", "e")
            f = self.node(("log", base, arg))
        else:
            if power == ("neg", ("num", Fraction(1))) and name in ("sin", "cos", "tan"):
                return self.node(("fn", "arc" + name, arg))
            f = self.node(("fn", name, arg))
        return self.node(("pow", f, power)) if power is not None else f


def parse_expr(s: str) -> tuple:
    """The AST of one expression; raises ParseError / TooComplex."""
    if len(s) > MAX_ANSWER_CHARS:
        raise TooComplex("answer_too_long")
    tokens = tokenize(s)
    if not tokens:
        raise ParseError("unparseable")
    return _Parser(tokens).parse()


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
_OR = re.compile(r"\s+or\s+|\s*\\lor\s*")
_LIST_SEP = re.compile(r"\s*;\s*|\s*,?\s+and\s+")
_CUP = re.compile(r"\s*\\cup\s*|\s+U\s+")
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
_SET_BUILDER = re.compile(r"^\{\s*[a-zA-Z](?:_\w)?\s*(?:\\in\s*[^|:{}]*?)?\s*(?:\||\\mid|:)\s*(.+)\}$", re.S)
_RANGE_WORDS = re.compile(r"^(?:from\s+)?(\S+)\s+(?:to|through|thru)\s+(\S+)$|^between\s+(\S+)\s+and\s+(\S+)$", re.I)
_STRUCTURE = re.compile(r"[,;=<>:!]|\s(?:or|and|to|through|thru|U)\s|\\(?:cup|pm|mp|in|lor)(?![a-zA-Z])|^between\s")
_FUNCTION_CALL = re.compile(r"\\(?:" + "|".join(sorted(_FUNCS)) + r")(?![a-zA-Z])")
_UNIT = re.compile(r"^(.*?)\s*\\unit\{([^{}]*)\}$", re.S)
_NUMBER_WORDS = re.compile(r"^(-?\d+(?:\.\d+)?)\s+([a-zA-Z][a-zA-Z\s'-]*)$", re.ASCII)
MULTIPLIERS = {"hundred": 100, "thousand": 10**3, "million": 10**6, "billion": 10**9, "trillion": 10**12,
               "dozen": 12}
POWERS = {"squared": 2, "cubed": 3}
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
}
INF = ("const", "inf")
NEG_INF = ("neg", INF)


def parse_answer(s: str, *, units: bool = True, _depth: int = 0, _normalized: bool = False) -> tuple:
    """The answer value of ``s`` (see the module docstring); raises ParseError / TooComplex."""
    if _depth > 8:
        raise TooComplex("too_deep")
    if len(s) > MAX_ANSWER_CHARS:
        raise TooComplex("answer_too_long")
    if not _normalized:
        s = normalize(s, units=units)
    s = s.strip()
    if not s:
        raise ParseError("empty")
    plain = _PLAIN_NUMBER.fullmatch(s)
    if plain:  # the commonest answer: skip the tokenizer, build the tree the parser would build
        node = _num(plain.group(2))
        return ("expr", ("neg", node) if plain.group(1) else node, False)
    rec = lambda x: parse_answer(x, units=units, _depth=_depth + 1, _normalized=True)  # noqa: E731

    m = _MATRIX.match(s)
    if m:
        rows = [r for r in re.split(r"\\\\", m.group(2)) if r.strip()]
        if not rows or len(rows) > MAX_ITEMS:
            raise ParseError("unparseable")
        table = [[parse_expr(c.strip()) for c in r.split("&")] for r in rows]
        if len({len(r) for r in table}) != 1:
            raise ParseError("unparseable")
        return ("matrix", table)

    # every structure below needs one of a few characters or words: a plain expression skips them all
    if _STRUCTURE.search(s) or s[0] in "([{":
        builder = _SET_BUILDER.match(s) if s[0] == "{" and _wrapped(s) else None
        if builder:  # {x | -1 < x < 1}: the solution set of the condition
            return _solution_set(rec(builder.group(1)))
        words = _RANGE_WORDS.match(s)
        if words:  # "2 to 7", "between 2 and 7": the closed range
            lo, hi = (words.group(1), words.group(2)) if words.group(1) else (words.group(3), words.group(4))
            return ("range", parse_expr(lo), parse_expr(hi))

        parts = split_top(s, _OR)
        if len(parts) > 1:
            return ("or", [rec(p) for p in parts])
        parts = split_top(s, _LIST_SEP)
        if len(parts) > 1:
            return ("set", _items(parts, rec))
        parts = split_top(s, _CUP)
        if len(parts) > 1:
            vals = [_as_interval(rec(p)) for p in parts]
            return ("union", vals)
        s = _IN.sub("", s)
        if not s.strip():
            raise ParseError("empty")

        parts = split_top(s, _COMMA)
        if len(parts) > MAX_ITEMS:
            raise TooComplex("too_many_items")
        if len(parts) > 1:
            return ("set", _items(parts, rec))
        pm = _PLUS_MINUS.findall(s) if "\\pm" in s or "\\mp" in s else ()
        if len(pm) == 1:  # a \pm b: both values
            return ("set", _items([s], rec))

        if s[0] in "([{" and s[-1] in ")]}" and _wrapped(s):
            inner = s[1:-1]
            items = split_top(inner, _COMMA)
            if len(items) > MAX_ITEMS:
                raise TooComplex("too_many_items")
            if s[0] == "{" and s[-1] == "}":
                if len(items) > 1:
                    return ("set", _items(items, rec))
                return rec(inner) if inner.strip() else ("set", [])
            if len(items) == 2 and (s[0] == "[" or s[-1] == "]") and s[0] != "{" and s[-1] != "}":
                lo, hi = (_scalar(rec(p)) for p in items)
                return ("interval", s[0] == "[", lo, hi, s[-1] == "]")
            if len(items) > 1:
                if s[0] == "(" and s[-1] == ")" or s[0] == "[" and s[-1] == "]":
                    return ("tuple", [rec(p) for p in items])
                raise ParseError("unparseable")

        rel = split_top(s, _REL)
        if len(rel) > 1:
            return _inequality(s)

        eq = split_top(s, _EQ)
        if len(eq) > 1:
            return _equation(eq, rec)

        ratio = split_top(s, _RATIO)
        if len(ratio) > 1:
            return ("ratio", [parse_expr(p) for p in ratio])

    unit = _UNIT.match(s) if "\\unit{" in s else None
    if unit and unit.group(2) == "deg" and (_FUNCTION_CALL.search(unit.group(1)) or "\\unit{" in unit.group(1)):
        unit = None  # \sin 30^\circ, 30^\circ + 15^\circ: the degree signs belong to the terms
    if unit:
        value = rec(unit.group(1)) if unit.group(1).strip() else None
        if value is None or value[0] != "expr" or value[2]:
            raise ParseError("unparseable")
        return ("qty", value[1], unit.group(2))
    if "\\unit{deg}" in s:  # a degree sign inside an expression (\sin 30^\circ): a factor of pi/180, written
        s = s.replace("\\unit{deg}", " \\frac{\\pi}{180}")  # next to its number so it joins a function's argument

    pct = False
    if s.endswith("%"):
        pct, s = True, s[:-1].strip()
    try:
        return ("expr", parse_expr(s), pct)
    except ParseError as exc:
        if exc.args and exc.args[0] == "text" and not pct:
            return _number_with_words(s) or ("text", text_key(s))
        raise


def _items(parts: list[str], rec: Any) -> list[tuple]:
    """The values of a list's parts: ``a \\pm b`` gives two, ``1, 2, \\ldots, 9`` is written out."""
    if any(not p.strip() for p in parts):
        raise ParseError("unparseable")
    out: list[tuple | None] = []
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
        out = _written_out(out)
    if len(out) > MAX_ITEMS:
        raise TooComplex("too_many_items")
    return out  # type: ignore[return-value]


def _int_of(v: tuple | None) -> int | None:
    if v is None or v[0] != "expr" or v[2]:
        return None
    a, sign = v[1], 1
    if a[0] == "neg":
        a, sign = a[1], -1
    if a[0] == "num" and a[1].denominator == 1:
        return sign * int(a[1])
    return None


def _written_out(items: list[tuple | None]) -> list[tuple]:
    """``a, b, ..., z`` (integers, one ellipsis) as every term of the arithmetic progression."""
    k = items.index(None)
    before, after = [_int_of(v) for v in items[:k]], [_int_of(v) for v in items[k + 1 :]]
    if items.count(None) != 1 or not before or len(after) != 1 or None in before or None in after:
        raise ParseError("unparseable")
    step = before[-1] - before[-2] if len(before) > 1 else (1 if after[0] >= before[-1] else -1)
    if step == 0 or (after[0] - before[-1]) % step or (after[0] - before[-1]) // step < 0:
        raise ParseError("unparseable")
    count = (after[0] - before[-1]) // step
    if len(before) + count > MAX_ITEMS:
        raise TooComplex("too_many_items")
    values = before + [before[-1] + step * j for j in range(1, count + 1)]
    return [("expr", ("neg", ("num", Fraction(-n))) if n < 0 else ("num", Fraction(n)), False) for n in values]


def _equation(sides: list[str], rec: Any) -> tuple:
    """``a = b = ... = z`` as ("eq", values, function, labels): the values of the sides (None for a side
    only a label can be, such as ``m_{\\max}``), the function ``f(x)`` it defines as (name, parameters) or
    None, and for each side but the last whether it reads as a label (no digits outside subscripts)."""
    if any(not p.strip() for p in sides) or len(sides) > MAX_ITEMS:
        raise ParseError("unparseable")
    fn = _FUNCTION_DEF.match(sides[0])
    values: list[tuple | None] = []
    for p in sides[:-1]:
        try:
            values.append(rec(p))
        except ParseError:
            values.append(None)
    values.append(rec(sides[-1]))
    labels = tuple(not re.search(r"\d", _LABEL_DIGITS.sub("", p)) for p in sides[:-1])
    function = (fn.group(1), tuple(x.strip() for x in fn.group(2).split(","))) if fn else None
    return ("eq", values, function, labels)


def _number_with_words(s: str) -> tuple | None:
    """``3 thousand`` = 3000, ``5 squared`` = 25, ``12 cookies`` = 12; None when a word changes or withdraws
    the number in a way not read here ("5 wrong", "about 5", "5 or more")."""
    m = _NUMBER_WORDS.fullmatch(s)
    if m is None:
        return None
    number = _num(m.group(1).lstrip("-"))
    if m.group(1).startswith("-"):
        number = ("neg", number)
    words = m.group(2).lower().replace("-", " ").split()
    first, rest = words[0], words[1:]
    if any(w in CHANGERS for w in rest) or any(w in _FUNCS or w == "pi" for w in words):
        return None
    if first in MULTIPLIERS:
        return ("expr", ("mul", (number, ("num", Fraction(MULTIPLIERS[first])))), False)
    if first in POWERS and not rest:
        return ("expr", ("pow", number, ("num", Fraction(POWERS[first]))), False)
    if first == "percent" and not rest:
        return ("expr", number, True)
    if first in CHANGERS:
        return None
    return ("expr", number, False)


def text_key(s: str) -> str:
    s = s.replace("\\", " ")
    s = re.sub(r"[{}]", "", s)
    return " ".join(s.casefold().split()).strip(" .!,;:")


def _scalar(v: tuple) -> tuple:
    if v[0] == "expr" and not v[2]:
        return v[1]
    raise ParseError("unparseable")


def _as_interval(v: tuple) -> tuple:
    if v[0] == "interval":
        return v
    if v[0] == "tuple" and len(v[1]) == 2:  # (a, b) read as an open interval in a union
        return ("interval", False, _scalar(v[1][0]), _scalar(v[1][1]), False)
    if v[0] == "set":  # {3}: a point
        return v
    if v[0] == "expr":
        return ("interval", True, v[1], v[1], True)
    raise ParseError("unparseable")


def _solution_set(v: tuple) -> tuple:
    """A condition's value as a set of reals: an interval or a union ("x < -1 or x > 1" is a union)."""
    if v[0] in ("interval", "union"):
        return v
    if v[0] == "or" and all(x[0] == "interval" for x in v[1]):
        return ("union", v[1])
    raise ParseError("unparseable")


def _linear(a: tuple) -> tuple[str, Fraction, Fraction] | None:
    """(x, c, d) when ``a`` is c*x + d with rational c != 0 and d, else None."""
    from rlvr.verifiers.math.equivalence import NotPolynomial, poly

    try:
        p = poly(a)
    except (NotPolynomial, TooComplex, ArithmeticError):
        return None
    var = [m for m in p if m]
    if len(var) != 1 or len(var[0]) != 1 or var[0][0][1] != 1 or var[0][0][0].startswith("\\"):
        return None
    return var[0][0][0], p[var[0]], p.get((), Fraction(0))


_FLIP = {"<": ">", ">": "<", "<=": ">=", ">=": "<="}


def _bounds(op: str, bound: tuple) -> tuple:
    """The interval of ``x op bound``."""
    if op in ("<", "<="):
        return ("interval", False, NEG_INF, bound, op == "<=")
    return ("interval", op == ">=", bound, INF, False)


def _absolute(inner: tuple, op: str, bound: tuple) -> tuple:
    """``|c*x + d| op bound`` as an interval (< and <=) or a union of two rays (> and >=)."""
    from rlvr.verifiers.math.equivalence import NotRational, rat

    lin = _linear(inner)
    try:
        r = rat(bound)
    except NotRational:
        raise ParseError("unparseable") from None
    if lin is None or r < 0:
        raise ParseError("unparseable")
    _, c, d = lin
    lo, hi = sorted(((-r - d) / c, (r - d) / c))
    closed = op in ("<=", ">=")
    if op in ("<", "<="):
        return ("interval", closed, ("num", lo), ("num", hi), closed)
    return ("union", [("interval", False, NEG_INF, ("num", lo), closed), ("interval", closed, ("num", hi), INF, False)])


def _inequality(s: str) -> tuple:
    """``a < x <= b`` / ``x > 2`` / ``2 >= x`` / ``-x > -1`` / ``0 < 2x+1 < 3`` / ``x != 1`` as a set of reals."""
    ops: list[str] = []
    pieces = [p.strip() for p in split_top(s, _REL, ops)]
    if len(pieces) != len(ops) + 1 or any(not p for p in pieces):
        raise ParseError("unparseable")
    if "!=" in ops:
        if ops != ["!="] or not _VAR.match(pieces[0]):
            raise ParseError("unparseable")
        b = parse_expr(pieces[1])
        return ("union", [("interval", False, NEG_INF, b, False), ("interval", False, b, INF, False)])
    if len(ops) == 1:
        a, b = pieces
        op = ops[0]
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
    if len(ops) == 2 and ops[0][0] == ops[1][0]:
        lo, hi = parse_expr(pieces[0]), parse_expr(pieces[2])
        o1, o2 = ops
        if o1[0] == ">":
            lo, hi, o1, o2 = hi, lo, _FLIP[o2], _FLIP[o1]
        if not _VAR.match(pieces[1]):  # lo < c*x + d < hi
            lin = _linear(parse_expr(pieces[1]))
            if lin is None:
                raise ParseError("unparseable")
            _, c, d = lin
            from rlvr.verifiers.math.equivalence import NotRational, rat

            try:
                lo, hi = ("num", (rat(lo) - d) / c), ("num", (rat(hi) - d) / c)
            except NotRational:
                raise ParseError("unparseable") from None
            if c < 0:
                lo, hi, o1, o2 = hi, lo, o2, o1
        return ("interval", o1 == "<=", lo, hi, o2 == "<=")
    raise ParseError("unparseable")


def is_multi(v: tuple) -> bool:
    """A multi-valued answer (a set or bare list of values, or "a or b"; "x < -1 or x > 1" is one set)."""
    return v[0] == "set" or (v[0] == "or" and not all(x[0] == "interval" for x in v[1]))


def free_symbols(a: Any, out: set[str] | None = None) -> set[str]:
    out = set() if out is None else out
    stack = [a]
    while stack:
        n = stack.pop()
        if not isinstance(n, tuple) or not n:
            continue
        if n[0] == "sym":
            out.add(n[1])
            continue
        if n[0] in ("num", "const"):
            continue
        for c in n[1:]:
            if isinstance(c, tuple):
                if c and isinstance(c[0], str):
                    stack.append(c)
                else:
                    stack.extend(c)
    return out
