"""The "ifeval" verifier: IFEval's 25 instruction checks (arXiv:2311.07911), strict and loose."""

import json
import random
import re
import threading
import time

import pytest

from rlvr.verifiers import Status, verify
from rlvr.verifiers.ifeval import instruction_ids, loose_variants, textutil
from rlvr.verifiers.registry import verifier_isolation

FR = "Bonjour, je m'appelle Marie et j'habite à Paris depuis dix ans avec ma famille."
EN = "Hello, my name is Mary and I have lived in London for ten years with my family."

# (instruction id, IFEval kwargs, response, followed?)
CAT3 = {"keyword": "cat", "frequency": 3, "relation": "at least"}
Z3 = {"letter": "z", "let_frequency": 3, "let_relation": "at least"}
SENT3 = {"num_sentences": 3, "relation": "at least"}
CAPS_AT_LEAST_2 = {"capital_frequency": 2, "capital_relation": "at least"}
CAPS_UNDER_2 = {"capital_frequency": 2, "capital_relation": "less than"}
DE_UPPER = "DIES IST EIN DEUTSCHER SATZ, DER GANZ IN GROSSBUCHSTABEN GESCHRIEBEN IST."

CASES = [
    # keywords
    ("keywords:existence", {"keywords": ["banana", "Moon"]}, "I ate a BANANA on the moon.", True),
    ("keywords:existence", {"keywords": ["banana", "Moon"]}, "I ate a banana at noon.", False),
    ("keywords:frequency", CAT3, "Cat, cat and CAT.", True),
    ("keywords:frequency", CAT3, "A cat and a dog and a cat.", False),
    ("keywords:frequency", {"keyword": "cat", "frequency": 2, "relation": "less than"}, "One cat only.", True),
    ("keywords:frequency", {"keyword": "cat", "frequency": 2, "relation": "less than"}, "A cat and a cat.", False),
    ("keywords:forbidden_words", {"forbidden_words": ["bad", "evil"]}, "This is badly phrased but fine.", True),
    ("keywords:forbidden_words", {"forbidden_words": ["bad", "evil"]}, "Nothing EVIL here.", False),
    ("keywords:letter_frequency", Z3, "Zigzag pizza", True),
    ("keywords:letter_frequency", Z3, "buzz", False),
    ("keywords:letter_frequency", {"letter": "E", "let_frequency": 3, "let_relation": "less than"}, "tree", True),
    ("keywords:letter_frequency", {"letter": "E", "let_frequency": 3, "let_relation": "less than"}, "Eerie", False),
    # language
    ("language:response_language", {"language": "fr"}, FR, True),
    ("language:response_language", {"language": "fr"}, EN, False),
    ("language:response_language", {"language": "en"}, "12345 678", True),  # nothing to detect: followed, as in IFEval
    # length constraints
    ("length_constraints:number_sentences", {"num_sentences": 3, "relation": "less than"}, "One here. Two here.", True),
    ("length_constraints:number_sentences", {"num_sentences": 3, "relation": "less than"}, "One. Two! Three?", False),
    ("length_constraints:number_sentences", SENT3, "Mr. Smith left. Why? Done.", True),
    ("length_constraints:number_sentences", SENT3, "Dr. Who is here. Yes.", False),
    ("length_constraints:number_sentences", SENT3, "a list\n- no stop\n- at all", False),
    ("length_constraints:number_paragraphs", {"num_paragraphs": 3}, "First.\n***\nSecond.\n***\nThird.", True),
    ("length_constraints:number_paragraphs", {"num_paragraphs": 3}, "***\nOne.\n***\nTwo.\n***\nThree.\n***", True),
    ("length_constraints:number_paragraphs", {"num_paragraphs": 3}, "First.\n***\nSecond.", False),
    ("length_constraints:number_paragraphs", {"num_paragraphs": 3}, "First.\n***\n***\nThird.", False),
    ("length_constraints:number_paragraphs", {"num_paragraphs": 2}, "First.\n\nSecond.\n\nThird.", False),
    ("length_constraints:number_words", {"num_words": 5, "relation": "less than"}, "only four words here", True),
    ("length_constraints:number_words", {"num_words": 5, "relation": "less than"}, "now there are five words", False),
    ("length_constraints:number_words", {"num_words": 4, "relation": "at least"}, "don't stop now", True),
    ("length_constraints:number_words", {"num_words": 4, "relation": "at least"}, "hi there, friend", False),
    (
        "length_constraints:nth_paragraph_first_word",
        {"num_paragraphs": 2, "nth_paragraph": 2, "first_word": "Finally"},
        'Intro text.\n\n"Finally, done."',
        True,
    ),
    (
        "length_constraints:nth_paragraph_first_word",
        {"num_paragraphs": 2, "nth_paragraph": 2, "first_word": "finally"},
        "Intro text.\n\nAt last, done.",
        False,
    ),
    (
        "length_constraints:nth_paragraph_first_word",
        {"num_paragraphs": 2, "nth_paragraph": 2, "first_word": "finally"},
        "Intro.\n\nFinally here.\n\nA third one.",
        False,
    ),
    # detectable content
    ("detectable_content:number_placeholders", {"num_placeholders": 2}, "Dear [name], I live at [address].", True),
    ("detectable_content:number_placeholders", {"num_placeholders": 2}, "Dear [name], I live at [add\nress].", False),
    ("detectable_content:postscript", {"postscript_marker": "P.S."}, "Hi there.\n\nP.S. See you soon.", True),
    ("detectable_content:postscript", {"postscript_marker": "P.S."}, "Hi there.\n\np. s. see you soon.", True),
    ("detectable_content:postscript", {"postscript_marker": "P.S."}, "Hi there.\n\nPS see you soon.", False),
    ("detectable_content:postscript", {"postscript_marker": "P.P.S"}, "Hi.\nP.S. one\nP.P.S. two", True),
    ("detectable_content:postscript", {"postscript_marker": "P.P.S"}, "Hi.\nP.S. only one", False),
    # detectable format
    ("detectable_format:number_bullet_lists", {"num_bullets": 2}, "My list:\n* one\n* two", True),
    ("detectable_format:number_bullet_lists", {"num_bullets": 2}, "- one\n  - two\nend", True),
    ("detectable_format:number_bullet_lists", {"num_bullets": 2}, "* one\n* two\n- three", False),
    ("detectable_format:number_bullet_lists", {"num_bullets": 2}, "**bold** intro\n* one", False),
    ("detectable_format:constrained_response", {}, "Let me think.\nMy answer is maybe.", True),
    ("detectable_format:constrained_response", {}, "my answer is yes.", False),
    ("detectable_format:number_highlighted_sections", {"num_highlights": 2}, "*first* and *second* parts", True),
    ("detectable_format:number_highlighted_sections", {"num_highlights": 2}, "**bold** counts as one", False),
    ("detectable_format:number_highlighted_sections", {"num_highlights": 2}, "*only one* and ** **", False),
    (
        "detectable_format:multiple_sections",
        {"section_spliter": "SECTION", "num_sections": 2},
        "SECTION 1\nIntro\nSECTION 2\nBody",
        True,
    ),
    (
        "detectable_format:multiple_sections",
        {"section_spliter": "SECTION", "num_sections": 2},
        "Section 1\nIntro\nSection 2\nBody",
        False,
    ),
    ("detectable_format:json_format", {}, '```json\n{"a": 1, "b": [true, null]}\n```', True),
    ("detectable_format:json_format", {}, "  [1, 2.5e3, 123456789012345678901234567890]  ", True),
    ("detectable_format:json_format", {}, 'Here you go: {"a": 1}', False),
    ("detectable_format:title", {}, "<<Poem of Joy>>\nRoses are red.", True),
    ("detectable_format:title", {}, "<<  >>\nRoses are red.", False),
    ("detectable_format:title", {}, "Poem of Joy\nRoses are red.", False),
    # combination
    ("combination:two_responses", {}, "Answer one.\n******\nAnswer two.", True),
    ("combination:two_responses", {}, "Same.\n******\nSame.", False),
    ("combination:two_responses", {}, "one\n******\n******\ntwo", False),
    (
        "combination:repeat_prompt",
        {"prompt_to_repeat": "Write a poem about cats."},
        "write a poem about cats. Cats nap all day.",
        True,
    ),
    ("combination:repeat_prompt", {"prompt_to_repeat": "Write a poem about cats."}, "A poem about cats.", False),
    # start / end
    ("startend:end_checker", {"end_phrase": "Any other questions?"}, 'Thanks. "any other questions?"  ', True),
    ("startend:end_checker", {"end_phrase": "Any other questions?"}, "Any other questions? Bye.", False),
    ("startend:quotation", {}, '"The whole answer is quoted."', True),
    ("startend:quotation", {}, 'The answer is "quoted".', False),
    ("startend:quotation", {}, '"', False),
    # change case
    ("change_case:capital_word_frequency", CAPS_AT_LEAST_2, "This is VERY IMPORTANT.", True),
    ("change_case:capital_word_frequency", CAPS_AT_LEAST_2, "Very important, OK.", False),
    ("change_case:capital_word_frequency", CAPS_UNDER_2, "I am here.", True),
    ("change_case:capital_word_frequency", CAPS_UNDER_2, "I CAN'T.", False),
    ("change_case:english_capital", {}, "THIS IS AN ENGLISH SENTENCE WRITTEN ENTIRELY IN CAPITAL LETTERS.", True),
    ("change_case:english_capital", {}, "This is an English sentence, not all in capitals.", False),
    ("change_case:english_capital", {}, DE_UPPER, False),
    ("change_case:english_lowercase", {}, "this is an english sentence written entirely in lowercase letters.", True),
    ("change_case:english_lowercase", {}, "This sentence has a Capital letter in it.", False),
    ("change_case:english_lowercase", {}, DE_UPPER.lower(), False),
    # punctuation
    ("punctuation:no_comma", {}, "No commas here. None at all!", True),
    ("punctuation:no_comma", {}, "Well, yes.", False),
]


