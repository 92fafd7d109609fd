"""Normalise an answer string: one spelling for what LaTeX and plain text write in many ways.

Delimiters, spacing commands, ``\\left``/``\\right``, ``\\text{}``, ``\\dfrac``, thousands separators (``1,000``,
``1\\,000``, ``11,\\!111``, ``1 000``), Unicode forms (minus signs, fullwidth characters, superscript digits),
repeating decimals (``0.\\overline{3}`` -> ``\\frac{1}{3}``), ``\\mathbb{R}``, the empty set and "k is an integer"
side conditions are rewritten; with ``units``, a trailing unit becomes ``\\unit{NAME}`` (units.py) and count nouns
are dropped. Every step is a linear scan or a regex without nested quantifiers.
"""

from __future__ import annotations

import re
import unicodedata
from fractions import Fraction

from rlvr.verifiers.math import units as unit_words
from rlvr.verifiers.math.words import mixed_number

_TEXT_CMDS = ("\\text", "\\textbf", "\\textit", "\\textrm", "\\mathrm", "\\mathbf", "\\mathit", "\\mbox",
              "\\operatorname", "\\mathsf", "\\textnormal", "\\boldsymbol", "\\mathbb")
FUNCTION_NAMES = {
    "sin", "cos", "tan", "cot", "sec", "csc", "arcsin", "arccos", "arctan", "sinh", "cosh", "tanh",
    "log", "ln", "exp", "lg", "floor", "ceil",
}
_UNICODE = {
    "\u2212": "-", "\u00d7": "\\times ", "\u00b7": "\\cdot ", "\u03c0": "\\pi ", "\u221e": "\\infty ",
    "\u2264": "<=", "\u2265": ">=", "\u2260": "!=", "\u00b0": "^\\circ ", "\u222a": "\\cup ", "\u221a": "\\sqrt",
    "\u00a0": " ", "\u2009": " ", "\u202f": " ", "\u2013": "-", "\u2012": "-", "\u2010": "-", "\u2011": "-",
    "\u2014": "-", "\ufe63": "-", "\u2026": "...", "\u22c5": "\\cdot ", "\u2217": "*", "\u2205": "\\emptyset ",
    "\u211d": "\\mathbb{R}", "\u2208": "\\in ", "\u2223": "\\mid ", "\u2044": "/",
    "\u2248": "\\approx ", "\u2216": "\\setminus ", "\u00a2": " cents", "\u2308": "\\lceil ", "\u2309": "\\rceil ",
    "\u230a": "\\lfloor ", "\u230b": "\\rfloor ", "\u2103": "^\\circ C", "\u2109": "^\\circ F", "\u2030": " per mille", "\u2031": " basis points",
}
# circled digits used as item labels ("\u2460 3 \u2461 5"): NFKC would read them as digits, so they become
# list separators first
_CIRCLED = re.compile("[\u2460-\u2473\u24ea\u24f5-\u24fe\u2776-\u2793]")
_SUPERSCRIPTS = {"\u2070": "0", "\u00b9": "1", "\u00b2": "2", "\u00b3": "3", "\u2074": "4", "\u2075": "5",
                 "\u2076": "6", "\u2077": "7", "\u2078": "8", "\u2079": "9", "\u207b": "-", "\u207a": "+"}
_SUPERSCRIPT_RUN = re.compile("[" + "".join(_SUPERSCRIPTS) + "]+")
_THOUSANDS = re.compile(r"^-?(?:[1-9]\d{0,2}|0(?= ))(?:,\d{3})+(?:\.\d+)?$|^-?\d{1,3}(?: \d{3})+(?:\.\d+)?$")
_UNIT_POWER = re.compile(r"\s*\^\s*\{?\s*([23])\s*\}?")


