"""rlvr's math verifier and Math-Verify on the public comparison cases, one table row per source.

    python benchmarks/math_public_cases.py [--cases tests/data/math_public_cases.jsonl] [--show 50]

Each case (tests/data/math_public_cases.jsonl) names the project whose tests or benchmark it is modelled on
("source"), a response, the gold reference and the verdict a careful grader gives ("expected"). Prints, per
source, how often each verifier agrees with the expected verdict, then every case where they differ.
Needs `pip install math-verify` (the `bench` extra).
"""

from __future__ import annotations

import argparse
import json
import pathlib

CASES = pathlib.Path(__file__).resolve().parents[1] / "tests" / "data" / "math_public_cases.jsonl"


def load_cases(path: str | pathlib.Path = CASES) -> list[dict]:
    """The cases of a JSONL file, one object per line."""
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def rlvr_verdict(case: dict) -> bool:
    """rlvr's verdict on a case: full credit or not."""
    from rlvr.verifiers import verify

    return verify("math", case["response"], case["reference"], timeout_s=10.0).score >= 1.0


def math_verify_verdict(case: dict) -> bool:
    """Math-Verify's verdict, called as its README shows: verify(parse(gold), parse(answer))."""
    from math_verify import parse, verify

    try:
        return bool(verify(parse("$" + case["reference"] + "$"), parse(case["response"])))
    except Exception:
        return False


def table(cases: list[dict], verdicts: dict[str, list[bool]]) -> list[tuple[str, int, dict[str, int]]]:
    """(source, cases, {verifier: cases where it agrees with the expected verdict}) per source, in order."""
    rows = []
    for source in dict.fromkeys(c["source"] for c in cases):
        idx = [i for i, c in enumerate(cases) if c["source"] == source]
        rows.append((source, len(idx), {name: sum(v[i] == cases[i]["expected"] for i in idx)
                                        for name, v in verdicts.items()}))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default=str(CASES))
    parser.add_argument("--show", type=int, default=50, help="disagreements to print")
    args = parser.parse_args()
    cases = load_cases(args.cases)
    verdicts = {"rlvr": [rlvr_verdict(c) for c in cases], "Math-Verify": [math_verify_verdict(c) for c in cases]}
    print("| source | cases | rlvr right | Math-Verify right |")
    print("| --- | --- | --- | --- |")
    total = {name: 0 for name in verdicts}
    for source, n, right in table(cases, verdicts):
        print(f"| {source} | {n} | {right['rlvr']} | {right['Math-Verify']} |")
        for name in total:
            total[name] += right[name]
    print(f"| all | {len(cases)} | {total['rlvr']} | {total['Math-Verify']} |")
    differ = [(c, a, b) for c, a, b in zip(cases, verdicts["rlvr"], verdicts["Math-Verify"]) if a != b]
    print(f"\ncases where the two differ: {len(differ)}")
    for c, a, b in differ[: args.show]:
        mark = "rlvr right" if a == c["expected"] else "Math-Verify right"
        print(f"  [{c['source']}] {mark:17s} expected={c['expected']!s:5} ref={c['reference']!r} "
              f"response=...{c['response'][-70:]!r}")
    wrong = [c for c, a in zip(cases, verdicts["rlvr"]) if a != c["expected"]]
    print(f"\nrlvr wrong on {len(wrong)}:")
    for c in wrong:
        print(f"  [{c['source']}] expected={c['expected']!s:5} ref={c['reference']!r} "
              f"response=...{c['response'][-70:]!r}")


if __name__ == "__main__":
    main()
