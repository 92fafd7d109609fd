"""The math verifier on the answer families of its third round: for every family, answers that must be accepted
and near misses that must be rejected, side by side (the cases are our own). Then the options and structure
that the families rest on: ``truncated``, typed answer values, the import direction parse -> compare."""

from __future__ import annotations

import ast
import pathlib

import pytest

from rlvr.verifiers import Status, verify


def B(x: str) -> str:
    """A response that boxes ``x``."""
    return f"The result is $\\boxed{{{x}}}$."


def PM(*cells: int) -> str:
    """A 2x2 pmatrix of ``cells`` (row by row)."""
    a, b, c, d = cells
    return f"\\begin{{pmatrix}}{a} & {b} \\\\ {c} & {d}\\end{{pmatrix}}"


# family -> rows of (response, reference, accepted?)
FAMILIES: dict[str, list[tuple[str, str, bool]]] = {
    "a rejected candidate after the marker": [
        ("Answer: 9 is what I first thought, but no.", "9", False),
        ("Answer: 14. Wait, no, that's wrong.", "14", False),
        ("The answer is 3, but that is incorrect.", "3", False),
        ("Final answer: 8. Hmm, no.", "8", False),
        ("$\\boxed{5}$. No wait, that's wrong.", "5", False),
        ("<answer>6</answer> Actually no, that's incorrect.", "6", False),
        ("Answer: 9. No other value works.", "9", True),
        ("The answer is 3, which is what I first thought.", "3", True),
        (B("5") + " No other value satisfies both equations.", "5", True),
        (B("12") + " Wait.", "12", True),
        (B("12") + " Hmm, let me verify: $3 \\cdot 4 = 12$. Yes.", "12", True),
        (B("12") + " No.", "12", False),
        ("Answer: 9? No.", "9", False),
    ],
    "exact forms are decided exactly": [
        (B("\\sqrt{9.0000000002}"), "3", False),
        (B("\\sqrt{16.000000001}"), "4", False),
        (B("\\frac{1}{3.0000000001}"), "\\frac13", False),
        (B("(1.0000000001)^{2}"), "1", False),
        (B("\\ln(2.7182818284)"), "1", False),
        (B("2\\sqrt{2.25}"), "3", True),
        (B("3.14159265359"), "\\pi", True),
        (B("-3.14159265359"), "-\\pi", True),
        (B("2.718281828459"), "e", True),
        (B("1.41421356237 \\text{ m}"), "\\sqrt{2} \\text{ m}", True),
    ],
    "a reference written as a rounded decimal": [
        (B("\\frac{2}{3}"), "0.6666667", True),
        (B("0.0666668"), "0.066666793", True),
        (B("\\pi"), "3.1416", True),
        (B("\\sqrt2"), "1.414", True),
        (B("0.0833333333333333"), "\\frac{1}{12}", True),
        (B("0.33"), "0.3333333", False),
        (B("\\frac{1}{3}"), "0.3334", False),
        (B("0.333333"), "\\frac{1}{3}", False),
        (B("1.414"), "1.4142", False),
        (B("\\sqrt2"), "1.415", False),
        (B("0.0666669"), "0.066666793", False),
    ],
    "units that contradict the reference's unit": [
        (B("4 \\text{ grams}"), "4 \\text{ kg}", False),
        (B("30 \\text{ cents}"), "\\$30", False),
        (B("45 \\text{ minutes}"), "45 \\text{ hours}", False),
        (B("4 \\text{ tons}"), "4 \\text{ kg}", False),
        (B("4 \\text{ kg}"), "4 \\text{ tons}", False),
        (B("5 \\text{ apples}"), "5 \\text{ kg}", False),
        (B("30 \\text{ arcminutes}"), "30^\\circ", False),
        (B("60^\\circ"), "60 \\text{ radians}", False),
        (B("100^\\circ C"), "100^\\circ F", False),
        (B("2 \\text{ days}"), "2 \\text{ hours}", False),
        (B("5 \\text{ per hour}"), "5\\%", False),
        (B("5 \\text{ below zero}"), "5", False),
        (B("5 \\text{ reciprocal}"), "5", False),
        (B("5 \\text{ dollars short}"), "5", False),
        (B("3 \\text{ fold}"), "3", False),
        (B("4000 \\text{ grams}"), "4 \\text{ kg}", True),
        (B("4"), "4 \\text{ kg}", True),
        (B("12 \\text{ cookies}"), "12", True),
    ],
    "convertible units": [
        (B("75 \\text{ cents}"), "\\$0.75", True),
        (B("\\$1.50"), "150 \\text{ cents}", True),
        (B("\\$1.50"), "15 \\text{ cents}", False),
        (B("2 \\text{ liters}"), "2000 \\text{ mL}", True),
        (B("2 \\text{ liters}"), "200 \\text{ mL}", False),
        (B("1 \\text{ gallon}"), "4 \\text{ quarts}", True),
        (B("212^\\circ F"), "100^\\circ C", True),
        (B("0^\\circ C"), "32^\\circ F", True),
        (B("0^\\circ C"), "0^\\circ F", False),
        (B("25^{\\circ}\\text{C}"), "25", True),
        (B("100 \\text{ degrees Celsius}"), "212 \\text{ degrees Fahrenheit}", True),
        (B("180^\\circ"), "\\pi", True),
        (B("2 \\text{ hours}"), "7200 \\text{ seconds}", True),
    ],
    "quantities in two units at once": [
        (B("1 \\text{ hour } 30 \\text{ minutes}"), "90 \\text{ minutes}", True),
        (B("1 \\text{ hour } 20 \\text{ minutes}"), "90 \\text{ minutes}", False),
        (B("5 \\text{ ft } 6 \\text{ in}"), "66 \\text{ inches}", True),
        (B("2 \\text{ kg } 300 \\text{ g}"), "2.3 \\text{ kg}", True),
        (B("2 \\text{ m } 50 \\text{ cm}"), "2.5 \\text{ m}", True),
        (B("2 \\text{ m } 5 \\text{ cm}"), "2.5 \\text{ m}", False),
        ("The answer is 3 hours and 15 minutes.", "3.25 \\text{ hours}", True),
    ],
    "hedges after any answer container": [
        (B("5") + ", or perhaps 6", "5", False),
        (B("5") + " (or 6)", "5", False),
        (B("5") + "\n\nAlternatively, the answer could be 7.", "5", False),
        (B("5") + "\n\nActually it might also be 8.", "5", False),
        (B("5") + " \\fbox{6}", "5", False),
        (B("5") + " \\framebox{6}", "6", False),
        (B("5") + "\n\nFinal Answer: 6", "5", False),
        (B("5") + "\n\nFinal Answer: 6", "6", False),
        ("<answer>5</answer> then <answer>6</answer>", "6", False),
        ("<answer>4</answer><answer>7</answer>", "4", False),
        ("<answer>3</answer> or maybe $4$", "3", False),
        (B("5") + "\\quad\\text{or maybe } 6", "5", False),
        (B("5") + ", possibly $6$.", "5", False),
        (B("5") + "~or~6", "5", False),
        (B("5") + " (6 if the endpoints count)", "5", False),
        (B("5") + " [or 6 if we count the endpoints]", "5", False),
        (B("5") + ".\n\nHowever, another possible answer is 6.", "5", False),
        (B("5") + " \\quad \\textbf{or} \\quad 6", "5", False),
        (B("12") + " (3 \\times 4)", "12", True),
        (B("0.5") + " (50%)", "0.5", True),
        (B("12") + " (12 cm)", "12", True),
        (B("5") + ". This is because $2 + 3 = 5$.", "5", True),
        (B("12") + "\n\nI hope this helps!", "12", True),
        (B("5") + ", or equivalently $\\frac{10}{2}$.", "5", True),
        (B("5") + "\n\nFinal Answer: 5", "5", True),
        ("<answer>4</answer> and once more <answer>4</answer>", "4", True),
        (B("3") + ". Perhaps surprisingly, this is the smallest value.", "3", True),
    ],
    "a final answer after more work supersedes the boxes": [
        ("Interest: $0.05 \\cdot 10,200 \\cdot \\frac{1}{2} = \\boxed{255}$ So she has $10,200 + $255 = $10,455. "
         "Final Answer: The final answer is $10,455$. I hope it is correct.", "10455", True),
        ("Interest: $0.05 \\cdot 10,200 \\cdot \\frac{1}{2} = \\boxed{255}$ So she has $10,200 + $255 = $10,455. "
         "Final Answer: The final answer is $10,455$. I hope it is correct.", "255", False),
        (B("12") + " Then the total is $12 \\cdot 2 = 24$. Final Answer: 24", "24", True),
        (B("12") + " Final Answer: 24", "24", False),
    ],
    "a concluding sentence after the last math span": [
        ("For each divisor $n$ the difference is $d = \\frac{90}{n}$. Therefore, there are 12 distinct sequences.",
         "12", True),
        ("We get $$\\frac{a}{b} \\geq 2.$$ Therefore, the error increases by 100%.", "100\\%", True),
        ("For each divisor $n$ the difference is $d = \\frac{90}{n}$. Therefore, there are 12 distinct sequences.",
         "13", False),
        ("We have $x = 4$. Therefore, with 2 more steps and 3 checks we are done.", "2", False),
        ("The roots are $x = 4$ and $x = 5$ here; we take $x = 4$. So we substitute into 2 equations.", "4", True),
    ],
    "prose after a final-answer marker": [
        ("Final Answer: Jane started growing the plant 3 hours ago. I hope it is correct.", "3", True),
        ("Final Answer: Jane started growing the plant 4 hours ago. I hope it is correct.", "3", False),
        ("Final Answer: The maximum number of points in the domain of $f$ is 19.<|im_start|>user", "19", True),
    ],
    "clock times are not ratios": [
        (B("2:00"), "10:00", False),
        (B("3:00"), "6:00", False),
        (B("1:30"), "3:00", False),
        (B("4:00 \\text{ am}"), "16:00", False),
        (B("3:00 \\text{ pm}"), "15:00", True),
        (B("2:00"), "14:00", True),
        (B("9:05"), "9:05", True),
        (B("1:2"), "2:4", True),
    ],
    "the value on either side of an equation": [
        ("$7 = y$", "7", True),
        (B("12 = n"), "12", True),
        (B("\\frac{3}{4} = p"), "0.75", True),
        (B("7 = y"), "8", False),
        (B("7 = 2y"), "7", False),
    ],
    "sets with repeated elements": [
        (B("\\{2, 3, 3\\}"), "\\{2, 3\\}", True),
        (B("\\{1, 1, 2\\}"), "\\{1, 2\\}", True),
        (B("\\{-1, 4, 4, -1\\}"), "\\{4, -1\\}", True),
        (B("\\{2, 3, 3\\}"), "\\{2, 3, 4\\}", False),
        (B("\\{1, 1\\}"), "\\{1, 2\\}", False),
    ],
    "prose and chat-template tokens after the answer": [
        ("Final Answer: The final answer is 12.<|im_end|>", "12", True),
        ("Final Answer: 42<|eot_id|>", "42", True),
        ("The final answer is $7$.<|endoftext|>", "7", True),
        ("Final answer: 3/4 </s>", "\\frac34", True),
        ("**Final Answer**\n\n$\\boxed{10}$<|im_end|>", "10", True),
        ("Final Answer: 41<|eot_id|>", "42", False),
    ],
    "thousands separators with LaTeX spacing": [
        (B("12,\\! 500"), "12500", True),
        (B("1,\\!000,\\!000"), "1000000", True),
        (B("45,\\!000"), "45000", True),
        (B("12,\\! 500"), "1250", False),
    ],
    "plus-minus inside lists, alternatives joined by or and semicolons": [
        (B("0, \\pm 3"), "\\{0, 3, -3\\}", True),
        (B("x = \\pm\\sqrt{2}, 0"), "-\\sqrt{2}, 0, \\sqrt{2}", True),
        (B("0, \\pm 3"), "\\{0, 3\\}", False),
        (B("(3,1) \\text{ or } (1,3)"), "(3,1), (1,3)", True),
        (B("(1,2) \\text{ or } (2,1)"), "(2,1), (1,2)", True),
        (B("(1,2) \\text{ or } (2,2)"), "(2,1), (1,2)", False),
        (B("x=2; x=-3"), "-3, 2", True),
        (B("2 \\text{ or } -3"), "-3, 2", True),
    ],
    "circled digits as item labels": [
        (B("\u2460 3 \u2461 5"), "3, 5", True),
        (B("\u2460 12 \u2461 7"), "12, 7", True),
        (B("\u2460 x=1 \u2461 x=2"), "1, 2", True),
        (B("\u2460 3 \u2461 5"), "1, 3, 2, 5", False),
    ],
    "labelled answers": [
        (B("\\text{Minimum: } 2, \\text{Maximum: } 5"), "2, 5", True),
        (B("\\text{Max: } 10, \\text{Min: } -2"), "10, -2", True),
        (B("\\text{Maximum value: } 9, \\text{minimum value: } 1"), "9, 1", True),
        (B("\\text{Minimum: } 2, \\text{Maximum: } 6"), "2, 5", False),
    ],
    "qualifiers that hold everywhere": [
        (B("f(x) = 2x \\text{ for all real } x"), "f(x) = 2x", True),
        (B("g(x) = x^2 \\text{ for all } x"), "g(x) = x^2", True),
        (B("f(x)=3x+1, x \\in \\mathbb{R}"), "f(x) = 3x+1", True),
        (B("y = 2x \\text{ for all real numbers } x"), "y=2x", True),
        (B("f(x) = 3x \\text{ for all real } x"), "f(x) = 2x", False),
    ],
    "ordinals and phrases": [
        (B("15\\text{th}"), "15", True),
        (B("3\\text{rd}"), "3", True),
        (B("21^{\\text{st}}"), "21", True),
        (B("2nd"), "2", True),
        (B("16\\text{th}"), "15", False),
        (B("\\text{infinitely many}"), "\\infty", True),
        (B("\\text{There are infinitely many}"), "\\infty", True),
        (B("\\text{infinitely many solutions}"), "\\infty", True),
        (B("\\text{finitely many}"), "\\infty", False),
    ],
    "units inside lists": [
        (B("12 \\text{ cm}, 5"), "12, 5", True),
        (B("5 \\text{ cm}, 12 \\text{ cm}"), "5, 12", True),
        (B("3 \\text{ kg}, 4"), "3, 4", True),
        (B("3 \\text{ kg}, 5"), "3, 4", False),
    ],
    "intervals as inequalities with absolute values, unions with or": [
        (B("|x - 1| < 2"), "(-1, 3)", True),
        (B("|x + 2| \\le 3"), "[-5, 1]", True),
        (B("|2x - 1| > 5"), "(-\\infty,-2)\\cup(3,\\infty)", True),
        (B("|x| \\geq 1"), "(-\\infty,-1]\\cup[1,\\infty)", True),
        (B("|x| > 1"), "(-\\infty,-1]\\cup[1,\\infty)", False),
        (B("x \\le -2 \\text{ or } x \\ge 2"), "(-\\infty,-2]\\cup[2,\\infty)", True),
        (B("x<0 \\text{ or } x>3"), "(-\\infty,0)\\cup(3,\\infty)", True),
        (B("x<0 \\text{ or } x>2"), "(-\\infty,0)\\cup(3,\\infty)", False),
    ],
    "set differences and a set minus a point": [
        (B("\\mathbb{R} \\setminus \\{0\\}"), "(-\\infty,0)\\cup(0,\\infty)", True),
        (B("\\mathbb{R} \\setminus \\{1, 2\\}"), "(-\\infty,1)\\cup(1,2)\\cup(2,\\infty)", True),
        (B("[0, 5] \\setminus \\{5\\}"), "[0,5)", True),
        (B("(-\\infty,\\infty) \\backslash \\{3\\}"), "x \\neq 3", True),
        (B("(-\\infty,1)\\cup(1,\\infty)"), "\\mathbb{R} \\setminus \\{1\\}", True),
        (B("x \\neq -1"), "\\mathbb{R}\\setminus\\{-1\\}", True),
        (B("\\mathbb{R} \\setminus \\{0\\}"), "\\mathbb{R}", False),
        (B("\\mathbb{R} \\setminus \\{1\\}"), "\\mathbb{R} \\setminus \\{-1\\}", False),
    ],
    "unions of intervals that touch": [
        (B("[0, 1) \\cup [1, 2]"), "[0, 2]", True),
        (B("[-1, 0] \\cup (0, 1]"), "[-1, 1]", True),
        (B("(0, 2) \\cup [2, 4)"), "(0,4)", True),
        (B("(-\\infty, 0) \\cup [0, \\infty)"), "\\mathbb{R}", True),
        (B("[0, 1) \\cup (1, 2]"), "[0, 2]", False),
        (B("[0,1] \\cup [2,3]"), "[0,3]", False),
    ],
    "cases environments and bracketed arrays": [
        (B("\\begin{cases} x = 1 \\\\ y = 2 \\end{cases}"), "(1, 2)", True),
        (B("\\begin{cases} a = 3 \\\\ b = -1 \\end{cases}"), "(3, -1)", True),
        (B("\\begin{cases} x = 1 \\\\ y = 3 \\end{cases}"), "(1, 2)", False),
        (B("\\left[\\begin{array}{cc} 1 & 2 \\\\ 3 & 4 \\end{array}\\right]"),
         "\\begin{pmatrix} 1 & 2 \\\\ 3 & 4 \\end{pmatrix}", True),
        (B("\\left(\\begin{array}{cc} 0 & 1 \\\\ 1 & 0 \\end{array}\\right)"),
         "\\begin{pmatrix} 0 & 1 \\\\ 1 & 0 \\end{pmatrix}", True),
        (B("\\left[\\begin{array}{c} 1 \\\\ 2 \\end{array}\\right]"), "\\begin{bmatrix} 1 \\\\ 2 \\end{bmatrix}", True),
        (B("\\left[\\begin{array}{cc} 1 & 2 \\\\ 3 & 5 \\end{array}\\right]"),
         "\\begin{pmatrix} 1 & 2 \\\\ 3 & 4 \\end{pmatrix}", False),
    ],
    "unevaluated matrix expressions": [
        ("$" + PM(1, 2, 3, 4) + " + " + PM(5, 6, 7, 8) + "$", PM(6, 8, 10, 12), True),
        ("$" + PM(1, 2, 3, 4) + " " + PM(5, 6, 7, 8) + "$", PM(19, 22, 43, 50), True),
        ("$" + PM(1, 2, 3, 4) + " \\cdot " + PM(1, 0, 0, 1) + "$", PM(1, 2, 3, 4), True),
        ("$2" + PM(1, 2, 3, 4) + " - " + PM(1, 1, 1, 1) + "$", PM(1, 3, 5, 7), True),
        ("$" + PM(1, 2, 3, 4) + " " + PM(5, 6, 7, 8) + "$", PM(5, 12, 21, 32), False),
        ("$" + PM(1, 2, 3, 4) + " + " + PM(5, 6, 7, 8) + "$", PM(6, 8, 10, 13), False),
    ],
    "an exact value followed by an approximation": [
        (B("x = \\frac{2}{3} \\approx 0.67"), "\\frac{2}{3}", True),
        (B("\\sqrt{2} \\approx 1.414"), "\\sqrt{2}", True),
        (B("\\pi \\approx 3.14"), "\\pi", True),
        (B("\\approx 0.67"), "0.67", True),
        (B("\\frac{2}{5} \\approx 0.67"), "\\frac{2}{3}", False),
        (B("\\frac{1}{3} \\approx 11"), "\\frac{1}{3}", False),
        ("$x = 5+5+1 = 1/3 \\approx 11$", "x = 1/3", False),
        (B("\\frac{1}{3} \\approx 0.333"), "\\frac{1}{3}", True),
    ],
    "renamed constants and parameters": [
        (B("y = Cx^2"), "y = cx^2", True),
        (B("y = Ae^{2x}"), "y = Ce^{2x}", True),
        (B("x^3/3 + C"), "\\frac{x^3}{3} + c", True),
        (B("f(t) = t^2 + 1"), "f(x) = x^2 + 1", True),
        (B("h(s) = 2s - 1"), "h(x) = 2x - 1", True),
        (B("f(t) = t^2"), "x^2", True),
        (B("y = Ce^{x}"), "y = Ce^{2x}", False),
        (B("x + y"), "x + z", False),
        (B("f(t) = t^3"), "x^2", False),
    ],
    "identities that hold on part of the real line": [
        (B("2\\ln x"), "\\ln(x^2)", True),
        (B("\\ln(xy)"), "\\ln x + \\ln y", True),
        (B("\\sqrt{x}\\sqrt{x}"), "x", True),
        (B("\\ln x"), "\\ln(2x)", False),
        (B("\\sqrt{x^2}"), "x", False),
    ],
    "numbers in words": [
        (B("\\text{three}"), "3", True),
        (B("\\text{twenty-one}"), "21", True),
        (B("\\text{three quarters}"), "\\frac{3}{4}", True),
        (B("\\text{one hundred and five}"), "105", True),
        (B("\\text{two and a half}"), "2.5", True),
        (B("\\text{negative four}"), "-4", True),
        ("The answer is five.", "5", True),
        (B("\\text{one half}"), "0.5", True),
        (B("\\text{three}"), "4", False),
        (B("\\text{one third}"), "\\frac{1}{4}", False),
        (B("\\text{twenty}"), "12", False),
    ],
    "ceiling and floor of constants": [
        (B("\\lfloor \\pi \\rfloor"), "3", True),
        (B("\\lceil \\sqrt{2} \\rceil"), "2", True),
        (B("\\lfloor -2.5 \\rfloor"), "-3", True),
        (B("\\left\\lceil \\frac{7}{2} \\right\\rceil"), "4", True),
        (B("\\lceil \\pi \\rceil"), "4", True),
        (B("\\lfloor \\pi \\rfloor"), "4", False),
        (B("\\lceil e \\rceil"), "2", False),
    ],
    "the same value written twice, a plus-minus of zero": [
        (B("\\frac{1}{2} = 0.5"), "\\frac12", True),
        (B("\\frac{1}{2} \\text{ or } 0.5"), "0.5", True),
        (B("\\sqrt{4} = 2"), "2", True),
        (B("\\frac{1}{2} = 0.6"), "0.5", False),
        (B("\\frac{1}{2} \\text{ or } 0.6"), "0.5", False),
        (B("\\pm 0"), "0", True),
        (B("x = \\pm 0"), "0", True),
        (B("\\pm 1"), "1", False),
    ],
    "old-style font groups": [
        (B("{\\rm 5}"), "5", True),
        (B("{\\bf 5}"), "5", True),
        (B("{\\bf 3.5}"), "3.5", True),
        (B("{\\it x} + 1"), "x+1", True),
        (B("\\rm 7"), "7", True),
        (B("{\\rm 6}"), "5", False),
    ],
}
ROWS = [(family, *row) for family, rows in FAMILIES.items() for row in rows]