def _unicode(s: str) -> str:
    """ASCII spellings of Unicode math: superscript runs become ``^{...}``, then NFKC folds fullwidth and
    compatibility forms, then the table above."""
    if _CIRCLED.search(s):
        s = _CIRCLED.sub(", ", s).strip(" ,")
    if _SUPERSCRIPT_RUN.search(s):
        s = _SUPERSCRIPT_RUN.sub(lambda m: "^{" + "".join(_SUPERSCRIPTS[c] for c in m.group()) + "}", s)
    s = unicodedata.normalize("NFKC", s)
    for k, v in _UNICODE.items():
        if k in s:
            s = s.replace(k, v)
    return s


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
        if units and cmd in ("\\text", "\\mathrm", "\\mbox", "\\textrm") and s[:i].strip():
            power = _UNIT_POWER.match(s, k + 1)
            marker = unit_words.wrapped(inner + "^" + power.group(1)) if power else None
            if marker is not None:
                k = power.end() - 1
            else:
                marker = unit_words.wrapped(inner)
            if marker is not None:
                inner = marker
        elif cmd == "\\operatorname":
            inner = "\\" + inner.strip() + " " if inner.strip() in FUNCTION_NAMES else inner
        s = s[:i] + " " + inner + " " + s[k + 1 :] if cmd != "\\operatorname" else s[:i] + inner + s[k + 1 :]
    return s


# LaTeX commands rewritten by name, in two passes (before and after \text{} is unwrapped); one regex per
# pass finds every command and a table says what it becomes (unlisted commands are kept)
_COMMAND = re.compile(r"\\(?:left|right)\s*\.|\\([a-zA-Z]+)")
_LAYOUT_COMMANDS = {  # sizing, style and fraction-style commands: gone or plain
    **dict.fromkeys(("left", "right", "bigl", "bigr", "Bigl", "Bigr", "big", "Big", "bigg", "Bigg"), ""),
    **dict.fromkeys(("displaystyle", "textstyle", "limits"), ""),
    "dfrac": "\\frac", "tfrac": "\\frac", "cfrac": "\\frac",
}
_RELATION_COMMANDS = {  # relations, bars, infinity, "or" and ellipses in the spelling the parser reads
    **dict.fromkeys(("leqslant", "leq", "le"), "<="), **dict.fromkeys(("geqslant", "geq", "ge"), ">="),
    **dict.fromkeys(("neq", "ne"), "!="), "lt": "<", "gt": ">",
    **dict.fromkeys(("lvert", "rvert", "vert"), "|"),
    **dict.fromkeys(("infty", "infinity"), "\\infty "), "lor": " or ",
    **dict.fromkeys(("ldots", "dots", "cdots", "dotsc", "dotsb"), "..."),
    **dict.fromkeys(("emptyset", "varnothing"), "\\{\\}"),
    **dict.fromkeys(("permil", "textperthousand"), " per mille "), "textpertenthousand": " basis points ",
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
_SCIENTIFIC = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)[eE]([+-]?\d{1,4})(?![\w.])")  # 2.5e3
_BARE_INFINITY = re.compile(r"(?<![a-zA-Z\\])(?:infinity|inf)(?![a-zA-Z])")
PLAIN_NUMBER = re.compile(r"(-?)(\d{1,40}(?:\.\d{1,40})?)", re.ASCII)
_ANSWER_PREFIX = re.compile(r"^(?:the\s+)?(?:answer|solution)\s*(?:is|:)\s*", re.I)
_REPEATING = re.compile(
    r"(\d*)\.(\d{0,40})\\(?:overline|bar)\s*\{?\s*(\d{1,40})\s*\}?|(\d*)\.(\d{0,40})\\dot\s*\{?(\d)\}?"
)
_REALS = re.compile(r"\\mathbb\s*\{?\s*R\s*\}?(?![a-zA-Z^_])|\\R(?![a-zA-Z])|\ball real numbers\b", re.I)
_INTEGER_PARAMETER = re.compile(
    r"(?:,|\(|\bfor\b|\bwhere\b)? ?(?:(?:all|any|some) )?(?:integers? )?[kmn](?: ?, ?[kmn])* ?"
    r"(?:\\in ?(?:\\mathbb ?\{?Z\}?|Z)|is an integer|are integers) ?\)?$"
    r"|(?:,|\bfor\b|\bwhere\b) ?(?:(?:all|any|some) )?integers? [kmn] ?\)?$"
)


def _without_integer_parameter(s: str) -> str:
    """``s`` without a trailing "k \\in \\mathbb{Z}" / "where k is an integer" (looked for in the last 80
    characters only, so the pattern's optional spaces cannot make a long answer slow)."""
    head = max(0, len(s) - 80)
    m = _INTEGER_PARAMETER.search(s[head:])
    return s if m is None else s[: head + m.start()]


