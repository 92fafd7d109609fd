"""The "choice" verifier reads letters as a reader sees them: letters joined by invisible characters are one word
(no credit), look-alike letters from other scripts are never credited as the Latin letter, and honest Unicode
(fullwidth or styled letters, invisible characters around a letter, text in another script) still gets credit."""

import pytest

from rlvr.verifiers import Status, verify
from rlvr.verifiers.choice import extract_choice, visible_text

INVISIBLE = {
    "zero-width space": "\u200b", "zero-width non-joiner": "\u200c", "zero-width joiner": "\u200d",
    "word joiner": "\u2060", "soft hyphen": "\u00ad", "byte-order mark": "\ufeff", "left-to-right mark": "\u200e",
    "invisible separator": "\u2063", "variation selector": "\ufe0f", "Hangul filler": "\u3164",
    "Mongolian vowel separator": "\u180e", "tag space": "\U000e0020",
}


@pytest.mark.parametrize("name", sorted(INVISIBLE))
@pytest.mark.parametrize("template", ["A{z}B", "Answer: A{z}B", "The answer is C{z}B.", "\\boxed{{A{z}B}}",
                                      "**A{z}B**", "Answer: A{z}{z}B", "B{z}A\nAnswer: A{z}B"])
def test_letters_joined_by_invisible_characters_get_no_credit(name, template):
    response = template.format(z=INVISIBLE[name])
    for gold in "AB":
        v = verify("choice", response, gold)
        assert v.score == 0.0, (name, response, gold, v)


@pytest.mark.parametrize("name", sorted(INVISIBLE))
@pytest.mark.parametrize("template", ["Answer: {z}B", "Answer: B{z}", "Answer: ({z}B{z})", "{z}B", "**B**{z}"])
def test_an_invisible_character_beside_one_letter_keeps_the_credit(name, template):
    response = template.format(z=INVISIBLE[name])
    v = verify("choice", response, "B")
    assert (v.score, v.reason) == (1.0, "choice_match"), (name, response, v)


@pytest.mark.parametrize("name", sorted(INVISIBLE))
def test_a_hedge_split_by_invisible_characters_is_still_a_hedge(name):
    z = INVISIBLE[name]
    v = verify("choice", f"Answer: A{z},{z}B", "B")
    assert (v.score, v.reason) == (0.0, "multiple_answers"), v


LOOKALIKES = {"Cyrillic A": "\u0410", "Cyrillic Ve": "\u0412", "Cyrillic Es": "\u0421", "Cyrillic Ie": "\u0415",
              "Greek Alpha": "\u0391", "Greek Beta": "\u0392", "Cherokee A": "\u13aa", "Cherokee Be-like": "\u13f4"}
LATIN_OF = {"\u0410": "A", "\u0412": "B", "\u0421": "C", "\u0415": "E", "\u0391": "A", "\u0392": "B", "\u13aa": "A",
            "\u13f4": "B"}


@pytest.mark.parametrize("name", sorted(LOOKALIKES))
@pytest.mark.parametrize("template", ["{x}", "Answer: {x}", "The answer is ({x}).", "\\boxed{{{x}}}", "**{x}**"])
def test_a_lookalike_letter_is_not_the_latin_one(name, template):
    x = LOOKALIKES[name]
    v = verify("choice", template.format(x=x), LATIN_OF[x], choices="ABCDE")
    assert v.score == 0.0, (name, v)
    assert v.status is not Status.CORRECT


@pytest.mark.parametrize("response", [
    "Answer: \u0410 or B", "Answer: B or \u0410", "Answer: \u0410, B", "Answer: \u0421/B", "A\u0412", "Answer: B\u0421",
    "Answer: \u0392\u200dA", "**\u0410** or **B**",
])
def test_a_hedge_or_a_word_made_with_lookalikes_gets_no_credit(response):
    for gold in "ABC":
        assert verify("choice", response, gold).score == 0.0, (response, gold)


@pytest.mark.parametrize("response, gold", [
    ("Answer: \uff22", "B"),                      # fullwidth B
    ("Answer: \U0001d401", "B"),                  # mathematical bold B
    ("\u041e\u0442\u0432\u0435\u0442: B", "B"),  # "Answer: B" in Russian, with a Latin B
    ("\u0412 \u044d\u0442\u043e\u043c \u0441\u043b\u0443\u0447\u0430\u0435 \u043e\u0442\u0432\u0435\u0442: B", "B"),
    ("The answer is (C)\u00a0.", "C"),
    ("\u7b54\u6848\u662f B", "B"),              # Chinese text, then the letter
])
def test_honest_unicode_keeps_its_credit(response, gold):
    v = verify("choice", response, gold)
    assert (v.score, v.status) == (1.0, Status.CORRECT), (response, v)


def test_visible_text_and_extract_choice():
    assert visible_text("A\u200dB\u00ad") == "AB"
    assert visible_text("\uff21") == "A"
    assert visible_text("\u0412") == "\u0412"  # look-alikes are not mapped by the reader's view
    assert extract_choice("Answer: A\u200bB") is None
    assert extract_choice("Answer: B\u200b") == (["B"], "strong")


def test_long_unicode_responses_stay_fast():
    import time

    t0 = time.perf_counter()
    for junk in ("\u200b" * 200_000 + "B", "A\u200d" * 100_000, "\u0412 " * 100_000, "\u0410\u200b," * 50_000):
        verify("choice", junk, "B")
    assert time.perf_counter() - t0 < 10.0


@pytest.mark.parametrize("mark", ["\u0338", "\u0336", "\u20e5", "\u0301", "\u0335", "\u20d2", "\ufe22"])
@pytest.mark.parametrize("template", ["Answer: B{m}", "\\boxed{{B{m}}}", "The answer is (B{m}).", "**B{m}**"])
def test_a_letter_with_a_combining_mark_is_not_the_letter(mark, template):
    v = verify("choice", template.format(m=mark), "B")
    assert v.score == 0.0, (template, mark, v)
