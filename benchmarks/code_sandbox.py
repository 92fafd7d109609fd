"""Latency and throughput of the "code" verifier (its sandbox and harness) on synthetic tasks.

    python benchmarks/code_sandbox.py [--tasks 200] [--tests-per-task 5] [--io-tasks 10] [--workers W] [--seed 0]

Builds --tasks assert-style tasks (a correct solution in a ```python fence and --tests-per-task
`assert f(...) == ...` tests: arithmetic, string, list and dict functions, each task under its own
function name) and --io-tasks stdin/stdout tasks with as many cases each. Then:
  1. runs every task alone through `verify("code", ...)` and prints the median and p90 milliseconds per
     test case (a task's wall time divided by its number of tests), separately for assert and io tests;
  2. runs all tasks in one `score_batch([ScoreRequest("code", ...), ...])`, which scores "threads"
     verifiers on the runner's thread pool (with --workers W: verify() on a pool of W threads), and
     prints tasks and tests per second;
  3. exits non-zero unless every verdict is "correct".
Prints the isolation level the sandboxes ran at (see docs/security.md).
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import string
import sys
import time

# (name, solution body with {f} for the function name, argument generator, reference implementation)
ASSERT_TEMPLATES = [
    ("add", "def {f}(a, b):\n    return a + b\n",
     lambda r: (r.randint(-999, 999), r.randint(-999, 999)), lambda a, b: a + b),
    ("mul_mod", "def {f}(a, b, m):\n    return (a * b) % m\n",
     lambda r: (r.randint(0, 10**6), r.randint(0, 10**6), r.randint(2, 997)), lambda a, b, m: (a * b) % m),
    ("gcd", "def {f}(a, b):\n    while b:\n        a, b = b, a % b\n    return abs(a)\n",
     lambda r: (r.randint(1, 10**5), r.randint(1, 10**5)), lambda a, b: __import__("math").gcd(a, b)),
    ("fib", "def {f}(n):\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a\n",
     lambda r: (r.randint(0, 90),), None),
    ("digit_sum", "def {f}(n):\n    return sum(int(c) for c in str(abs(n)))\n",
     lambda r: (r.randint(-10**9, 10**9),), lambda n: sum(int(c) for c in str(abs(n)))),
    ("reverse", "def {f}(s):\n    return s[::-1]\n",
     lambda r: (_word(r, 12),), lambda s: s[::-1]),
    ("count_vowels", "def {f}(s):\n    return sum(1 for c in s.lower() if c in 'aeiou')\n",
     lambda r: (_word(r, 20),), lambda s: sum(1 for c in s.lower() if c in "aeiou")),
    ("is_palindrome", "def {f}(s):\n    t = [c.lower() for c in s if c.isalnum()]\n    return t == t[::-1]\n",
     lambda r: (_maybe_palindrome(r),), lambda s: [c.lower() for c in s if c.isalnum()][::-1]
     == [c.lower() for c in s if c.isalnum()]),
    ("caesar", "def {f}(s, k):\n"
     "    return ''.join(chr((ord(c) - 97 + k) % 26 + 97) if c.islower() else c for c in s)\n",
     lambda r: (_word(r, 10).lower(), r.randint(0, 25)),
     lambda s, k: "".join(chr((ord(c) - 97 + k) % 26 + 97) if c.islower() else c for c in s)),
    ("uniq_sorted", "def {f}(xs):\n    return sorted(set(xs))\n",
     lambda r: (_ints(r, 12, 20),), lambda xs: sorted(set(xs))),
    ("running_sum", "def {f}(xs):\n    out, t = [], 0\n    for x in xs:\n        t += x\n"
     "        out.append(t)\n    return out\n",
     lambda r: (_ints(r, 10, 100),), lambda xs: [sum(xs[: i + 1]) for i in range(len(xs))]),
    ("max_subarray", "def {f}(xs):\n    best = cur = xs[0]\n    for x in xs[1:]:\n        cur = max(x, cur + x)\n"
     "        best = max(best, cur)\n    return best\n",
     lambda r: (_ints(r, 12, 50, nonempty=True),),
     lambda xs: max(sum(xs[i:j]) for i in range(len(xs)) for j in range(i + 1, len(xs) + 1))),
    ("min_max", "def {f}(xs):\n    return (min(xs), max(xs))\n",
     lambda r: (_ints(r, 8, 1000, nonempty=True),), lambda xs: (min(xs), max(xs))),
    ("word_count", "def {f}(text):\n    counts = {{}}\n    for w in text.split():\n"
     "        counts[w] = counts.get(w, 0) + 1\n    return counts\n",
     lambda r: (" ".join(r.choice(["a", "b", "cat", "dog", "x"]) for _ in range(r.randint(0, 10))),),
     lambda text: {w: text.split().count(w) for w in text.split()}),
    ("flatten", "def {f}(xs):\n    out = []\n    for x in xs:\n        if isinstance(x, list):\n"
     "            out.extend({f}(x))\n        else:\n            out.append(x)\n    return out\n",
     lambda r: ([r.randint(0, 9), [r.randint(0, 9), [r.randint(0, 9)]], r.randint(0, 9)],),
     lambda xs: _flatten(xs)),
    ("mean", "def {f}(xs):\n    return sum(xs) / len(xs)\n",
     lambda r: (_ints(r, 6, 100, nonempty=True),), lambda xs: sum(xs) / len(xs)),
]

# (solution program, input generator, reference implementation: input text -> output text)
IO_TEMPLATES = [
    ("import sys\nprint(sum(int(x) for x in sys.stdin.read().split()))\n",
     lambda r: " ".join(str(r.randint(-100, 100)) for _ in range(r.randint(1, 10))) + "\n",
     lambda text: f"{sum(int(x) for x in text.split())}\n"),
    ("import sys\nfor line in reversed(sys.stdin.read().splitlines()):\n    print(line)\n",
     lambda r: "".join(_word(r, 8) + "\n" for _ in range(r.randint(1, 5))),
     lambda text: "".join(line + "\n" for line in reversed(text.splitlines()))),
    ("n = int(input())\nfor i in range(1, n + 1):\n    print(' '.join(str(i * j) for j in range(1, n + 1)))\n",
     lambda r: f"{r.randint(1, 9)}\n",
     lambda text: "".join(" ".join(str(i * j) for j in range(1, int(text) + 1)) + "\n"
                          for i in range(1, int(text) + 1))),
    ("input()\nxs = sorted(map(int, input().split()))\nprint(*xs)\n",
     lambda r: (lambda xs: f"{len(xs)}\n{' '.join(map(str, xs))}\n")(_ints(r, 10, 50, nonempty=True)),
     lambda text: " ".join(map(str, sorted(map(int, text.splitlines()[1].split())))) + "\n"),
    ("print(len(input().split()))\n",
     lambda r: " ".join(_word(r, 5) for _ in range(r.randint(0, 12))) + "\n",
     lambda text: f"{len(text.split())}\n"),
]


def _word(r: random.Random, n: int) -> str:
    return "".join(r.choice(string.ascii_letters) for _ in range(r.randint(1, n)))


def _ints(r: random.Random, n: int, bound: int, nonempty: bool = False) -> list[int]:
    return [r.randint(-bound, bound) for _ in range(r.randint(1 if nonempty else 0, n))]


def _maybe_palindrome(r: random.Random) -> str:
    half = _word(r, 6)
    return half + half[::-1] if r.random() < 0.5 else half + _word(r, 3)


def _flatten(xs: list) -> list:
    return [y for x in xs for y in (_flatten(x) if isinstance(x, list) else [x])]


def _fib(n: int) -> int:
    a, b = 0, 1
    for _ in range(n):
        a, b = b, a + b
    return a


def fenced(program: str, r: random.Random) -> str:
    intro = r.choice(["Here is a solution.", "The function below does it in one pass.", "Solution:"])
    return f"{intro}\n\n```python\n{program}```\n"


def assert_task(i: int, k: int, r: random.Random) -> tuple[str, dict]:
    stem, body, gen, ref = ASSERT_TEMPLATES[i % len(ASSERT_TEMPLATES)]
    name = f"{stem}_{i}"
    ref = ref or _fib
    tests = []
    for _ in range(k):
        args = gen(r)
        tests.append(f"assert {name}({', '.join(map(repr, args))}) == {ref(*args)!r}")
    return fenced(body.format(f=name), r), {"language": "python", "tests": tests}


def io_task(i: int, k: int, r: random.Random) -> tuple[str, dict]:
    program, gen, ref = IO_TEMPLATES[i % len(IO_TEMPLATES)]
    cases = []
    for _ in range(k):
        text = gen(r)
        cases.append({"input": text, "output": ref(text)})
    return fenced(program, r), {"language": "python", "io": cases}


def percentile(values, q):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def check(verdicts, tasks) -> list[str]:
    bad = []
    for (kind, response, reference), v in zip(tasks, verdicts):
        if v.status != "correct":
            status = getattr(v.status, "value", v.status)
            bad.append(f"  {kind}: {status} {v.reason} {str(v.details)[:300]}\n    reference: {str(reference)[:200]}")
    return bad


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=200, help="assert-style tasks")
    parser.add_argument("--tests-per-task", type=int, default=5, help="tests per task (io cases per io task)")
    parser.add_argument("--io-tasks", type=int, default=10, help="stdin/stdout tasks")
    parser.add_argument("--workers", type=int, default=None,
                        help="threads scoring the batch (default: score_batch on the runner's own pool)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.tasks < 0 or args.io_tasks < 0 or args.tasks + args.io_tasks == 0 or args.tests_per_task < 1:
        parser.error("need --tasks + --io-tasks >= 1 and --tests-per-task >= 1")

    import concurrent.futures

    from rlvr.verifiers import RewardRunner, ScoreRequest, score_batch, set_default_runner, verify
    from rlvr.verifiers.code import isolation_level

    runner = RewardRunner()
    set_default_runner(runner)
    threads = args.workers or max(2, os.cpu_count() or 2)

    r = random.Random(args.seed)
    k = args.tests_per_task
    tasks = [("tests", *assert_task(i, k, r)) for i in range(args.tasks)]
    tasks += [("io", *io_task(i, k, r)) for i in range(args.io_tasks)]
    n_tests = {"tests": args.tasks * k, "io": args.io_tasks * k}

    t0 = time.perf_counter()
    level = isolation_level()
    probe_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    warm = verify("code", *assert_task(10**6, 1, random.Random(1)))  # first call: imports, thread pool
    first_s = time.perf_counter() - t0
    print(f"isolation: {level} (probe {probe_s * 1000:.0f} ms; sandbox details: {warm.details.get('isolation')}, "
          f"separate uid: {warm.details.get('separate_uid')})   cpus: {os.cpu_count()}")
    print(f"tasks: {args.tasks} assert-style + {args.io_tasks} stdin/stdout, {k} tests each "
          f"({n_tests['tests']} assert tests, {n_tests['io']} io cases); first call {first_s * 1000:.0f} ms")

    # 1. one task at a time
    per_test = {"tests": [], "io": []}
    per_task = {"tests": [], "io": []}
    sequential = []
    start = time.perf_counter()
    for kind, response, reference in tasks:
        t = time.perf_counter()
        v = verify("code", response, reference)
        dt = time.perf_counter() - t
        sequential.append(v)
        per_task[kind].append(dt)
        per_test[kind].append(dt / k)
    sequential_s = time.perf_counter() - start
    print(f"one at a time (verify): {len(tasks)} tasks in {sequential_s:.2f} s")
    for kind, label in (("tests", "assert test"), ("io", "io test")):
        if per_test[kind]:
            ms = [x * 1000 for x in per_test[kind]]
            task_ms = [x * 1000 for x in per_task[kind]]
            print(f"  per {label:11s} median {statistics.median(ms):7.2f} ms  p90 {percentile(ms, 0.9):7.2f} ms"
                  f"   (per task median {statistics.median(task_ms):7.2f} ms, p90 {percentile(task_ms, 0.9):7.2f} ms)")

    # 2. one batch: score_batch runs "threads" verifiers on the runner's pool; --workers uses a pool of that size
    start = time.perf_counter()
    if args.workers is None:
        batch = score_batch([ScoreRequest("code", response, reference) for _, response, reference in tasks])
        how = f"score_batch, {threads} threads"
    else:
        with concurrent.futures.ThreadPoolExecutor(args.workers) as pool:
            batch = list(pool.map(lambda task: verify("code", task[1], task[2]), tasks))
        how = f"verify on {threads} threads"
    batch_s = time.perf_counter() - start
    total_tests = sum(n_tests.values())
    print(f"batch ({how}): {len(tasks)} tasks in {batch_s:.2f} s = "
          f"{len(tasks) / batch_s:.1f} tasks/s, {total_tests / batch_s:.1f} tests/s "
          f"(speed-up over one at a time: {sequential_s / batch_s:.2f}x)")

    # 3. every verdict must be correct
    levels = sorted({str(v.details.get("isolation")) for v in sequential + batch})
    print(f"isolation in verdicts: {', '.join(levels)}")
    bad = check(sequential, tasks) + check(batch, tasks)
    runner.close()
    if bad or warm.status != "correct":
        print(f"FAILED: {len(bad) + (warm.status != 'correct')} verdicts are not 'correct':", file=sys.stderr)
        for line in bad[:20]:
            print(line, file=sys.stderr)
        sys.exit(1)
    print(f"all {2 * len(tasks)} verdicts correct")


if __name__ == "__main__":
    main()
