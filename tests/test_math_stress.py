"""The math verifier under hostile input from 8 threads at once: every call returns within its budget
(timeout_s + 0.5 s, the contract's slack) and the process does not grow by 100 MiB, however many distinct
large answers it sees."""

from __future__ import annotations

import concurrent.futures
import random
import time

import pytest

from rlvr.verifiers import Status, verify

TIMEOUT_S = 1.0
SLACK_S = 0.5
MAX_GROWTH_MIB = 100


def B(x: str) -> str:
    return f"After a long computation we get $\\boxed{{{x}}}$."


def _adversarial() -> list[tuple[str, str]]:
    """Responses whose cost grows with the input in every stage: big integers, exact roots, polynomial
    products with huge coefficients, many boxes, deep nesting, long text, regex-hostile runs."""
    poly_boxes = " ".join(B(f"(x+{k})^{{64}}(y-{k}-1)^{{64}}+\\sin(xy)") for k in range(16))
    rows = [
        B("\\sqrt{99^{10000}+1}"),
        B("(\\frac{x}{7^{10000}}+\\frac{1}{5^{10000}})^{40}"),
        poly_boxes,
        B("(x+1)^{64}(y-2)^{64}+\\sin(xy)"),
        B("\\frac{" + "+".join(f"{k}^{{9999}}" for k in range(2, 60)) + "}{3^{9999}}"),
        B("+".join(f"\\frac{{1}}{{{p}^{{9000}}}}" for p in (3, 5, 7, 11, 13, 17, 19, 23, 29, 31))),
        B("\\sqrt[3]{" + "9" * 499 + "}"),
        B("\\sqrt[7]{" + "+".join(["9" * 400] * 3) + "}"),
        B("(a+b+c+d+e+f)^{64}"),
        B("\\prod" + "(x+1)" * 300),
        B("(x+1)" * 64 + "-(x-1)" * 64),
        B("2^{2^{2^{2^{2}}}}"),
        B("10^{10^{5}} - 10^{10^{5}} + 1"),
        B("\\sin(" * 60 + "x" + ")" * 60),
        B("\\frac{1}{" * 55 + "x" + "}" * 55),
        B(", ".join(f"(x+{k})^{{30}}" for k in range(64))),
        B("; ".join(f"x_{k} = {k}^{{5000}}" for k in range(60))),
        B("\\{x \\mid " + " < ".join(["x"] * 200) + "\\}"),
        B("1, 2, \\ldots, 10^{100}"),
        " ".join(f"\\boxed{{{k}^{{9000}}}}" for k in range(300)),
        " ".join(f"\\boxed{{{k % 97}}}" for k in range(20000)),
        "\\boxed{" * 5000 + "7" + "}" * 4000,
        "The answer is " + "not " * 20000 + "5.",
        "$" + "a" * 50000 + "$ " * 200 + "Final Answer: The final answer is 5.",
        "1 " * 60000 + "or 3",
        "Answer: " + "(" * 3000 + "x" + ")" * 3000,
        B("0." + "1" * 40 + "\\overline{" + "9" * 40 + "}"),
        B("\u00b2" * 2000),
        B("x" + "^{x" * 50 + "}" * 50),
        B("e^{-10^{6}}"),
        B("(1+10^{-400})^{10^{400}}"),
    ]
    refs = ["5", "x^2+2x+1", "1, 2"]
    return [(r, refs[i % len(refs)]) for i, r in enumerate(rows)]


def _rss_mib() -> float:
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    import os

    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def _timed(response: str, reference: str) -> tuple[float, object]:
    t0 = time.monotonic()
    v = verify("math", response, reference, timeout_s=TIMEOUT_S)
    return time.monotonic() - t0, v


@pytest.mark.skipif(not __import__("os").path.exists("/proc/self/statm"), reason="needs /proc")
def test_eight_threads_of_adversarial_input_keep_the_budget_and_the_memory():
    rows = _adversarial()
    _timed(B("(x+1)^2"), "x^2+2x+1")  # imports and caches warm before the baseline
    _timed(B("\\sin^2 x + \\cos^2 x"), "1")
    before = _rss_mib()

    def job(i: int) -> tuple[float, object, str]:
        if i < 2 * len(rows):
            response, reference = rows[i % len(rows)]
        else:  # about 190 kB, all distinct, as the answer or the reference, built here so the test holds none
            body = "".join(random.Random(i).choice("0123456789+x ") for _ in range(400)) * 475 + str(i)
            response, reference = (B(body), str(i)) if i % 2 else (B(str(i)), body)
        return (*_timed(response, reference), response[:80])

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        results = list(pool.map(job, range(2 * len(rows) + 1000)))
    late = [(round(t, 3), head, v) for t, v, head in results if t > TIMEOUT_S + SLACK_S]
    assert not late, late
    assert all(v.status in set(Status) for _, v, _ in results)
    growth = _rss_mib() - before
    slowest = max(results, key=lambda r: r[0])
    print(f"\n{len(results)} calls from 8 threads: slowest {slowest[0]:.3f} s (budget {TIMEOUT_S + SLACK_S} s, "
          f"{slowest[2][-45:]!r}: {slowest[1].reason}), process growth {growth:.1f} MiB")  # shown with pytest -s
    assert growth < MAX_GROWTH_MIB, growth


def test_caches_hold_bytes_not_entries():
    from rlvr.verifiers.math import caches, clear_caches

    clear_caches()
    for i in range(400):
        answer = "\\frac{1}{2}" + " " * 2500 + "+" + str(i)
        verify("math", B(answer), answer + "x" * 400)
    for cache in caches():
        assert 0 <= cache.bytes <= cache.max_bytes
    assert sum(cache.max_bytes for cache in caches()) <= 64 * 2**20
