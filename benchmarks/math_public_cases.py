"""rlvr's math verifier and Math-Verify on public answer-equivalence cases, one table row per source.

    python benchmarks/math_public_cases.py [--cases FILE ...] [--show 50] [--prune-known]

The cases live in tests/data/math_public_*.jsonl. Each names its source ("source") and, for cases taken from
another project's tests or grader, the repository, path and commit they come from ("repo", "path", "commit",
"test"); a response (or, for graders that compare extracted answers, the "answer"), the gold reference and the expected verdict ("expected"). Where we think the source's
authors decided wrong, "expected" is our verdict, "source_expected" keeps theirs and "note" says why.
The cases on which rlvr is known to be wrong are listed by family in tests/data/math_public_known_wrong.json
(explained in docs/math_public_comparison.md).

--prune-known deletes from that file the cases rlvr now gets right (it never adds one: a new known
disagreement needs its family written by hand). Prints, per source: cases, how many verdicts each verifier gets right, both wrong, rlvr-only wrong,
Math-Verify-only wrong, and the p50/p99 latency of one rlvr call; then every case either gets wrong.
Needs `pip install math-verify` (the `bench` extra).
"""

from __future__ import annotations

import argparse
import json
import pathlib
import re
import time

DATA = pathlib.Path(__file__).resolve().parents[1] / "tests" / "data"
CASES = DATA / "math_public_cases.jsonl"  # the first set (cases modelled on each source's tests)
KNOWN_WRONG = DATA / "math_public_known_wrong.json"

# A reference written inside one pair of math delimiters, as other projects' tests write golds for their parsers.
_DELIMITED = re.compile(r"^\s*(?:\$\$(?P<a>.*)\$\$|\$(?P<b>[^$]*)\$|\\\((?P<c>.*)\\\)|\\\[(?P<d>.*)\\\])\s*$", re.S)


def case_files() -> list[pathlib.Path]:
    """Every public case file, the first set first."""
    return [CASES] + sorted(p for p in DATA.glob("math_public_*.jsonl") if p != CASES)


