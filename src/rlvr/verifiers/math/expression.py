"""Expressions: our own tokenizer and recursive-descent parser for the LaTeX subset of answers.

Everything here is our own code and runs inline: no SymPy. Expressions become plain tuples (an AST) that the
evaluators in equivalence.py and numeric.py read with hard guards, and that symbolic.py turns into SymPy only
inside a supervised worker. The parser is bounded before it works: answer length, nesting depth, node count
and digits of a literal.

AST nodes::

    ("num", Fraction)      ("sym", "x_1")         ("const", "pi" | "e" | "i" | "inf")
    ("add", (a, b, ...))   ("mul", (a, b, ...))   ("neg", a)      ("div", a, b)     ("pow", a, b)
    ("fn", name, a)        ("log", base, a)       ("fact", a)     ("root", a, n)    ("abs", a)
"""

from __future__ import annotations

import re
from fractions import Fraction
from typing import Any

from rlvr.verifiers.math.normalize import FUNCTION_NAMES as _FUNCS

MAX_ANSWER_CHARS = 1500  # longer answers are "too_complex"
MAX_DEPTH = 60  # nesting depth of the expression grammar
MAX_NODES = 3000
MAX_DIGITS = 500  # digits in one number literal
INF = ("const", "inf")
NEG_INF = ("neg", INF)


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
            elif name in ("frac", "sqrt", "cup", "in", "binom"):
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


def number_node(text: str) -> tuple:
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
            return text in ("frac", "sqrt", "binom")
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
            return self.node(number_node(tok[1]))
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
            return self.node(number_node(text))
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
            if text == "binom":  # n! / (k! (n-k)!)
                n, k = self.group(), self.group()
                rest = self.node(("fact", self.node(("add", (n, self.node(("neg", k)))))))
                return self.node(("div", self.node(("fact", n)), self.node(("mul", (self.node(("fact", k)), rest)))))
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
