"""Normalise an answer string and parse it into a small structure of expression trees.

Everything here is our own code and runs inline: no SymPy. Expressions become plain tuples (an AST) that the
evaluators in equivalence.py read with hard guards, and that symbolic.py turns into SymPy only inside a
supervised worker.

AST nodes::

    ("num", Fraction)      ("sym", "x_1")         ("const", "pi" | "e" | "i" | "inf")
    ("add", (a, b, ...))   ("mul", (a, b, ...))   ("neg", a)      ("div", a, b)     ("pow", a, b)
    ("fn", name, a)        ("log", base, a)       ("fact", a)     ("root", a, n)    ("abs", a)

Answer values::

    ("expr", ast, percent: bool)    ("assign", lhs: str, value)     ("eq", lhs_ast, rhs_ast)
    ("set", [values])               ("tuple", [values])             ("interval", lo_closed, lo, hi, hi_closed)
    ("union", [intervals])          ("matrix", [[ast]])             ("text", str)      ("or", [values])
"""

from __future__ import annotations

import functools
import re
from fractions import Fraction
from typing import Any

MAX_ANSWER_CHARS = 1500  # longer answers are "too_complex"
MAX_DEPTH = 60  # nesting depth of the expression grammar
MAX_NODES = 3000
MAX_DIGITS = 500  # digits in one number literal
MAX_ITEMS = 64  # elements in a set/tuple/matrix


class ParseError(Exception):
    """The text is not an expression we can read (reason in args[0]: "text", "unparseable")."""


class TooComplex(Exception):
    """Past a guard (length, depth, exponent, factorial ...): the answer is "undecidable", reason "too_complex"."""


# ------------------------------------------------------------------------------------------- normalisation

UNITS = (
    "units?", "square units?", "sq\\.? units?", "cubic units?", "cm\\^?2?", "cm\\^?3?", "mm", "km", "kg", "g", "mg",
    "meters?", "metres?", "centimeters?", "kilometers?", "miles?", "mph", "km/h", "feet", "foot", "ft", "inches?",
    "in", "yards?", "dollars?", "cents?", "seconds?", "minutes?", "hours?", "days?", "weeks?", "years?", "sec",
    "min", "hrs?", "degrees?", "radians?", "grams?", "kilograms?", "pounds?", "lbs?", "liters?", "litres?", "ml",
    "people", "students", "m", "s", "L",
)
_UNIT_TEXT = re.compile(r"^\s*(?:" + "|".join(UNITS) + r")\s*$", re.I)
# bare unit words stripped at the end of an answer (single letters like "m" only inside \text{})
_BARE_UNITS = re.compile(
    r"(?<=[\d}\s])\s*(?:" + "|".join(u for u in UNITS if len(u.rstrip("?")) > 2 and u not in ("in", "min")) + r")\s*$",
    re.I,
)
_TEXT_CMDS = ("\\text", "\\textbf", "\\textit", "\\textrm", "\\mathrm", "\\mathbf", "\\mathit", "\\mbox",
              "\\operatorname", "\\mathsf", "\\textnormal", "\\boldsymbol", "\\mathbb")
_UNICODE = {
    "\u2212": "-", "\u00d7": "\\times ", "\u00b7": "\\cdot ", "\u03c0": "\\pi ", "\u221e": "\\infty ",
    "\u2264": "<=", "\u2265": ">=", "\u2260": "!=", "\u00b0": "", "\u222a": "\\cup ", "\u221a": "\\sqrt",
    "\u00a0": " ", "\u2009": " ", "\u2013": "-",
}
_THOUSANDS = re.compile(r"^-?\d{1,3}(?:,\d{3})+(?:\.\d+)?$")


def _unwrap_text_commands(s: str, units: bool) -> str:
    for _ in range(50):
        best = None
        for cmd in _TEXT_CMDS:
            i = s.find(cmd + "{")
            if i >= 0 and (best is None or i < best[0]):
                best = (i, cmd)
        if best is None:
            return s
        i, cmd = best
        j = i + len(cmd)
        depth, k = 0, j
        while k < len(s):
            if s[k] == "{":
                depth += 1
            elif s[k] == "}":
                depth -= 1
                if depth == 0:
                    break
            k += 1
        if k >= len(s):
            return s[:i] + s[j + 1 :]  # unclosed: drop the command
        inner = s[j + 1 : k]
        if units and cmd in ("\\text", "\\mathrm", "\\mbox", "\\textrm") and _UNIT_TEXT.match(inner) \
                and s[:i].strip():
            inner = " "
            tail = re.match(r"\s*\^\s*\{?\s*[23]\s*\}?", s[k + 1 :])
            if tail:
                k += tail.end()
        elif cmd == "\\operatorname":
            inner = "\\" + inner.strip() + " " if inner.strip() in _FUNCS else inner
        s = s[:i] + " " + inner + " " + s[k + 1 :] if cmd != "\\operatorname" else s[:i] + inner + s[k + 1 :]
    return s


