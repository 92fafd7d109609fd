"""The 25 IFEval instruction checks (Zhou et al., 2023, "Instruction-Following Evaluation for Large Language
Models", arXiv:2311.07911, Table 1), under IFEval's instruction ids and keyword-argument names, so rows of
IFEval's prompt files can be checked as they are.

Each check is built from its kwargs by :func:`build_checker`, which validates them, and then answers
``checker(response) -> bool`` (the "strict" check; the loose variants live in the verifier). The semantics
follow IFEval's reference checker; where this module deliberately differs it says so:

* keywords, forbidden words, section splitters and postscript markers are matched literally (escaped), not
  as regular expressions (identical for plain words, which is what IFEval's data holds);
* sentences and capital words use this package's own tokenizers (:mod:`.textutil`), not NLTK's;
* language detection is seeded, so it is deterministic (:mod:`.language`);
* a letter_frequency "letter" outside a-z ("#", "!", as in IFEval's data) is counted as given, where the
  reference substitutes a random letter.

docs/rewards.md ("IFEval agreement") measures the agreement with the reference and lists each difference.
"""

from __future__ import annotations

import collections
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from rlvr.verifiers.ifeval import textutil
from rlvr.verifiers.ifeval.language import UndetectableLanguage, detect_language, same_language

Checker = Callable[[str], bool]

RELATIONS = ("less than", "at least")


class UnknownInstruction(KeyError):
    """No check has this instruction id."""


class BadKwargs(ValueError):
    """An instruction's kwargs are missing, of the wrong type or out of range."""


@dataclass(frozen=True)
class Instruction:
    id: str
    kwargs: tuple[str, ...]  # the kwarg names it takes (all required)
    build: Callable[..., Checker]


_INSTRUCTIONS: dict[str, Instruction] = {}


def _instruction(instruction_id: str, *kwargs: str) -> Callable[[Callable[..., Checker]], Callable[..., Checker]]:
    def decorator(build: Callable[..., Checker]) -> Callable[..., Checker]:
        _INSTRUCTIONS[instruction_id] = Instruction(instruction_id, kwargs, build)
        return build

    return decorator


def instruction_ids() -> list[str]:
    """Every supported instruction id, sorted."""
    return sorted(_INSTRUCTIONS)


def clean_kwargs(kwargs: Mapping[str, Any] | None) -> dict[str, Any]:
    """The kwargs without null values (IFEval's files list every kwarg name on every row, unused ones null)."""
    if kwargs is None:
        return {}
    if not isinstance(kwargs, Mapping):
        raise BadKwargs(f"kwargs must be an object, got {type(kwargs).__name__}")
    return {str(k): v for k, v in kwargs.items() if v is not None}


def build_checker(instruction_id: str, kwargs: Mapping[str, Any] | None = None) -> Checker:
    """The check for one instruction. Raises UnknownInstruction for an unknown id and BadKwargs when the
    kwargs (nulls ignored) lack a required name, carry an unexpected one, or hold a bad value."""
    spec = _INSTRUCTIONS.get(instruction_id) if isinstance(instruction_id, str) else None
    if spec is None:
        raise UnknownInstruction(instruction_id)
    given = clean_kwargs(kwargs)
    unexpected = sorted(set(given) - set(spec.kwargs))
    if unexpected:
        raise BadKwargs(f"unexpected kwargs {unexpected}; {instruction_id} takes {list(spec.kwargs) or 'none'}")
    missing = [name for name in spec.kwargs if name not in given]
    if missing:
        raise BadKwargs(f"missing kwargs {missing} for {instruction_id}")
    return spec.build(**given)


# ------------------------------------------------------------------------------------------ kwarg checks


def _int(name: str, value: Any, minimum: int = 0) -> int:
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadKwargs(f"{name} must be an integer, got {value!r}")
    if value < minimum:
        raise BadKwargs(f"{name} must be >= {minimum}, got {value}")
    return value


