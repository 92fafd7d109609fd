"""rlvr's "ifeval" verifier against Google's reference checker (lm-evaluation-harness's copy), instruction by
instruction, on the responses in ifeval_cases.py (written for this comparison: following, violating and
borderline responses for all 25 instruction types).

    pip install -e ".[bench]"
    python benchmarks/ifeval_vs_reference.py [--show] [--markdown]

Prints, per instruction type, how many verdicts were compared and how many agree (strict mode: the response as
it is). --show lists every disagreement with both verdicts. The reference's language detection draws random
samples, and it replaces a letter_frequency "letter" outside a-z ("#", "!") by a random letter; both global seeds
are fixed to 0 here so that the run is repeatable (rlvr seeds its own detector and counts the character asked for).
"""

from __future__ import annotations

import argparse
import collections
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from ifeval_cases import cases, instruction_types  # noqa: E402
from ifeval_reference import ReferenceUnavailable, load_reference  # noqa: E402

from rlvr.verifiers.ifeval import build_checker, instruction_ids  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--show", action="store_true", help="list every disagreement")
    parser.add_argument("--markdown", action="store_true", help="print the table as markdown")
    args = parser.parse_args(argv)

    try:
        reference = load_reference()
    except ReferenceUnavailable as exc:
        print(f"reference checker unavailable: {exc}", file=sys.stderr)
        return 2
    import random

    import langdetect

    langdetect.DetectorFactory.seed = 0
    random.seed(0)  # the reference draws a random letter for a letter_frequency "letter" that is not a-z

    rows = cases()
    missing = sorted(set(instruction_ids()) - set(instruction_types()))
    if missing:
        print(f"no cases for: {', '.join(missing)}", file=sys.stderr)
        return 2

    per_type: dict[str, list[int]] = collections.defaultdict(lambda: [0, 0, 0])  # compared, agree, ref followed
    disagreements = []
    ours_s = ref_s = 0.0
    for row in rows:
        t0 = time.perf_counter()
        checker = build_checker(row["id"], row["kwargs"])
        ours = bool(row["response"].strip()) and checker(row["response"])
        t1 = time.perf_counter()
        theirs = reference.follows(row["id"], dict(row["kwargs"]), row["response"], prompt=row["prompt"])
        t2 = time.perf_counter()
        ours_s, ref_s = ours_s + t1 - t0, ref_s + t2 - t1
        stats = per_type[row["id"]]
        stats[0] += 1
        stats[1] += ours == theirs
        stats[2] += theirs
        if ours != theirs:
            disagreements.append((row, ours, theirs))

    total = sum(s[0] for s in per_type.values())
    agree = sum(s[1] for s in per_type.values())
    if args.markdown:
        print("| instruction | verdicts | reference: followed | agree |")
        print("| --- | ---: | ---: | ---: |")
        for name in sorted(per_type):
            n, a, f = per_type[name]
            print(f"| `{name}` | {n} | {f} | {a}/{n} ({100 * a / n:.1f}%) |")
        print(f"| **all 25** | {total} | {sum(s[2] for s in per_type.values())} | {agree}/{total} "
              f"({100 * agree / total:.1f}%) |")
    else:
        width = max(map(len, per_type))
        print(f"{'instruction':{width}}  verdicts  ref-followed  agree")
        for name in sorted(per_type):
            n, a, f = per_type[name]
            print(f"{name:{width}}  {n:8d}  {f:12d}  {a}/{n} ({100 * a / n:.1f}%)")
        print(f"{'all':{width}}  {total:8d}  {sum(s[2] for s in per_type.values()):12d}  "
              f"{agree}/{total} ({100 * agree / total:.1f}%)")
    print(f"\n{len(per_type)} instruction types, {len(rows)} verdicts; time: rlvr {ours_s:.2f} s, "
          f"reference {ref_s:.2f} s")
    if args.show:
        for row, ours, theirs in disagreements:
            print(f"\n{row['id']} {row['kwargs']}\n  rlvr={ours} reference={theirs}\n  {row['response']!r}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