def _case_id(case):
    instruction_id, _, response, followed = case
    return f"{instruction_id}-{'accept' if followed else 'reject'}-{response[:24]!r}"


def one(instruction_id, kwargs):
    return {"instruction_id_list": [instruction_id], "kwargs": [kwargs]}


@pytest.mark.parametrize("instruction_id, kwargs, response, followed", CASES, ids=[_case_id(c) for c in CASES])
def test_instruction(instruction_id, kwargs, response, followed):
    v = verify("ifeval", response, one(instruction_id, kwargs))
    expected = (1.0, Status.CORRECT) if followed else (0.0, Status.INCORRECT)
    assert (v.score, v.status) == expected, v
    assert v.details["instructions"] == [{"id": instruction_id, "followed": followed, "kwargs": kwargs}]


def test_every_instruction_id_has_accept_and_reject_cases():
    assert len(instruction_ids()) == 25
    for instruction_id in instruction_ids():
        outcomes = {followed for iid, _, _, followed in CASES if iid == instruction_id}
        assert outcomes == {True, False}, instruction_id


# ------------------------------------------------------------------------------------------ whole rows

# An IFEval row as in the Hugging Face copy of input_data.jsonl: every kwarg name on every entry, unused ones null.
_NULL_KWARGS = dict.fromkeys(
    "num_highlights relation num_words num_placeholders prompt_to_repeat num_paragraphs nth_paragraph first_word "
    "num_sentences keyword frequency keywords forbidden_words letter let_frequency let_relation language "
    "postscript_marker num_bullets end_phrase section_spliter num_sections capital_frequency capital_relation".split()
)
ROW = {
    "key": 1001,
    "prompt": "Write a short note about rain. Do not use any commas, highlight at least 2 sections with markdown, "
    "and use at least 40 words. End with a postscript starting with P.S.",
    "instruction_id_list": [
        "punctuation:no_comma",
        "detectable_format:number_highlighted_sections",
        "length_constraints:number_words",
        "detectable_content:postscript",
    ],
    "kwargs": [
        dict(_NULL_KWARGS),
        {**_NULL_KWARGS, "num_highlights": 2},
        {**_NULL_KWARGS, "relation": "at least", "num_words": 40},
        {**_NULL_KWARGS, "postscript_marker": "P.S."},
    ],
}


