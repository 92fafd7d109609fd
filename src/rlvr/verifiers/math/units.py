"""Units of measure after an answer's value: which words are units, their dimension and their size.

``mark(s)`` rewrites a trailing unit (a word such as "minutes", or ``\\text{cm}^2``) as ``\\unit{NAME}``, which
the parser reads into a quantity; count nouns ("units", "people") carry no dimension and are dropped. Two
quantities are equal when their dimensions agree and their values agree once converted (2 minutes = 120
seconds; 2 minutes is not 2 hours). Sizes are exact rationals of a base unit per dimension; the degree is
pi/180 of a radian.
"""

from __future__ import annotations

import re
from fractions import Fraction

from rlvr.verifiers.math.words import number_in_words

_F = Fraction
_INCH = _F(254, 10000)
_FOOT = 12 * _INCH
_YARD = 3 * _FOOT
_MILE = 5280 * _FOOT
_POUND = _F(45359237, 100000000)
_GALLON = 231 * _INCH**3  # the US gallon

# canonical name -> (dimension, size in the dimension's base unit); "deg" is special-cased (pi/180)
SIZES: dict[str, tuple[str, Fraction]] = {
    "mm": ("length", _F(1, 1000)), "cm": ("length", _F(1, 100)), "m": ("length", _F(1)),
    "km": ("length", _F(1000)), "in": ("length", _INCH), "ft": ("length", _FOOT), "yd": ("length", _YARD),
    "mi": ("length", _MILE),
    "mm^2": ("area", _F(1, 10**6)), "cm^2": ("area", _F(1, 10**4)), "m^2": ("area", _F(1)),
    "km^2": ("area", _F(10**6)), "in^2": ("area", _INCH**2), "ft^2": ("area", _FOOT**2),
    "yd^2": ("area", _YARD**2), "mi^2": ("area", _MILE**2),
    "mm^3": ("volume", _F(1, 10**9)), "cm^3": ("volume", _F(1, 10**6)), "m^3": ("volume", _F(1)),
    "in^3": ("volume", _INCH**3), "ft^3": ("volume", _FOOT**3), "L": ("volume", _F(1, 1000)),
    "mL": ("volume", _F(1, 10**6)), "cL": ("volume", _F(1, 10**5)), "dL": ("volume", _F(1, 10**4)),
    "gal": ("volume", _GALLON), "qt": ("volume", _GALLON / 4), "pt": ("volume", _GALLON / 8),
    "cup": ("volume", _GALLON / 16), "floz": ("volume", _GALLON / 128),
    "s": ("time", _F(1)), "min": ("time", _F(60)), "h": ("time", _F(3600)), "day": ("time", _F(86400)),
    "week": ("time", _F(604800)),
    "year": ("year", _F(1)), "month": ("month", _F(1)),  # calendar units of varying length: not converted
    "mg": ("mass", _F(1, 1000)), "g": ("mass", _F(1)), "kg": ("mass", _F(1000)), "lb": ("mass", 1000 * _POUND),
    "oz": ("mass", 1000 * _POUND / 16),
    "dollar": ("money", _F(1)), "cent": ("money", _F(1, 100)),
    "mph": ("speed", _MILE / 3600), "km/h": ("speed", _F(1000, 3600)), "m/s": ("speed", _F(1)),
    "deg": ("angle", _F(1)), "rad": ("angle", _F(1)),
    # temperatures convert with an offset (equivalence.py); the size is that of one degree in kelvins
    "degC": ("temperature", _F(1)), "K": ("temperature", _F(1)), "degF": ("temperature", _F(5, 9)),
}
# the kelvin value of zero on a temperature scale
TEMPERATURE_ZERO: dict[str, Fraction] = {"degC": _F(27315, 100), "K": _F(0), "degF": _F(27315, 100) - _F(160, 9)}

# spelling -> canonical name (matched case-insensitively when longer than two letters)
_SPELLINGS = {
    "mm": "mm", "millimeters?": "mm", "millimetres?": "mm", "cm": "cm", "centimeters?": "cm",
    "centimetres?": "cm", "m": "m", "meters?": "m", "metres?": "m", "km": "km", "kilometers?": "km",
    "kilometres?": "km", "in": "in", "inch(?:es)?": "in", "ft": "ft", "feet": "ft", "foot": "ft", "yd": "yd",
    "yards?": "yd", "mi": "mi", "miles?": "mi",
    "ml": "mL", "mL": "mL", "cc": "cm^3", "milliliters?": "mL", "millilitres?": "mL", "L": "L", "liters?": "L", "litres?": "L",
    "s": "s", "sec": "s", "secs": "s", "seconds?": "s", "min": "min", "mins": "min", "minutes?": "min",
    "h": "h", "hr": "h", "hrs": "h", "hours?": "h", "days?": "day", "weeks?": "week", "years?": "year",
    "months?": "month",
    "mg": "mg", "milligrams?": "mg", "g": "g", "grams?": "g", "kg": "kg", "kilograms?": "kg", "lbs?": "lb",
    "pounds?": "lb", "oz": "oz", "ounces?": "oz",
    "dollars?": "dollar", "cents?": "cent",
    "mph": "mph", "km/h": "km/h", "kph": "km/h", "m/s": "m/s",
    "degrees?": "deg", "deg": "deg", "radians?": "rad", "rad": "rad",
    "(?:degrees? )?(?:celsius|centigrade)": "degC", "(?:degrees? )?fahrenheit": "degF", "kelvins?": "K",
    "gallons?": "gal", "quarts?": "qt", "pints?": "pt", "cups?": "cup", "fluid ounces?": "floz", "fl oz": "floz",
    "centiliters?": "cL", "centilitres?": "cL", "cl": "cL", "deciliters?": "dL", "decilitres?": "dL", "dl": "dL",
}
_PATTERNS = [(re.compile(k, re.I), re.compile(k), name) for k, name in _SPELLINGS.items()]
_SQUARE = re.compile(r"^(?:square|sq\.?)\s+(.+)$", re.I)
_CUBIC = re.compile(r"^(?:cubic|cu\.?)\s+(.+)$", re.I)
# count nouns: no dimension, dropped
_POWER = re.compile(r"^(.+?)\s*\^\s*\{?\s*([23])\s*\}?$")
_COUNTS = re.compile(r"^(?:(?:square |sq\.? |cubic )?units?|people|persons?|students|children|items|objects|"
                     r"ways|times)$", re.I)

