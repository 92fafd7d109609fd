"""The "choice" verifier gives no credit to negated letters, refusals, or letters that are symbols in an expression,
and still credits the committed answers around them."""

import time

import pytest

from rlvr.verifiers import Status, verify

TEN = "ABCDEFGHIJ"

# (response, gold, choices): each must score 1.0
MUST_ACCEPT = [
    ("The answer is B, not C.", "B", "ABCD"),
    ("Not A, not B, but C.", "C", "ABCD"),
    ("It is not A. The answer is D.", "D", "ABCD"),
    ("I would not pick D. I pick B.", "B", "ABCD"),
    ("A is not correct, so the answer is C.", "C", "ABCD"),
    ("Since B is wrong, the answer is (A).", "A", "ABCD"),
    ("There is no doubt the answer is C.", "C", "ABCD"),
    ("It is not hard to see that the answer is C.", "C", "ABCD"),
    ("We rule out A and B. Answer: C", "C", "ABCD"),
    ("I'm not sure at first, but the answer is B.", "B", "ABCD"),
    ("No. The correct option is D.", "D", "ABCD"),
    ("Answer: I", "I", TEN),
    ("I", "I", TEN),
    ("The answer is (I).", "I", TEN),
    ("I think the answer is I.", "I", TEN),
    ("Answer: I because the rest fail.", "I", TEN),
    ("Answer: A because it is the only even one.", "A", "ABCD"),
    ("Answer: E", "E", "ABCDE"),
    ("$\\mathrm{E}$", "E", "ABCDE"),
    ("\\boxed{\\mathrm{E}}", "E", "ABCDE"),
    ("**Answer: C**", "C", "ABCD"),
    ("x = 2, so the answer is B.", "B", "ABCD"),
    ("Answer: C - the others overflow.", "C", "ABCD"),
    ("The answer is C. D is not correct.", "C", "ABCD"),
    ("I'd choose B rather than C.", "B", "ABCD"),
    ("Instead of A, pick C.", "C", "ABCD"),
    ("(A) and (B) are both wrong, so (C)", "C", "ABCD"),
    ("Answer: (not B) C", "C", "ABCD"),
    ("Answer: B (not C)", "B", "ABCD"),
    ("P.S. the answer is D", "D", "ABCD"),
]

