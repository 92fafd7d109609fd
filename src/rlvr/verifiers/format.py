"""The "format" verifier: the response has the required tags (and, optionally, sections) in the required layout.

    verify("format", "<think>2+2 is 4</think>\\n<answer>4</answer>", None)           # correct, "format_ok"
    verify("format", "<answer>4</answer><think>...</think>", None)                 # incorrect, "wrong_order"

The default is the DeepSeek-R1 template: ``<think>...</think><answer>...</answer>``, each tag pair exactly once,
think before answer, a non-empty answer, and nothing but whitespace outside the tags. ``reference`` is ignored.

Options:
- ``tags``: the tag names, in their required order (default ["think", "answer"]); tags are matched literally and
  case-sensitively as ``<name>`` and ``</name>``. An empty list checks no tags (and then no "outside" text either).
- ``require_order`` (True): tags, and required sections, must appear in the listed order.
- ``allow_text_outside`` (False): whether non-whitespace text may appear outside the tag pairs.
- ``require_nonempty`` (None = the last tag, "answer" by default): tags whose content must not be blank. Blank
  means nothing visible: whitespace (NBSP included) and invisible characters (zero-width spaces and joiners, the
  BOM, bidirectional marks, soft hyphens, tag characters, variation selectors, Hangul fillers, the braille blank,
  combining marks with no letter to sit on) count as nothing, here and in the "text outside the tags" check; so do
  HTML comments and character references that decode to such characters ("&nbsp;", "&#8203;").
- ``required_sections`` ([]): markers that must appear anywhere in the response. One that starts with "#" is a
  markdown heading and must open a line, or follow an opening tag there ("## Plan" matches "## Plan" and
  "<think>## Plan:", not "### Plan", "## Planning" or "see ## Plan"); anything else is a literal substring.

Reasons (the first problem found; details["problems"] lists them all): "format_ok", "missing_tag:<name>",
"duplicate_tag:<name>", "unclosed_tag:<name>" (an opening tag without a closing one after it, or the reverse),
"empty_tag:<name>", "nested_tag:<name>" (one tag pair inside another), "wrong_order", "text_outside_tags",
"missing_section:<s>"; "bad_option"/"bad_response" are status "error". ``extracted`` is the stripped content of the
last tag in ``tags`` when that pair is well formed (the answer), else None. Score 1.0 or 0.0.
"""

from __future__ import annotations

import html
import re
import unicodedata
from typing import Any

from rlvr.verifiers.base import Status, Verdict
from rlvr.verifiers.registry import register_verifier

DEFAULT_TAGS = ("think", "answer")
_TAG_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.:-]*")


# Characters that show nothing on their own, beyond what str.isspace() covers: format controls (Cf: zero-width
# space and joiners, BOM, bidi marks, soft hyphen, tag characters), other controls (Cc), unassigned code points
# (Cn), combining marks (Mn, Me: without a base character they mark nothing), and the letters that render blank.
_INVISIBLE_CATEGORIES = frozenset({"Cf", "Cc", "Cn", "Mn", "Me", "Zs", "Zl", "Zp"})
_BLANK_LETTERS = frozenset("\u115f\u1160\u3164\uffa0\u2800\u17b4\u17b5")


def _drop_html_comments(text: str) -> str:
    # a scan, not a lazy regex: "<!--" repeated without "-->" would make a regex rescan the tail each time
    parts, pos = [], 0
    while True:
        start = text.find("<!--", pos)
        end = text.find("-->", start + 4) if start >= 0 else -1
        if end < 0:
            parts.append(text[pos:])
            return "".join(parts)
        parts.append(text[pos:start])
        pos = end + 3


def _no_visible_char(text: str) -> bool:
    return all(
        ch.isspace() or ch in _BLANK_LETTERS or unicodedata.category(ch) in _INVISIBLE_CATEGORIES for ch in text
    )


def is_blank(text: str) -> bool:
    """Whether ``text`` shows nothing (see the module docstring), also once HTML comments are dropped and
    character references decoded ("&nbsp;", "&#8203;", "<!-- -->" render as nothing)."""
    if not text.strip() or _no_visible_char(text):
        return True
    if "&" not in text and "<!--" not in text:
        return False
    return _no_visible_char(html.unescape(_drop_html_comments(text)))


def _edge_blank(ch: str) -> bool:
    # combining marks stay: at the end of a text they belong to the letter before them
    return ch.isspace() or ch in _BLANK_LETTERS or unicodedata.category(ch) in ("Cf", "Cc", "Cn")


def strip_blank(text: str) -> str:
    """``text`` without whitespace and invisible characters at either end."""
    start, end = 0, len(text)
    while start < end and _edge_blank(text[start]):
        start += 1
    while end > start and _edge_blank(text[end - 1]):
        end -= 1
    return text[start:end]