# LaTeX commands rewritten by name, in two passes (before and after \text{} is unwrapped); one regex per
# pass finds every command and a table says what it becomes (unlisted commands are kept)
_COMMAND = re.compile(r"\\(?:left|right)\s*\.|\\([a-zA-Z]+)")
_LAYOUT_COMMANDS = {  # sizing, style and fraction-style commands: gone or plain
    **dict.fromkeys(("left", "right", "bigl", "bigr", "Bigl", "Bigr", "big", "Big", "bigg", "Bigg"), ""),
    **dict.fromkeys(("displaystyle", "textstyle", "limits"), ""),
    "dfrac": "\\frac", "tfrac": "\\frac",
}
_RELATION_COMMANDS = {  # relations, bars, infinity and "or" in the spelling the parser reads
    **dict.fromkeys(("leqslant", "leq", "le"), "<="), **dict.fromkeys(("geqslant", "geq", "ge"), ">="),
    **dict.fromkeys(("neq", "ne"), "!="), "lt": "<", "gt": ">",
    **dict.fromkeys(("lvert", "rvert", "vert"), "|"),
    **dict.fromkeys(("infty", "infinity"), "\\infty "), "lor": " or ",
}


def _rewrite_commands(s: str, table: dict[str, str]) -> str:
    def one(m: re.Match) -> str:
        name = m.group(1)
        if name is None:  # \left. / \right.: an invisible delimiter
            return " "
        return table.get(name, m.group(0))

    return _COMMAND.sub(one, s)


_THIN_SPACE_IN_NUMBER = re.compile(r"(?<=\d)\\,(?=\d{3}(?!\d))")
_SPACING_COMMAND = re.compile(r"(?<!\\)\\[,;: ]|\\q?quad(?![a-zA-Z])|~")
_FRAC_OF_DIGITS = re.compile(r"\\frac\s*(\d)\s*(\d)")
_DEGREES = re.compile(r"\^\s*\{\s*\\circ\s*\}|\^\s*\\circ|\\circ|\\degree")
_BARE_INFINITY = re.compile(r"(?<![a-zA-Z\\])(?:infinity|inf)(?![a-zA-Z])")
_PLAIN_NUMBER = re.compile(r"(-?)(\d{1,40}(?:\.\d{1,40})?)")
_ANSWER_PREFIX = re.compile(r"^(?:the\s+)?(?:answer|solution)\s*(?:is|:)\s*", re.I)


@functools.lru_cache(maxsize=8192)
def normalize(s: str, *, units: bool = True) -> str:
    """A canonical spelling of an answer: delimiters, spacing commands, \\left/\\right, \\text{}, \\dfrac,
    degrees, thousands separators, trailing periods and (with ``units``) known unit words are gone."""
    s = s.strip()
    if _PLAIN_NUMBER.fullmatch(s):  # the commonest answer needs none of the rewriting below
        return s
    for a, b in (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]")):
        while len(s) >= len(a) + len(b) and s.startswith(a) and s.endswith(b):
            s = s[len(a) : -len(b)].strip()
    if not s.isascii():
        for k, v in _UNICODE.items():
            if k in s:
                s = s.replace(k, v)
    s = s.replace("\\$", " ").replace("$", " ")
    # every LaTeX rewrite needs a backslash, so plain text skips them (the order of the steps is kept)
    latex = "\\" in s
    if latex:
        s = _rewrite_commands(s, _LAYOUT_COMMANDS)
        if "\\," in s:
            s = _THIN_SPACE_IN_NUMBER.sub("", s)  # 1\,234
    s = s.replace("{,}", "")
    if latex:
        s = s.replace("\\!", "")
        s = _SPACING_COMMAND.sub(" ", s)
        if "\\frac" in s:
            s = _FRAC_OF_DIGITS.sub(r"\\frac{\1}{\2}", s)
        if "circ" in s or "degree" in s:
            s = _DEGREES.sub("", s)
        s = s.replace("\\%", "%")
        s = _unwrap_text_commands(s, units)
        s = _rewrite_commands(s, _RELATION_COMMANDS).replace("\\|", "|")
        s = s.replace("\\{", "{").replace("\\}", "}")
    else:
        s = s.replace("~", " ")
    if "inf" in s:
        s = _BARE_INFINITY.sub(r"\\infty ", s)
    s = " ".join(s.split())
    if units:
        for _ in range(2):
            # the pattern is anchored at the end: searching only the tail keeps a long answer cheap
            unit = _BARE_UNITS.search(s, max(0, len(s) - 40))
            if unit is None:
                break
            s = s[: unit.start()].strip()
    s = s.rstrip(" .;")
    s = _ANSWER_PREFIX.sub("", s)
    if _THOUSANDS.match(s):
        s = s.replace(",", "")
    return s.strip()


# ------------------------------------------------------------------------------------------------ tokenizer

_FUNCS = {
    "sin", "cos", "tan", "cot", "sec", "csc", "arcsin", "arccos", "arctan", "sinh", "cosh", "tanh",
    "log", "ln", "exp", "lg",
}
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


