"""Pull the final answer out of a model response.

Every function here is linear in the response length (no backtracking regexes over the whole text), so a
100k-character response costs milliseconds.

Priority (the first method that finds something wins):
  1. ``<answer>...</answer>`` (the last one; a \\boxed{} inside it is unwrapped)
  2. the last ``\\boxed{...}`` / ``\\fbox{...}`` (nested braces; ``\\boxed 5`` without braces too)
  3. the LAST of the explicit markers "final answer is ...", "answer is ...", "Answer: ...", "#### ..."
  4. the last inline/display math: ``$...$``, ``$$...$$``, ``\\(...\\)``, ``\\[...\\]``
  5. the last number in the text (turned off by ``strict=True``)
"""

from __future__ import annotations

import re
from dataclasses import dataclass

BOX_COMMANDS = ("\\boxed", "\\fbox")


@dataclass(frozen=True)
class Extraction:
    answer: str | None  # the answer text (None: nothing found)
    method: str  # "answer_tag", "boxed", "marker", "math", "last_number", "none"
    candidates: tuple[str, ...] = ()  # every boxed value (to detect hedging), else (answer,)


def _brace_pairs(text: str) -> dict[int, int]:
    """Index of every "{" -> index of its matching "}" (one linear pass; escaped braces do not count)."""
    pairs: dict[int, int] = {}
    stack: list[int] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == "\\":
            i += 2
            continue
        if c == "{":
            stack.append(i)
        elif c == "}" and stack:
            pairs[stack.pop()] = i
        i += 1
    return pairs


def boxed_all(text: str) -> list[str]:
    """Contents of every \\boxed{...} / \\fbox{...} in order (unclosed ones are skipped)."""
    out: list[tuple[int, str]] = []
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
                    pairs = _brace_pairs(text)
                end = pairs.get(j)
                if end is not None:
                    out.append((i, text[j + 1 : end]))
                    pos = end + 1
            else:  # "\boxed 5": one token
                m = re.match(r"[^\s$]+", text[j : j + 200])
                if m:
                    out.append((i, m.group(0)))
    out.sort()
    return [s for _, s in out]


_MARKERS = re.compile(
    r"(?:final\s+answer\s*(?:is|:)|answer\s*(?:is|:)|####)",
    re.I,
)
_NUMBER = re.compile(r"-?\d+(?:,\d{3})+(?:\.\d+)?(?!\d)|-?(?:\d+(?:\.\d+)?|\.\d+)(?:/\d+)?")


def _clean_marker_text(s: str) -> str:
    s = s.strip()
    # up to the end of the line, or of the sentence (". " followed by a capital / end)
    line = s.split("\n", 1)[0].strip()
    m = re.search(r"\.\s+[A-Z]", line)
    if m and line[: m.start()].count("$") % 2 == 0:
        line = line[: m.start()]
    line = line.strip()
    line = re.sub(r"^(?:\*\*|:|\s)+", "", line)
    line = re.sub(r"(?:\*\*|\s)+$", "", line)
    # math inside the marker text wins
    inner = last_math(line)
    if inner is not None:
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
    # dollars: pair them from the left ($$ counts as one delimiter)
    spans: list[tuple[int, int]] = []
    i, n, open_at, open_len = 0, len(text), -1, 0
    while i < n:
        if text[i] == "\\":
            i += 2
            continue
        if text[i] == "$":
            ln = 2 if text.startswith("$$", i) else 1
            if open_at < 0:
                open_at, open_len = i, ln
            else:
                spans.append((open_at + open_len, i))
                open_at = -1
            i += ln
            continue
        i += 1
    if spans:
        a, b = spans[-1]
        if best is None or b > best[0]:
            best = (b, text[a:b])
    return None if best is None else best[1].strip()


def extract(response: str, *, strict: bool = False) -> Extraction:
    low = response.lower()
    close = low.rfind("</answer>")
    start = low.rfind("<answer>", 0, close) if close >= 0 else -1
    if start >= 0:
        inner = response[start + len("<answer>") : close]
        boxes = boxed_all(inner)
        if boxes:
            return Extraction(boxes[-1].strip(), "answer_tag", tuple(b.strip() for b in boxes))
        m = last_math(inner)
        ans = (m if m is not None else inner).strip()
        return Extraction(ans, "answer_tag", (ans,))
    boxes = boxed_all(response)
    if boxes:
        return Extraction(boxes[-1].strip(), "boxed", tuple(b.strip() for b in boxes))
    last = None
    for last in _MARKERS.finditer(response):
        pass
    if last is not None:
        ans = _clean_marker_text(response[last.end() : last.end() + 2000])
        if ans:
            return Extraction(ans, "marker", (ans,))
    m = last_math(response)
    if m:
        return Extraction(m, "math", (m,))
    if not strict:
        num = None
        for num in _NUMBER.finditer(response):
            pass
        if num is not None:
            return Extraction(num.group(0), "last_number", (num.group(0),))
    return Extraction(None, "none", ())