def _text(name: str, value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise BadKwargs(f"{name} must be a non-empty string, got {value!r}")
    return value.strip()


def _texts(name: str, value: Any) -> list[str]:
    if isinstance(value, str) or not isinstance(value, (list, tuple)):
        raise BadKwargs(f"{name} must be a list of strings, got {value!r}")
    return [_text(name, item) for item in value]


def _relation(name: str, value: Any) -> str:
    if value not in RELATIONS:
        raise BadKwargs(f"{name} must be one of {list(RELATIONS)}, got {value!r}")
    return value


def _compare(count: int, relation: str, threshold: int) -> bool:
    return count < threshold if relation == "less than" else count >= threshold


def _literal(text: str) -> str:
    return re.escape(text)


# -------------------------------------------------------------------------------------------- keywords


@_instruction("keywords:existence", "keywords")
def _keywords_existence(keywords: Any) -> Checker:
    """Include every keyword (case-insensitive, anywhere, also inside longer words)."""
    patterns = [re.compile(_literal(k), re.IGNORECASE) for k in _texts("keywords", keywords)]
    return lambda value: all(p.search(value) for p in patterns)


@_instruction("keywords:frequency", "keyword", "frequency", "relation")
def _keywords_frequency(keyword: Any, frequency: Any, relation: Any) -> Checker:
    """The keyword (case-insensitive, non-overlapping occurrences) appears < N ("less than") or >= N times."""
    pattern = re.compile(_literal(_text("keyword", keyword)), re.IGNORECASE)
    n, rel = _int("frequency", frequency), _relation("relation", relation)
    return lambda value: _compare(sum(1 for _ in pattern.finditer(value)), rel, n)


@_instruction("keywords:forbidden_words", "forbidden_words")
def _keywords_forbidden(forbidden_words: Any) -> Checker:
    """None of the words appears as a whole word (case-insensitive)."""
    words = _texts("forbidden_words", forbidden_words)
    patterns = [re.compile(r"\b" + _literal(w) + r"\b", re.IGNORECASE) for w in words]
    return lambda value: not any(p.search(value) for p in patterns)


@_instruction("keywords:letter_frequency", "letter", "let_frequency", "let_relation")
def _keywords_letter_frequency(letter: Any, let_frequency: Any, let_relation: Any) -> Checker:
    """The letter (case-insensitive) occurs < N ("less than") or >= N times. IFEval's data also asks for
    characters that are not letters ("#", "!"); they are counted the same way. (The reference checker replaces
    such a character by a random letter, so its verdict on those rows is a coin toss.)"""
    if not isinstance(letter, str) or len(letter.strip()) != 1:
        raise BadKwargs(f"letter must be a single character, got {letter!r}")
    char = letter.strip().lower()
    n, rel = _int("let_frequency", let_frequency), _relation("let_relation", let_relation)
    return lambda value: _compare(collections.Counter(value.lower())[char], rel, n)


# -------------------------------------------------------------------------------------------- language


@_instruction("language:response_language", "language")
def _response_language(language: Any) -> Checker:
    """The whole response is in the language (ISO 639-1 code); text with no detectable language passes."""
    wanted = _text("language", language)

    def check(value: str) -> bool:
        try:
            return same_language(detect_language(value), wanted)
        except UndetectableLanguage:
            return True

    return check


# ---------------------------------------------------------------------------------- length constraints


@_instruction("length_constraints:number_sentences", "num_sentences", "relation")
def _number_sentences(num_sentences: Any, relation: Any) -> Checker:
    """Fewer than N ("less than") or at least N sentences (see textutil.split_sentences)."""
    n, rel = _int("num_sentences", num_sentences), _relation("relation", relation)
    return lambda value: _compare(textutil.count_sentences(value), rel, n)


_PARAGRAPH_DIVIDER = re.compile(r"\s?\*\*\*\s?")


@_instruction("length_constraints:number_paragraphs", "num_paragraphs")
def _number_paragraphs(num_paragraphs: Any) -> Checker:
    """Exactly N paragraphs separated by the markdown divider ``***``; an empty paragraph fails the check,
    except before the first or after the last divider."""
    n = _int("num_paragraphs", num_paragraphs)

    def check(value: str) -> bool:
        parts = _PARAGRAPH_DIVIDER.split(value)
        count = len(parts)
        for i, part in enumerate(parts):
            if not part.strip():
                if i in (0, len(parts) - 1):
                    count -= 1
                else:
                    return False
        return count == n

    return check


@_instruction("length_constraints:number_words", "num_words", "relation")
def _number_words(num_words: Any, relation: Any) -> Checker:
    """Fewer than N ("less than") or at least N words (runs of word characters)."""
    n, rel = _int("num_words", num_words), _relation("relation", relation)
    return lambda value: _compare(textutil.count_words(value), rel, n)


_FIRST_WORD_STOP = frozenset(".,?!'\"")


@_instruction("length_constraints:nth_paragraph_first_word", "num_paragraphs", "nth_paragraph", "first_word")
def _nth_paragraph_first_word(num_paragraphs: Any, nth_paragraph: Any, first_word: Any) -> Checker:
    """Exactly N paragraphs separated by blank lines ("\\n\\n"), and the nth of them starts with the word
    (case-insensitive; leading quotes and trailing punctuation of that word are ignored)."""
    n = _int("num_paragraphs", num_paragraphs, minimum=1)
    nth = _int("nth_paragraph", nth_paragraph, minimum=1)
    if nth > n:
        raise BadKwargs(f"nth_paragraph ({nth}) must be <= num_paragraphs ({n})")
    wanted = _text("first_word", first_word).lower()

    def check(value: str) -> bool:
        paragraphs = value.split("\n\n")
        count = sum(1 for p in paragraphs if p.strip())
        if nth > count:
            return False
        paragraph = paragraphs[nth - 1].strip()
        if not paragraph:
            return False
        word = paragraph.split()[0].strip().lstrip("'").lstrip('"')
        first = []
        for char in word:
            if char in _FIRST_WORD_STOP:
                break
            first.append(char.lower())
        return count == n and "".join(first) == wanted

    return check


# ---------------------------------------------------------------------------------- detectable content


@_instruction("detectable_content:number_placeholders", "num_placeholders")
def _number_placeholders(num_placeholders: Any) -> Checker:
    """At least N placeholders in square brackets, such as [address] (each within one line)."""
    n = _int("num_placeholders", num_placeholders)
    return lambda value: textutil.count_placeholders(value) >= n


@_instruction("detectable_content:postscript", "postscript_marker")
def _postscript(postscript_marker: Any) -> Checker:
    """A postscript starting with the marker (case-insensitive; "P.S." and "P.P.S" tolerate a space after
    each period, as in "P. S.")."""
    marker = _text("postscript_marker", postscript_marker)
    if marker == "P.P.S":
        pattern = re.compile(r"p\.\s?p\.\s?s")
    elif marker == "P.S.":
        pattern = re.compile(r"p\.\s?s\.")
    else:
        pattern = re.compile(_literal(marker.lower()))
    # IFEval searches r"\s*<marker>.*$" (MULTILINE) in the lowercased text: "\s*" and ".*$" always match,
    # so the marker's presence decides; searching it alone avoids quadratic backtracking on whitespace.
    return lambda value: pattern.search(value.lower()) is not None


# ----------------------------------------------------------------------------------- detectable format


@_instruction("detectable_format:number_bullet_lists", "num_bullets")
def _number_bullet_lists(num_bullets: Any) -> Checker:
    """Exactly N markdown bullet points: lines starting with "* " or "-" (after optional whitespace)."""
    n = _int("num_bullets", num_bullets)
    return lambda value: textutil.count_bullets(value) == n


CONSTRAINED_RESPONSES = ("My answer is yes.", "My answer is no.", "My answer is maybe.")


@_instruction("detectable_format:constrained_response")
def _constrained_response() -> Checker:
    """The response contains one of the fixed options (case-sensitive)."""
    return lambda value: any(option in value.strip() for option in CONSTRAINED_RESPONSES)


_HIGHLIGHT = re.compile(r"\*[^\n\*]*\*")
_DOUBLE_HIGHLIGHT = re.compile(r"\*\*[^\n\*]*\*\*")


@_instruction("detectable_format:number_highlighted_sections", "num_highlights")
def _number_highlighted_sections(num_highlights: Any) -> Checker:
    """At least N non-empty markdown highlights, *like this* (each within one line); as in IFEval, spans
    found as single-star and as double-star (**like this**) highlights are counted separately."""
    n = _int("num_highlights", num_highlights)

    def check(value: str) -> bool:
        count = sum(1 for m in _HIGHLIGHT.finditer(value) if m.group().strip("*").strip())
        count += sum(1 for m in _DOUBLE_HIGHLIGHT.finditer(value) if m.group()[2:-2].strip())
        return count >= n

    return check


@_instruction("detectable_format:multiple_sections", "section_spliter", "num_sections")
def _multiple_sections(section_spliter: Any, num_sections: Any) -> Checker:
    """At least N sections, each starting with the splitter word and a number ("SECTION 1"), case-sensitive."""
    splitter = _text("section_spliter", section_spliter)
    n = _int("num_sections", num_sections)
    pattern = re.compile(r"\s?" + _literal(splitter) + r"\s?\d+\s?")
    return lambda value: sum(1 for _ in pattern.finditer(value)) >= n


_JSON_FENCES = ("```json", "```Json", "```JSON", "```")


def _ignore_number(text: str) -> int:
    return 0


@_instruction("detectable_format:json_format")
def _json_format() -> Checker:
    """The whole response is JSON, optionally wrapped in a ```json fence."""

    def check(value: str) -> bool:
        value = value.strip()
        for fence in _JSON_FENCES:
            value = value.removeprefix(fence)
        value = value.removesuffix("```").strip()
        try:  # numbers are only syntax-checked: no giant-integer conversion
            json.loads(value, parse_int=_ignore_number, parse_float=_ignore_number)
        except (ValueError, RecursionError):
            return False
        return True

    return check


@_instruction("detectable_format:title")
def _title() -> Checker:
    """A title in double angular brackets, <<like this>>, with something in it."""
    return lambda value: any(t.lstrip("<").rstrip(">").strip() for t in textutil.titles(value))


# ----------------------------------------------------------------------------------------- combination


@_instruction("combination:two_responses")
def _two_responses() -> Checker:
    """Two different responses separated by six asterisks (******)."""

    def check(value: str) -> bool:
        parts = value.split("******")
        kept = []
        for i, part in enumerate(parts):
            if not part.strip():
                if i not in (0, len(parts) - 1):
                    return False
            else:
                kept.append(part)
        return len(kept) == 2 and kept[0].strip() != kept[1].strip()

    return check


@_instruction("combination:repeat_prompt", "prompt_to_repeat")
def _repeat_prompt(prompt_to_repeat: Any) -> Checker:
    """The response starts with the request, repeated word for word (case-insensitive)."""
    prompt = _text("prompt_to_repeat", prompt_to_repeat).lower()
    return lambda value: value.strip().lower().startswith(prompt)


# ---------------------------------------------------------------------------------------- start / end


@_instruction("startend:end_checker", "end_phrase")
def _end_checker(end_phrase: Any) -> Checker:
    """The response ends with the exact phrase (case-insensitive; surrounding whitespace and quotes ignored)."""
    phrase = _text("end_phrase", end_phrase).lower()
    return lambda value: value.strip().strip('"').lower().endswith(phrase)


@_instruction("startend:quotation")
def _quotation() -> Checker:
    """The whole response is wrapped in double quotation marks."""

    def check(value: str) -> bool:
        value = value.strip()
        return len(value) > 1 and value[0] == '"' and value[-1] == '"'

    return check


# ------------------------------------------------------------------------------------------ change case


@_instruction("change_case:capital_word_frequency", "capital_frequency", "capital_relation")
def _capital_word_frequency(capital_frequency: Any, capital_relation: Any) -> Checker:
    """Words in all capital letters appear < N ("less than") or >= N times (see textutil.word_tokens)."""
    n, rel = _int("capital_frequency", capital_frequency), _relation("capital_relation", capital_relation)
    return lambda value: _compare(sum(1 for w in textutil.word_tokens(value) if w.isupper()), rel, n)


def _english_in_case(value: str, case_ok: bool) -> bool:
    if not case_ok:
        return False
    try:
        return detect_language(value) == "en"
    except UndetectableLanguage:
        return True


@_instruction("change_case:english_capital")
def _english_capital() -> Checker:
    """The response is in English and all in capital letters."""
    return lambda value: _english_in_case(value, value.isupper())


@_instruction("change_case:english_lowercase")
def _english_lowercase() -> Checker:
    """The response is in English and all in lowercase letters."""
    return lambda value: _english_in_case(value, value.islower())


# ----------------------------------------------------------------------------------------- punctuation


@_instruction("punctuation:no_comma")
def _no_comma() -> Checker:
    """No commas at all (the ASCII comma)."""
    return lambda value: "," not in value