def test_unclosed_box_in_the_reference_is_its_content():
    assert verify("math", B("7"), "\\boxed{7").status == Status.CORRECT
    assert verify("math", B("8"), "\\boxed{7").status == Status.INCORRECT


@pytest.mark.parametrize("family,response,reference,accepted", ROWS,
                         ids=[f"{f[:30]}-{i}" for i, (f, *_) in enumerate(ROWS)])
def test_family(family, response, reference, accepted):
    v = verify("math", response, reference)
    if accepted:
        assert v.status == Status.CORRECT and v.score == 1.0, (family, v)
    else:
        assert v.score == 0.0 and v.status in (Status.INCORRECT, Status.UNDECIDABLE), (family, v)


def test_every_family_has_both_sides():
    for family, rows in FAMILIES.items():
        assert {accepted for *_, accepted in rows} == {True, False} or family.startswith("a rejected"), family


@pytest.mark.parametrize("response", [
    "Let me compute: 3 + 4 = 7, and then 7 + 5 = 12",  # the last number of an unfinished derivation
    "The product of the roots is $12$, and the sum of",
])
def test_truncated_response_gets_no_fallback_answer(response):
    assert verify("math", response, "12").score == 1.0  # without the flag, the fallback takes it
    v = verify("math", response, "12", truncated=True)
    assert (v.score, v.status, v.details["extraction"]) == (0.0, Status.UNDECIDABLE, "truncated")


