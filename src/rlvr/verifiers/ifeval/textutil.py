"""Small, dependency-free text utilities for the IFEval checks.

IFEval counts words with NLTK's ``RegexpTokenizer(r"\\w+")``, sentences with NLTK's Punkt model and capital
words with ``nltk.word_tokenize``. NLTK data cannot be downloaded everywhere, so this module has its own:

* :func:`count_words` -- the number of ``\\w+`` runs: the same count as IFEval's word tokenizer.
* :func:`split_sentences` -- a rule-based approximation of Punkt for English (see its docstring).
* :func:`word_tokens` -- a Treebank-like word tokenizer (contractions split off, punctuation separate).

It also holds linear-time scanners that give the same answers as some of IFEval's regular expressions, whose
direct use backtracks quadratically on adversarial input (long runs of blank lines, ``[[[[...``, ``<<<<...``).
Everything here is linear in the length of the text.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator

# ------------------------------------------------------------------------------------------------- words

_WORD_RUN = re.compile(r"\w+")


def count_words(text: str) -> int:
    """The number of maximal runs of word characters (``\\w+``): IFEval's word count."""
    return sum(1 for _ in _WORD_RUN.finditer(text))


_TOKEN = re.compile(r"\w+(?:['\u2019.-]\w+)*|[^\w\s]")
_CONTRACTION = re.compile(r"(?i)(.+?)(n['\u2019]t|['\u2019](?:s|re|ve|ll|d|m))")


def word_tokens(text: str) -> Iterator[str]:
    """Treebank-like tokens: words (hyphens, apostrophes and periods inside a word kept: "well-known",
    "U.S.A" then "."), English contractions split off as NLTK does ("can't" -> "ca", "n't"; "I'm" -> "I",
    "'m"), and every other non-space symbol on its own."""
    for m in _TOKEN.finditer(text):
        token = m.group()
        if "'" in token or "\u2019" in token:
            c = _CONTRACTION.fullmatch(token)
            if c is not None:
                yield c.group(1)
                yield c.group(2)
                continue
        yield token


# --------------------------------------------------------------------------------------------- sentences

# After one of these "." never ends a sentence (titles, references, "e.g.").
_HARD_ABBREVIATIONS = frozenset(
    """mr mrs ms dr prof sr jr st rev hon gen col capt lt sgt gov sen rep mt ft vs cf viz e.g i.e eg ie
    approx ca dept est op eds""".split()
)
# After one of these "." never ends a sentence before a number ("No. 5", "Fig. 3", "pp. 12"); before anything else
# it is an ordinary word ("Is it? No. The answer is ...").
_NUMBER_ABBREVIATIONS = frozenset("no nos fig figs vol vols pp p ch sec eq art".split())
_NUMBER_LIKE = re.compile(r"[(\[]?(?:\d|[IVXLC]+\b)")
# After one of these "." ends a sentence only when the next word starts with a capital letter.
_SOFT_ABBREVIATIONS = frozenset(
    """etc inc ltd co corp al a.m p.m am pm u.s u.k u.n jan feb mar apr jun jul aug sep sept oct nov dec
    mon tue tues wed thu thur thurs fri sat sun""".split()
)
# Closing and opening marks around a sentence: quotes, brackets, markdown emphasis ("*One.* *Two.*", "~~One.~~").
_CLOSERS = "\"'\u201d\u2019\u00bb)]}*_~"
_OPENERS = "\"'\u201c\u2018\u00ab([{*_~"
# Words that often open an English sentence. After an abbreviation that can end a sentence ("etc.", "p.m."), a
# dotted acronym ("U.S.") or an ellipsis, a new sentence starts only at a capitalised word from this list; any other
# capitalised word is taken for part of the same sentence ("The U.S. Army"), as Punkt's frequent-sentence-starter
# heuristic decides.
_SENTENCE_STARTERS = frozenset(
    """the a an this that these those it its he she they we i you there here then but however if in on at when
    while so some many most both all each although though since yet thus hence instead meanwhile moreover indeed
    nevertheless nonetheless even despite according among under similarly nor our their his her my your""".split()
)


_TOKEN_SPAN = re.compile(r"\S+")


def _starts_lower(token: str) -> bool:
    core = token.lstrip(_OPENERS)
    return bool(core) and core[0].islower()


def _starts_sentence(token: str) -> bool:
    """Whether ``token`` is a capitalised common sentence opener (see _SENTENCE_STARTERS)."""
    core = token.lstrip(_OPENERS)
    if not core or not core[0].isupper():
        return False
    end = 0
    while end < len(core) and (core[end].isalpha() or core[end] == "'"):
        end += 1
    return core[:end].lower() in _SENTENCE_STARTERS


def _is_initial(token: str) -> bool:
    """A single letter and a period, "J." or "(J."."""
    core = token.lstrip(_OPENERS).rstrip(_CLOSERS)
    return len(core) == 2 and core[0].isalpha() and core[1] == "."


def _name_part(token: str) -> bool:
    """A capitalised word that does not end a sentence ("John", "Vitamin") or an initial: what precedes an
    initial in a name ("John F. Kennedy", "J. R. R. Tolkien")."""
    core = token.lstrip(_OPENERS)
    return _is_initial(token) or (bool(core) and core[0].isupper() and core[-1].isalpha())


