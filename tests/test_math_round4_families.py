"""Families of wrong math verdicts found by external testing, round 4: hedges that offer two values, units whose size
changes the value, words that withdraw a value, colour macros, money in dollars and cents, an equation after a
leading word, answers after a repeated end-of-thoughts marker, and a symbolic worker that fails to start.

Each table holds cases beyond the examples the testers reported, written so that the family, not one spelling, is
what they check."""

from __future__ import annotations

import subprocess
import sys

import pytest

from rlvr.verifiers import Status, verify

# (response, reference): several values offered for a one-valued reference get no credit
HEDGES = [
    ("Either 3 or 5.", "3"),
    ("Either 3 or 5.", "5"),
    ("x=3 or x=5 both satisfy the equation.", "5"),
    ("x=3 or x=5 both satisfy the equation.", "3"),
    ("The answer could be 12 or 15.", "15"),
    ("It is 4, 6, or 8.", "8"),
    ("So y = 2 or y = 7.", "7"),
    ("\\boxed{12}, though 15 is also possible.", "12"),
    ("\\boxed{12}; 15 works too.", "12"),
    ("The answer is \\boxed{12} (both 12 and 15 work).", "12"),
    ("The answer is \\boxed{9}, unless it's 10.", "9"),
    ("\\boxed{9}. If not, then 10.", "9"),
    ("\\boxed{5} but I'm not sure, maybe 7", "5"),
    ("\\boxed{5}, though it could equally be 7.", "5"),
    ("\\boxed{5} or else 7", "5"),
    ("\\boxed{5}. Hmm, 7 might be right as well, 7 is also plausible.", "5"),
    ("3 and 5 both work.", "5"),
    ("x=1orx=2", "1"),
    ("2or3", "3"),
    ("Both 3 and 5 satisfy the equation.", "5"),
    ("We get $x=3$ or $x=5$.", "5"),
    ("\\boxed{3}\n\nActually, 5 could also be the answer.", "3"),
    ("\\boxed{3}. I'm not fully confident; 5 is another possibility.", "3"),
]

# (response, reference): the same several values for a reference that has them all are right
MULTI_VALUED = [
    ("The solutions are x=3 or x=5.", "3, 5"),
    ("So x = -1 or x = 2", "-1, 2"),
    ("Either 3 or 5.", "3, 5"),
    ("\\boxed{3}, \\boxed{5}", "5, 3"),
    ("The roots are x = 1 and x = 4", "1, 4"),
    ("We get $x=3$ or $x=5$.", "3, 5"),
    ("It is 4, 6, or 8.", "4, 6, 8"),
    ("\\boxed{x=1, x=2, and x=3}", "1, 2, 3"),
    ("x=1orx=2", "1, 2"),  # alternatives glued to "or"
]

# (response, reference, correct): a unit that changes the magnitude is part of the value
SCALED_UNITS = [
    ("\\boxed{250 bp}", "2.5\\%", True),
    ("\\boxed{2.5 bp}", "2.5\\%", False),
    ("The rate rose by 25 basis points.", "0.25\\%", True),
    ("The rate rose by 25 basis points.", "25\\%", False),
    ("\\boxed{25\u2030}", "25\\%", False),
    ("\\boxed{25\u2030}", "2.5\\%", True),
    ("\\boxed{15 \\permil}", "1.5\\%", True),
    ("\\boxed{3 per mille}", "3\\%", False),
    ("\\boxed{40 ppm}", "40\\%", False),
    ("\\boxed{40 cm}", "40 m", False),
    ("\\boxed{90 minutes}", "90 hours", False),
    ("\\boxed{90 minutes}", "1.5 hours", True),
    ("\\boxed{3 thousand words}", "3", False),
    ("\\boxed{2 million}", "2", False),
    ("\\boxed{500 mg}", "500 g", False),
    ("\\boxed{5 km}", "5000 meters", True),
    ("\\boxed{250\\,\\text{bp}}", "2.5\\%", True),
    ("The interest is 50 basis points.", "50\\%", False),
    ("The answer is 40 thousand.", "40", False),
    ("It takes 45 minutes.", "45 hours", False),
]