def _repeating(m: re.Match) -> str:
    """``a.b\\overline{r}`` as the exact fraction it denotes."""
    whole, fixed, rep = (m.group(1), m.group(2), m.group(3)) if m.group(3) else (m.group(4), m.group(5), m.group(6))
    head = int((whole or "0") + fixed)
    value = Fraction(int((whole or "0") + fixed + rep) - head, 10 ** len(fixed) * (10 ** len(rep) - 1))
    return f"\\frac{{{value.numerator}}}{{{value.denominator}}}"


_CURRENCY = re.compile(r"^\\?\$\s*(-?\d{1,3}(?:,\d{3})+(?:\.\d+)?|-?\d+(?:\.\d+)?)$")
_SEPARATOR_IN_NUMBER = re.compile(r"(?<=\d),\s*\\[!,]\s*(?=\d{3}(?!\d))|(?<=\d)\\!\s*,\s*(?=\d{3}(?!\d))")
_FONT_GROUP = re.compile(r"\{\s*\\(?:rm|bf|it|sf|tt|em|sl|sc|cal|bm|boldmath)(?![a-zA-Z])\s*([^{}]*)\}")
_FONT_SWITCH = re.compile(r"\\(?:rm|bf|it|sf|tt|em|sl|sc|boldmath)(?![a-zA-Z])\s*")
_CEILING_FLOOR = {"lceil": "\\ceil(", "rceil": ")", "lfloor": "\\floor(", "rfloor": ")"}
_TEMPERATURE = re.compile(
    r"(?:\^\s*\{\s*\\circ\s*\}|\^\s*\\circ|\\circ|\\degree)\s*(?:\\(?:text|mathrm|rm)\s*\{\s*([CFK])\s*\}|\{?\s*([CFK])\s*\}?)"
    r"(?![a-zA-Z])"
)
_DEGREES_BEFORE_SCALE = re.compile(r"\bdeg(?:rees?|\.)?\s+(?=(?:celsius|centigrade|fahrenheit)\b)", re.I)
_CASES = re.compile(r"^\\begin\{cases\}(.*)\\end\{cases\}$", re.S)
_ARRAY_MATRIX = re.compile(r"^([\[(])\s*\\begin\{array\}\s*\{[^{}]*\}(.*)\\end\{array\}\s*([\])])$", re.S)
_ORDINAL = re.compile(r"(?<=\d)\s*(?:\^\s*\{?\s*)?(?:st|nd|rd|th)\s*\}?(?![a-zA-Z])")
_INFINITELY_MANY = re.compile(
    r"^(?:there\s+(?:are|is|exist)\s+)?(?:infinitely\s+many|an?\s+infinite\s+(?:number|amount)|infinite(?:ly)?)"
    r"(?:\s+[a-z]+){0,2}$", re.I
)
# a condition after an answer that says it holds everywhere: "for all real x", ", x \in (-\infty,\infty)"
_EVERYWHERE = re.compile(
    r"(?:,\s*|\s+)(?:(?:for|where|when)\s+\(-\\infty\s*,\s*\\infty\s*\)\s*[a-zA-Z]?|(?:for|where|when)\s+(?:all|every|each|any)\s+(?:real\s+(?:numbers?\s+)?|\(-\\infty\s*,\s*\\infty\s*\)\s*)?"
    r"[a-zA-Z]?(?:\s*\\in\s*\(-\\infty\s*,\s*\\infty\s*\))?|(?:for|where)\s+[a-zA-Z]\s+(?:is\s+)?(?:any\s+)?real(?:\s+numbers?)?"
    r"|(?:for\s+(?:all\s+)?)?[a-zA-Z]\s*\\in\s*\(-\\infty\s*,\s*\\infty\s*\))$"
)
# a label before a list item: "Minimum: 2, Maximum: 5"
_ITEM_LABEL = re.compile(r"(?:^|(?<=[,;]))\s*[A-Za-z][A-Za-z]+(?:\s+[A-Za-z]+){0,3}\s*:\s*(?=[^\s:])")
_MATRIX_IN_PARENTHESES = re.compile(r"^\((\\begin\{([pbBvV]?matrix)\}.*\\end\{\2\})\)$", re.S)
_SERIAL_CONJUNCTION = re.compile(r"(?<=[\d}])\s*, (?:or|and) (?=[-\d\\]|[a-zA-Z] ?=)")
_WORDS_IN_TEXT = re.compile(r"\\(?:text|textrm|mathrm|mbox)\s*\{([^{}]*)\}")
_BASIS_POINTS = re.compile(r"(?<=\d)\s*bps?$")  # 25 bp: basis points, never the product b*p
_LONE_VARIABLE = re.compile(r"^[a-zA-Z](?:_\{?\w+\}?)?$")