def _num(text: str) -> tuple:
    """A number literal ("42", "3.50", "4.", ".5") as an exact Fraction (built from ints: Fraction(str) is
    several times slower)."""
    whole, _, frac = text.partition(".")
    if not frac:
        return ("num", Fraction(int(whole or "0")))
    return ("num", Fraction(int((whole or "0") + frac), 10 ** len(frac)))


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
_CUP = re.compile(r"\s*\\cup\s*|\s+U\s+")
_REL = re.compile(r"<=|>=|!=|<|>")
_EQ = re.compile(r"=")
_VAR = re.compile(r"^\s*(?:[a-zA-Z]|\\[a-zA-Z]+)(?:_\{?\w+\}?)?\s*$")
_LHS = re.compile(r"^\s*(?:[a-zA-Z](?:_\{?\w+\}?)?|[a-zA-Z]\s*\([^()]*\)|\([a-zA-Z\s,]+\))\s*$")
_MATRIX = re.compile(r"^\\begin\{([pbBvV]?matrix)\}(.*)\\end\{\1\}$", re.S)
_PLUS_MINUS = re.compile(r"\\(?:pm|mp)(?![a-zA-Z])")
_IN = re.compile(r"^\s*[a-zA-Z]\s*\\in\s*")
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

    parts = split_top(s, _OR)
    if len(parts) > 1:
        return ("or", [rec(p) for p in parts])
    pm = _PLUS_MINUS.findall(s) if "\\pm" in s or "\\mp" in s else ()
    if len(pm) == 1:  # a \pm b: both values
        plus, minus = ("+", "-") if pm[0] == "\\pm" else ("-", "+")
        return ("set", [rec(_PLUS_MINUS.sub(sign, s)) for sign in (plus, minus)])
    parts = split_top(s, _CUP)
    if len(parts) > 1:
        vals = [_as_interval(rec(p)) for p in parts]
        return ("union", vals)
    s = _IN.sub("", s)

    parts = split_top(s, _COMMA)
    if len(parts) > MAX_ITEMS:
        raise TooComplex("too_many_items")
    if len(parts) > 1:
        if any(not p.strip() for p in parts):
            raise ParseError("unparseable")
        return ("set", [rec(p) for p in parts])

    if s[0] in "([{" and s[-1] in ")]}" and _wrapped(s):
        inner = s[1:-1]
        items = split_top(inner, _COMMA)
        if len(items) > MAX_ITEMS:
            raise TooComplex("too_many_items")
        if s[0] == "{" and s[-1] == "}":
            if len(items) > 1:
                return ("set", [rec(p) for p in items])
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
        lhs, rhs = eq[0].strip(), eq[-1].strip()
        if not lhs or not rhs:
            raise ParseError("unparseable")
        if _LHS.match(lhs):
            return ("assign", re.sub(r"\s+", "", lhs), rec(rhs))
        return ("eq", parse_expr(lhs), parse_expr(rhs))

    pct = False
    if s.endswith("%"):
        pct, s = True, s[:-1].strip()
    try:
        return ("expr", parse_expr(s), pct)
    except ParseError as exc:
        if exc.args and exc.args[0] == "text" and not pct:
            return ("text", text_key(s))
        raise


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


def _inequality(s: str) -> tuple:
    """``a < x <= b`` / ``x > 2`` / ``2 >= x`` as an interval."""
    ops: list[str] = []
    pieces = [p.strip() for p in split_top(s, _REL, ops)]
    if "!=" in ops or len(pieces) != len(ops) + 1 or any(not p for p in pieces):
        raise ParseError("unparseable")
    if len(ops) == 1:
        a, b = pieces
        op = ops[0]
        if _VAR.match(a) and not _VAR.match(b):
            bound, var_left = parse_expr(b), True
        elif _VAR.match(b) and not _VAR.match(a):
            bound, var_left = parse_expr(a), False
        elif _VAR.match(a):
            bound, var_left = parse_expr(b), True
        else:
            raise ParseError("unparseable")
        if not var_left:
            op = {"<": ">", ">": "<", "<=": ">=", ">=": "<="}[op]
        if op in ("<", "<="):
            return ("interval", False, NEG_INF, bound, op == "<=")
        return ("interval", op == ">=", bound, INF, False)
    if len(ops) == 2 and _VAR.match(pieces[1]):
        lo, hi = parse_expr(pieces[0]), parse_expr(pieces[2])
        o1, o2 = ops
        if o1[0] == "<" and o2[0] == "<":
            return ("interval", o1 == "<=", lo, hi, o2 == "<=")
        if o1[0] == ">" and o2[0] == ">":
            return ("interval", o2 == ">=", hi, lo, o1 == ">=")
    raise ParseError("unparseable")


def is_multi(v: tuple) -> bool:
    """A multi-valued answer (a set or bare list of values, or "a or b")."""
    return v[0] in ("set", "or")


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