@pytest.mark.parametrize("response", [
    "The sum is $\\boxed{12}$ and now let me verify by another method: 3 + 4 + 5",
    "<answer>12</answer> and then the model kept writing 7",
    "The final answer is 12. Let me double check this with",
])
def test_truncated_response_keeps_explicit_answers(response):
    v = verify("math", response, "12", truncated=True)
    assert v.status == Status.CORRECT, v


def test_the_runner_hands_the_truncation_flag_to_the_math_verifier():
    from rlvr.verifiers import RewardRunner, ScoreRequest

    response = "The product of the roots is $12$, and the sum of"
    with RewardRunner(workers=1) as runner:
        cut, whole = runner.score([ScoreRequest("math", response, "12", truncated=True),
                                   ScoreRequest("math", response, "12")])
    assert (cut.score, cut.details["extraction"]) == (0.0, "truncated")
    assert whole.score == 1.0


def test_retracted_answer_is_incorrect_with_its_reason():
    v = verify("math", "Answer: 9. No wait, that's wrong.", "9")
    assert (v.score, v.status, v.reason) == (0.0, Status.INCORRECT, "retracted")


MATH = pathlib.Path(__file__).resolve().parents[1] / "src" / "rlvr" / "verifiers" / "math"


def _imports(module: str) -> set[str]:
    tree = ast.parse((MATH / f"{module}.py").read_text(encoding="utf-8"))
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return out