# (response, reference): the words after the value withdraw it
WITHDRAWN = [
    ("Answer: 7 is probably wrong.", "7"),
    ("The result is 7? No.", "7"),
    ("The total is 42, which seems unlikely.", "42"),
    ("\\boxed{42} but that looks wrong.", "42"),
    ("Answer: 13. That can't be right.", "13"),
    ("So we get 8, but it doesn't work.", "8"),
    ("I get 8. It is definitely not correct.", "8"),
    ("The value is not 7.", "7"),
    ("Final answer: 19, which is most likely incorrect.", "19"),
    ("Answer: 7 (this is wrong)", "7"),
    ("Maybe 7? Probably not.", "7"),
    ("\\boxed{7} \u2014 no, that's not right.", "7"),
    ("Result: 7?? No way.", "7"),
    ("The answer is 7, I doubt it though.", "7"),
]

# (response, reference): words after the value that keep it
KEPT = [
    ("The answer is 7, which is definitely right.", "7"),
    ("\\boxed{7}. This is not a coincidence.", "7"),
    ("x = 7, which is not divisible by 2, so the answer is 7.", "7"),
    ("\\boxed{7}. Checking: 7 satisfies both equations.", "7"),
    ("\\boxed{3}. The other root, 5, is extraneous.", "3"),
    ("\\boxed{7}. Probably not the quickest method, but it works.", "7"),
]

# (response, reference, correct): colour macros are boxes or highlights, and a second value in one is a hedge
COLOURED = [
    ("\\colorbox{yellow}{5} or perhaps \\colorbox{yellow}{7}", "5", False),
    ("\\boxed{5} \\fcolorbox{red}{white}{7}", "5", False),
    ("\\color{red}\\boxed{5} \\color{blue}\\boxed{7}", "5", False),
    ("\\boxed{5} \\textcolor{red}{7}", "5", False),
    ("\\textcolor{red}{\\boxed{5}} or \\textcolor{red}{\\boxed{7}}", "5", False),
    ("The final answer is \\textcolor{red}{7}.", "7", True),
    ("\\colorbox{yellow}{$\\frac{1}{2}$}", "0.5", True),
    ("{\\color{red} \\boxed{7}}", "7", True),
    ("The answer is \\fcolorbox{red}{white}{$12$}.", "12", True),
    ("\\textcolor[rgb]{1,0,0}{\\boxed{12}}", "12", True),
]

# (response, reference, correct): dollars and cents written around numbers or in words
MONEY = [
    ("It costs 12 dollars and 50 cents.", "12.50", True),
    ("It costs 3 dollars and 5 cents.", "3.05", True),
    ("It costs $12 and 50 cents.", "12.5", True),
    ("The answer is twelve dollars fifty.", "12.50", True),
    ("\\boxed{12 dollars and 50 cents}", "12.5", True),
    ("Answer: twelve dollars and fifty cents", "12.5", True),
    ("Answer: 7 dollars 25 cents", "7.25", True),
    ("He paid \\$4 and 99 cents in total.", "4.99", True),
    ("Answer: five dollars and five cents", "5.05", True),
    ("It costs 12 dollars, 50 cents.", "12.5", True),
    ("\\boxed{\\$12 \\text{ and } 50 \\text{ cents}}", "12.5", True),
    ("\\boxed{12 \\text{ dollars and } 50 \\text{ cents}}", "12.5", True),
    ("Total: 1 dollar and 1 cent", "1.01", True),
    ("It costs 12 dollars and fifty cents.", "12.5", True),
    ("It costs $12 and 50\u00a2.", "12.5", True),
    ("The answer is a dollar fifty.", "1.50", True),
    ("It costs 12 dollars and 50 cents.", "12.05", False),
    ("Answer: 3 dollars and 5 cents", "3.5", False),
    ("\\boxed{12 dollars and 50 cents}", "50", False),
]

