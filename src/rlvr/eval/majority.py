"""maj@k: the chance that a majority vote over k sampled answers picks a correct one.

Answers are grouped by the verifier's own notion of equivalence (for "math", "1/2" and "0.5" are one
answer), so a vote is never split by spelling. For k < n the estimate averages the vote over random
k-subsets of the n samples (all of them when there are few); ties between the largest groups count as
the fraction of tied groups that are correct, the expectation of a fair tie-break.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Callable, Sequence

from rlvr.eval.calibration import verdict_correct
from rlvr.verifiers import Verdict, verify

MAX_SUBSETS = 256


def equivalence_for(verifier: str, options: dict | None = None) -> Callable[[str, str], bool]:
    """``same(a, b)``: are two extracted answers equivalent under ``verifier``? ``a`` is scored as a response
    against ``b`` as the reference (for "math", ``a`` is boxed so that its whole text is the answer)."""
    options = dict(options or {})

    def same(a: str, b: str) -> bool:
        if a == b:
            return True
        response = f"\\boxed{{{a}}}" if verifier == "math" else a
        return verdict_correct(verify(verifier, response, b, **options))

    return same


def group_answers(answers: Sequence[str | None], same: Callable[[str, str], bool]) -> list[int]:
    """A group id per answer (None, an answer that could not be extracted, gets -1): each answer joins the
    first earlier group whose representative it is equivalent to."""
    representatives: list[str] = []
    ids: list[int] = []
    for answer in answers:
        if answer is None or not str(answer).strip():
            ids.append(-1)
            continue
        for g, rep in enumerate(representatives):
            if same(answer, rep):
                ids.append(g)
                break
        else:
            representatives.append(answer)
            ids.append(len(representatives) - 1)
    return ids


def _vote(groups: Sequence[int], correct: Sequence[bool], chosen: Sequence[int]) -> float:
    counts: dict[int, int] = {}
    for i in chosen:
        if groups[i] >= 0:
            counts[groups[i]] = counts.get(groups[i], 0) + 1
    if not counts:
        return 0.0
    top = max(counts.values())
    winners = [g for g, c in counts.items() if c == top]
    group_correct = {groups[i]: correct[i] for i in chosen if groups[i] >= 0}
    return sum(group_correct[g] for g in winners) / len(winners)


def majority_at_k(groups: Sequence[int], correct: Sequence[bool], k: int, *, seed: int = 0) -> float:
    """Expected correctness of a majority vote over k of the n answers (see the module docstring)."""
    n = len(groups)
    if not 1 <= k <= n:
        raise ValueError(f"maj@k needs 1 <= k <= n, got k={k}, n={n}")
    if math.comb(n, k) <= MAX_SUBSETS:
        subsets = list(itertools.combinations(range(n), k))
    else:
        rng = random.Random(seed)
        subsets = [rng.sample(range(n), k) for _ in range(MAX_SUBSETS)]
    return sum(_vote(groups, correct, s) for s in subsets) / len(subsets)


def task_majority(verdicts: Sequence[Verdict], ks: Sequence[int], same: Callable[[str, str], bool],
                  *, seed: int = 0) -> dict[int, float]:
    """maj@k for one task's sampled verdicts, for every k."""
    groups = group_answers([v.extracted for v in verdicts], same)
    correct = [verdict_correct(v) for v in verdicts]
    return {k: majority_at_k(groups, correct, k, seed=seed) for k in ks}


__all__ = ["equivalence_for", "group_answers", "majority_at_k", "task_majority"]