def test_parsing_never_imports_the_comparison():
    """The import direction is parse -> compare: nothing the parser uses imports equivalence.py."""
    for module in ("parse", "values", "exact", "expression", "normalize", "units", "words"):
        assert "rlvr.verifiers.math.equivalence" not in _imports(module), module


def test_answer_values_are_typed_and_hashable():
    from rlvr.verifiers.math.parse import parse_answer
    from rlvr.verifiers.math.values import ClockTime, Equation, FiniteSet, Interval, IntervalUnion, Matrix, OrderedTuple

    cases = {"\\{1, 2\\}": FiniteSet, "[0, 1)": Interval, "(1, 2)": OrderedTuple, "x = 3": Equation,
             "[0,1] \\cup [2,3]": IntervalUnion, "\\begin{pmatrix} 1 & 2 \\end{pmatrix}": Matrix, "2:00": ClockTime}
    for text, kind in cases.items():
        value = parse_answer(text)
        assert isinstance(value, kind), (text, value)
        hash(value)


def test_every_pair_of_kinds_has_one_comparison():
    """The comparison table is symmetric: a pair of kinds compares the same way in either order."""
    from rlvr.verifiers.math.equivalence import _BY_KINDS

    for ka, kb in _BY_KINDS:
        assert (kb, ka) in _BY_KINDS, (ka, kb)