# (response, gold, choices, status, reason): each must score 0.0
MUST_REJECT = [
    # negations
    ("Answer: not C", "C", "ABCD", Status.INCORRECT, "negated_choice"),
    ("I would not pick D", "D", "ABCD", Status.INCORRECT, "negated_choice"),
    ("I wouldn't pick D.", "D", "ABCD", Status.INCORRECT, "negated_choice"),
    ("The answer is not B.", "B", "ABCD", Status.INCORRECT, "negated_choice"),
    ("The answer isn't A", "A", "ABCD", Status.INCORRECT, "negated_choice"),
    ("Definitely not A.", "A", "ABCD", Status.INCORRECT, "negated_choice"),
    ("It can't be C.", "C", "ABCD", Status.INCORRECT, "negated_choice"),
    ("Not D", "D", "ABCD", Status.INCORRECT, "negated_choice"),
    ("**not C**", "C", "ABCD", Status.INCORRECT, "negated_choice"),
    ("Neither A nor B", "A", "ABCD", Status.INCORRECT, "negated_choice"),
    ("Neither A nor B", "B", "ABCD", Status.INCORRECT, "negated_choice"),
    ("We can rule out A.", "A", "ABCD", Status.INCORRECT, "negated_choice"),
    ("Anything but C.", "C", "ABCD", Status.INCORRECT, "negated_choice"),
    ("I'd choose B rather than C.", "C", "ABCD", Status.INCORRECT, "choice_mismatch"),
    ("A is not correct", "A", "ABCD", Status.INCORRECT, "negated_choice"),
    ("Option C is incorrect.", "C", "ABCD", Status.INCORRECT, "negated_choice"),
    ("**B** is wrong.", "B", "ABCD", Status.INCORRECT, "negated_choice"),
    ("I don't think the answer is C.", "C", "ABCD", Status.INCORRECT, "negated_choice"),
    ("All except C are true. Answer: not C", "C", "ABCD", Status.INCORRECT, "negated_choice"),
    ("(D) is never the answer here", "D", "ABCD", Status.INCORRECT, "negated_choice"),
    ("A and B are wrong.", "A", "ABCD", Status.INCORRECT, "negated_choice"),
    ("A, B and D are all incorrect.", "D", "ABCD", Status.INCORRECT, "negated_choice"),
    ("Option C fails.", "C", "ABCD", Status.INCORRECT, "negated_choice"),
    # letters inside dotted abbreviations
    ("E.g. consider the first case.", "E", "ABCDE", Status.UNDECIDABLE, "no_choice_found"),
    ("I.e. the second one.", "I", TEN, Status.UNDECIDABLE, "no_choice_found"),
    ("It was 9 A.M. so early.", "A", "ABCD", Status.UNDECIDABLE, "no_choice_found"),
    ("Answer: B.C.", "B", "ABCD", Status.UNDECIDABLE, "no_choice_found"),
    ("D.C. is the capital.", "D", "ABCD", Status.UNDECIDABLE, "no_choice_found"),
    ("Answer: (E)nergy", "E", "ABCDE", Status.UNDECIDABLE, "no_choice_found"),
    ("[A]pple", "A", "ABCD", Status.UNDECIDABLE, "no_choice_found"),
    # refusals: "I" and "A" as pronoun and article, even where they are choices
    ("I am not sure.", "I", TEN, Status.INCORRECT, "refusal"),
    ("I don't know.", "I", TEN, Status.INCORRECT, "refusal"),
    ("I don't know", "I", TEN, Status.INCORRECT, "refusal"),
    ("I cannot answer this question.", "I", TEN, Status.INCORRECT, "refusal"),
    ("I can't tell.", "I", TEN, Status.INCORRECT, "refusal"),
    ("Answer: I don't know.", "I", TEN, Status.INCORRECT, "refusal"),
    ("The answer is: I'm not sure.", "I", TEN, Status.INCORRECT, "refusal"),
    ("I refuse to answer.", "I", TEN, Status.INCORRECT, "refusal"),
    ("Answer: A bit of both, I cannot decide.", "A", "ABCD", Status.INCORRECT, "refusal"),
    # hedges
    ("A or C", "A", "ABCD", Status.INCORRECT, "multiple_answers"),
    ("A or C", "C", "ABCD", Status.INCORRECT, "multiple_answers"),
    # symbols in an expression
    ("\\mathrm{E}*2", "E", "ABCDE", Status.UNDECIDABLE, "no_choice_found"),
    ("$\\mathrm{E}*2$", "E", "ABCDE", Status.UNDECIDABLE, "no_choice_found"),
    ("\\boxed{E*2}", "E", "ABCDE", Status.UNDECIDABLE, "no_choice_found"),
    ("E=mc^2", "E", "ABCDE", Status.UNDECIDABLE, "no_choice_found"),
    ("Answer: C-1", "C", "ABCD", Status.UNDECIDABLE, "no_choice_found"),
    ("B^2 + 1", "B", "ABCD", Status.UNDECIDABLE, "no_choice_found"),
    ("so x = A", "A", "ABCD", Status.UNDECIDABLE, "no_choice_found"),
    ("2*D", "D", "ABCD", Status.UNDECIDABLE, "no_choice_found"),
    ("Answer: B-cell lymphoma", "B", "ABCD", Status.UNDECIDABLE, "no_choice_found"),
]


@pytest.mark.parametrize("response, gold, choices", MUST_ACCEPT)
def test_committed_answers_still_count(response, gold, choices):
    v = verify("choice", response, gold, choices=choices)
    assert (v.score, v.status, v.extracted) == (1.0, Status.CORRECT, gold), v


@pytest.mark.parametrize("response, gold, choices, status, reason", MUST_REJECT)
def test_negations_refusals_and_expressions_get_nothing(response, gold, choices, status, reason):
    v = verify("choice", response, gold, choices=choices)
    assert (v.score, v.status, v.reason) == (0.0, status, reason), v


def test_negated_letters_are_reported():
    v = verify("choice", "Neither A nor B", "A")
    assert v.details["negated"] == ["A", "B"]


@pytest.mark.parametrize("junk", ["not A " * 50_000, "no, " * 100_000 + "A", ("I don't know. " * 20_000)])
def test_negation_checks_stay_linear(junk):
    start = time.perf_counter()
    v = verify("choice", junk + "\nAnswer: C", "C")
    assert time.perf_counter() - start < 5
    assert v.score == 1.0, v
