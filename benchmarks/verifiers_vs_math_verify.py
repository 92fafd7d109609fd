"""rlvr's math verifier and Math-Verify side by side on the same rows, in one process.

    python benchmarks/verifiers_vs_math_verify.py [--rows rows.jsonl] [--repeat 3] [--show 20]

Rows carry "response" and "reference" (the format of `rlvr verify`). Without --rows, a built-in set of
realistic responses is generated: worked solutions in the styles of MATH (inline LaTeX) and GSM8K (plain
arithmetic, "$" as currency) followed by a final answer in the forms models use (\\boxed{}, "Final Answer:
The final answer is $...$", <answer> tags, "The answer is", "####", $...$), for answers of every common
type. Prints median and p99 latency per call for both, their ratio (overall and per answer form when rows
carry a "form"), and every row where the two disagree. Needs `pip install math-verify`.
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import statistics
import time

# Steps of worked solutions in the styles of MATH (inline LaTeX) and GSM8K (plain arithmetic, "$" as currency).
REASONING_STEPS = [
    "Let $x$ be the number of apples. Then $3x + 5 = 20$, so $x = 5$.",
    "Expanding, $(a+b)^2 = a^2 + 2ab + b^2$, and the cross term is what we need.",
    "The discriminant is $b^2 - 4ac = 25 - 24 = 1$, so there are two real roots.",
    "By the Pythagorean theorem, $c = \\sqrt{3^2 + 4^2} = 5$.",
    "We simplify $\\frac{12}{18} = \\frac{2}{3}$ by dividing by $6$.",
    "She earns 12 * 5 = $60 per week, and $60 * 4 = $240 per month.",
    "Natalia sold 48/2 = <<48/2=24>>24 clips in May.",
    "Recall that \\[ \\sum_{k=1}^{n} k = \\frac{n(n+1)}{2}. \\]",
    "Subtracting 7 from both sides gives 2x = 14, hence x = 7.",
    "Since $\\sin^2\\theta + \\cos^2\\theta = 1$, we get $\\cos\\theta = \\pm\\frac{4}{5}$.",
    "Wait, let me double-check the arithmetic: 17 + 26 = 43, which matches.",
    "The area of the triangle is $\\frac{1}{2} \\cdot 6 \\cdot 8 = 24$ square units.",
    "Using the formula $\\binom{n}{k} = \\frac{n!}{k!(n-k)!}$ with $n = 6$ and $k = 2$ gives $15$.",
    "Multiplying both sides by $(x-1)$, we must remember that $x \\neq 1$.",
    "Therefore the sequence is geometric with ratio $r = \\tfrac{1}{3}$.",
    "Hmm, that is not right. Let me reconsider the case $n = 0$ separately.",
]

# (gold, equivalent forms a model might write, a wrong form)
ANSWERS = [
    ("42", ["42", "42.0", "\\text{42}"], "41"),
    ("72", ["72", "72.00"], "27"),
    ("1000", ["1,000", "1000", "10^3"], "100"),
    ("-7", ["-7", "- 7"], "7"),
    ("12.5", ["12.50", "\\frac{25}{2}", "12.5"], "12"),
    ("\\frac{1}{2}", ["0.5", "\\frac12", "1/2", "\\dfrac{1}{2}"], "\\frac{1}{3}"),
    ("-\\frac{3}{4}", ["-0.75", "-\\frac{3}{4}", "\\frac{-3}{4}"], "\\frac{3}{4}"),
    ("\\frac{7}{12}", ["7/12", "\\frac{7}{12}", "\\tfrac{7}{12}"], "\\frac{5}{12}"),
    ("3\\sqrt{2}", ["3\\sqrt{2}", "\\sqrt{18}", "3 \\sqrt 2"], "2\\sqrt{3}"),
    ("\\frac{\\sqrt{3}}{2}", ["\\frac{\\sqrt3}{2}", "\\dfrac{\\sqrt{3}}{2}", "\\frac{1}{2}\\sqrt{3}"], "\\frac{\\sqrt{2}}{2}"),
    ("\\pi", ["\\pi", "\\pi "], "2\\pi"),
    ("4\\pi", ["4\\pi", "4 \\pi"], "8\\pi"),
    ("30^\\circ", ["30", "30^\\circ", "30^{\\circ}"], "60^\\circ"),
    ("25\\%", ["25\\%", "25"], "50\\%"),
    ("x^2+2x+1", ["(x+1)^2", "x^2 + 2x + 1", "1+2x+x^2"], "x^2+1"),
    ("y = 2x + 3", ["y=2x+3", "y = 3 + 2x"], "y = 3x + 2"),
    ("(1,2)", ["(1, 2)", "\\left(1,2\\right)"], "(2,1)"),
    ("\\{1,2,3\\}", ["\\{3,2,1\\}", "\\{1, 2, 3\\}"], "\\{1,2\\}"),
    ("-2, 3", ["3, -2", "-2, 3"], "2, 3"),
    ("[1,3)", ["[1, 3)", "1 \\le x < 3"], "(1,3]"),
    ("[2,\\infty)", ["[2, \\infty)", "x \\ge 2"], "(2,\\infty)"),
    ("\\infty", ["\\infty", "+\\infty"], "-\\infty"),
    ("2", ["x = 2", "2"], "3"),
    ("\\begin{pmatrix} 1 & 2 \\\\ 3 & 4 \\end{pmatrix}",
     ["\\begin{pmatrix}1&2\\\\3&4\\end{pmatrix}", "\\begin{pmatrix} 1 & 2 \\\\ 3 & 4 \\end{pmatrix}"],
     "\\begin{pmatrix} 1 & 3 \\\\ 2 & 4 \\end{pmatrix}"),
    ("\\text{(B)}", ["B", "(B)", "\\text{(B)}"], "C"),
]
# how models end a solution: boxed (Qwen/DeepSeek style), Minerva's "final answer is", GSM8K's "####", ...
WRAPPERS = [
    "{r}Therefore, the final answer is $\\boxed{{{a}}}$.",
    "{r}\n\n**Final Answer**\n\\[\n\\boxed{{{a}}}\n\\]",
    "{r}\nFinal Answer: The final answer is ${a}$. I hope it is correct.",
    "<think>\n{r}\n</think>\n<answer>{a}</answer>",
    "{r}So the answer is {a}.",
    "{r}\n#### {a}",
    "{r}The result is ${a}$.",
    "{r}Answer: {a}",
]


def builtin_rows(seed: int = 0) -> list[dict]:
    """Worked solutions of 1-12 steps followed by a final answer: one row per answer form and wrapper."""
    rng = random.Random(seed)
    rows = []
    for gold, rights, wrong in ANSWERS:
        for answer in rights + [wrong]:
            for wrapper in WRAPPERS:
                steps = rng.choices(REASONING_STEPS, k=rng.randint(1, 12))
                text = wrapper.format(r=" ".join(steps) + " ", a=answer)
                rows.append({"response": text, "reference": gold, "expected": answer != wrong,
                             "form": wrapper.replace("{r}", "").replace("\n", " ").strip()})
    return rows


def timed_side_by_side(fns, rows, repeat, resets):
    """Per-row median latency of each function over ``repeat`` passes, and each one's last-pass results.

    The functions are timed alternately on each row, so machine noise hits both alike; each ``reset``
    empties that function's caches before every call (untimed), so no call reuses work done for another
    row or an earlier pass: every figure is a cold call. As in ``timeit``, the garbage collector is off
    during a pass (and runs between passes), so one function's garbage is not billed to the other.
    """
    times = [[[] for _ in rows] for _ in fns]
    results = [[] for _ in fns]
    for _ in range(repeat):
        results = [[] for _ in fns]
        gc.collect()
        gc.disable()
        for i, row in enumerate(rows):
            for k, fn in enumerate(fns):
                resets[k]()
                start = time.perf_counter()
                results[k].append(fn(row))
                times[k][i].append(time.perf_counter() - start)
        gc.enable()
    return [[statistics.median(t) for t in per_fn] for per_fn in times], results


def percentile(values, q):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", help="JSONL with response and reference (default: built-in realistic rows)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--show", type=int, default=20, help="disagreements to print")
    args = parser.parse_args()

    from math_verify import parse, verify as mv_verify

    from rlvr.verifiers import verify

    rows = builtin_rows() if not args.rows else [json.loads(line) for line in open(args.rows) if line.strip()]

    def ours(row):
        return verify("math", row["response"], row["reference"]).score >= 1.0

    def theirs(row):
        try:
            return bool(mv_verify(parse("$" + row["reference"] + "$"), parse(row["response"])))
        except Exception:
            return False

    # warm both up (imports, caches of compiled grammars) before timing
    for row in rows[:5]:
        ours(row), theirs(row)
    from rlvr.verifiers import default_runner
    from rlvr.verifiers.math import clear_caches

    def clear_rlvr_caches():
        clear_caches()
        default_runner().cache_clear()

    (our_t, their_t), (our_r, their_r) = timed_side_by_side(
        [ours, theirs], rows, args.repeat, resets=[clear_rlvr_caches, lambda: None]
    )

    def fmt(ts):
        return f"median {1000 * statistics.median(ts):8.3f} ms   p99 {1000 * percentile(ts, 0.99):8.3f} ms"

    print(f"rows: {len(rows)}  (each timed {args.repeat}x alternately for both with cold caches, median per row)")
    print(f"rlvr math    {fmt(our_t)}")
    print(f"Math-Verify  {fmt(their_t)}")
    print(f"median ratio (Math-Verify / rlvr): {statistics.median(their_t) / statistics.median(our_t):.1f}x")
    if "form" in rows[0]:
        print("median ratio per answer form:")
        for form in dict.fromkeys(row["form"] for row in rows):
            idx = [i for i, row in enumerate(rows) if row["form"] == form]
            ratio = statistics.median(their_t[i] for i in idx) / statistics.median(our_t[i] for i in idx)
            ours_ms, theirs_ms = (1000 * statistics.median(t[i] for i in idx) for t in (our_t, their_t))
            print(f"  {ratio:5.1f}x  rlvr {ours_ms:6.3f} ms  Math-Verify {theirs_ms:6.3f} ms  {form!r}")
    if "expected" in rows[0]:
        for name, res in (("rlvr", our_r), ("Math-Verify", their_r)):
            right = sum(r == row["expected"] for r, row in zip(res, rows))
            print(f"{name:12s} agrees with the expected label on {right}/{len(rows)} rows")
    disagreements = [(row, a, b) for row, a, b in zip(rows, our_r, their_r) if a != b]
    print(f"disagreements: {len(disagreements)}")
    for row, a, b in disagreements[: args.show]:
        tail = row["response"][-60:].replace("\n", " ")
        print(f"  rlvr={a!s:5} math-verify={b!s:5} ref={row['reference']!r:22} ...{tail!r}")


if __name__ == "__main__":
    main()
