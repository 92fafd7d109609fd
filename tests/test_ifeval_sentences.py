"""IFEval: sentence counting around markdown emphasis, initials and acronyms, and letter_frequency with the
non-letter characters IFEval's own data asks for."""

import pytest

from rlvr.verifiers import Status, verify
from rlvr.verifiers.ifeval import textutil

SENTENCES = [  # (text, sentences)
    ("*One here.* *Two here.* *Three here.*", 3),
    ("**One here.** **Two here.**", 2),
    ("_One._ _Two._ _Three._", 3),
    ("*Why?* *Because.*", 2),
    ("The U.S. Army is large.", 1),
    ("The U.S. Army is large. It trains daily.", 2),
    ("She moved to the U.S. Then she studied.", 2),
    ("It was J. R. R. Tolkien who wrote it.", 1),
    ("I chose plan A. Then we left.", 2),
    ("The winner is team B. The loser is team C.", 2),
    ("Me and I. Then we left.", 2),
    ("We met at 5 p.m. The show began.", 2),
    ("We met at 5 p.m. Eastern time.", 1),
    ("Fruit, nuts, etc. Some people like them.", 2),
    ("Apples, pears, etc. are fruit.", 1),
    ("Mr. Smith left. Why? Done.", 3),
    ("John F. Kennedy spoke. Crowds cheered.", 2),
    ("Vitamin C. It helps.", 1),  # "C." after a capitalised word is taken for an initial, as Punkt does
    ("The answer is B. Then we stop.", 2),
    ("I like it. I. Really. Do.", 4),  # "I." after a sentence is a one-word sentence, not an initial
    ("He left at 5 p.m. The end.", 2),
    ("Wait... The end.", 2),
    ("~~One here.~~ ~~Two here.~~", 2),
    ("Is it? No. The answer is here.", 3),
    ("See No. 5 for details.", 1),
    ("See Fig. 3 and pp. 12-14.", 1),
    ("Climb Mt. Everest today.", 1),
]


@pytest.mark.parametrize("text, expected", SENTENCES)
def test_sentence_count(text, expected):
    assert textutil.count_sentences(text) == expected, textutil.split_sentences(text)


def _sentences(text, n, relation):
    ref = {"instruction_id_list": ["length_constraints:number_sentences"],
           "kwargs": [{"num_sentences": n, "relation": relation}]}
    return verify("ifeval", text, ref).score


def test_emphasis_sentences_through_the_verifier():
    assert _sentences("*One here.* *Two here.* *Three here.*", 3, "at least") == 1.0
    assert _sentences("*One here.* *Two here.* *Three here.*", 3, "less than") == 0.0
    assert _sentences("The U.S. Army trains.", 2, "less than") == 1.0


LETTERS = [  # (letter, frequency, relation, response, followed)
    ("#", 3, "at least", "## Heading\n#tag", True),
    ("#", 3, "at least", "# One heading", False),
    ("!", 2, "less than", "Wow!", True),
    ("!", 2, "less than", "Wow! Amazing!", False),
    ("!", 1, "at least", "No exclamation here.", False),
    ("Z", 2, "at least", "zZ", True),
    ("é", 2, "at least", "Été", True),
]


@pytest.mark.parametrize("letter, frequency, relation, response, followed", LETTERS)
def test_letter_frequency_accepts_any_single_character(letter, frequency, relation, response, followed):
    ref = {"instruction_id_list": ["keywords:letter_frequency"],
           "kwargs": [{"letter": letter, "let_frequency": frequency, "let_relation": relation}]}
    v = verify("ifeval", response, ref)
    assert v.status != Status.ERROR, v
    assert v.score == (1.0 if followed else 0.0), v


@pytest.mark.parametrize("letter", ["ab", "", " ", 3, None])  # None: a null kwarg is dropped, so it is missing
def test_letter_frequency_still_needs_exactly_one_character(letter):
    ref = {"instruction_id_list": ["keywords:letter_frequency"],
           "kwargs": [{"letter": letter, "let_frequency": 1, "let_relation": "at least"}]}
    v = verify("ifeval", "text", ref)
    assert (v.status, v.reason) == (Status.ERROR, "bad_kwargs:keywords:letter_frequency"), v