def test_full_row_scores_the_fraction_followed():
    response = "Rain is *soft* and *steady* today. It taps on the window.\n\nP.S. Bring an umbrella."
    v = verify("ifeval", response, ROW)
    assert v.status == Status.PARTIAL and v.score == pytest.approx(0.75), v
    assert v.reason == "some_followed"
    followed = {r["id"]: r["followed"] for r in v.details["instructions"]}
    assert followed == {
        "punctuation:no_comma": True,
        "detectable_format:number_highlighted_sections": True,
        "length_constraints:number_words": False,
        "detectable_content:postscript": True,
    }
    # nulls are dropped from the reported kwargs
    assert v.details["instructions"][2]["kwargs"] == {"relation": "at least", "num_words": 40}
    assert v.details["instructions"][0]["kwargs"] == {}


def test_full_row_all_followed_and_none_followed():
    good = (
        "Rain is *soft* and *steady* today. It taps on the window all morning and fills the gutters with a quiet "
        "song. The garden drinks it in and the air smells of wet earth and cut grass. Children splash in the "
        "puddles on the way home.\n\nP.S. Bring an umbrella."
    )
    v = verify("ifeval", good, ROW)
    assert (v.score, v.status, v.reason) == (1.0, Status.CORRECT, "all_followed"), v
    v = verify("ifeval", "Rain, rain, go away.", ROW)
    assert (v.score, v.status, v.reason) == (0.0, Status.INCORRECT, "none_followed"), v