def _rows_as_list(m: re.Match) -> str:
    """A cases environment of equations ("x = 1 \\\\ y = 2") as the list it states, else unchanged."""
    rows = [r.replace("&", " ").strip() for r in re.split(r"\\\\", m.group(1)) if r.strip()]
    if rows and all("=" in r or "<" in r or ">" in r for r in rows) and not any("&" in r for r in rows):
        return ", ".join(rows)
    return m.group(0)


def _exact_before_approximation(s: str) -> str:
    """``\\approx 0.67`` is 0.67 and ``x \\approx 0.67`` is ``x = 0.67``; ``x = 2/3 \\approx 0.67`` is left to the
    parser, which keeps the exact value when the approximation agrees with it."""
    left, _, right = s.partition("\\approx")
    left, right = left.strip(), right.strip()
    if not left:
        return right
    if _LONE_VARIABLE.match(left):
        return f"{left} = {right}"
    return f"{left} \\approx {right}"  # parse.py keeps the exact value when the approximation agrees with it



def _mixed_number(s: str) -> str:
    """ "2 and a half \\unit{h}", "two and three quarters": the whole number and its fraction as one value, so that
    "and" does not read as a list of two."""
    head, sep, unit = s.partition(" \\unit{")
    value = mixed_number(head)
    if value is None:
        return s
    return f"\\frac{{{value.numerator}}}{{{value.denominator}}}" + (sep + unit if sep else "")


def _decimal(value: Fraction) -> str:
    """A number of cents as a decimal ("12.5", "3.05", "7")."""
    whole, cents = divmod(int(value * 100), 100)
    return f"{whole}.{cents:02d}".rstrip("0").rstrip(".") if cents else str(whole)