def load_cases(*paths: str | pathlib.Path) -> list[dict]:
    """The cases of the given JSONL files (default: every public case file), one object per line; each gets
    "file" (its file's name) and "id" (file:line) unless it has one."""
    rows = []
    for path in paths or case_files():
        path = pathlib.Path(path)
        with open(path, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if line.strip():
                    row = json.loads(line)
                    row.setdefault("id", f"{path.stem}:{n}")
                    row["file"] = path.name
                    rows.append(row)
    return rows


def bare_reference(reference: str) -> str:
    """The reference without one pair of math delimiters around all of it (rlvr takes a bare gold answer, as
    dataset columns hold it; other projects' tests wrap golds in ``$...$`` for their own parsers)."""
    m = _DELIMITED.match(reference)
    if not m:
        return reference
    return next(g for g in m.groups() if g is not None).strip()


def response_text(case: dict) -> str:
    """The case's response; a case that holds only an extracted answer (sources whose graders compare answers,
    not responses) is presented as a model writes a final answer: ``The final answer is $\boxed{...}$.``"""
    if "response" in case:
        return case["response"]
    return "The final answer is $\\boxed{" + case["answer"] + "}$."


def rlvr_verdict(case: dict) -> bool:
    """rlvr's verdict on a case: full credit or not."""
    from rlvr.verifiers import verify

    return verify("math", response_text(case), bare_reference(case["reference"]), timeout_s=10.0).score >= 1.0


def math_verify_verdict(case: dict) -> bool:
    """Math-Verify's verdict, called as its README shows: verify(parse(gold), parse(answer)). A gold without
    delimiters is wrapped in ``$...$`` (Math-Verify's parser only reads LaTeX inside delimiters or a box)."""
    from math_verify import parse, verify

    gold = case["reference"]
    if not re.search(r"\$|\\\(|\\\[|\\boxed", gold):
        gold = "$" + gold + "$"
    try:
        return bool(verify(parse(gold), parse(response_text(case))))
    except Exception:
        return False


# Answers of every kind the verifier handles, scored once before timing so that one-time costs (imports and caches
# built on first use) are not billed to whichever case happens to come first.
WARM_UP = [("The answer is $\\boxed{\\frac{x+1}{2}}$.", "(x+1)/2"), ("$x \\in [2, \\infty)$", "x \\ge 2"),
           ("$\\begin{pmatrix}1 & 2\\\\ 3 & 4\\end{pmatrix}$", "\\begin{pmatrix}1&2\\\\3&4\\end{pmatrix}"),
           ("$\\{1, 2\\}$", "\\{2, 1\\}"), ("$y = \\sqrt{3}x + 1$", "y=1+\\sqrt3 x"), ("$\\cfrac{2}{5}$", "0.4"),
           ("$-[2, 5)$", "(-5, -2]"), ("$\\sum_{k=0}^{n} k$", "\\frac{n(n+1)}{2}"), ("Answer: 12,500", "12500")]


def warm_up() -> float:
    """Score WARM_UP with both verifiers; the seconds it took."""
    start = time.perf_counter()
    for response, reference in WARM_UP:
        case = {"response": response, "reference": reference}
        rlvr_verdict(case)
        math_verify_verdict(case)
    return time.perf_counter() - start


def timed(fn, cases: list[dict]) -> tuple[list[bool], list[float]]:
    """Each case's verdict and the seconds its call took."""
    verdicts, seconds = [], []
    for c in cases:
        start = time.perf_counter()
        verdicts.append(fn(c))
        seconds.append(time.perf_counter() - start)
    return verdicts, seconds


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


def table(cases: list[dict], verdicts: dict[str, list[bool]],
          seconds: list[float] | None = None) -> list[tuple[str, int, dict[str, float]]]:
    """(source, cases, counts) per source, in order of first appearance. counts: right answers per verifier,
    "both wrong", "rlvr-only wrong", "Math-Verify-only wrong" and, with ``seconds``, rlvr's p50/p99 latency."""
    rows = []
    for source in dict.fromkeys(c["source"] for c in cases):
        idx = [i for i, c in enumerate(cases) if c["source"] == source]
        ok = {name: [v[i] == cases[i]["expected"] for i in idx] for name, v in verdicts.items()}
        counts: dict[str, float] = {name: sum(v) for name, v in ok.items()}
        pairs = list(zip(ok["rlvr"], ok["Math-Verify"]))
        counts["both wrong"] = sum(not a and not b for a, b in pairs)
        counts["rlvr-only wrong"] = sum(not a and b for a, b in pairs)
        counts["Math-Verify-only wrong"] = sum(a and not b for a, b in pairs)
        if seconds is not None:
            counts["p50 ms"] = 1000 * percentile([seconds[i] for i in idx], 0.5)
            counts["p99 ms"] = 1000 * percentile([seconds[i] for i in idx], 0.99)
        rows.append((source, len(idx), counts))
    return rows


def markdown(rows: list[tuple[str, int, dict[str, float]]], seconds: list[float]) -> str:
    head = ["source", "cases", "rlvr right", "Math-Verify right", "both wrong", "rlvr-only wrong",
            "Math-Verify-only wrong", "rlvr p50 ms", "rlvr p99 ms"]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    total = {k: 0 for k in ("rlvr", "Math-Verify", "both wrong", "rlvr-only wrong", "Math-Verify-only wrong")}
    n = 0
    for source, cases, c in rows:
        lines.append(f"| {source} | {cases} | {c['rlvr']} | {c['Math-Verify']} | {c['both wrong']} | "
                     f"{c['rlvr-only wrong']} | {c['Math-Verify-only wrong']} | {c['p50 ms']:.1f} | {c['p99 ms']:.1f} |")
        n += cases
        for k in total:
            total[k] += c[k]
    lines.append(f"| all | {n} | {total['rlvr']} | {total['Math-Verify']} | {total['both wrong']} | "
                 f"{total['rlvr-only wrong']} | {total['Math-Verify-only wrong']} | "
                 f"{1000 * percentile(seconds, 0.5):.1f} | {1000 * percentile(seconds, 0.99):.1f} |")
    return "\n".join(lines)


def prune_known(now_right: list[str]) -> None:
    """Delete the given case ids from the known-disagreement file, and every family left without a case."""
    known = json.loads(KNOWN_WRONG.read_text(encoding="utf-8"))
    gone = sorted(set(now_right) & set(known["cases"]))
    for case_id in gone:
        del known["cases"][case_id]
    used = set(known["cases"].values())
    known["families"] = {k: v for k, v in known["families"].items() if k in used}
    KNOWN_WRONG.write_text(json.dumps(known, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"pruned {len(gone)} known disagreements rlvr now gets right: {', '.join(gone) or '-'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", nargs="*", help="JSONL files (default: tests/data/math_public_*.jsonl)")
    parser.add_argument("--show", type=int, default=200, help="wrong cases to print")
    parser.add_argument("--prune-known", action="store_true",
                        help=f"delete the cases rlvr now gets right from {KNOWN_WRONG.name}")
    args = parser.parse_args()
    cases = load_cases(*(args.cases or []))
    print(f"warm-up (imports, first use): {warm_up():.1f} s")
    ours, seconds = timed(rlvr_verdict, cases)
    theirs, _ = timed(math_verify_verdict, cases)
    verdicts = {"rlvr": ours, "Math-Verify": theirs}
    print(markdown(table(cases, verdicts, seconds), seconds))
    slow = sorted(zip(seconds, cases), key=lambda p: -p[0])[:5]
    print("\nslowest rlvr calls: " + ", ".join(f"{c['id']} {1000 * s:.0f} ms" for s, c in slow))
    print(f"rlvr calls over 0.5 s: {sum(s > 0.5 for s in seconds)} of {len(cases)}")
    known = json.loads(KNOWN_WRONG.read_text(encoding="utf-8"))["cases"]
    if args.prune_known:
        prune_known([c["id"] for c, a in zip(cases, ours) if a == c["expected"]])
    wrong = [(c, a, b) for c, a, b in zip(cases, ours, theirs) if a != c["expected"] or b != c["expected"]]
    print(f"\ncases either gets wrong: {len(wrong)}")
    for c, a, b in wrong[: args.show]:
        who = "both" if a != c["expected"] and b != c["expected"] else ("rlvr" if a != c["expected"] else "MV")
        pin = f" [known: {known[c['id']]}]" if c["id"] in known else ""
        print(f"  {who:4s} wrong{pin} {c['id']} expected={c['expected']!s:5} ref={c['reference'][:60]!r} "
              f"response={response_text(c)[-90:]!r}")


if __name__ == "__main__":
    main()
