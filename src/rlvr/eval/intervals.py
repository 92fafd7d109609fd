"""95% bootstrap intervals over tasks, plain and paired (Efron & Tibshirani, 1993, "An Introduction to the
Bootstrap", Ch. 13: percentile intervals)."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

RESAMPLES = 1000


def bootstrap_ci(values: Sequence[float], *, resamples: int = RESAMPLES, seed: int = 0) -> tuple[float, float]:
    """Percentile 95% interval of the mean of ``values`` under resampling of tasks with replacement."""
    return paired_bootstrap_ci(values, [0.0] * len(values), resamples=resamples, seed=seed)


def paired_bootstrap_ci(a: Sequence[float], b: Sequence[float], *, resamples: int = RESAMPLES,
                        seed: int = 0) -> tuple[float, float]:
    """95% percentile interval of mean(a - b) when tasks are resampled with replacement (each resample
    draws the same tasks for both sides, so task difficulty cancels)."""
    if len(a) != len(b):
        raise ValueError(f"paired bootstrap needs the same tasks on both sides, got {len(a)} and {len(b)}")
    diffs = [x - y for x, y in zip(a, b)]
    if len(diffs) < 2:
        v = diffs[0] if diffs else 0.0
        return v, v
    rng = random.Random(seed)
    n = len(diffs)
    means = sorted(sum(diffs[rng.randrange(n)] for _ in range(n)) / n for _ in range(resamples))
    return means[int(0.025 * resamples)], means[min(int(0.975 * resamples), resamples - 1)]


def stat(values: Sequence[float], seed: int) -> dict[str, Any]:
    low, high = bootstrap_ci(values, seed=seed)
    return {"value": sum(values) / len(values) if values else 0.0, "ci95": [low, high]}
