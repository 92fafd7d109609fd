"""Responses written for comparing rlvr's IFEval checks with Google's reference: for each of the 25 instruction
types, responses that follow the instruction, responses that violate it, and the borderline cases where two
implementations could part (markdown around sentences, abbreviations, fences, odd whitespace, case).

:func:`cases` returns rows {"id", "kwargs", "prompt", "response"}; every response is checked against every kwargs
variant listed for its instruction, so one response serves as a following and as a violating example.
"""

from __future__ import annotations

from typing import Any

LOREM = (
    "Rivers carry sediment from the mountains to the sea. Along the way they carve valleys and feed wetlands. "
    "Farmers have relied on floods for thousands of years. Modern dams change that rhythm. "
    "Engineers now try to balance power, irrigation and ecology. "
)

# instruction id -> (kwargs variants, responses)
_TABLE: dict[str, tuple[list[dict[str, Any]], list[str]]] = {
    "keywords:existence": (
        [{"keywords": ["river", "delta"]}, {"keywords": ["Flood"]}, {"keywords": ["dam", "ecology", "power"]}],
        [
            "The river ends in a wide delta.",
            "A RIVER meets the sea at its DELTA.",
            "Floods shaped the valley.",
            "Rivers and deltas: a flood of ideas.",
            "Nothing relevant is mentioned here.",
            LOREM,
            "The dam produces power; ecology suffers.",
            "riverdelta",
        ],
    ),
    "keywords:frequency": (
        [
            {"keyword": "water", "frequency": 3, "relation": "at least"},
            {"keyword": "water", "frequency": 2, "relation": "less than"},
            {"keyword": "sun", "frequency": 1, "relation": "at least"},
        ],
        [
            "Water, water, everywhere, and not a drop of water to drink.",
            "Water is life.",
            "WATER water WaTeR",
            "Sunlight and watermelons: the sun sets over the waterfront.",
            "No liquid is mentioned.",
            "The sundial shows noon.",
            "Waterwater water",
        ],
    ),
    "keywords:forbidden_words": (
        [{"forbidden_words": ["bad", "evil"]}, {"forbidden_words": ["sun"]}, {"forbidden_words": ["new york"]}],
        [
            "This is a good answer.",
            "This is a bad answer.",
            "Badminton is fun.",
            "The EVIL twin appears.",
            "Sunday is sunny.",
            "The sun rises.",
            "I love New York in spring.",
            "I love New  York.",
            "Newyork is not a word.",
            "The sun's light is bad-tempered.",
        ],
    ),
    "keywords:letter_frequency": (
        [
            {"letter": "a", "let_frequency": 5, "let_relation": "at least"},
            {"letter": "z", "let_frequency": 2, "let_relation": "less than"},
            {"letter": "E", "let_frequency": 10, "let_relation": "at least"},
            {"letter": "q", "let_frequency": 1, "let_relation": "less than"},
            {"letter": "#", "let_frequency": 2, "let_relation": "at least"},
            {"letter": "!", "let_frequency": 2, "let_relation": "less than"},
        ],
        [
            "A banana, a papaya and a mango.",
            "Pizza and jazz.",
            "Seventeen sleepy sheep entered the green meadow, eventually.",
            "Quiet quarters.",
            "Hmm.",
            "AAAAA",
            "Zebra.",
            LOREM,
            "## Heading\n#tag and more!",
            "Wow! Amazing! Incredible!",
        ],
    ),
    "language:response_language": (
        [{"language": "en"}, {"language": "fr"}, {"language": "es"}, {"language": "de"}],
        [
            "The weather is lovely today and we are going to the park.",
            "Il fait beau aujourd'hui et nous allons au parc avec nos amis.",
            "Hoy hace buen tiempo y vamos al parque con nuestros amigos.",
            "Heute ist das Wetter schön und wir gehen mit unseren Freunden in den Park.",
            "12345 67890",
            "Bonjour! The meeting is at noon and everyone should bring their notes.",
        ],
    ),
    "length_constraints:number_sentences": (
        [
            {"num_sentences": 3, "relation": "at least"},
            {"num_sentences": 3, "relation": "less than"},
            {"num_sentences": 4, "relation": "less than"},
            {"num_sentences": 5, "relation": "at least"},
        ],
        [
            "One sentence only.",
            "First. Second. Third.",
            "Is this one? Yes! And a third.",
            "Mr. Smith went to Washington. He met Dr. Jones.",
            "The U.S. Army trains. It is large.",
            "It was J. R. R. Tolkien who wrote it.",
            "We met at 5 p.m. The show began. It ended late.",
            "*One here.* *Two here.* *Three here.*",
            LOREM,
            "A list:\n- apples\n- pears\n- plums",
            "Wait... What happened? Nobody knows.",
            "Values like 3.14 and 2.71 are constants. They matter.",
            "I chose plan A. Then we left. We were happy.",
            '"Why?" he asked. She smiled.',
            "e.g. this one counts as one sentence.",
            "Section 1. Introduction. Section 2. Methods.",
            "He left at 5 p.m. Then he slept. Good.",
            "Team C. The loser is team D. Sad.",
            "Plan A. Eastern teams won. Again.",
            "Apples, etc. Bananas too. Fine.",
            "See Fig. 3 for details. Then stop.",
            "Use e.g. apples. Then pears.",
            "Vitamin C. It helps. A lot.",
            "It was 3 a.m. We slept. Late.",
            "I like it. I. Really. Do.",
            "John F. Kennedy spoke. Crowds cheered. Then rain.",
            "(This is one.) (This is two.) (Three.)",
            'He said "Go." Then he left. Done.',
            "**Bold one.** **Bold two.** **Bold three.** **Bold four.**",
            "~~One here.~~ ~~Two here.~~ ~~Three here.~~",
            "Is it? No. The answer is here.",
            "See No. 5 for details. Then stop. Done.",
            "1. First point.\n2. Second point.\n3. Third point.",
            "Climb Mt. Everest today. It is tall.",
        ],
    ),
    "length_constraints:number_paragraphs": (
        [{"num_paragraphs": 2}, {"num_paragraphs": 3}],
        [
            "First paragraph.\n***\nSecond paragraph.",
            "First.\n\n***\n\nSecond.\n\n***\n\nThird.",
            "First.\n***\n***\nThird.",
            "Only one paragraph here.",
            "***\nFirst.\n***\nSecond.\n***",
            "One *** two *** three",
            "First.\n\nSecond.",
            "A\n* * *\nB",
        ],
    ),
    "length_constraints:number_words": (
        [
            {"num_words": 10, "relation": "at least"},
            {"num_words": 10, "relation": "less than"},
            {"num_words": 50, "relation": "at least"},
        ],
        [
            "Short answer.",
            "one two three four five six seven eight nine ten",
            "one two three four five six seven eight nine",
            "don't stop-me now: e-mail me at 5 p.m., ok?",
            LOREM,
            LOREM * 2,
            "Ein, zwei, drei — vier fünf sechs sieben acht neun zehn elf.",
        ],
    ),
    "length_constraints:nth_paragraph_first_word": (
        [
            {"num_paragraphs": 2, "nth_paragraph": 2, "first_word": "however"},
            {"num_paragraphs": 3, "nth_paragraph": 1, "first_word": "rivers"},
        ],
        [
            "Rivers run.\n\nHowever, they also flood.",
            "Rivers run.\n\nHowever, they flood.\n\nThird part.",
            "Rivers, wide and long.\n\nThey flood.\n\nThey recede.",
            '"Rivers" matter.\n\nMore.\n\nEnd.',
            "Rivers run.\n\n\n\nHowever they flood.",
            "rivers run.\n\n  However  they flood.",
            "Streams run.\n\nThen they flood.\n\nEnd.",
            "Rivers.\nHowever.",
            "Riverside homes.\n\nHoweverish.\n\nEnd.",
        ],
    ),
    "detectable_content:number_placeholders": (
        [{"num_placeholders": 2}, {"num_placeholders": 1}, {"num_placeholders": 3}],
        [
            "Dear [name], your order [number] ships today.",
            "Dear [name], thanks.",
            "No placeholders at all.",
            "Visit [address] on [date] at [time].",
            "Broken [bracket\nacross lines] here.",
            "Nested [[a]] and [b].",
            "Empty [] brackets [ ].",
        ],
    ),
    "detectable_content:postscript": (
        [{"postscript_marker": "P.S."}, {"postscript_marker": "P.P.S"}, {"postscript_marker": "Note:"}],
        [
            "Main text.\n\nP.S. Remember the milk.",
            "Main text.\nP. S. spaced out.",
            "Main text.\nP.P.S. A second postscript.",
            "Main text.\np.s. lowercase marker.",
            "Main text with no postscript.",
            "Main text.\nNote: bring snacks.",
            "Main text.\nPS without periods.",
            "Main text mentions P.S. in the middle of a line.",
        ],
    ),
    "detectable_format:number_bullet_lists": (
        [{"num_bullets": 3}, {"num_bullets": 2}],
        [
            "* one\n* two\n* three",
            "- one\n- two",
            "* one\n- two\n* three",
            "* one\n** bold line\n* two",
            "Intro\n  * indented one\n  * indented two",
            "No bullets here.",
            "1. one\n2. two\n3. three",
            "*emphasis* at line start\n* real bullet",
            "- one\n-two\n- three",
        ],
    ),
    "detectable_format:constrained_response": (
        [{}],
        [
            "My answer is yes.",
            "My answer is no.",
            "My answer is maybe.",
            "my answer is yes.",
            "Yes.",
            "After thinking: My answer is no. Because reasons.",
            "My answer is Yes.",
        ],
    ),
    "detectable_format:number_highlighted_sections": (
        [{"num_highlights": 2}, {"num_highlights": 1}, {"num_highlights": 3}],
        [
            "This is *highlighted* and *this too*.",
            "Only **bold** here.",
            "Nothing highlighted.",
            "Empty ** and * * markers.",
            "*one* *two* *three*",
            "*across\nlines* do not count",
            "**a** and *b*",
        ],
    ),
    "detectable_format:multiple_sections": (
        [{"section_spliter": "Section", "num_sections": 2}, {"section_spliter": "PARAGRAPH", "num_sections": 3}],
        [
            "Section 1\nIntro.\nSection 2\nBody.",
            "SECTION 1\nIntro.\nSECTION 2\nBody.",
            "PARAGRAPH 1 a PARAGRAPH 2 b PARAGRAPH 3 c",
            "Section one\nSection two",
            "Section 1 only.",
            "Section 1\n\nSection 1\n\nSection 2",
            "paragraph 1 paragraph 2 paragraph 3",
            "Section10 Section11",
        ],
    ),
    "detectable_format:json_format": (
        [{}],
        [
            '{"a": 1}',
            '```json\n{"a": 1}\n```',
            '```JSON\n[1, 2]\n```',
            '```\n{"a": true}\n```',
            "Here is JSON: {\"a\": 1}",
            '{"a": 1,}',
            "```json\n{'a': 1}\n```",
            '  \n  {"nested": {"b": [1, 2, {"c": null}]}}  ',
            "NaN",
            '"just a string"',
        ],
    ),
    "detectable_format:title": (
        [{}],
        [
            "<<My Title>>\nBody text.",
            "Body with no title.",
            "<<>> empty title",
            "<< >> blank title",
            "Text <<Inline Title>> text",
            "<<Title across\nlines>>",
            "<<<Triple>>>",
        ],
    ),
    "combination:two_responses": (
        [{}],
        [
            "First answer.\n******\nSecond answer.",
            "Same.\n******\nSame.",
            "Only one answer.",
            "One.\n******\nTwo.\n******\nThree.",
            "******\nOne.\n******\nTwo.",
            "One. ****** Two.",
            "One.\n*******\nTwo.",
        ],
    ),
    "combination:repeat_prompt": (
        [{"prompt_to_repeat": "Write a poem about rivers."}, {"prompt_to_repeat": "Explain tides in two lines."}],
        [
            "Write a poem about rivers. Rivers run and rivers bend.",
            "write a poem about rivers. lowercase repeat.",
            "  Write a poem about rivers.\nHere it is.",
            "A poem about rivers: they run.",
            "Explain tides in two lines. The moon pulls. The sea follows.",
            "Explain tides in 2 lines. Close but not exact.",
        ],
    ),
    "startend:end_checker": (
        [{"end_phrase": "Is there anything else I can help with?"}, {"end_phrase": "Peace."}],
        [
            "Here you go. Is there anything else I can help with?",
            "Here you go. Is there anything else I can help with?  \n",
            "Here you go. is there anything else i can help with?",
            'Here you go. "Is there anything else I can help with?"',
            "Here you go. Is there anything else I can help with? Thanks.",
            "Goodbye and Peace.",
            "Peace. Goodbye.",
        ],
    ),
    "startend:quotation": (
        [{}],
        [
            '"Wrapped in quotes."',
            '  "Wrapped with spaces around."  ',
            "Not wrapped.",
            '"Only at the start.',
            "\u201cCurly quotes.\u201d",
            '"',
            "'Single quotes.'",
        ],
    ),
    "change_case:capital_word_frequency": (
        [
            {"capital_frequency": 2, "capital_relation": "at least"},
            {"capital_frequency": 3, "capital_relation": "less than"},
        ],
        [
            "This is VERY IMPORTANT.",
            "Nothing shouted here.",
            "USA and NASA and FBI.",
            "I think I AM right.",
            "DON'T STOP.",
            "U.S.A. is AWESOME",
            "WELL-KNOWN facts.",
            "A B C D",
        ],
    ),
    "change_case:english_capital": (
        [{}],
        [
            "THIS IS ALL IN CAPITAL LETTERS AND IN ENGLISH.",
            "THIS IS MOSTLY CAPITAL but not all.",
            "CECI EST EN FRANÇAIS ET EN MAJUSCULES POUR LE TEST.",
            "123 456",
            "HELLO, WORLD! 42 TIMES.",
        ],
    ),
    "change_case:english_lowercase": (
        [{}],
        [
            "this is all lowercase english text about rivers and seas.",
            "this has One capital letter.",
            "ceci est une phrase en français écrite en minuscules pour le test.",
            "lowercase with numbers 42 and symbols #!",
            "i think so.",
        ],
    ),
    "punctuation:no_comma": (
        [{}],
        [
            "No commas in this sentence.",
            "One comma, here.",
            "Fullwidth comma\uff0c here.",
            "Arabic comma \u060c here.",
            "Numbers like 1,000 count.",
            "Semicolons; colons: dashes - all fine.",
        ],
    ),
}


def cases() -> list[dict[str, Any]]:
    """Every (instruction, kwargs variant, response) row of the table, with a prompt for repeat_prompt."""
    rows = []
    for instruction_id, (variants, responses) in _TABLE.items():
        for kwargs in variants:
            for response in responses:
                prompt = kwargs.get("prompt_to_repeat", "")
                rows.append({"id": instruction_id, "kwargs": kwargs, "prompt": prompt, "response": response})
    return rows


def instruction_types() -> list[str]:
    return sorted(_TABLE)