def normalize(s: str, *, units: bool = True) -> str:
    """A canonical spelling of an answer (see the module docstring). Not cached: an answer is seen once, and
    the reference, seen by every response of a group, is cached with its parse (see the package)."""
    s = s.strip()
    if PLAIN_NUMBER.fullmatch(s):  # the commonest answer needs none of the rewriting below
        return s
    for a, b in (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]")):
        while len(s) >= len(a) + len(b) and s.startswith(a) and s.endswith(b):
            s = s[len(a) : -len(b)].strip()
    if not s.isascii():
        s = _unicode(s)
    if units and ("ollar" in s or "ent" in s) and \
            (money_parts := unit_words.money_in_parts(_WORDS_IN_TEXT.sub(r" \1 ", s) if "\\" in s else s)) is not None:
        s = _decimal(money_parts) + " \\unit{dollar}"
    if "$" in s:
        money = _CURRENCY.match(s)  # "\\$2.50": an amount of money, which converts to cents
        if money and units:
            s = money.group(1).replace(",", "") + " \\unit{dollar}"
        s = s.replace("\\$", " ").replace("$", " ")
    # every LaTeX rewrite needs a backslash, so plain text skips them (the order of the steps is kept)
    latex = "\\" in s
    if latex:
        s = _rewrite_commands(s, _LAYOUT_COMMANDS)
        if "\\," in s:
            s = _THIN_SPACE_IN_NUMBER.sub("", s)  # 1\,234
        if "\\!" in s or "\\," in s:
            s = _SEPARATOR_IN_NUMBER.sub("", s)  # 12,\! 500
    s = s.replace("{,}", ",")
    if latex:
        if "\\rm" in s or "\\bf" in s or "\\it" in s or "\\sf" in s or "\\tt" in s or "\\em" in s or "\\cal" in s:
            s = _FONT_SWITCH.sub("", _FONT_GROUP.sub(r"\1", s))  # {\rm 5}, {\bf 5}
        if "ceil" in s or "floor" in s:
            s = _rewrite_commands(s, _CEILING_FLOOR)
        if "\\begin{cases}" in s:
            s = _CASES.sub(_rows_as_list, s.strip())
        if "\\begin{array}" in s:
            s = _ARRAY_MATRIX.sub(lambda m: f"\\begin{{{'b' if m.group(1) == '[' else 'p'}matrix}}{m.group(2)}"
                                  f"\\end{{{'b' if m.group(1) == '[' else 'p'}matrix}}", s.strip())
        s = s.replace("\\!", "")
        if "\\overline" in s or "\\bar" in s or "\\dot" in s:
            s = _REPEATING.sub(_repeating, s)
        s = _SPACING_COMMAND.sub(" ", s)
        if "\\frac" in s:
            s = _FRAC_OF_DIGITS.sub(r"\\frac{\1}{\2}", s)
        if "circ" in s or "degree" in s:
            if units:  # 100^\\circ C: a temperature
                s = _TEMPERATURE.sub(lambda m: " \\unit{deg" + (m.group(1) or m.group(2)) + "} ", s)
            s = _DEGREES.sub(" \\\\unit{deg} " if units else " ", s)
        s = s.replace("\\%", "%")
        if "\\mathbb" in s or "\\R" in s:
            s = _REALS.sub("(-\\\\infty,\\\\infty)", s)
        s = _unwrap_text_commands(s, units)
        if "real" in s:
            s = _REALS.sub("(-\\\\infty,\\\\infty)", s)
        s = _rewrite_commands(s, _RELATION_COMMANDS).replace("\\|", "|")
        s = s.replace("\\{", "{").replace("\\}", "}")
    else:
        s = s.replace("~", " ")
        if "real" in s:
            s = _REALS.sub("(-\\\\infty,\\\\infty)", s)
    if "inf" in s:
        s = _BARE_INFINITY.sub(r"\\infty ", s)
    s = " ".join(s.split())
    if ", or " in s or ", and " in s:
        s = _SERIAL_CONJUNCTION.sub(", ", s)  # "4, 6, or 8": the list 4, 6, 8
    if "Z" in s or "integer" in s:
        s = _without_integer_parameter(s)
    s = s.rstrip(" .;")
    if s.endswith("\\") and not s.endswith("\\\\"):  # a stray backslash at the end ("185\\")
        s = s[:-1].rstrip()
    if s.startswith("(\\begin{") and s.endswith(")"):  # (\begin{pmatrix}...\end{pmatrix})
        inner = _MATRIX_IN_PARENTHESES.match(s)
        s = inner.group(1) if inner else s
    if "infinit" in s and _INFINITELY_MANY.match(s):
        s = "\\infty"
    if "\\approx" in s and s.count("\\approx") == 1:
        s = _exact_before_approximation(s)
    if "\\in" in s or "for " in s or "where " in s or "when " in s:
        head = max(0, len(s) - 80)
        m = _EVERYWHERE.search(s, head)
        if m and s[: m.start()].strip():
            s = s[: m.start()].rstrip(" ,")
    if ":" in s and _ITEM_LABEL.search(s):
        s = _ITEM_LABEL.sub(" ", s).strip()
    if "st" in s or "nd" in s or "rd" in s or "th" in s:
        s = _ORDINAL.sub("", s)
    if "bp" in s:
        s = _BASIS_POINTS.sub(" basis points", s)
    if units:
        if "deg" in s:
            s = _DEGREES_BEFORE_SCALE.sub("", s)
        s = unit_words.mark_trailing(s)
    if " and " in s and ("hal" in s or "thir" in s or "quart" in s or "th" in s):
        s = _mixed_number(s)
    s = _ANSWER_PREFIX.sub("", s)
    if "e" in s or "E" in s:
        s = _SCIENTIFIC.sub(r"\1\\times 10^{\2}", s)
    if _THOUSANDS.match(s):
        s = s.replace(",", "").replace(" ", "")
    return s.strip()


__all__ = ["FUNCTION_NAMES", "PLAIN_NUMBER", "normalize"]
