"""Audit of the "reasoning_gym" verifier: how each wrapped scorer treats answers that do not commit to the
right answer (junk, the gold answer hedged with others, a list of every small integer, the question echoed,
the gold answer padded), next to answers that state it in another form.

    rlvr data audit-rg --size 20 --out audit.json          # every generator; or --names chain_sum,gcd

A scorer "can be gamed" when some non-committal answer scores on average at least ``GAMED_AT``, and "leaks"
when one scores above 0 at all. docs/data.md lists the findings.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from typing import Any

GAMED_AT = 0.5

# answers that should score 0: each is built from the entry and its gold answer
NON_COMMITTAL: dict[str, Callable[[dict, str], str]] = {
    "empty": lambda entry, gold: "",
    "junk": lambda entry, gold: "banana",
    "hedge": lambda entry, gold: f"{gold} or 0 or 1 or yes or no",
    "all_small_ints": lambda entry, gold: " ".join(str(i) for i in range(-100, 101)),
    "question_echo": lambda entry, gold: str(entry.get("question", "")),
    "gold_padded": lambda entry, gold: f"{gold} " + "filler " * 200,
}
# answers that state the gold answer in another form: a fair scorer gives them full credit
RESTATED: dict[str, Callable[[dict, str], str]] = {
    "gold": lambda entry, gold: gold,
    "gold_sentence": lambda entry, gold: f"The answer is {gold}.",
    "gold_upper": lambda entry, gold: gold.upper(),
}


class _Timeout(Exception):
    pass


def _alarm(signum, frame):
    raise _Timeout()


def audit_dataset(name: str, size: int = 20, seed: int = 0, time_limit_s: int = 120) -> dict[str, Any]:
    """Mean score per probe answer over ``size`` generated entries of dataset ``name``."""
    import reasoning_gym

    from rlvr.verifiers.reasoning_gym import reasoning_gym_verifier

    started = time.perf_counter()
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(time_limit_s)
    try:
        dataset = reasoning_gym.create_dataset(name, size=size, seed=seed)
        sums = {probe: 0.0 for probe in (*NON_COMMITTAL, *RESTATED)}
        maxes = dict.fromkeys(sums, 0.0)
        entries = 0
        for entry in dataset:
            gold = "" if entry.get("answer") is None else str(entry["answer"])
            reference = {"dataset": name, "entry": entry}
            for probe, make in (*NON_COMMITTAL.items(), *RESTATED.items()):
                score = reasoning_gym_verifier(f"<answer>{make(entry, gold)}</answer>", reference).score
                sums[probe] += score
                maxes[probe] = max(maxes[probe], score)
            entries += 1
    except _Timeout:
        return {"dataset": name, "error": f"over {time_limit_s}s"}
    except Exception as exc:  # a generator that cannot run here (missing data, bad defaults) is reported
        return {"dataset": name, "error": repr(exc)[:200]}
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    means = {probe: total / entries for probe, total in sums.items()}
    gamed = sorted(p for p in NON_COMMITTAL if means[p] >= GAMED_AT)
    leaks = sorted(p for p in NON_COMMITTAL if maxes[p] > 0 and p not in gamed)
    return {"dataset": name, "entries": entries, "mean": means, "max": maxes, "gamed_by": gamed, "leaks": leaks,
            "seconds": round(time.perf_counter() - started, 2)}


def audit(names: list[str] | None = None, size: int = 20, seed: int = 0,
          progress: Callable[[dict], None] | None = None) -> list[dict[str, Any]]:
    """``audit_dataset`` for each name (all of reasoning-gym's datasets when None)."""
    from reasoning_gym.factory import DATASETS

    rows = []
    for name in names or sorted(DATASETS):
        row = audit_dataset(name, size=size, seed=seed)
        rows.append(row)
        if progress:
            progress(row)
    return rows


def format_audit(rows: list[dict[str, Any]]) -> str:
    """One line per dataset: gamed or leaking probes, and how restated gold answers fare."""
    lines = []
    for row in rows:
        if "error" in row:
            lines.append(f"{row['dataset']}: not audited ({row['error']})")
            continue
        verdict = ("GAMED by " + ", ".join(row["gamed_by"])) if row["gamed_by"] else "not gamed"
        if row["leaks"]:
            verdict += "; credit leaks to " + ", ".join(row["leaks"])
        restated = ", ".join(f"{p} {row['mean'][p]:.2f}" for p in RESTATED)
        lines.append(f"{row['dataset']}: {verdict} (restated gold: {restated})")
    return "\n".join(lines)
