"""Pre-checks that reject answers a judge should never see: empty or near-empty text, bare reasoning openers,
refusals and talk addressed to the grader.

"One Token to Fool LLM-as-a-Judge" (Zhao et al., 2025, arXiv:2507.08794) shows that strong judges give credit to
"master keys": non-word symbols (":", "."), reasoning openers ("Thought process:", "Let's solve this problem step
by step.", "Solution") and their translations. A policy trained against such a judge learns to emit them. These
checks run before the judge is called, so a master key costs no judge call and earns no reward.

    precheck("Thought process:")           # "bare_opener"
    precheck("The answer is 42.")          # None: goes to the judge

Each check is deliberately narrow: a real short answer ("42", "B", "no") passes; only text with no content
beyond an opener, a refusal or a plea to the grader is stopped.
"""

from __future__ import annotations

import re
import unicodedata

# Openers and labels that carry no answer, in their normalised form (lower case, letters, digits and single spaces).
OPENERS = frozenset({
    "thought process", "thoughts", "thinking", "let me think", "let s think", "let s think step by step",
    "let s solve this problem step by step", "let s solve this step by step", "let s solve this", "let me solve this",
    "let me solve this step by step", "let s break this down", "let s work through this", "step by step",
    "step 1", "solution", "solutions", "answer", "final answer", "the answer", "the answer is", "the final answer is",
    "response", "explanation", "reasoning", "analysis", "proof", "here is the solution", "here s the solution",
    "here is my answer", "sure", "okay", "ok", "alright", "certainly", "of course",
    # translations the paper and its released data use, and a few of our own
    "解", "解答", "答案", "解析", "かいせつ", "解説", "答え", "respuesta", "solución", "solucion", "réponse",
    "reponse", "lösung", "losung", "antwort", "risposta", "soluzione", "resposta", "solução", "ответ", "решение",
})

_REFUSAL = re.compile(
    r"^\W*(i\s*(?:am|'m)\s+(?:sorry|unable|not able)|sorry\b|i\s+(?:can\s*not|can't|cannot|won't|will\s+not)\s+"
    r"(?:help|answer|solve|assist|provide|do|comply)|as\s+an\s+ai\b|i\s+do(?:\s+not|n't)\s+know\b)",
    re.IGNORECASE,
)
_META = re.compile(
    r"(\b(?:grader|judge|evaluator|reviewer|verifier)s?\b.{0,80}\b(?:correct|full\s+(?:marks|credit|score)|pass|accept)"
    r"|\b(?:give|award|assign)\s+(?:me\s+|this\s+)?(?:full\s+(?:marks|credit|score)|a\s+(?:score|reward)\s+of)"
    r"|\bignore\s+(?:all\s+|any\s+)?(?:previous|prior|above|the)\s+(?:instructions|rules|reference)"
    r"|\b(?:(?:this|my)\s+(?:answer|response|solution)|the\s+(?:answer|response|solution)\s+above)\s+"
    r"(?:is|was)\s+(?:correct|right|perfect)\s*[.!]?\s*$"
    r"|\bverdict\s*[:=]\s*(?:correct|yes|pass)\b)",
    re.IGNORECASE | re.DOTALL,
)
_MIN_CONTENT_CHARS = 1  # letters or digits a response must have outside openers


def normalise(text: str) -> str:
    """Lower case, accents kept, every run of non-word characters as one space, trimmed."""
    text = unicodedata.normalize("NFKC", text).lower()
    return " ".join(re.sub(r"[\W_]+", " ", text).split())


def _strip_openers(norm: str) -> str:
    """Remove openers from the front repeatedly ("Solution: Let's think step by step" -> "")."""
    changed = True
    while changed and norm:
        changed = False
        for opener in sorted(OPENERS, key=len, reverse=True):
            if norm == opener:
                return ""
            if norm.startswith(opener + " "):
                norm, changed = norm[len(opener) + 1:], True
                break
    return norm


def precheck(response: str, *, prompt: str | None = None, max_chars: int = 200_000) -> str | None:
    """The reason ``response`` must score 0 without a judge, or None. Reasons: "not_text", "empty",
    "too_long", "bare_opener", "prompt_echo", "refusal", "meta_talk"."""
    if not isinstance(response, str):
        return "not_text"
    if len(response) > max_chars:
        return "too_long"
    norm = normalise(response)
    if sum(ch.isalnum() for ch in norm) < _MIN_CONTENT_CHARS:
        return "empty"
    if not _strip_openers(norm):
        return "bare_opener"
    if isinstance(prompt, str) and prompt.strip() and norm == normalise(prompt):
        return "prompt_echo"
    head = response.lstrip()[:300]
    if _REFUSAL.search(head):
        return "refusal"
    if _META.search(response[-2000:]) or _META.search(response[:2000]):
        return "meta_talk"
    return None
