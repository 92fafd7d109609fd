"""Pull the final answer out of a model response.

Every function here is linear in the response length (no backtracking regexes over the whole text), so a
100k-character response costs milliseconds.

Priority (the first method that finds something wins):
  1. ``<answer>...</answer>`` (the last one; a \\boxed{} inside it is unwrapped)
  2. the last ``\\boxed{...}`` / ``\\fbox{...}`` (nested braces; ``\\boxed 5`` without braces too); when a
     final-answer marker ("final answer", "the answer is", "Answer:", "in conclusion") stands between
     earlier boxes and later ones, only the later ones are candidates (the earlier were intermediate results)
  3. the LAST of the explicit markers "final answer is ...", "answer is ...", "Answer: ...", "#### ...";
     in prose after it ("The largest $n$ is 34.") the value after the last "is" / "equals"
  4. the last inline/display math: ``$...$``, ``$$...$$``, ``\\(...\\)``, ``\\[...\\]``
  5. the last number in the text that is not part of a word (turned off by ``strict=True``)
For 4 and 5, which take what the text happens to end with, a sentence that withdraws or does not commit
to the value ("it is not 5", "we need to prove that ... 10", "I could not finish") gives no answer, and so does
a response cut off by the length limit (``truncated``): it never committed to its last number.

Hedges: every answer container counts. Several ``<answer>`` tags are all candidates; after the final container
(tag or box), another box-like macro, a later "final answer" line, and a value offered as an alternative ("or
perhaps 6", "(or 6)", "it could also be 7") are candidates too, so that the caller sees several different
answers. A value that the next words reject ("Answer: 9. No wait, that's wrong.") gives no answer.
Chat-template tokens (``<|im_end|>``, ``</s>``) are removed first; only the text after the last ``</think>``
is read (when something follows it); colour macros are read as boxes (``\\colorbox``, ``\\fcolorbox``) or as their
content (``\\color``, ``\\textcolor``, which after a box is another boxed value).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

BOX_COMMANDS = ("\\boxed", "\\fbox", "\\framebox")


@dataclass(frozen=True)
class Extraction:
    answer: str | None  # the answer text (None: nothing found)
    method: str  # "answer_tag", "boxed", "marker", "math", "last_number", "none", "uncommitted", "retracted",
    # "truncated"
    candidates: tuple[str, ...] = ()  # every value offered as final (to detect hedging), else (answer,)


_BRACE_OR_ESCAPE = re.compile(r"\\.|[{}]", re.S)
_DOLLAR_OR_ESCAPE = re.compile(r"\\.|\$\$?", re.S)
_SENTENCE_END = re.compile(r"\.\s+[A-Z]")
_LEADING_BOLD_OR_COLON = re.compile(r"^(?:\*\*|:|\s|\\?[\"\u201c])+")
_TRAILING_BOLD = re.compile(r"(?:\*\*|\s|\\?[\"\u201d])+$")
# values offered together before the last one: "3 or 4", "either 3 or 5", "x=3 or x=5", "3, 4, or 5", "x = 1 and x = 2"
_ONE_VALUE = r"(?:[a-zA-Z]\s*=\s*)?-?\d+(?:\.\d+)?"
_VALUES_OR = re.compile(
    r"(?<![\w.=+*/^-])(?:" + _ONE_VALUE + r"\s*(?:,\s*)?(?:or\s+|,\s*|and\s+(?=[a-zA-Z]\s*=)))+(?:[a-zA-Z]\s*=\s*)?$"
)
# several math spans offered together: "$3$ or $4$", "$x = 1$ and $x = 3$", "$1$, $2$"
_MATH_OR_MATH = re.compile(r"\$\s*(?:,|;|\s(?:and|or)\b|,\s*(?:and|or)\b)\s*\$")
# a reason after the value: "7, since $n = 3$"
_REASON = re.compile(r",?\s+(?:since|because|as|given that|which|where|so that)\b", re.I)
# a restated goal before an explicit marker: "we want to show that the answer is 4"
_GOAL = re.compile(r"\b(?:prove|show\s+that|to\s+show|asked\s+to|asks\s+us|assume|suppose)\b")
_ARITHMETIC_CHAIN = re.compile(r"(?<![\w.])(?:[\d.]+\s*[-+*/x\u00d7]\s*)+[\d.]+\s*=\s*$")
_CLOSES_MATH = re.compile(r"[\s.,;:!?)\]}'\"*]|$")


def matching_brace(text: str, open_at: int) -> int | None:
    """Index of the "}" closing the "{" at ``open_at`` (escaped braces do not count), None if unclosed.

    The regex skips everything but braces and backslash escapes in C, so this is linear and cheap."""
    depth = 0
    for m in _BRACE_OR_ESCAPE.finditer(text, open_at):
        c = m.group()
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return m.start()
    return None


def _brace_pairs(text: str) -> dict[int, int]:
    """Index of every "{" -> index of its matching "}", in one pass over the whole text."""
    pairs: dict[int, int] = {}
    stack: list[int] = []
    for m in _BRACE_OR_ESCAPE.finditer(text):
        c = m.group()
        if c == "{":
            stack.append(m.start())
        elif c == "}" and stack:
            pairs[stack.pop()] = m.start()
    return pairs


def boxed_all(text: str) -> list[str]:
    """Contents of every \\boxed{...} / \\fbox{...} in order (unclosed ones are skipped)."""
    return [s for _, s in boxed_spans(text)]


def boxed_spans(text: str) -> list[tuple[int, str]]:
    """(position, content) of every \\boxed{...} / \\fbox{...} in order (unclosed ones are skipped)."""
    out: list[tuple[int, str]] = []
    # a box is usually short and closed, so its own scan is cheapest; after an unclosed one, every later
    # box would rescan to the end, so the pairs of the whole text are computed once instead
    pairs: dict[int, int] | None = None
    for cmd in BOX_COMMANDS:
        pos = 0
        while True:
            i = text.find(cmd, pos)
            if i < 0:
                break
            j = i + len(cmd)
            pos = j
            if j < len(text) and text[j].isalpha():  # \boxedfoo is another command
                continue
            while j < len(text) and text[j] == " ":
                j += 1
            if j < len(text) and text[j] == "{":
                if pairs is None:
                    end = matching_brace(text, j)
                    if end is None:
                        pairs = _brace_pairs(text)
                else:
                    end = pairs.get(j)
                if end is not None:
                    out.append((i, text[j + 1 : end]))
                    pos = end + 1
            else:  # "\boxed 5": one token
                m = re.match(r"[^\s$]+", text[j : j + 200])
                if m:
                    out.append((i, m.group(0)))
    out.sort()
    return out


# "final answer is" ends where "answer is" does, so one pattern finds the end of every marker
_ANSWER_MARKER = re.compile(r"answer\s*(?:is|:)")
_OPTION_MARKER = re.compile(r"(?:option|choice)\s+is\b")
_NUMBER = re.compile(
    r"-?\d{1,3}(?:,(?:\\!)?\d{3})+(?:\.\d+)?(?!\d)|-?\d{1,3}(?: \d{3})+(?![\d.])|-?\d+,\d{1,2}(?![\d,])"
    r"|-?(?:\d+(?:\.\d+)?|\.\d+)(?:/\d+)?"
)


# a copula outside math: in "The largest $n$ is 34" the value follows it
_COPULA = re.compile(r"\s(?:is|are|was|were|equals|be|becomes|gives|of)\s", re.I)
_WITHDRAWN = re.compile(
    r"\b(?:not|never|n't|cannot|unable|unsure|no\s+(?:answer|solution|idea))\b|n't\b", re.I
)
# giving up: no value near it is a committed answer (this and the patterns below read lowercased text)
_GIVING_UP = (r"could\s+not|couldn't|unable|not\s+sure|don't\s+know|do\s+not\s+know|give\s+up|gave\s+up|"
              r"not\s+finish|didn't\s+finish|unfinished|ran\s+out|no\s+idea|not\s+able")
_GAVE_UP = re.compile(r"\b(?:" + _GIVING_UP + r")\b")
# a sentence that restates a goal, assumes, guesses or gives up commits to none of its values
_UNCOMMITTED = re.compile(
    r"\b(?:prove|show\s+that|need\s+to|want\s+to|we\s+must|asked|asks|suppose|assume|let\s+us\s+find|"
    r"to\s+find|can't|cannot|incomplete|stuck|guess|let\s+(?=\$|[a-z]\s*=)|" + _GIVING_UP + r")"
)
_NEGATED_BEFORE = re.compile(r"(?:\b(?:not|never|no|cannot)\b|n't\b)[^.\d\n$]{0,25}$")
_NEGATED_AFTER = re.compile(r"\s*(?:is|was|are|were)\s+(?:not|never)\b|\s*(?:isn't|wasn't|aren't)\b")
_FINAL_MARKERS = ("final answer", "answer is", "answer:", "**answer", "in conclusion", "to conclude", "in summary")


def _after_copula(line: str) -> str:
    """The value part of a prose answer line: the text after its last copula outside math, when that text
    holds a number or math; else the line."""
    best = None
    for m in _COPULA.finditer(line):
        if line[: m.start()].count("$") % 2 == 0:
            best = m
    if best is None:
        return line
    rest = line[best.end() :].strip()
    return rest if re.search(r"[\d$\\]", rest) else line


def _clean_marker_text(s: str) -> str:
    s = s.strip()
    # up to the end of the line, or of the sentence (". " followed by a capital / end)
    line = s.split("\n", 1)[0].strip()
    m = _SENTENCE_END.search(line)
    if m and line[: m.start()].count("$") % 2 == 0:
        line = line[: m.start()]
    line = line.strip()
    line = _LEADING_BOLD_OR_COLON.sub("", line)
    line = _TRAILING_BOLD.sub("", line)
    if _WITHDRAWN.search(line):  # "definitely not 5": kept whole, so it reads as text
        return line.replace("$", " ").rstrip(".").strip()
    line = _after_copula(line)
    if "$" not in line and "\\" not in line and len(line.split()) >= 4:  # prose: its one number, if one
        numbers = list(_NUMBER.finditer(line))
        if len(numbers) == 1:
            return numbers[0].group(0)
    reason = _REASON.search(line)
    if reason and reason.start() > 0 and line[: reason.start()].count("$") % 2 == 0:
        line = line[: reason.start()]
    # math inside the marker text wins, unless several spans are offered as alternatives ("$3$ or $4$")
    inner = last_math(line)
    if inner is not None:
        if _MATH_OR_MATH.search(line):
            return line.replace("$", "").rstrip(".").strip()
        return inner
    return line.rstrip(".").strip()


def last_math(text: str) -> str | None:
    """The last $...$ / $$...$$ / \\(...\\) / \\[...\\] content."""
    best: tuple[int, str] | None = None
    # \( \) and \[ \]
    for open_, close in (("\\(", "\\)"), ("\\[", "\\]")):
        j = text.rfind(close)
        if j >= 0:
            i = text.rfind(open_, 0, j)
            if i >= 0 and (best is None or j > best[0]):
                best = (j, text[i + 2 : j])
    # dollars, paired from the right: the last delimiter that can close math (one followed by a space,
    # punctuation or the end, unlike the "$" of "$60 per week") and the delimiter of its kind before it.
    # Pairing from the left would let a currency amount earlier in the text shift every later pair.
    if "$" in text:
        marks = [(m.start(), len(m.group())) for m in _DOLLAR_OR_ESCAPE.finditer(text) if m.group()[0] == "$"]
        for k in range(len(marks) - 1, 0, -1):
            end, size = marks[k]
            if not _CLOSES_MATH.match(text, end + size):
                continue
            opener = next((marks[j][0] for j in range(k - 1, -1, -1) if marks[j][1] == size), None)
            if opener is not None and (best is None or end > best[0]):
                best = (end, text[opener + size : end])
            break
    return None if best is None else best[1].strip()


def _lowercase_same_length(text: str) -> str:
    """``text.lower()`` with every index unchanged (a few characters, such as "\u0130", lower to two)."""
    low = text.lower()
    if len(low) == len(text):
        return low
    return "".join(c if len(c.lower()) != 1 else c.lower() for c in text)


def _last_marker_end(low: str) -> int:
    """End of the last answer marker ("answer is", "Answer:", "final answer is", "####") in lowercased
    text, or -1. Searches backwards, so a long response costs a few ``rfind`` calls."""
    hashes = low.rfind("####")
    best = hashes + 4 if hashes >= 0 else -1
    for word, marker in (("answer", _ANSWER_MARKER), ("option", _OPTION_MARKER), ("choice", _OPTION_MARKER)):
        pos = len(low)
        while True:
            i = low.rfind(word, 0, pos)
            if i < 0 or i < hashes:
                break
            m = marker.match(low, i)
            if m:
                best = max(best, m.end())
                break
            pos = i + len(word) - 1
    return best


def _sentence(text: str, start: int, end: int) -> str:
    """The sentence around text[start:end] (bounded to 300 characters either side)."""
    lo = max(0, start - 300)
    head = text[lo:start]
    cut = max(head.rfind(". "), head.rfind("\n"), head.rfind("! "), head.rfind("? "))
    tail = text[end : end + 300]
    stop = min((i for i in (tail.find(". "), tail.find("\n"), tail.find("! "), tail.find("? ")) if i >= 0),
               default=len(tail))
    return head[cut + 1 :] + text[start:end] + tail[:stop]


def _committed(text: str, start: int, end: int) -> bool:
    """(``text`` is lowercased: the patterns here match lowercase only, several times faster than ignoring
    case.) False when a negation stands right before text[start:end] ("definitely not 5"; "not 10, which is 12"
    commits to 12), the sentence holding it does not commit to it ("we need to prove ..."), or the text
    after it gives up."""
    return not (_NEGATED_BEFORE.search(text, max(0, start - 40), start) or _NEGATED_AFTER.match(text, end)
                or _RETRACTED.match(text[end : end + 200])
                or _UNCOMMITTED.search(_sentence(text, start, end)) or _UNCOMMITTED.search(text[end : end + 300])
                or _GAVE_UP.search(text, max(0, start - 300), start))


def _final_candidates(low: str, spans: list[tuple[int, str]]) -> list[tuple[int, str]]:
    """The boxes offered as final: those after the last final-answer marker that follows an earlier box."""
    last = spans[-1][0]
    marker = max(low.rfind(m, spans[0][0], last) for m in _FINAL_MARKERS)
    if marker > spans[0][0]:
        return [sp for sp in spans if sp[0] > marker]
    return spans


# "3 and 5 both work", "both x = 3 and x = 5 satisfy it": values joined by "and" offered together
_VALUES_AND = re.compile(r"(?<![\w.=+*/^-])(?:" + _ONE_VALUE + r"\s*(?:,\s*)?(?:or\s+|and\s+|,\s*))+(?:[a-zA-Z]\s*=\s*)?$")
_BOTH_AFTER = re.compile(r"\s*,?\s*(?:both|all|each)\b", re.I)
_BOTH_BEFORE = re.compile(r"\b(?:both|either)\s+$", re.I)


def _last_number(response: str) -> re.Match | None:
    """The last number that is not part of a word ("AZYUK2A" holds none); letters right after it must
    be a unit ("12cm")."""
    from rlvr.verifiers.math.units import canonical

    # search a growing tail, so a long text of numbers costs about as much as its last few thousand characters
    window = 2000
    while True:
        start = max(0, len(response) - window)
        if start > 0:  # begin at a space, so no number is cut in two
            space = response.find(" ", start)
            start = space if space >= 0 else start
        found = None
        for num in _NUMBER.finditer(response, start):
            i, j = num.start(), num.end()
            if i > 0 and (response[i - 1].isalpha() or response[i - 1] == "_"):
                continue
            if j < len(response) and response[j].isalpha():
                word = re.match(r"[A-Za-z]+", response[j : j + 20])
                if word is None or not canonical(word.group()):
                    continue
            found = num
        if found is not None or start == 0:
            return found
        window *= 8


# chat-template and end-of-sequence tokens a model may emit after its answer
_TEMPLATE_TOKEN = re.compile(r"<\|[A-Za-z0-9_]{1,40}\|>|</?s>|<(?:eos|eot|bos|end_of_turn|start_of_turn|pad)>", re.I)
# the start of another turn of the conversation
_NEXT_TURN = re.compile(r"<\|im_start\|>|<\|start_header_id\|>|<start_of_turn>|<\|user\|>|<\|assistant\|>")
# short English words, which make a run of one- and two-letter tokens a sentence ("It is 4, 6, or 8."), not an expression
_PROSE_WORD = re.compile(r"(?<![\\a-zA-Z])(?:is|it|so|be|we|as|at|an|to|of|if|on|by|no|do|am|my|us|up)(?![a-zA-Z])", re.I)
_GLUED_OR = re.compile(r"(?<=[\d)}\]])or(?=[A-Za-z(\\\d-])")
# a word that leads into a final equation ("So 27+82 = 109", "Therefore, x = 4"): no factor of it
_CONNECTIVE = re.compile(r"^(?:so|thus|hence|therefore|then|now|finally|and|giving|which\s+gives|that\s+is|i\.e\.)"
                         r"(?![a-z])[,:]?\s*", re.I)
# a response that is one bare expression (no delimiters, no prose): "\frac{10}{9}", "3+2", "-x^2 + 1"
_BARE_EXPRESSION = re.compile(r"[-+*/^_=(){}\[\].,!|\s\d]*(?:(?:\\[a-zA-Z]+|[a-zA-Z]{1,2}(?![a-zA-Z]))[-+*/^_=(){}\[\].,!|\s\d]*)*")
# the words right after a value that reject it: "9. No wait, that's wrong", "9 is what I first thought, but no"
_INTERJECTION = r"(?:(?:wait|hmm|oops|actually|but|however)\b[\s,.!]*)*"
# words after a value that doubt it away: "7 is probably wrong", "7, which seems unlikely", "7 can't be right"
_DOUBTED = (
    r"(?:(?:which|but|though|although|however|and|yet)[\s,]+)?(?:(?:that|this|it|which)\s+)?"
    r"(?:(?:is|was|seems|seemed|looks|looked|appears|sounds|feels)\s+(?:(?:probably|likely|definitely|clearly|"
    r"certainly|surely|obviously|very|quite|highly|rather|too|so|pretty|most|almost\s+certainly)\s+)*(?:to\s+be\s+)?"
    r"(?:wrong|incorrect|unlikely|implausible|impossible|off|bogus|absurd|a\s+mistake|mistaken|not\s+(?:right|correct|"
    r"it|the\s+answer|possible|likely|plausible|valid))"
    r"|(?:can't|cannot|can\s+not|couldn't|could\s+not|shouldn't|won't)\s+be\s+(?:right|correct|it|the\s+answer|true)"
    r"|(?:doesn't|does\s+not|didn't|did\s+not)\s+(?:work|check\s+out|fit|satisfy))\b"
)
_RETRACTED = re.compile(
    r"^[\s.,;:!?()\[\]}*$\u2014\u2013-]*(?:"
    + _INTERJECTION + r"(?:no|nope)\b[\s,.!]*(?:(?:wait|that(?:'s|\s+is|\s+was)|it(?:'s|\s+is|\s+was)|i\s+was)\b"
    r"[^.\n]{0,30}?)?(?:wrong|incorrect|not\s+(?:right|correct)|a\s+mistake|mistaken|$|[.!?])"
    r"|" + _INTERJECTION + r"(?:that(?:'s|\s+is|\s+was)|it(?:'s|\s+is|\s+was)|this\s+is)\s+"
    r"(?:wrong|incorrect|not\s+(?:right|correct)|a\s+mistake)"
    r"|scratch\s+that|never\s*mind|no\s+way\b|(?:(?:but|though|although)\s+)?i\s+(?:really\s+|seriously\s+)?doubt\s+"
    r"(?:it|that|this)\b|(?:probably|likely|surely|certainly|definitely)\s+not\s*(?:[.!?)]|$)"
    r"|(?:is|was)\s+(?:what\s+i\s+)?(?:first\s+)?(?:thought|guessed|assumed)[^.\n]{0,40}?\b(?:but|however)\b"
    r"|" + _DOUBTED + r")",
    re.I,
)
# a value offered as an alternative after the final answer: "or perhaps 6", "(or 6)", "it could also be 7"
_VALUE = r"(\$[^$]{1,200}\$|\\\(.{1,200}?\\\)|\\(?:boxed|fbox|framebox)\s*\{[^{}]{1,200}\}|-?\d+(?:[.,/:]\d+)*%?)"
_NEAR_ALTERNATIVE = re.compile(  # right after the container, in the same sentence
    r"^[\s$.,;:)\]]*[^\n.]{0,40}?\bor\b(?:\s+(?:perhaps|maybe|possibly|rather|else|alternatively|possibly))?[\s,:]*"
    r"(?:(?:it\s+(?:is|could\s+be|might\s+be)|the\s+answer\s+(?:is|could\s+be|might\s+be)|even|just)\s+)?" + _VALUE,
    re.I,
)
_PARENTHESISED_VALUE = re.compile(r"^[\s$.,;:]*[(\[]\s*" + _VALUE + r"(?:\s+[a-zA-Z][a-zA-Z ]{0,40})?\s*[)\]]")  # "(6 if ...)"
_FAR_ALTERNATIVE = re.compile(  # anywhere after it
    r"\b(?:alternatively|alternately|or\s+(?:perhaps|maybe|possibly)|perhaps|maybe|possibly|another\s+(?:possible\s+)?"
    r"(?:answer|value|solution)\s+(?:is|would\s+be|could\s+be)|(?:could|might|may)\s+(?:also|instead|well)\s+be|"
    r"(?:could|might)\s+be|(?:could|might|may)\s+(?:equally|just\s+as\s+well)\s+be|unless\s+(?:it(?:'s|\s+is)\s+)?|"
    r"if\s+not,?\s+(?:then\s+)?|or\s+else|i\s+also\s+(?:got|get|found)|another\s+candidate\s+is)\b[\s,:]*(?:(?:it(?:'s|\s+is|\s+could\s+be|\s+might\s+be)|the\s+answer\s+(?:is|could\s+be|"
    r"might\s+be|would\s+be)|be|is)\s+)?" + _VALUE,
    re.I,
)
# a value named as another possibility after it: "though 7 is also possible", "7 works too", "both 5 and 7 work"
_LATER_ALTERNATIVE = re.compile(
    r"(?:\bboth\s+" + _VALUE + r"\s+and\s+)?" + _VALUE + r"\s+(?:(?:is|would\s+be|could\s+be|might\s+be|may\s+be|seems)\s+"
    r"(?:also\s+|equally\s+)?(?:possible|plausible|an?\s+(?:option|possibility|candidate|alternative)|valid|acceptable|"
    r"correct|right|likely)|(?:is|would\s+be)\s+another\s+(?:possibility|option|candidate|answer)|(?:could|might|may)\s+"
    r"(?:also\s+)?be\s+(?:the\s+)?(?:answer|right|correct|it)|(?:also|too)\s+works?|works?\s+(?:too|as\s+well)"
    r"|(?:both\s+)?(?:work|satisfy))\b",
    re.I,
)
_TAIL_TEXT = re.compile(r"\\(?:text|textbf|textit|mathrm|mbox)\s*\{([^{}]*)\}")  # words in LaTeX, read as words
_TAIL_LATEX = re.compile(r"\\(?:q?quad|[,;:! ])")  # spacing
_PLAIN_NUMBER_ONLY = re.compile(r"-?\d+(?:\.\d+)?")
TAIL_CHARS = 3000  # how far after the final container hedges are looked for


def _tail_candidates(response: str, low: str, end: int) -> list[str] | None:
    """Values offered after the final answer container, which ends at ``end``: later boxes, a later final-answer
    line, alternatives. None when the words right after the container reject its value."""
    tail = response[end : end + TAIL_CHARS]
    if _RETRACTED.match(tail):
        return None
    out = [b.strip() for _, b in boxed_spans(tail)]
    marker = _last_marker_end(low[end : end + TAIL_CHARS])
    if marker >= 0:
        value = _clean_marker_text(tail[marker:])
        if value and len(value) <= 200:
            out.append(value)
    words = _TAIL_LATEX.sub(" ", _TAIL_TEXT.sub(r" \1 ", tail)) if "\\" in tail else tail
    words = words.replace("~", " ")
    for m in (_NEAR_ALTERNATIVE.match(words), _PARENTHESISED_VALUE.match(words), *_FAR_ALTERNATIVE.finditer(words),
              *_LATER_ALTERNATIVE.finditer(words)):
        if m is None:
            continue
        for value in m.groups():
            if value is not None:
                boxed = boxed_all(value)
                out.append((boxed[-1] if boxed else value.strip("$")).strip())
    return out


_WORK = re.compile(r"=|\$|\\\(|\\\[")


def _later_final_answer(response: str, low: str, end: int) -> Extraction | None:
    """The answer of a final-answer marker after the last box when work (an equation or a math span) stands
    between them ("... = \\boxed{255}$ So she has $10,200 + $255 = $10,455. Final Answer: ..."), else None. Without
    work between, a later final answer that differs is a hedge (``_tail_candidates``)."""
    marker = _last_marker_end(low[end : end + TAIL_CHARS])
    if marker < 0:
        return None
    between = response[end : end + marker].lstrip("$ \t.,;)]")
    if not _WORK.search(between):
        return None
    answer = _clean_marker_text(response[end + marker : end + marker + 2000])
    if not answer:
        return None
    if _RETRACTED.match(_after_value(response, end + marker, answer)) or _retracts_itself(answer):
        return Extraction(None, "retracted", ())
    return Extraction(answer, "marker", (answer,))


_CONCLUSION = re.compile(r"(?:[.!?:$]\s*|\n\s*)(?:therefore|thus|hence|in total|in conclusion),?\s+([^.!?\n$]*)")


def _concluding_number(response: str, low: str, math_end: int) -> str | None:
    """The one number of a concluding sentence ("Therefore, there are 12 sequences.") that follows the last math
    span, which was then a step of the work; None when there is no such sentence or it holds several numbers."""
    found = None
    for m in _CONCLUSION.finditer(low, math_end, min(len(low), math_end + 1000)):
        found = m
    if found is None:
        return None
    numbers = list(_NUMBER.finditer(response, found.start(1), found.end(1)))
    if len(numbers) != 1 or not _committed(low, numbers[0].start(), numbers[0].end()):
        return None
    number = numbers[0]
    if response[number.start() - 1 : number.start()].isalpha():
        return None
    return number.group(0) + ("%" if response.startswith("%", number.end()) else "")


def _tag_answers(response: str, low: str) -> tuple[list[str], int]:
    """The answers of every <answer>...</answer> (the boxes inside one, else its math or its text), the final
    one last, and where the last tag ends."""
    out: list[str] = []
    pos, end = 0, -1
    while True:
        start = low.find("<answer>", pos)
        close = low.find("</answer>", start) if start >= 0 else -1
        if close < 0:
            return out, end
        inner = response[start + len("<answer>") : close]
        boxes = boxed_all(inner)
        m = last_math(inner) if not boxes else None
        if boxes:
            out.extend(b.strip() for b in boxes)
        else:
            out.append((m if m is not None else inner).strip())
        pos = end = close + len("</answer>")


# the end of a model's thoughts; a model may close them more than once, and its answer follows the last close
_END_OF_THOUGHTS = re.compile(r"</(?:think|thinking|thought|thoughts|reasoning)>|\u25c1/think\u25b7", re.I)


def _after_thoughts(response: str) -> str:
    """The text after the last end-of-thoughts marker, when something follows it; else the whole response."""
    last = None
    for last in _END_OF_THOUGHTS.finditer(response):
        pass
    if last is None or not response[last.end() :].strip():
        return response
    return response[last.end() :]


# colour macros: \colorbox{c}{X} and \fcolorbox{c}{d}{X} draw a box, as \fbox does; \color{c} only switches colour;
# \textcolor{c}{X} highlights X: a value after a box when a box stands before it, else plain X
_COLOUR_SPEC = r"\s*(?:\[[^\]{}]{0,40}\])?\s*\{[^{}]{0,60}\}"
_COLOUR_BOX = re.compile(
    r"\\(?:colorbox" + _COLOUR_SPEC + r"|fcolorbox" + _COLOUR_SPEC + r"\s*\{[^{}]{0,60}\})\s*(?=\{)"
)
_COLOUR_SWITCH = re.compile(r"\\color" + _COLOUR_SPEC)
_TEXT_COLOUR = re.compile(r"\\textcolor" + _COLOUR_SPEC + r"\s*(?=\{)")


def _uncolour(response: str) -> str:
    """``response`` with its colour macros read as boxes or as their plain content (see above)."""
    response = _COLOUR_SWITCH.sub(" ", _COLOUR_BOX.sub(lambda m: "\\fbox", response))
    out, pos = [], 0
    first_box = min((i for i in (response.find(cmd) for cmd in BOX_COMMANDS) if i >= 0), default=len(response))
    pairs: dict[int, int] | None = None
    for m in _TEXT_COLOUR.finditer(response):
        if m.start() < pos:
            continue
        if pairs is None:  # every brace pair once: an unclosed macro must not make each later one rescan the text
            pairs = _brace_pairs(response)
        end = pairs.get(m.end())
        if end is None:
            continue
        boxed_before = first_box < m.start()
        inner = response[m.end() + 1 : end]
        out.append(response[pos : m.start()])
        out.append("\\fbox{" + inner + "}" if boxed_before and not boxed_all(inner) else inner)
        pos = end + 1
    return "".join(out) + response[pos:] if out else response


def extract(response: str, *, strict: bool = False, truncated: bool = False) -> Extraction:
    if "<" in response:
        turn = _NEXT_TURN.search(response)
        if turn and response[: turn.start()].strip():  # a new turn begins: the response ended before it
            response = response[: turn.start()]
        response = _TEMPLATE_TOKEN.sub(" ", response)
    if "</" in response or "\u25c1/" in response:
        response = _after_thoughts(response)
    if "color" in response:
        response = _uncolour(response)
    low = _lowercase_same_length(response)
    tags, tags_end = _tag_answers(response, low) if "<answer>" in low else ([], -1)
    if tags:
        tail = _tail_candidates(response, low, tags_end)
        if tail is None:
            return Extraction(None, "retracted", ())
        return Extraction(tags[-1], "answer_tag", (*tags, *tail))
    spans = boxed_spans(response)
    if spans:
        final = _final_candidates(low, spans)
        last_end = _box_end(response, spans[-1])
        later = _later_final_answer(response, low, last_end)
        if later is not None:  # work went on after the boxes, up to a final answer: they were intermediate
            return later
        tail = _tail_candidates(response, low, last_end)
        if tail is None:
            return Extraction(None, "retracted", ())
        return Extraction(final[-1][1].strip(), "boxed", (*(b.strip() for _, b in final), *tail))
    end = _last_marker_end(low)
    if end >= 0 and _GOAL.search(_sentence(low, end, end)):
        return Extraction(None, "uncommitted", ())
    if end >= 0:
        ans = _clean_marker_text(response[end : end + 2000])
        if ans and (_RETRACTED.match(_after_value(response, end, ans)) or _retracts_itself(ans)):
            return Extraction(None, "retracted", ())
        if ans:
            return Extraction(ans, "marker", (ans,))
    if truncated:  # cut off by the length limit: what the text happens to end with is no committed answer
        return Extraction(None, "truncated", ())
    bare = response.strip()
    if len(bare) <= 300:
        bare = _CONNECTIVE.sub("", bare, count=1)
        if "or" in bare:
            bare = _GLUED_OR.sub(" or ", bare)  # "W(x)=1orW(x)=-1": two alternatives, not the variables o and r
    if 0 < len(bare) <= 300 and "$" not in bare and "\n" not in bare and _BARE_EXPRESSION.fullmatch(bare) \
            and not _PLAIN_NUMBER_ONLY.fullmatch(bare) and not _PROSE_WORD.search(bare):
        return Extraction(bare, "math", (bare,))
    m = last_math(response)
    if m:
        at = response.rfind(m)
        if at >= 0 and not _committed(low, at, at + len(m)):
            return Extraction(None, "uncommitted", ())
        offered = _maths_offered(response, at) if at > 0 and response[at - 1] == "$" else []
        if offered:
            answer = " or ".join([*offered, m])
            return Extraction(answer, "math", (answer,))
        concluded = _concluding_number(response, low, at + len(m)) if at >= 0 else None
        if concluded is not None:
            return Extraction(concluded, "last_number", (concluded,))
        return Extraction(m, "math", (m,))
    if not strict:
        num = _last_number(response)
        if num is not None:
            if not _committed(low, num.start(), num.end()):
                return Extraction(None, "uncommitted", ())
            # "... 3 or 4": a hedge, kept whole so that it is judged as one; "12 + 31 = 42": the chain, so
            # that a false one is not credited
            hedge = _VALUES_OR.search(response, max(0, num.start() - 120), num.start())
            both = _VALUES_AND.search(response, max(0, num.start() - 120), num.start())
            if both and (_BOTH_AFTER.match(response, num.end()) or _BOTH_BEFORE.search(response, max(0, both.start() - 20), both.start())):
                hedge = both if hedge is None or both.start() < hedge.start() else hedge
            chain = _ARITHMETIC_CHAIN.search(response, max(0, num.start() - 200), num.start())
            answer = response[hedge.start() : num.end()] if hedge else num.group(0)
            if chain and not hedge:
                answer = response[chain.start() : num.end()].strip()
            money = _money_before(response, num)
            if money is not None:
                answer = money
            elif not hedge and not chain:
                answer += _size_after(response, num.end())
            return Extraction(answer, "last_number", (answer,))
    return Extraction(None, "none", ())


# words after a number that change its size: a share smaller than a percent, a multiplier
_SIZE_WORD = re.compile(
    r"\s?(?:\\?%|\u2030|\u2031)|\s*(?:basis\s+points?|bps?|per\s+mille|per\s+mil|permille|percent|ppm|ppb|thousand|"
    r"million|billion|trillion)(?![a-z])",
    re.I,
)
_AND_FRACTION = re.compile(r"\s+and\s+(?:an?|one|two|three)\s+(?:half|thirds?|quarters?)\b", re.I)
_WORDS_AFTER = re.compile(r"\s+([a-zA-Z]{2,}(?:/[a-zA-Z]+)?)(?:\s+([a-zA-Z]{2,}))?")


def _size_after(response: str, end: int) -> str:
    """The words right after the last number that change its value ("25 basis points", "3 million", "90 minutes"),
    so that the number is not compared without them; "" when none do."""
    from rlvr.verifiers.math.units import canonical

    fraction = _AND_FRACTION.match(response, end)
    if fraction:  # "3 and a half hours": the fraction, then its unit
        return fraction.group(0) + _size_after(response, fraction.end())
    size = _SIZE_WORD.match(response, end)
    if size:
        return size.group(0)
    words = _WORDS_AFTER.match(response, end)
    if words is None or words.group(1).lower() in ("in", "or", "and", "at", "to", "of", "by"):
        return ""
    for text in ((words.group(1) + " " + words.group(2)) if words.group(2) else None, words.group(1)):
        if text and canonical(text):
            return " " + text
    return ""


# dollars and cents in digits: "12 dollars and 50 cents", "$12 and 50 cents", "3 dollars 5 cents"
_MONEY_IN_PARTS = re.compile(
    r"(?:\\?\$\s*\d+(?:\.\d+)?|(?<![\w.])\d+(?:\.\d+)?\s*dollars?)\s*(?:,\s*|\s+and\s+|\s+)"
    r"(?:\d{1,2}|[a-z]+(?:[\s-][a-z]+)?)\s*(?:cents?\b|\u00a2)", re.I
)


def _money_before(response: str, num: re.Match) -> str | None:
    """The whole amount when the last number is the cents of an amount in dollars and cents, else None."""
    found = None
    for m in _MONEY_IN_PARTS.finditer(response, max(0, num.start() - 60), min(len(response), num.end() + 60)):
        if m.start() <= num.start() and num.end() < m.end():
            found = m.group(0)
    return found


_LEADING_VALUE = re.compile(r"\s*(?:\$[^$]{1,200}\$|-?\d+(?:[.,/]\d+)*%?)")


_MATH_BEFORE = re.compile(r"\$([^$]{1,200})\$\s*(?:,\s*(?:or|and)?|or|and)\s*$")


def _maths_offered(response: str, at: int) -> list[str]:
    """The math spans joined to the one opening at ``at`` by "or", "and" or commas ("$x=3$ or $x=5$"), in order."""
    found: list[str] = []
    end = at - 1
    while len(found) < 20:
        m = _MATH_BEFORE.search(response, max(0, end - 300), end)
        if m is None or (m.start() > 0 and response[m.start() - 1] == "$"):
            break
        found.insert(0, m.group(1).strip())
        end = m.start()
    return found


def _retracts_itself(answer: str) -> bool:
    """A marker's answer that is a value followed by words rejecting it ("9 is what I first thought, but no")."""
    m = _LEADING_VALUE.match(answer)
    return bool(m and m.end() < len(answer) and _RETRACTED.match(answer[m.end():]))


def _box_end(response: str, span: tuple[int, str]) -> int:
    """Where the box at ``span`` (position, content) ends."""
    at, content = span
    i = response.find(content, at)
    if i < 0:
        return at
    end = i + len(content)
    return end + 1 if response.startswith("}", end) else end


def _after_value(response: str, marker_end: int, answer: str) -> str:
    """The text after the answer a marker introduced (from the end of the answer's first occurrence)."""
    window = response[marker_end : marker_end + 2000]
    i = window.find(answer)
    if i < 0:
        i = window.find(answer.split()[0]) if answer.split() else -1
        if i < 0:
            return ""
        return window[i + len(answer.split()[0]) :]
    return window[i + len(answer) :]
