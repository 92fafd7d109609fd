"""The "format" verifier: a tag whose content is only invisible characters is empty, and invisible characters
outside the tags are not text."""

import time

import pytest

from rlvr.verifiers import Status, verify
from rlvr.verifiers.format import is_blank

INVISIBLE = {
    "zero-width space": "\u200b",
    "zero-width non-joiner": "\u200c",
    "zero-width joiner": "\u200d",
    "word joiner": "\u2060",
    "BOM": "\ufeff",
    "NBSP": "\u00a0",
    "narrow NBSP": "\u202f",
    "ideographic space": "\u3000",
    "soft hyphen": "\u00ad",
    "left-to-right mark": "\u200e",
    "right-to-left override": "\u202e",
    "invisible times": "\u2062",
    "Mongolian vowel separator": "\u180e",
    "Hangul filler": "\u3164",
    "Hangul choseong filler": "\u115f",
    "braille blank": "\u2800",
    "variation selector": "\ufe0f",
    "tag space": "\U000e0020",
    "combining acute alone": "\u0301",
    "combining grapheme joiner": "\u034f",
    "line separator": "\u2028",
    "NUL": "\x00",
}


@pytest.mark.parametrize("name", INVISIBLE)
def test_invisible_only_answer_is_empty(name):
    ch = INVISIBLE[name]
    for content in (ch, ch * 3, f" {ch}\n{ch} ", ch + "\u200b\ufeff\u00a0"):
        v = verify("format", f"<think>ok</think><answer>{content}</answer>", None)
        assert (v.score, v.status, v.reason) == (0.0, Status.INCORRECT, "empty_tag:answer"), (name, v)


@pytest.mark.parametrize(
    "content, extracted",
    [
        ("4", "4"),
        ("\u200b4\u200b", "4"),
        ("\ufeff x \u00a0", "x"),
        ("e\u0301", "e\u0301"),  # a combining mark on a letter is visible
        ("\u4e2d", "\u4e2d"),
        ("\U0001f600", "\U0001f600"),
        ("a\u200db", "a\u200db"),
    ],
)
def test_visible_answers_still_count(content, extracted):
    v = verify("format", f"<think>ok</think><answer>{content}</answer>", None)
    assert (v.score, v.reason, v.extracted) == (1.0, "format_ok", extracted), v


@pytest.mark.parametrize("content", ["&nbsp;", "&#8203;", "&#x200B;&ZeroWidthSpace;", "<!-- nothing -->", "&zwnj; "])
def test_entities_and_comments_that_render_as_nothing_are_empty(content):
    v = verify("format", f"<think>ok</think><answer>{content}</answer>", None)
    assert v.reason == "empty_tag:answer", v


@pytest.mark.parametrize("content", ["&lt;", "&amp;", "<!-- x --> 4", "&#52;"])
def test_entities_that_show_something_are_not_empty(content):
    v = verify("format", f"<think>ok</think><answer>{content}</answer>", None)
    assert (v.score, v.reason) == (1.0, "format_ok"), v


def test_invisible_characters_outside_tags_are_not_text():
    v = verify("format", "\ufeff<think>a</think>\u200b\n<answer>4</answer>\u2060", None)
    assert (v.score, v.reason) == (1.0, "format_ok"), v
    v = verify("format", "<think>a</think>x\u200b<answer>4</answer>", None)
    assert v.reason == "text_outside_tags", v


def test_invisible_think_is_empty_when_required():
    v = verify("format", "<think>\u200b\u200b</think><answer>4</answer>", None, require_nonempty=["think", "answer"])
    assert v.reason == "empty_tag:think", v


def test_is_blank_is_linear_on_long_input():
    start = time.perf_counter()
    assert is_blank("\u200b" * 1_000_000)
    assert not is_blank("\u200b" * 1_000_000 + "x")
    assert not is_blank("<!--" * 200_000 + "x")
    assert is_blank("<!-- -->" * 100_000 + "&nbsp;" * 100_000)
    assert time.perf_counter() - start < 5