def _error(reason: str, why: str) -> Verdict:
    return Verdict(0.0, Status.ERROR, reason, details={"error": why})


def _string_list(value: Any, name: str) -> list[str] | str:
    if isinstance(value, str) or not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        return f"{name} must be a list of strings, got {value!r}"
    if len(set(value)) != len(value):
        return f"{name} has duplicates: {value!r}"
    return list(value)


def _section_pattern(section: str) -> re.Pattern[str]:
    if section.startswith("#"):
        # a heading opens a line, possibly right after an opening tag ("<think>## Plan")
        return re.compile(r"^[ \t]*(?:<[A-Za-z_][\w.:-]*>[ \t]*)?" + re.escape(section) + r"(?![\w#])", re.MULTILINE)
    return re.compile(re.escape(section))


@register_verifier("format")
def format_verifier(
    response: str,
    reference: Any = None,
    *,
    tags: Any = DEFAULT_TAGS,
    require_order: bool = True,
    allow_text_outside: bool = False,
    require_nonempty: Any = None,
    required_sections: Any = (),
    timeout_s: float | None = None,  # the runner's budget; everything here is linear-time
) -> Verdict:
    """Check the layout of ``response`` (see the module docstring); ``reference`` is ignored."""
    tag_list = _string_list(tags, "tags")
    if isinstance(tag_list, str):
        return _error("bad_option", tag_list)
    bad_names = [t for t in tag_list if not _TAG_NAME.fullmatch(t)]
    if bad_names:
        return _error("bad_option", f"invalid tag names: {bad_names!r}")
    nonempty = _string_list(tag_list[-1:] if require_nonempty is None else require_nonempty, "require_nonempty")
    if isinstance(nonempty, str):
        return _error("bad_option", nonempty)
    if set(nonempty) - set(tag_list):
        unknown = sorted(set(nonempty) - set(tag_list))
        return _error("bad_option", f"require_nonempty names tags not in tags: {unknown!r}")
    sections = _string_list(required_sections, "required_sections")
    if isinstance(sections, str):
        return _error("bad_option", sections)
    if any(not s.strip() for s in sections):
        return _error("bad_option", "required_sections may not contain blank markers")
    if not isinstance(response, str):
        return _error("bad_response", f"response is {type(response).__name__}, expected str")

    problems: list[str] = []
    spans: dict[str, tuple[int, int, str]] = {}  # name -> (start, end, content)
    for name in tag_list:
        open_tag, close_tag = f"<{name}>", f"</{name}>"
        opens = [m.start() for m in re.finditer(re.escape(open_tag), response)]
        closes = [m.start() for m in re.finditer(re.escape(close_tag), response)]
        if not opens and not closes:
            problems.append(f"missing_tag:{name}")
        elif len(opens) > 1 or len(closes) > 1:
            problems.append(f"duplicate_tag:{name}")
        elif len(opens) != len(closes) or closes[0] < opens[0]:
            problems.append(f"unclosed_tag:{name}")
        else:
            start, end = opens[0], closes[0] + len(close_tag)
            spans[name] = (start, end, response[opens[0] + len(open_tag) : closes[0]])

    for name in nonempty:
        if name in spans and is_blank(spans[name][2]):
            problems.append(f"empty_tag:{name}")

    ordered = sorted(spans, key=lambda n: spans[n][0])
    nested = False
    for outer, inner in zip(ordered, ordered[1:]):
        if spans[inner][0] < spans[outer][1]:
            problems.append(f"nested_tag:{inner}")
            nested = True
    if require_order and not nested and ordered != [n for n in tag_list if n in spans]:
        problems.append("wrong_order")

    if tag_list and not allow_text_outside and not nested:
        outside, pos = [], 0
        for name in ordered:
            start, end, _ = spans[name]
            outside.append(response[pos:start])
            pos = end
        outside.append(response[pos:])
        if not is_blank("".join(outside)):
            problems.append("text_outside_tags")

    found_at: list[int] = []
    for section in sections:
        pattern = _section_pattern(section)
        m = pattern.search(response, found_at[-1] + 1 if (require_order and found_at) else 0)
        if m is not None:
            found_at.append(m.start())
        elif pattern.search(response) is not None:
            if "wrong_order" not in problems:
                problems.append("wrong_order")
        else:
            problems.append(f"missing_section:{section}")

    last = tag_list[-1] if tag_list else None
    extracted = strip_blank(spans[last][2]) if last in spans else None
    details: dict[str, Any] = {"problems": problems}
    if problems:
        return Verdict(0.0, Status.INCORRECT, problems[0], extracted=extracted, details=details)
    return Verdict(1.0, Status.CORRECT, "format_ok", extracted=extracted, details=details)