# (response, reference, correct): a whole number and a fraction in words, with a unit
MIXED_IN_WORDS = [
    ("The answer is two and a half hours.", "2.5 hours", True),
    ("\\boxed{2 and a half hours}", "150 minutes", True),
    ("It is 3 and a half hours.", "3.5 hours", True),
    ("\\boxed{3 and a half}", "3.5", True),
    ("\\boxed{-2 and a half}", "-2.5", True),
    ("\\boxed{two and three quarters}", "2.75", True),
    ("It is 3 and a half hours.", "3 hours", False),
    ("\\boxed{3 and 4}", "3.5", False),
]

# (response, reference, correct): a final equation after a leading word is read as the equation
LEADING_WORD = [
    ("So 27+82 = 109", "109", True),
    ("Thus 3*4=12", "12", True),
    ("Therefore, 27 + 82 = 109.", "109", True),
    ("Hence 6/2 = 3", "3", True),
    ("So, 2^3 = 8", "8", True),
    ("Then 10-4=6", "6", True),
    ("Finally 2 + 2 = 4", "4", True),
    ("So 27+82 = 108", "108", False),
    ("So 27+82 = 109", "108", False),
]

# (response, reference, correct): the answer is after the LAST end-of-thoughts marker
THOUGHTS = [
    ("<think>4</think> wait </think> The answer is 7", "7", True),
    ("<think>\\boxed{4}</think>hmm</think>\\boxed{7}", "7", True),
    ("<think>x</think>\\boxed{4}</think>The answer is \\boxed{7}", "7", True),
    ("<think>\\boxed{7}</think>let me redo</thinking>\\boxed{4}", "7", False),
    ("<reasoning>\\boxed{3}</reasoning>\\boxed{3}</reasoning>\\boxed{9}", "9", True),
]


def _score(response: str, reference: str) -> float:
    return verify("math", response, reference).score


@pytest.mark.parametrize("response, reference", HEDGES)
def test_several_values_for_one_get_no_credit(response, reference):
    v = verify("math", response, reference)
    assert v.score == 0.0 and v.status == Status.INCORRECT, v


@pytest.mark.parametrize("response, reference", MULTI_VALUED)
def test_several_values_match_a_several_valued_reference(response, reference):
    assert _score(response, reference) == 1.0


@pytest.mark.parametrize("response, reference, correct", SCALED_UNITS)
def test_a_unit_of_another_size_changes_the_value(response, reference, correct):
    assert _score(response, reference) == float(correct)


@pytest.mark.parametrize("response, reference", WITHDRAWN)
def test_a_withdrawn_value_gets_no_credit(response, reference):
    assert _score(response, reference) == 0.0


@pytest.mark.parametrize("response, reference", KEPT)
def test_words_that_keep_the_value(response, reference):
    assert _score(response, reference) == 1.0


@pytest.mark.parametrize("response, reference, correct", COLOURED)
def test_colour_macros(response, reference, correct):
    assert _score(response, reference) == float(correct)


@pytest.mark.parametrize("response, reference, correct", MONEY)
def test_dollars_and_cents(response, reference, correct):
    assert _score(response, reference) == float(correct)


@pytest.mark.parametrize("response, reference, correct", MIXED_IN_WORDS)
def test_a_mixed_number_in_words(response, reference, correct):
    assert _score(response, reference) == float(correct)


@pytest.mark.parametrize("response, reference, correct", LEADING_WORD)
def test_an_equation_after_a_leading_word(response, reference, correct):
    assert _score(response, reference) == float(correct)


@pytest.mark.parametrize("response, reference, correct", THOUGHTS)
def test_the_answer_after_the_last_end_of_thoughts(response, reference, correct):
    assert _score(response, reference) == float(correct)