def canonical(word: str) -> str | None:
    """The canonical unit named by ``word`` ("minutes" -> "min", "square feet" -> "ft^2"), "" for a count
    noun, None when it is no unit."""
    word = " ".join(word.split())
    if _COUNTS.match(word):
        return ""
    power = ""
    m = _SQUARE.match(word) or _CUBIC.match(word)
    if m:
        power, word = ("^2" if m.re is _SQUARE else "^3"), m.group(1)
    m = _POWER.match(word)
    if m and not power:
        word, power = m.group(1), "^" + m.group(2)
    for any_case, exact, name in _PATTERNS:
        if (any_case if len(word) > 2 else exact).fullmatch(word):
            unit = name + power
            return unit if unit in SIZES else None
    return None


# a bare unit word (two or more letters; single letters only inside \text{}) at the end of an answer
_BARE = re.compile(
    r"(?<=[\d}\s])\s*((?:(?:square|sq\.?|cubic)\s+)?[a-zA-Z]{2,}(?:/[a-zA-Z]+)?(?:\s*\^\s*\{?[23]\}?)?)\s*$"
)


def mark_trailing(s: str) -> str:
    """``s`` with a trailing bare unit word replaced by ``\\unit{NAME}`` (count nouns dropped)."""
    m = _BARE.search(s, max(0, len(s) - 40))
    if m is None:
        return s
    word = m.group(1)
    if word in ("in", "min", "or", "and") or (len(word) <= 2 and word.lower() not in ("cm", "mm", "km", "kg", "mg",
                                                                                   "ft", "yd", "mi", "lb", "oz", "ml")):
        return s
    unit = canonical(word)
    if unit is None:
        return s
    head = s[: m.start()].rstrip()
    if not head:
        return s
    return head if unit == "" else f"{head} \\unit{{{unit}}}"


def wrapped(inner: str) -> str | None:
    """The marker for the unit inside ``\\text{...}`` (any spelling, single letters too), "" for a count
    noun, None when ``inner`` is no unit."""
    inner = inner.strip()
    if not inner or len(inner) > 30:
        return None
    unit = canonical(inner)
    if unit is None:
        return None
    return "" if unit == "" else f"\\unit{{{unit}}}"


# an amount of money in two parts: "12 dollars and 50 cents", "$12 and 50 cents", "twelve dollars fifty"
_MONEY = re.compile(
    r"^(?:\\?\$\s*(?P<sign>)(?P<a>[a-z0-9.\s-]{1,80}?)|(?P<b>[a-z0-9.\s-]{1,80}?)\s*dollars?)"
    r"\s*(?:,\s*|\s+and\s+|\s+)(?P<c>[a-z0-9\s-]{1,40}?)\s*(?P<cents>cents?)?$",
    re.I,
)


def _amount(text: str) -> Fraction | None:
    text = text.strip()
    if re.fullmatch(r"\d+(?:\.\d+)?", text):
        return Fraction(text)
    return Fraction(1) if text.lower() in ("a", "an") else number_in_words(text)


def money_in_parts(s: str) -> Fraction | None:
    """The dollars of an amount written as dollars and cents ("12 dollars and 50 cents" = 12.5, "$3 and 5 cents"
    = 3.05, "twelve dollars fifty" = 12.5), None for any other text. A "$" amount needs the word "cents", so that
    "$12 50" stays what it is."""
    m = _MONEY.match(s.strip()) if len(s) <= 200 else None
    if m is None or (m.group("a") is not None and not m.group("cents")):
        return None
    dollars = _amount(m.group("a") if m.group("a") is not None else m.group("b"))
    cents = _amount(m.group("c"))
    if dollars is None or cents is None or cents.denominator != 1 or not 0 <= cents < 100 or dollars < 0:
        return None
    return dollars + cents / 100


__all__ = ["SIZES", "TEMPERATURE_ZERO", "canonical", "mark_trailing", "money_in_parts", "wrapped"]