def test_null_kwargs_are_ignored():
    kwargs = {**_NULL_KWARGS, "keywords": ["rain"]}
    v = verify("ifeval", "It will rain.", one("keywords:existence", kwargs))
    assert v.status == Status.CORRECT, v
    # an instruction without kwargs accepts an all-null entry, a null entry and a missing kwargs list
    assert verify("ifeval", "ok", one("punctuation:no_comma", dict(_NULL_KWARGS))).status == Status.CORRECT
    assert verify("ifeval", "ok", one("punctuation:no_comma", None)).status == Status.CORRECT
    assert verify("ifeval", "ok", {"instruction_id_list": ["punctuation:no_comma"]}).status == Status.CORRECT


def test_reference_as_json_string():
    v = verify("ifeval", "Rain *today* and *tomorrow*.", json.dumps(ROW))
    assert v.status == Status.PARTIAL and v.score == pytest.approx(0.5), v


# ------------------------------------------------------------------------------------------ strict/loose


LOOSE = [
    # a preamble line before the quoted answer: only removing the first line helps
    ("startend:quotation", {}, 'Sure, here it is:\n"The answer, in quotes."'),
    # markdown bold around the closing phrase: only removing "*" helps
    ("startend:end_checker", {"end_phrase": "Anything else?"}, "Done.\n**Anything else?**"),
    # a closing remark after the JSON: only removing the last line helps
    ("detectable_format:json_format", {}, '{"a": 1}\nHope this helps!'),
    # a preamble line and a closing remark: only removing both helps
    ("detectable_format:json_format", {}, 'Here is the JSON:\n{"a": 1}\nHope this helps!'),
    # a bold title line containing a comma: removing the first line helps
    ("punctuation:no_comma", {}, "**Rain, a poem**\nDrops fall on the roof\nand the street shines"),
]


@pytest.mark.parametrize("instruction_id, kwargs, response", LOOSE, ids=[f"{c[0]}-{i}" for i, c in enumerate(LOOSE)])
def test_loose_accepts_what_strict_rejects(instruction_id, kwargs, response):
    strict = verify("ifeval", response, one(instruction_id, kwargs))
    loose = verify("ifeval", response, one(instruction_id, kwargs), mode="loose")
    assert strict.status == Status.INCORRECT and strict.details["mode"] == "strict", strict
    assert loose.status == Status.CORRECT and loose.details["mode"] == "loose", loose


def test_loose_variants_follow_ifeval():
    variants = loose_variants("first *a*\nmiddle\nlast")
    assert variants == [
        "first *a*\nmiddle\nlast",
        "middle\nlast",
        "first *a*\nmiddle",
        "middle",
        "first a\nmiddle\nlast",
        "middle\nlast",
        "first a\nmiddle",
        "middle",
    ]


def test_loose_still_rejects_what_no_variant_fixes():
    v = verify("ifeval", "Well, yes, no.", one("punctuation:no_comma", {}), mode="loose")
    assert v.status == Status.INCORRECT


