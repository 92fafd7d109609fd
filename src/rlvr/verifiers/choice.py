"""The "choice" verifier: pull the final multiple-choice letter out of a response and compare it with the gold letter.

    verify("choice", "Let me think... The answer is (B).", "B")       # correct, reason "choice_match"
    verify("choice", "It is either A or B.", "A")                     # incorrect, reason "multiple_answers"

Extraction works in tiers, from the clearest signal to the weakest; the first tier that finds anything decides, and
inside a tier the LAST candidate wins (the model's final word):

1. "strong": ``\\boxed{B}``, an answer phrase ("Answer: B", "The final answer is (B)", "the correct option is B"),
   or a last non-empty line that is nothing but a letter ("B", "(B).", "**B**").
2. "marked": a bold letter (``**B**``), or "Option B" / "choice (B)" / "letter B".
3. "line_marker": lines that start with a letter marker ("B) because ...", "(C) ..."), used only when every such line
   names the same letter (several different ones are a listing of the options, not an answer).
4. "fallback": any standalone capital letter among the choices, skipping the article "A" ("A good approach ..."),
   the pronoun "I" ("I think ...") and the option labels of a listing ("A) 12\nB) 15").

Invisible characters (zero-width space and joiners, the word joiner, the soft hyphen, the byte-order mark,
direction marks, variation selectors, Hangul fillers, tag characters) are removed and the text is NFKC-normalised
before anything else, so "A\u200dB" reads as "AB" (no standalone letter) and a fullwidth "\uff22" as "B". A letter
is standalone only between characters that are not letters of any script and without a combining mark, so
"A\u0412" (a Latin A touching a Cyrillic Ve) is not "A", nor "B\u0338" (a struck-through B) "B". A look-alike letter from another script (Cyrillic "\u0412" for "B", Greek "\u0392") is
never credited as the Latin one: where reading the look-alikes as Latin would pick different letters than
reading them as what they are ("Answer: \u0412", "\u0410 or B"), the verdict is "incorrect", reason
"confusable_letter".

A letter that is negated or part of an expression is never an answer: one inside a negated clause ("Answer: not C",
"I would not pick D", "Neither A nor B", "B, not C", "rule out A"), one described as not the answer ("A is not
correct", "C isn't right"), one that is an operand ("\\mathrm{E}*2", "E=mc^2", "C-1"), one inside a dotted
abbreviation ("E.g.", "A.M.", "D.C.") and the pronoun "I" or article "A" before a word that cannot follow a letter
("Answer: I don't know"). If every candidate is negated the verdict
is "incorrect", reason "negated_choice"; a response with no candidate that declines to answer ("I am not sure.",
"I cannot answer this.") is "incorrect", reason "refusal".

Letters joined by "or", "and", "/", "&" or commas ("A or B", "Answer: A, C", "**A** or **B**") form one committed
answer; if it names more than one DIFFERENT letter it is a hedge: status "incorrect", reason "multiple_answers",
score 0. A committed letter outside ``choices`` ("Answer: E" for ABCD) is "incorrect", reason "invalid_choice".

Reasons: "choice_match", "choice_mismatch", "multiple_answers", "invalid_choice", "negated_choice", "refusal",
"confusable_letter",
"no_choice_found" (undecidable),
"bad_reference"/"bad_option"/"bad_response" (status "error"). ``details["source"]`` names the tier that decided.
All patterns are linear-time; the verifier is pure and never raises for any model output.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from typing import Any

from rlvr.verifiers.base import Status, Verdict
from rlvr.verifiers.registry import register_verifier

# One letter, possibly wrapped: (B)  [B]  **B**  *B*  $B$  \text{B}  \textbf{B}  \mathrm{B}. The wrapper runs are
# bounded character classes, never nested alternatives, so a run of "*" or "(" cannot make matching blow up.
_ITEM = re.compile(
    r"""
    (?<![\w\\'-])
    (?P<open>[*_$(\[{]{0,4}(?:\\(?:text(?:bf|rm|tt)?|mathrm|mathbf)\{)?[*_$(\[{]{0,2})
    (?P<letter>[A-Za-z])
    (?P<close>[*_$)\]}]{0,6})
    (?![\w\u0300-\u036f\u1ab0-\u1aff\u1dc0-\u1dff\u20d0-\u20ff\ufe20-\ufe2f]|'[A-Za-z])
    """,
    re.VERBOSE,
)
# What joins the letters of one answer: "A or B", "A, C", "A/B", "A & B", "A, B, and C", "A and/or B".
_SEP = re.compile(
    r"[ \t]*(?:(?P<punct>[,/&+])[ \t]*(?:(?P<w1>and/or|or|and)\b[ \t]*)?|(?P<w2>and/or|or|and)\b[ \t]*)", re.IGNORECASE
)
_STRICT_END = re.compile(r"[ \t]*(?:$|\n|\r|[.,;:!?)\]}*_$\"]|-{1,2}[ \t]|\u2014|\u2013)")
_NEXT_WORD = re.compile(r"[ \t]+([A-Za-z']+)")
# After "B and" / "B,", a following letter that starts its own clause ("B, A is wrong") is not part of the answer.
_CLAUSE_VERBS = frozenset(
    "is was isn't wasn't seems looks can cannot can't would could should must might may does doesn't has had "
    "fails appears remains gives makes only alone".split()
)
# "A" counts as a letter, not the article, when the next word is one of these (or punctuation follows).
_LETTER_AFTER_A = _CLAUSE_VERBS | {"or", "nor", "and", "are", "were", "both", "because", "since", "as", "but", "so"}
_LETTER_AFTER_I = frozenset({"is", "was", "isn't", "wasn't", "seems", "or", "and"})
_LETTER_AFTER_I_STRONG = _LETTER_AFTER_I | {"because", "since", "as", "but", "so"}

# \boxed{...} with at most one level of inner braces (\boxed{\text{B}}); a letter answer is short
_BOXED = re.compile(r"\\boxed[ \t]*\{(?P<content>[^{}]{0,100}(?:\{[^{}]{0,100}\}[^{}]{0,100})?)\}")
_ANSWER_ANCHOR = re.compile(
    r"""
    \b(?:(?:final|correct|right|best|true)[ \t]+)?(?:answer|option|choice)(?:[ \t]*\(s\)|s)?
    [ \t]*(?:\*\*|__)?[ \t]*
    (?:is|are|would[ \t]+be|will[ \t]+be|should[ \t]+be|must[ \t]+be|:|=|-|\u2014|\u2013)
    [ \t]*(?:\*\*|__)?[ \t]*:?[ \t]*
    (?:(?:therefore|thus|hence|clearly|then|probably|likely|definitely|indeed|either|both)[ \t]*,?[ \t]+)?
    (?:(?:option|choice|letter)[ \t]*:?[ \t]*)?
    """,
    re.VERBOSE | re.IGNORECASE,
)
_OPTION_ANCHOR = re.compile(r"\b(?:option|choice|letter|answer)[ \t]*[:#]?[ \t]*", re.IGNORECASE)
_BOLD = re.compile(r"(?<![A-Za-z0-9*_])(?P<w>\*\*|__)[ \t]*[(\[]?(?P<letter>[A-Za-z])[)\]]?[.:]?[ \t]*(?P=w)(?![*_])")
_LINE_MARKER = re.compile(
    r"^[ \t]*(?:[-*>][ \t]+)?(?:\*\*)?[(\[]?(?P<letter>[A-Z])(?:[)\].:]|\*\*)(?:\*\*)?(?=[ \t]|$)", re.MULTILINE
)
_BLANKS = re.compile(r"[ \t\f\v]+")
# Characters that render as nothing (or as a blank with no width of its own): removed before extraction.
_INVISIBLE = re.compile(
    "[\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180b-\u180f\u200b-\u200f\u202a-\u202e\u2060-\u206f"
    "\u2800\u3164\ufe00-\ufe0f\ufeff\uffa0\U0001d173-\U0001d17a\U000e0000-\U000e0fff]"
)
# Capital letters of other scripts that look like the Latin option letters, when they stand alone or touch Latin
# letters (not inside a word of their own script: a Russian "\u0412" preposition in a sentence is left alone).
_LOOKALIKE_LATIN = {
    **dict(zip("\u0410\u0412\u0421\u0415\u041d\u0406\u0408\u041a\u041c\u041e\u0420\u0405\u0422\u0423\u0425",
               "ABCEHIJKMOPSTYX")),  # Cyrillic
    **dict(zip("\u0391\u0392\u0395\u0396\u0397\u0399\u039a\u039c\u039d\u039f\u03a1\u03a4\u03a5\u03a7",
               "ABEZHIKMNOPTYX")),  # Greek
    **dict(zip("\u13aa\u13f4\u13df\u13a1\u13bb\u13ab\u13e6\u13b7\u13c2\u13a2", "ABCEHJKMPT")),  # Cherokee
}
_LOOKALIKE = re.compile(
    "(?<![^\\W\\d_A-Za-z])[" + "".join(_LOOKALIKE_LATIN) + "](?![^\\W\\d_A-Za-z])"
)

# Negation. A letter is negated when the clause before it (back to the last sentence or clause break, at most
# _CLAUSE_CHARS characters) holds a negation cue, or when it is followed by "is not ..." / "isn't ...".
_CLAUSE_CHARS = 80
_LAST_CLAUSE_BREAK = re.compile(
    r".*(?:[.;:!?\n\r,)\]]|\b(?:(?<!anything )(?<!everything )(?<!all )but|so|thus|hence|therefore"
    r"|instead(?! of)|however|rather(?! than)|then|yet)\b)",
    re.IGNORECASE | re.DOTALL,
)
_NEGATION_CUE = re.compile(
    r"""\b(?:not|never|no|neither|nor|none|except|excluding|exclude[sd]?|eliminat(?:e[sd]?|ing)|avoid(?:s|ed|ing)?
    |reject(?:s|ed|ing)?|rul(?:e[sd]?|ing)[ \t]+out|other[ \t]+than|instead[ \t]+of|rather[ \t]+than
    |anything[ \t]+but|cannot|without)\b|n['\u2019]t\b""",
    re.IGNORECASE | re.VERBOSE,
)
# substrings at least one of which every negation cue contains: a quick filter before the regex
_CUE_HINTS = ("no", "ne", "exc", "elimin", "avoid", "reject", "rul", "other", "instead", "rather", "anything",
              "without", "n't", "n\u2019t")
# phrases with a negation word that do not negate what follows ("no doubt the answer is C")
_NOT_A_NEGATION = re.compile(
    r"\b(?:no[ \t]+doubt|not[ \t]+only|no[ \t]+matter|without[ \t]+(?:a[ \t]+)?doubt|no[ \t]+question|not[ \t]+hard"
    r"|not[ \t]+difficult|not[ \t]+surprising(?:ly)?)\b",
    re.IGNORECASE,
)
_NEGATIVE_PREDICATE = (
    r"[ \t]+(?:definitely[ \t]+|clearly[ \t]+|also[ \t]+|both[ \t]+|all[ \t]+)?"
    r"(?:not|never|hardly|wrong|incorrect|false|invalid|impossible|ruled[ \t]+out|eliminated)\b"
)
_NEGATED_AFTER = re.compile(
    r"[ \t]*(?:is|are|was|were|would[ \t]+be|seems?|looks?|appears?)" + _NEGATIVE_PREDICATE
    # letters joined to this one share a plural predicate: "(A) and (B) are both wrong"
    + r"|(?:[ \t]*(?:,|and|or|&)[ \t]*[(\[]?[A-Z][)\]]?){1,8}[ \t]*(?:are|were|would[ \t]+be|seem|look|appear)"
    + _NEGATIVE_PREDICATE
    + r"|[ \t]*(?:isn't|wasn't|isn\u2019t|wasn\u2019t|can't|cannot|can\u2019t|won't|doesn't|does[ \t]+not|fails)\b",
    re.IGNORECASE,
)
# A letter glued to a word through a wrapper is part of that word ("(E)nergy", "[A]pple").
_GLUED_AFTER = re.compile(r"[*_$)\]}]+[A-Za-z0-9]")
# A letter inside a dotted abbreviation is not a choice ("E.g.", "A.M.", "D.C.").
_DOTTED_AFTER = re.compile(r"\.[A-Za-z]\b")
_DOTTED_BEFORE = re.compile(r"(?<![A-Za-z])[A-Za-z]\.\Z")
# A letter next to an arithmetic operator and an operand is a symbol in an expression ("E*2", "C-1", "x = A").
_OPERAND_AFTER = re.compile(
    r"(?:[*^]|[-+/](?=[ \t]*\d)|-(?=\w)|[ \t]*[=<>^\u00d7\u00b7\u00f7\u2264\u2265\u2260])[ \t]*[\w(\\{]"
)
_OPERATOR_CHARS = frozenset("*^=<>+-/\u00d7\u00b7\u00f7\u2264\u2265\u2260")
_OPERAND_BEFORE = re.compile(
    r"(?:[\w)}\]][ \t]*[*^\u00d7\u00b7\u00f7]|[=<>\u2264\u2265\u2260]|\d[ \t]*[-+/])[ \t]*\Z"
)
# Declining to answer (only consulted when no candidate letter is found).
_REFUSAL = re.compile(
    r"""\b(?:(?:I|we)[ \t]+(?:do[ \t]+not|don't|don\u2019t|cannot|can't|can\u2019t|am[ \t]+not|'m[ \t]+not
    |am[ \t]+unable)
    [ \t]+(?:know|sure|certain|tell|answer|determine|decide|say|be[ \t]+sure)
    |I'm[ \t]+not[ \t]+(?:sure|certain)|not[ \t]+sure|unsure|no[ \t]+idea|(?:refuse|decline|unable)[ \t]+to
    |cannot[ \t]+be[ \t]+(?:determined|answered)|can't[ \t]+be[ \t]+(?:determined|answered))""",
    re.IGNORECASE | re.VERBOSE,
)
_TAIL_JUNK = re.compile(r"[\s.!)*_$\]]*\Z")

MAX_NEGATED_TAIL = 1000  # negated candidates looked past, per tier, before the tier gives up
MAX_RESPONSE_CHARS = 1_000_000  # longer responses are scanned only in their last MAX_RESPONSE_CHARS characters


@dataclass
class _Chain:
    letters: list[str]
    start: int
    end: int


def _normalize_choices(choices: Any) -> str | None:
    if isinstance(choices, str):
        letters = [c for c in choices if not c.isspace() and c not in ",;"]
    elif isinstance(choices, (list, tuple)) and all(isinstance(c, str) for c in choices):
        letters = [c.strip() for c in choices]
    else:
        return None
    letters = [c.upper() for c in letters]
    if not letters or not all(len(c) == 1 and "A" <= c <= "Z" for c in letters) or len(set(letters)) != len(letters):
        return None
    return "".join(letters)


def _reference_letter(value: Any) -> str | None:
    if not isinstance(value, str):
        return None
    text = value.strip().strip("()[].*: ").strip()
    if len(text) == 1 and text.isascii() and text.isalpha():
        return text.upper()
    return None


def _accept(m: re.Match[str], text: str, choices: str, kind: str, after: str = "") -> bool:
    """Whether a matched single letter counts as a choice. ``kind``: "strong" (right after an answer phrase),
    "marked" (after "Option"), "next" (after a separator; ``after`` is the separator text) or "fallback"."""
    return _letter_like(m, text, choices, kind, after) and not _symbol(m, text, kind)


def _symbol(m: re.Match[str], text: str, kind: str) -> bool:
    """Whether the letter is a symbol in an expression or a dotted abbreviation rather than a choice."""
    return bool(
        _OPERAND_AFTER.match(text, m.end())
        or _GLUED_AFTER.match(text, m.end())
        or _DOTTED_AFTER.match(text, m.end("letter"))
        or _DOTTED_BEFORE.search(text, max(0, m.start("letter") - 2), m.start("letter"))
        or (
            kind == "fallback"
            and text[max(0, m.start() - 3) : m.start()].rstrip()[-1:] in _OPERATOR_CHARS
            and _OPERAND_BEFORE.search(text, max(0, m.start() - 12), m.start())
        )
    )


def _letter_like(m: re.Match[str], text: str, choices: str, kind: str, after: str) -> bool:
    letter = m["letter"]
    upper = letter.upper()
    in_choices = upper in choices
    strict_end = _STRICT_END.match(text, m.end()) is not None
    wrapped = bool(m["open"] or m["close"])
    if letter.islower():
        return in_choices and kind != "fallback" and (wrapped or strict_end)
    if not in_choices:
        return kind == "strong" and strict_end  # "Answer: E." commits to a letter the question does not have
    if wrapped or strict_end:
        return True
    word_m = _NEXT_WORD.match(text, m.end())
    word = word_m[1].lower() if word_m else ""
    if kind in ("strong", "marked"):  # "Answer: B because ..." but not "Answer: I don't know", "Answer: A bit more"
        return not word_m or not (
            (upper == "A" and word not in _LETTER_AFTER_A) or (upper == "I" and word not in _LETTER_AFTER_I_STRONG)
        )
    if kind == "next":
        joined_by_or = "or" in after.lower().split() or "/" in after
        return joined_by_or or word not in _CLAUSE_VERBS
    # fallback: skip the article "A" and the pronoun "I"
    if upper == "A" and word_m and word not in _LETTER_AFTER_A:
        return False
    if upper == "I" and word_m and word not in _LETTER_AFTER_I:
        return False
    return True


def _parse_list(text: str, pos: int, choices: str, kind: str) -> _Chain | None:
    """The letter list starting exactly at ``pos`` ("B", "(A) or (C)", "A, B and D"), or None."""
    m = _ITEM.match(text, pos)
    if m is None or not _accept(m, text, choices, kind):
        return None
    chain = _Chain([m["letter"].upper()], m.start(), m.end())
    while True:
        sep = _SEP.match(text, chain.end)
        if sep is None:
            break
        nxt = _ITEM.match(text, sep.end())
        if nxt is None or not _accept(nxt, text, choices, "next", sep.group(0)):
            break
        chain.letters.append(nxt["letter"].upper())
        chain.end = nxt.end()
    return chain


def _negated(text: str, start: int, end: int) -> bool:
    """Whether the letters at text[start:end] are negated by their clause ("not C", "Neither A nor B", "A is not
    correct"). Looks at a bounded window, so the cost per candidate is constant."""
    window = text[max(0, start - _CLAUSE_CHARS) : start]
    lowered = window.lower()
    if any(hint in lowered for hint in _CUE_HINTS) and _NEGATION_CUE.search(window):  # most windows hold no cue
        last_break = _LAST_CLAUSE_BREAK.match(window)
        clause = window[last_break.end() :] if last_break else window
        if _NEGATION_CUE.search(_NOT_A_NEGATION.sub(" ", clause)):
            return True
    return _NEGATED_AFTER.match(text, end) is not None


def _affirmed(chains: list[_Chain], text: str, negated: list[str]) -> list[_Chain]:
    """The chains that are not negated; the letters of the others are added to ``negated``."""
    kept = []
    for chain in chains:
        if _negated(text, chain.start, chain.end):
            negated.extend(chain.letters)
        else:
            kept.append(chain)
    return kept


def _merge(chains: list[_Chain], text: str, negated: list[str], *, weak_separators: bool) -> _Chain | None:
    """The last chain that is not negated, merged with the chains just before it that are joined only by a
    separator ("\\boxed{A} or \\boxed{B}", "**A** or **B**"). Negation is checked lazily, from the end, so only
    the chains that could take part are looked at; the letters of negated ones are added to ``negated``."""
    chains = sorted(chains, key=lambda c: (c.start, c.end))
    last = len(chains) - 1
    while last >= 0 and _negated(text, chains[last].start, chains[last].end):
        negated.extend(chains[last].letters)
        last -= 1
        if len(chains) - last > MAX_NEGATED_TAIL:  # a response that is a wall of negations commits to nothing
            return None
    if last < 0:
        return None
    groups = [chains[last].letters]  # collected back to front
    start, end = chains[last].start, chains[last].end
    for prev in reversed(chains[:last]):
        if prev.end > start:  # overlapping candidates (the same letter seen by two patterns)
            if prev.start < start and not _negated(text, prev.start, prev.end):
                groups.append(prev.letters)
                start, end = prev.start, max(prev.end, end)
            continue
        if start - prev.end > 40:
            break
        gap = text[prev.end : start].replace("$", " ")
        sep = _SEP.fullmatch(gap)
        if gap.strip() and sep is None:
            break
        if sep is not None and not weak_separators and not (sep["w1"] or sep["w2"] or sep["punct"] in ("/", "&")):
            break
        if _negated(text, prev.start, prev.end):  # "not A or B": A is no part of the answer, and ends the run
            negated.extend(prev.letters)
            break
        groups.append(prev.letters)
        start = prev.start
    return _Chain([letter for group in reversed(groups) for letter in group], start, end)


def _boxed_chains(text: str, choices: str) -> list[_Chain]:
    chains = []
    for m in _BOXED.finditer(text):
        content = m["content"].strip()
        chain = _parse_list(content, 0, choices, "strong")
        if chain is not None and _TAIL_JUNK.match(content, chain.end):
            chains.append(_Chain(chain.letters, m.start(), m.end()))
    return chains


def _last_line_chain(text: str, choices: str) -> list[_Chain]:
    stripped = text.rstrip()
    start = max(stripped.rfind("\n"), stripped.rfind("\r")) + 1
    line = stripped[start:]
    offset = start + len(line) - len(line.lstrip(" \t-*>"))
    if stripped[offset : offset + 2] in ("**", "__"):
        offset = offset if _ITEM.match(stripped, offset) else offset + 2
    chain = _parse_list(stripped, offset, choices, "strong")
    if chain is None or not _TAIL_JUNK.match(stripped, chain.end):
        return []
    # a lone "A" or "I" line after prose is still a letter; a lone lowercase letter needs to be in choices (checked)
    return [chain]


def _strong(text: str, choices: str, negated: list[str]) -> _Chain | None:
    chains = _boxed_chains(text, choices)
    for m in _ANSWER_ANCHOR.finditer(text):
        chain = _parse_list(text, m.end(), choices, "strong")
        if chain is not None:
            chains.append(chain)
    chains += _last_line_chain(text, choices)
    return _merge(chains, text, negated, weak_separators=True)


def _marked(text: str, choices: str, negated: list[str]) -> _Chain | None:
    chains = []
    for m in _BOLD.finditer(text):
        if m["letter"].upper() in choices and not _OPERAND_AFTER.match(text, m.end()):
            chains.append(_Chain([m["letter"].upper()], m.start(), m.end()))
    for m in _OPTION_ANCHOR.finditer(text):
        chain = _parse_list(text, m.end(), choices, "marked")
        if chain is not None:
            chains.append(chain)
    return _merge(chains, text, negated, weak_separators=True)


def _line_markers(text: str, choices: str, negated: list[str]) -> _Chain | None:
    found = [
        _Chain([m["letter"]], m.start("letter"), m.end())
        for m in _LINE_MARKER.finditer(text)
        if m["letter"] in choices
    ]
    found = _affirmed(found, text, negated)
    if not found or len({chain.letters[0] for chain in found}) != 1:
        return None
    return found[-1]


def _fallback(text: str, choices: str, negated: list[str]) -> _Chain | None:
    # letters that open a line ("A) 12") label the options being listed; they are not answers here
    markers = {m.start("letter") for m in _LINE_MARKER.finditer(text)}
    chains = [
        _Chain([m["letter"]], m.start(), m.end())
        for m in _ITEM.finditer(text)
        if m["letter"].isupper() and m.start("letter") not in markers and _accept(m, text, choices, "fallback")
    ]
    return _merge(chains, text, negated, weak_separators=False)


_TIERS = (("strong", _strong), ("marked", _marked), ("line_marker", _line_markers), ("fallback", _fallback))


def visible_text(text: str) -> str:
    """``text`` as a reader sees it: invisible characters removed, then NFKC (fullwidth and styled letters become
    plain ones). Look-alike letters of other scripts are left as they are."""
    if not text.isascii():
        text = unicodedata.normalize("NFKC", _INVISIBLE.sub("", text))
    return text


def _lookalikes_as_latin(text: str) -> str:
    return _LOOKALIKE.sub(lambda m: _LOOKALIKE_LATIN[m.group()], text)


def extract_choice(text: str, choices: str = "ABCD") -> tuple[list[str], str] | None:
    """The letters of the final committed answer (distinct, in order) and the tier that found them, or None."""
    found = _extract(visible_text(text), choices)
    return found[:2] if found[0] else None


def _extract(text: str, choices: str) -> tuple[list[str], str, list[str]]:
    """(letters of the final committed answer, the tier that found them, negated letters seen before)."""
    # one space per run of blanks keeps every pattern's backtracking constant-bounded (linear time overall)
    text = _BLANKS.sub(" ", text)
    negated: list[str] = []
    for source, finder in _TIERS:
        chain = finder(text, choices, negated)
        if chain is not None:
            return list(dict.fromkeys(chain.letters)), source, negated
    return [], "", sorted(set(negated))


@register_verifier("choice")
def choice(
    response: str,
    reference: Any,
    *,
    choices: Any = "ABCD",
    timeout_s: float | None = None,  # the runner's budget; nothing here can run long
) -> Verdict:
    """Multiple choice. ``reference``: the gold letter ("B", "(b)") or a list of acceptable letters.
    ``choices``: the option letters, a string ("ABCDE") or a list; case-insensitive."""
    letters = _normalize_choices(choices)
    if letters is None:
        return Verdict(
            0.0, Status.ERROR, "bad_option", details={"error": f"choices must be distinct letters A-Z, got {choices!r}"}
        )
    refs = reference if isinstance(reference, (list, tuple, set, frozenset)) else [reference]
    gold = [_reference_letter(r) for r in refs]
    if not gold or None in gold:
        why = "expected a letter or a non-empty list of letters"
        return Verdict(0.0, Status.ERROR, "bad_reference", details={"error": why, "reference": repr(reference)[:200]})
    outside = sorted({g for g in gold if g not in letters})
    if outside:
        why = f"reference letter(s) {', '.join(outside)} not among choices {letters}"
        return Verdict(0.0, Status.ERROR, "bad_reference", details={"error": why})
    if not isinstance(response, str):
        error = f"response is {type(response).__name__}, expected str"
        return Verdict(0.0, Status.ERROR, "bad_response", details={"error": error})

    text = visible_text(response[-MAX_RESPONSE_CHARS:])
    picked, source, negated = _extract(text, letters)
    if not text.isascii() and _LOOKALIKE.search(text):
        as_latin = _extract(_lookalikes_as_latin(text), letters)[0]
        if as_latin != picked:  # the answer depends on reading a look-alike letter as Latin: never credited
            details = {"source": source, "read_as_latin": ",".join(as_latin)}
            return Verdict(0.0, Status.INCORRECT, "confusable_letter", extracted=",".join(picked) or None,
                           details=details)
    if not picked:
        if negated:
            return Verdict(0.0, Status.INCORRECT, "negated_choice", details={"negated": negated})
        if _REFUSAL.search(_BLANKS.sub(" ", text)):
            return Verdict(0.0, Status.INCORRECT, "refusal")
        return Verdict(0.0, Status.UNDECIDABLE, "no_choice_found")
    extracted = ",".join(picked)
    details = {"source": source}
    if len(picked) > 1:
        return Verdict(0.0, Status.INCORRECT, "multiple_answers", extracted=extracted, details=details)
    if picked[0] not in letters:
        return Verdict(0.0, Status.INCORRECT, "invalid_choice", extracted=extracted, details=details)
    if picked[0] in gold:
        return Verdict(1.0, Status.CORRECT, "choice_match", extracted=extracted, details=details)
    return Verdict(0.0, Status.INCORRECT, "choice_mismatch", extracted=extracted, details=details)
