"""Reading a judge's reply: a verdict (correct / incorrect) or a graded score, from messy model text.

    parse_judgement("... so it matches.\\nVERDICT: CORRECT")          # Judgement(1.0, "correct")
    parse_judgement("**Verdict:** incorrect")                         # Judgement(0.0, "incorrect")
    parse_judgement("Score: 7/10", graded=True, scale=10)            # Judgement(0.7, "partial")
    parse_judgement("I think so?")                                    # Judgement(None, "unparsable")

Rules, in order: a reasoning block (<think>...</think>) is dropped; a JSON object with "verdict", "correct"
or "score" wins; else the LAST explicit marker line ("VERDICT:", "Final verdict", "Score:", \\boxed{...}) wins;
else a reply whose only content is a bare yes/no/correct/incorrect word. Two different verdicts on the last
marker line, or none at all, are "unparsable" (the verifier reports "undecidable"), never a guess.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

_THINK = re.compile(r"<think>.*?(</think>|$)", re.IGNORECASE | re.DOTALL)
_POSITIVE = {"correct", "yes", "true", "pass", "right", "equivalent", "accept", "accepted", "1"}
_NEGATIVE = {"incorrect", "no", "false", "fail", "wrong", "not correct", "not equivalent", "reject", "rejected",
             "0", "partially correct", "partial"}
_WORD = r"(not\s+correct|not\s+equivalent|partially\s+correct|incorrect|correct|yes|no|true|false|pass|fail|wrong|right|" \
        r"equivalent|accept(?:ed)?|reject(?:ed)?)"
_VERDICT_MARK = re.compile(r"(?:final\s+)?(?:verdict|judgement|judgment|decision|grade|answer)\s*\**\s*[:=\-]",
                           re.IGNORECASE)
_WORDS = re.compile(r"\b" + _WORD + r"\b", re.IGNORECASE)
_BOXED = re.compile(r"\\boxed\{\s*(?:\\text\{)?\s*([A-Za-z ]+|\d+(?:\.\d+)?)\s*\}?\s*\}", re.IGNORECASE)
_SCORE = re.compile(r"\bscore\s*\**\s*[:=]?\s*\**\s*(-?\d+(?:\.\d+)?)\s*(?:/\s*(\d+(?:\.\d+)?)|out\s+of\s+(\d+(?:\.\d+)?))?",
                    re.IGNORECASE)
_RATIO = re.compile(r"(-?\d+(?:\.\d+)?)\s*(?:/|out\s+of)\s*(\d+(?:\.\d+)?)", re.IGNORECASE)
MAX_REPLY_CHARS = 64_000


@dataclass(frozen=True)
class Judgement:
    score: float | None  # None: nothing parsable
    label: str  # "correct", "incorrect", "partial" or "unparsable"
    evidence: str = ""  # the text the decision was read from (cut to 200 characters)


def _label(score: float) -> str:
    return "correct" if score >= 1.0 else "incorrect" if score <= 0.0 else "partial"


def _word_score(word: str) -> float | None:
    w = " ".join(word.lower().split())
    if w in _NEGATIVE:
        return 0.0
    if w in _POSITIVE:
        return 1.0
    return None


def _from_json(text: str, graded: bool, scale: float) -> Judgement | None:
    for match in reversed(list(re.finditer(r"\{[^{}]{0,2000}\}", text))):
        try:
            obj = json.loads(match.group(0))
        except ValueError:
            continue
        if not isinstance(obj, dict):
            continue
        if graded and isinstance(obj.get("score"), (int, float)) and not isinstance(obj.get("score"), bool):
            return _scaled(float(obj["score"]), scale, match.group(0))
        for key in ("verdict", "judgement", "judgment", "correct", "is_correct"):
            value = obj.get(key)
            if isinstance(value, bool):
                return Judgement(float(value), "correct" if value else "incorrect", match.group(0)[:200])
            if isinstance(value, str) and _word_score(value) is not None:
                s = _word_score(value)
                return Judgement(s, _label(s), match.group(0)[:200])
    return None


def _scaled(raw: float, scale: float, evidence: str, denominator: float | None = None) -> Judgement | None:
    top = denominator if denominator else scale
    if top <= 0 or raw < 0 or raw > top:
        return None
    s = raw / top
    return Judgement(s, _label(s), evidence[:200])


def parse_judgement(reply: str, *, graded: bool = False, scale: float = 10) -> Judgement:
    """The judge's decision in ``reply``; see the module docstring for the rules."""
    if not isinstance(reply, str):
        return Judgement(None, "unparsable")
    text = _THINK.sub(" ", reply[-MAX_REPLY_CHARS:]).strip()
    if not text:
        return Judgement(None, "unparsable")
    found = _from_json(text, graded, scale)
    if found is not None:
        return found
    if graded:
        scores = list(_SCORE.finditer(text))
        if scores:
            m = scores[-1]
            den = m.group(2) or m.group(3)
            return _scaled(float(m.group(1)), scale, m.group(0), float(den) if den else None) or \
                Judgement(None, "unparsable", m.group(0)[:200])
    lines = [ln for ln in text.splitlines() if ln.strip()]
    for line in reversed(lines):
        verdicts = {_word_score(w) for m in _VERDICT_MARK.finditer(line)
                    for w in _WORDS.findall(line[m.end():m.end() + 80])}
        verdicts |= {_word_score(m.group(1).strip()) for m in _BOXED.finditer(line)}
        verdicts.discard(None)
        if len(verdicts) == 1:
            s = verdicts.pop()
            return Judgement(s, _label(s), line.strip()[:200])
        if len(verdicts) > 1:
            return Judgement(None, "unparsable", line.strip()[:200])
        if graded:
            ratio = _RATIO.search(line)
            if ratio:
                out = _scaled(float(ratio.group(1)), scale, line, float(ratio.group(2)))
                if out is not None:
                    return out
    bare = re.sub(r"[^\w\s]", " ", text).strip()
    if len(bare) <= 40:
        s = _word_score(bare)
        if s is not None:
            return Judgement(s, _label(s), bare)
        if graded:
            try:
                return _scaled(float(bare), scale, bare) or Judgement(None, "unparsable", bare)
            except ValueError:
                pass
    return Judgement(None, "unparsable", text[-200:])