def test_blank_response_follows_nothing():
    # as in IFEval, even "no comma" is not followed by an empty answer
    for mode in ("strict", "loose"):
        v = verify("ifeval", "  \n ", one("punctuation:no_comma", {}), mode=mode)
        assert (v.score, v.status) == (0.0, Status.INCORRECT), v


# ------------------------------------------------------------------------------------------------ errors


def test_unknown_instruction_is_an_error():
    ref = {"instruction_id_list": ["punctuation:no_comma", "punctuation:no_semicolon"], "kwargs": [{}, {}]}
    v = verify("ifeval", "fine", ref)
    assert (v.score, v.status, v.reason) == (0.0, Status.ERROR, "unknown_instruction:punctuation:no_semicolon"), v
    assert "punctuation:no_comma" in v.details["known"]


BAD_KWARGS = [
    ("length_constraints:number_words", {"num_words": 10}),  # relation missing
    ("length_constraints:number_words", {"num_words": 10, "relation": "at most"}),
    ("length_constraints:number_words", {"num_words": "ten", "relation": "at least"}),
    ("length_constraints:number_words", {"num_words": -1, "relation": "at least"}),
    ("keywords:existence", {"keywords": "rain"}),  # a string, not a list
    ("keywords:letter_frequency", {"letter": "ab", "let_frequency": 2, "let_relation": "at least"}),
    ("length_constraints:nth_paragraph_first_word", {"num_paragraphs": 2, "nth_paragraph": 3, "first_word": "a"}),
    ("punctuation:no_comma", {"num_words": 3}),  # an unexpected non-null kwarg
    ("language:response_language", {}),
]


@pytest.mark.parametrize("instruction_id, kwargs", BAD_KWARGS, ids=[f"{c[0]}-{i}" for i, c in enumerate(BAD_KWARGS)])
def test_bad_kwargs_are_an_error(instruction_id, kwargs):
    v = verify("ifeval", "some response", one(instruction_id, kwargs))
    assert (v.score, v.status, v.reason) == (0.0, Status.ERROR, f"bad_kwargs:{instruction_id}"), v


def test_integral_float_kwargs_are_accepted():
    ref = one("length_constraints:number_words", {"num_words": 2.0, "relation": "at least"})
    assert verify("ifeval", "two words", ref).status == Status.CORRECT


@pytest.mark.parametrize(
    "reference",
    [
        None,
        "not json",
        [],
        {"kwargs": [{}]},
        {"instruction_id_list": []},
        {"instruction_id_list": ["punctuation:no_comma"], "kwargs": [{}, {}]},
    ],
)
def test_bad_reference_is_an_error(reference):
    v = verify("ifeval", "fine", reference)
    assert (v.score, v.status, v.reason) == (0.0, Status.ERROR, "bad_reference"), v


def test_bad_response_and_bad_mode_are_errors():
    ref = one("punctuation:no_comma", {})
    assert verify("ifeval", None, ref).reason == "bad_response"
    v = verify("ifeval", "fine", ref, mode="lenient")
    assert (v.status, v.reason) == (Status.ERROR, "bad_mode")


# ------------------------------------------------------------------------------ tokenizers and scanners


def test_sentence_splitter():
    split = textutil.split_sentences
    assert split("Hello there. How are you? I'm fine!") == ["Hello there.", "How are you?", "I'm fine!"]
    assert split("Mr. Smith went to Washington. He arrived at 5 p.m. Then he left.") == [
        "Mr. Smith went to Washington.",
        "He arrived at 5 p.m.",
        "Then he left.",
    ]
    assert split("Pears, plums, etc. are fruit. J. R. R. Tolkien wrote it.") == [
        "Pears, plums, etc. are fruit.",
        "J. R. R. Tolkien wrote it.",
    ]
    assert split('"Why?" he asked. The value 3.14 is pi.') == ['"Why?"', "he asked.", "The value 3.14 is pi."]
    assert split("Wait... What?") == ["Wait... What?"]  # Punkt too: "What" is not a frequent sentence starter
    assert split("Wait... The end.") == ["Wait...", "The end."]
    assert split("no final stop\nacross lines") == ["no final stop\nacross lines"]
    assert split("") == [] and split(" \n ") == []


