"""Numbers written in English words: cardinals ("twenty-five", "one hundred and twelve", "three thousand"),
fractions ("one half", "a third", "two thirds", "three quarters", "five eighths") and mixed numbers ("two and a
half"), with an optional sign ("negative five", "minus three").

The whole text must be number words: "five apples" or "about five" is no number here (parse.py decides what
words after a number mean). Linear in the number of words; at most MAX_WORDS of them.
"""

from __future__ import annotations

import re
from fractions import Fraction

MAX_WORDS = 16
_UNITS = {
    "zero": 0, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9,
    "ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13, "fourteen": 14, "fifteen": 15, "sixteen": 16,
    "seventeen": 17, "eighteen": 18, "nineteen": 19,
}
_TENS = {"twenty": 20, "thirty": 30, "forty": 40, "fifty": 50, "sixty": 60, "seventy": 70, "eighty": 80, "ninety": 90}
_SCALES = {"thousand": 10**3, "million": 10**6, "billion": 10**9, "trillion": 10**12}
# denominators: singular and plural ("a third", "two thirds"); "second" only in the plural ("two seconds" is time)
_DENOMINATORS = {
    "half": 2, "halves": 2, "third": 3, "thirds": 3, "quarter": 4, "quarters": 4, "fourth": 4, "fourths": 4,
    "fifth": 5, "fifths": 5, "sixth": 6, "sixths": 6, "seventh": 7, "sevenths": 7, "eighth": 8, "eighths": 8,
    "ninth": 9, "ninths": 9, "tenth": 10, "tenths": 10, "hundredth": 100, "hundredths": 100,
    "thousandth": 1000, "thousandths": 1000,
}
_SIGNS = {"negative": -1, "minus": -1, "positive": 1, "plus": 1}
_WORD = re.compile(r"[a-z]+")


def _cardinal(words: list[str]) -> int | None:
    """The integer of a run of cardinal words ("one hundred twenty three"), None if it is not one."""
    if not words:
        return None
    total, current, seen = 0, 0, False
    for w in words:
        if w in _UNITS:
            current += _UNITS[w]
        elif w in _TENS:
            current += _TENS[w]
        elif w == "hundred":
            current = (current or 1) * 100
        elif w in _SCALES:
            total += (current or 1) * _SCALES[w]
            current = 0
        elif w == "and" and seen:
            continue
        else:
            return None
        seen = True
    return total + current


def number_in_words(text: str) -> Fraction | None:
    """The value of ``text`` when it is a number in words, else None."""
    low = text.strip().lower().replace("-", " ")
    if not low or len(low) > 200:
        return None
    words = low.split()
    if len(words) > MAX_WORDS or not all(_WORD.fullmatch(w) for w in words):
        return None
    sign = 1
    if words[0] in _SIGNS:
        sign, words = _SIGNS[words[0]], words[1:]
    if not words:
        return None
    if words[-1] in _DENOMINATORS:  # a fraction, possibly after a whole part: "two and three quarters"
        denominator = _DENOMINATORS[words[-1]]
        head = words[:-1]
        whole = 0
        if "and" in head and head.index("and") > 0:
            k = len(head) - 1 - head[::-1].index("and")
            whole_part = _cardinal(head[:k])
            if whole_part is None:
                return None
            whole, head = whole_part, head[k + 1 :]
        if head in (["a"], ["an"], ["one"]):
            numerator = 1
        else:
            numerator = _cardinal(head)  # type: ignore[assignment]
            if numerator is None or numerator == 0:
                return None
        if numerator > 1 and not words[-1].endswith("s") and words[-1] != "halves":
            return None  # "two third" is no fraction
        return sign * (whole + Fraction(numerator, denominator))
    value = _cardinal(words)
    return None if value is None else Fraction(sign * value)


_MIXED = re.compile(r"^(-?\d+)\s+and\s+([a-z][a-z\s-]*)$")


def mixed_number(text: str) -> Fraction | None:
    """The value of a whole number and a fraction joined by "and", in words or with the whole part in digits
    ("two and a half", "3 and three quarters"), else None."""
    low = " ".join(text.lower().split())
    if " and " not in low or low.replace("-", " ").split()[-1] not in _DENOMINATORS:
        return None
    m = _MIXED.match(low)
    if m is None:
        return number_in_words(low)
    part = number_in_words(m.group(2))
    if part is None or not 0 < part < 1:
        return None
    whole = int(m.group(1))
    return whole - part if m.group(1).startswith("-") else whole + part


__all__ = ["mixed_number", "number_in_words"]