# ------------------------------------------------------------------------ a symbolic worker that cannot start

# decided only in the symbolic worker: the inline stages cannot read a limit, and probing cannot accept it
ONLY_SYMBOLIC = ("$\\lim_{x\\to 0} x$", "0")
ONLY_SYMBOLIC_WRONG = ("$\\lim_{x\\to 0} x$", "1")


@pytest.fixture
def failing_starts(monkeypatch):
    """The runner's worker starts fail the first ``n[0]`` times (a worker that exits at once, as one does when the
    machine has no room for it); a fresh default runner, closed afterwards."""
    from rlvr.verifiers.math import clear_caches
    from rlvr.verifiers.runner import RewardRunner, api

    clear_caches()  # a verdict of the symbolic stage kept from an earlier call would skip the worker
    real = subprocess.Popen
    n = [0]
    calls = [0]

    def flaky(args, **kwargs):
        calls[0] += 1
        if calls[0] <= n[0]:
            return real([sys.executable, "-c", "import sys; sys.exit(3)"], **kwargs)
        return real(args, **kwargs)

    monkeypatch.setattr(subprocess, "Popen", flaky)
    runner = RewardRunner()
    previous = api.set_default_runner(runner)
    yield n
    api.set_default_runner(previous)
    runner.close()


def test_a_worker_that_fails_to_start_is_started_again(failing_starts):
    failing_starts[0] = 3  # as many failures as the runner itself tolerates in one batch
    response, reference = ONLY_SYMBOLIC
    v = verify("math", response, reference, timeout_s=20.0)
    assert v.status == Status.CORRECT and v.reason == "symbolic_equal", v
    assert v.details["stage"] == "symbolic" and v.details.get("worker_attempts", 1) >= 2


@pytest.mark.parametrize("response, reference", [ONLY_SYMBOLIC, ONLY_SYMBOLIC_WRONG])
def test_a_worker_that_never_starts_is_named_in_the_verdict(failing_starts, response, reference):
    failing_starts[0] = 10**6
    v = verify("math", response, reference, timeout_s=5.0)
    # never a silent "incorrect": the verdict says the worker could not run the comparison
    assert v.status in (Status.ERROR, Status.TIMEOUT, Status.UNDECIDABLE), v
    assert v.score == 0.0
    if v.status == Status.ERROR:
        assert v.reason == "worker_start_failed" and v.details.get("worker_attempts", 1) >= 2


@pytest.mark.parametrize("digits", [3001, 5000, 100_000])
def test_an_answer_past_the_size_cap_that_is_the_reference_string(digits):
    big = "7" * digits
    assert verify("math", f"The answer is \\boxed{{{big}}}.", big).score == 1.0
    v = verify("math", f"The answer is \\boxed{{{big}1}}.", big)
    assert v.score == 0.0 and v.status != Status.CORRECT


# text built to make a scan per macro or per number rescan the whole response (quadratic before the fix)
HOSTILE = [
    "\\textcolor{red}{" * 20000 + "5",
    "\\boxed{1}" + "\\textcolor{red}{x} " * 10000,
    "\\colorbox{r}{" * 20000 + "5",
    "</think>" * 30000 + "5",
    "1 " * 60000 + "or 3 both",
    "$1$ or " * 20000 + "$2$",
    "12 dollars and " * 10000 + "5 cents",
]
TIMEOUT_S = 1.0
SLACK_S = 0.5  # the contract's slack past the budget
GRACE_S = 3.0  # a shared, loaded test machine; the quadratic scans took minutes


@pytest.mark.parametrize("response", HOSTILE, ids=range(len(HOSTILE)))
def test_hostile_text_for_the_new_rules_keeps_the_budget(response):
    import time

    start = time.monotonic()
    v = verify("math", response, "5", timeout_s=TIMEOUT_S)
    assert time.monotonic() - start < TIMEOUT_S + SLACK_S + GRACE_S
    assert v.status in set(Status)