def test_word_counts_and_tokens():
    assert textutil.count_words("don't stop-me now, 2 times") == 7  # \w+ runs, as IFEval's RegexpTokenizer
    tokens = list(textutil.word_tokens("I CAN'T believe it's U.S.A. WELL-KNOWN"))
    assert tokens == ["I", "CA", "N'T", "believe", "it", "'s", "U.S.A", ".", "WELL-KNOWN"]


def test_scanners_match_ifeval_regexes():
    """The linear-time scanners count exactly what IFEval's regular expressions find."""
    rng = random.Random(1234)
    alphabet = ["*", "-", " ", "\n", "\t", "a", "[", "]", "<", ">", "<<", ">>", "**"]
    for _ in range(20000):
        s = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12)))
        stars = re.findall(r"^\s*\*[^\*].*$", s, flags=re.MULTILINE)
        dashes = re.findall(r"^\s*-.*$", s, flags=re.MULTILINE)
        bullets = len(stars) + len(dashes)
        assert textutil.count_bullets(s) == bullets, s
        assert textutil.count_placeholders(s) == len(re.findall(r"\[.*?\]", s)), s
        assert list(textutil.titles(s)) == re.findall(r"<<[^\n]+>>", s), s


ALL_KWARGS = {
    "keywords:existence": {"keywords": ["a", "b"]},
    "keywords:frequency": {"keyword": "a", "frequency": 3, "relation": "at least"},
    "keywords:forbidden_words": {"forbidden_words": ["a"]},
    "keywords:letter_frequency": {"letter": "a", "let_frequency": 3, "let_relation": "less than"},
    "language:response_language": {"language": "en"},
    "length_constraints:number_sentences": {"num_sentences": 3, "relation": "at least"},
    "length_constraints:number_paragraphs": {"num_paragraphs": 3},
    "length_constraints:number_words": {"num_words": 5, "relation": "less than"},
    "length_constraints:nth_paragraph_first_word": {"num_paragraphs": 3, "nth_paragraph": 2, "first_word": "a"},
    "detectable_content:number_placeholders": {"num_placeholders": 2},
    "detectable_content:postscript": {"postscript_marker": "P.S."},
    "detectable_format:number_bullet_lists": {"num_bullets": 2},
    "detectable_format:constrained_response": {},
    "detectable_format:number_highlighted_sections": {"num_highlights": 2},
    "detectable_format:multiple_sections": {"section_spliter": "Section", "num_sections": 2},
    "detectable_format:json_format": {},
    "detectable_format:title": {},
    "combination:two_responses": {},
    "combination:repeat_prompt": {"prompt_to_repeat": "abc"},
    "startend:end_checker": {"end_phrase": "bye"},
    "change_case:capital_word_frequency": {"capital_frequency": 3, "capital_relation": "at least"},
    "change_case:english_capital": {},
    "change_case:english_lowercase": {},
    "punctuation:no_comma": {},
    "startend:quotation": {},
}


@pytest.mark.parametrize(
    "response",
    [
        "\n" * 200_000,
        "[" * 200_000,
        "<" * 200_000,
        " \n\t*-" * 40_000,
        "[" * 1000 + "\n" * 1000 + "p" * 1000,
        "[" * 100_000,
    ],
    ids=["newlines", "brackets", "angles", "bullets", "mixed", "deep-json"],
)
def test_adversarial_responses_stay_fast(response):
    assert set(ALL_KWARGS) == set(instruction_ids())
    ref = {"instruction_id_list": list(ALL_KWARGS), "kwargs": list(ALL_KWARGS.values())}
    start = time.perf_counter()
    v = verify("ifeval", response, ref, mode="loose")
    assert time.perf_counter() - start < 10, "a check is not linear-time"
    assert v.status in (Status.CORRECT, Status.PARTIAL, Status.INCORRECT), v


def test_language_detection_is_deterministic_across_threads():
    texts = [FR, EN, "Ciao, come stai oggi? Spero che tu stia bene.", "ok", "Hola amigo"]
    refs = [one("language:response_language", {"language": "en"}) for _ in texts]
    expected = [verify("ifeval", t, r).score for t, r in zip(texts, refs)]
    results = []

    def worker():
        results.append([verify("ifeval", t, r).score for t, r in zip(texts, refs)])

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(r == expected for r in results)


def test_registered_inline():
    assert verifier_isolation("ifeval") == "inline"