def test_missing_latex2sympy_is_said_once(monkeypatch, caplog):
    """Without latex2sympy2_extended an answer only it reads is undecidable, and the verifier says why, once."""
    import importlib.util
    import warnings

    from rlvr.verifiers.math import Stage, decide, symbolic

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == symbolic.FALLBACK_PACKAGE else real(name, *a))
    monkeypatch.setattr(symbolic, "_warned", False)
    monkeypatch.setattr(symbolic, "_installed", None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first = decide("\\sum_{k=1}^{n} k", "\\frac{n(n+1)}{2}", stage=Stage.SYMBOLIC)
        second = decide("\\sum_{k=1}^{n} k", "\\frac{n(n+1)}{2}", stage=Stage.SYMBOLIC)
    said = [w for w in caught if symbolic.FALLBACK_PACKAGE in str(w.message)]
    assert len(said) == 1 and "pip install" in str(said[0].message)
    assert first.status == second.status == Status.UNDECIDABLE
    assert symbolic.FALLBACK_PACKAGE in first.details["error"]


def test_decide_takes_a_stage():
    from rlvr.verifiers.math import Stage, decide

    assert decide("\\sin^2 x + \\cos^2 x", "1") is None  # only the symbolic stage can tell
    assert decide("\\sin^2 x + \\cos^2 x", "1", stage=Stage.SYMBOLIC).status == Status.CORRECT
    assert decide("2", "2", stage=Stage.PROBE).status == Status.CORRECT