def _ends_sentence(token: str, next_token: str, prev_token: str = "") -> bool:
    stripped = token.rstrip(_CLOSERS)
    if not stripped or stripped[-1] not in ".!?":
        return False
    end = len(stripped)
    while end and stripped[end - 1] in ".!?":
        end -= 1
    marks, core = stripped[end:], stripped[:end]
    if "?" in marks or "!" in marks:
        return True
    if len(marks) > 1:  # an ellipsis: a break only before a common sentence opener
        return _starts_sentence(next_token)
    word = core.lstrip(_OPENERS).lower()
    if not word:
        return True
    if word in _HARD_ABBREVIATIONS or word.rsplit("-", 1)[-1] in _HARD_ABBREVIATIONS:
        return False
    if word in _NUMBER_ABBREVIATIONS and _NUMBER_LIKE.match(next_token):
        return False
    if word in _SOFT_ABBREVIATIONS:
        return _starts_sentence(next_token)
    if len(word) == 1 and word.isalpha():
        if _is_initial(next_token) or _name_part(prev_token):  # an initial: "J. R. R. Tolkien", "John F. Kennedy"
            return False
        return not _starts_lower(next_token)  # a one-letter word: "plan A. Then", "Me and I. Then"
    if "." in word and all(0 < len(part) <= 2 and part.isalpha() for part in word.split(".")):
        return _starts_sentence(next_token)  # "U.S.", "a.k.a."
    if word.isdigit():  # "in 1999. The" breaks, "chapter 5. and" does not
        return not _starts_lower(next_token)
    return True


def split_sentences(text: str) -> list[str]:
    """Split English text into sentences, approximating NLTK's Punkt (which IFEval uses).

    A sentence ends at a whitespace-separated token that ends in ".", "!" or "?" (possibly followed by closing
    quotes, brackets or markdown emphasis: "*One here.* *Two here.*" is two) and is followed by another token.
    Line breaks alone never end a sentence (as in Punkt). "?" and "!" always end one; "." does not after a
    title-like abbreviation ("Mr.", "e.g.") or an initial (a letter after a capitalised word or before another
    initial: "John F. Kennedy", "J. R. R. Tolkien"); after any other one-letter word ("plan A.", "Me and I.")
    unless the next word is lowercase; after another abbreviation ("etc.", "p.m."), a dotted acronym ("U.S.") or
    an ellipsis only before a common sentence opener ("The U.S. Army" stays one sentence, "the U.S. The" does
    not); after a bare number unless the next word is lowercase. Empty or blank text has no sentences.
    """
    spans = [(m.start(), m.end()) for m in _TOKEN_SPAN.finditer(text)]
    sentences: list[str] = []
    start = 0
    for i in range(len(spans) - 1):
        (s, e), (ns, ne) = spans[i], spans[i + 1]
        if _ends_sentence(text[s:e], text[ns:ne], text[spans[i - 1][0] : spans[i - 1][1]] if i else ""):
            sentences.append(text[start:e].strip())
            start = ns
    if spans:
        sentences.append(text[start:].strip())
    return sentences


def count_sentences(text: str) -> int:
    return len(split_sentences(text))


# -------------------------------------------------------------------------------- linear-time scanners

_SPACE_RUN = re.compile(r"\s*")


def count_line_matches(text: str, accept: Callable[[str, int], int | None]) -> int:
    """How many matches ``re.findall`` finds for a MULTILINE pattern of the form ``^\\s*X...$``, in linear time.

    ``accept(text, q)`` is called with ``q`` = the first non-space position after a line start's leading
    whitespace (which may span several lines, as ``\\s*`` does); it returns the end of the match (a position
    just before a newline, or the end of text) or None. As in ``findall``, the next search starts at the end
    of the previous match. Each whitespace run is scanned once: a failed attempt from any line start inside
    it fails for every other line start up to ``q`` too (backing off ``\\s*`` only lands on whitespace).
    """
    n, pos, count = len(text), 0, 0
    while pos <= n:
        if pos > 0 and text[pos - 1] != "\n":  # move to the next line start
            nl = text.find("\n", pos)
            if nl < 0:
                break
            pos = nl + 1
        q = _SPACE_RUN.match(text, pos).end()
        end = accept(text, q) if q < n else None
        if end is not None:
            count += 1
            pos = end if end > pos else pos + 1
        else:
            pos = q + 1
    return count


def _line_end(text: str, start: int) -> int:
    nl = text.find("\n", start)
    return len(text) if nl < 0 else nl


def _star_bullet(text: str, q: int) -> int | None:
    # the rest of ^\s*\*[^\*].*$ : a "*", then any one character but "*" (a newline included), then the line
    if text[q] == "*" and q + 1 < len(text) and text[q + 1] != "*":
        return _line_end(text, q + 2)
    return None


def _dash_bullet(text: str, q: int) -> int | None:
    # the rest of ^\s*-.*$
    return _line_end(text, q + 1) if text[q] == "-" else None


def count_bullets(text: str) -> int:
    """IFEval's bullet count: matches of ``^\\s*\\*[^\\*].*$`` plus matches of ``^\\s*-.*$`` (MULTILINE)."""
    return count_line_matches(text, _star_bullet) + count_line_matches(text, _dash_bullet)


def count_placeholders(text: str) -> int:
    """The number of ``re.findall(r"\\[.*?\\]", text)`` matches: a "[" closed by a "]" on the same line."""
    n, pos, count = len(text), 0, 0
    while True:
        open_ = text.find("[", pos)
        if open_ < 0:
            return count
        line_end = _line_end(text, open_)
        close = text.find("]", open_ + 1, line_end)
        if close < 0:  # no later "[" on this line can be closed either
            pos = line_end + 1
            if pos > n:
                return count
        else:
            count += 1
            pos = close + 1


def titles(text: str) -> Iterator[str]:
    """What ``re.findall(r"<<[^\\n]+>>", text)`` finds: per line, from its first "<<" to its last ">>"
    (with at least one character between them), since the greedy ``[^\\n]+`` runs to the last ">>"."""
    for line in text.split("\n"):
        first = line.find("<<")
        if first < 0:
            continue
        last = line.rfind(">>")
        if last >= first + 3:
            yield line[first : last + 2]
