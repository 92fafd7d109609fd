"""Random token soup from the answer families' vocabulary: the math verifier answers every one with a
verdict and never raises (bad model output is a verdict, never a crash)."""

from __future__ import annotations

import random

from rlvr.verifiers import Status
from rlvr.verifiers.math import math_verifier

TOKENS = [
    "1", "2", "0", "-", "+", "x", "y", "k", "=", "<", ">", "\\le", "(", ")", "[", "]", "\\{", "\\}", ",", ";",
    " and ", " or ", "\\frac{", "}", "{", "\\sqrt", "^", "_", "\\pi", "^\\circ", "\\text{", " cm", " minutes",
    "\\mid", ":", "|", "\\pm", "\\ldots", "\\overline{", "%", ".", "\\infty", "\\cup", "\\mathbb{R}", "\\mathbb{Z}",
    "\\in", " thousand", " squared", " not ", "\\boxed{", "\u00b2", "\u2212", "\uff11", "A", "B", "f(", "\\sin",
    "\\log_", "!", "e", "i", "0.", "\\,", "\\!", "{,}", " ", "\\unit{deg}", "\\unit{", "==", "\\begin{pmatrix}",
    "&", "\\\\", "\\end{pmatrix}", " to ", "between ", " because ", "$",
]


def test_token_soup_always_gets_a_verdict():
    rng = random.Random(20261123)
    for _ in range(600):
        answer = "".join(rng.choice(TOKENS) for _ in range(rng.randint(1, 12)))
        reference = "".join(rng.choice(TOKENS) for _ in range(rng.randint(1, 8)))
        for response in ("\\boxed{" + answer + "}", "Answer: " + answer, answer):
            v = math_verifier(response, reference, timeout_s=2.0)
            assert v.status in set(Status), (response, reference, v)
            assert v.reason != "internal_error", (response, reference, v)
