"""Calibration of stated confidences: ECE, Brier score and AUROC from (confidence, correct) pairs.

A verdict carries a confidence when its verifier reads one (the ``calibrated`` verifier: details ``confidence`` and
``correct``); ``rlvr eval`` then adds these to its summary, each with a 95% bootstrap interval over tasks:

- ``ece``: expected calibration error with ``BINS`` = 10 equal-width bins over [0, 1] (bin b holds
  b/10 <= q < (b+1)/10, the last also q = 1): sum_b (n_b / n) |accuracy_b - mean confidence_b|
  (Naeini et al., 2015, "Obtaining Well Calibrated Probabilities Using Bayesian Binning", Sec. 3; Guo et al., 2017,
  "On Calibration of Modern Neural Networks", Eq. 3);
- ``brier``: mean (q - 1[correct])^2 (Brier, 1950);
- ``auroc``: the chance that a random correct answer states a higher confidence than a random wrong one, ties
  counting 1/2 (the Mann-Whitney U statistic over n_correct * n_wrong pairs); absent when all answers are right or all
  wrong.
Beside them: ``calibration_n`` (pairs used) and ``confidence_stated`` (share of decided samples that stated one).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from rlvr.eval.intervals import RESAMPLES
from rlvr.verifiers import Verdict

BINS = 10


def verdict_correct(verdict: Verdict) -> bool:
    """Was the answer right? A verdict whose reward is not its correctness (``details["correct"]``, a bool, as the
    ``calibrated`` verifier writes) says so itself; otherwise a score of 1 is correct."""
    flag = verdict.details.get("correct") if isinstance(verdict.details, dict) else None
    return flag if isinstance(flag, bool) else verdict.score >= 1.0


def verdict_confidence(verdict: Verdict) -> tuple[float, bool] | None:
    """(confidence, correct) when the verdict carries both, else None."""
    details = verdict.details if isinstance(verdict.details, dict) else {}
    q, correct = details.get("confidence"), details.get("correct")
    if isinstance(q, (int, float)) and not isinstance(q, bool) and 0.0 <= q <= 1.0 and isinstance(correct, bool):
        return float(q), correct
    return None


def _check(confidence: Sequence[float], correct: Sequence[bool]) -> None:
    if len(confidence) != len(correct):
        raise ValueError(f"need one correctness per confidence, got {len(confidence)} and {len(correct)}")
    if not confidence:
        raise ValueError("no (confidence, correct) pairs")
    bad = [q for q in confidence if not 0.0 <= q <= 1.0]
    if bad:
        raise ValueError(f"confidences must lie in [0, 1], got {bad[0]!r}")


def expected_calibration_error(confidence: Sequence[float], correct: Sequence[bool], bins: int = BINS) -> float:
    """ECE over ``bins`` equal-width bins of [0, 1] (module docstring)."""
    _check(confidence, correct)
    count, conf_sum, right = [0] * bins, [0.0] * bins, [0] * bins
    for q, c in zip(confidence, correct):
        b = min(int(q * bins), bins - 1)
        count[b] += 1
        conf_sum[b] += q
        right[b] += bool(c)
    n = len(confidence)
    return sum(abs(right[b] / count[b] - conf_sum[b] / count[b]) * count[b] / n for b in range(bins) if count[b])


def brier_score(confidence: Sequence[float], correct: Sequence[bool]) -> float:
    """Mean squared gap between the confidence and the outcome."""
    _check(confidence, correct)
    return sum((q - float(bool(c))) ** 2 for q, c in zip(confidence, correct)) / len(confidence)


def auroc(confidence: Sequence[float], correct: Sequence[bool]) -> float | None:
    """P(q of a random right answer > q of a random wrong one) + P(tie) / 2; None without both kinds."""
    _check(confidence, correct)
    n_pos = sum(bool(c) for c in correct)
    n_neg = len(correct) - n_pos
    if n_pos == 0 or n_neg == 0:
        return None
    # rank-sum form of the Mann-Whitney U statistic, ties given their average rank: O(n log n)
    order = sorted(range(len(confidence)), key=lambda i: confidence[i])
    rank_sum_pos, i = 0.0, 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and confidence[order[j + 1]] == confidence[order[i]]:
            j += 1
        mean_rank = (i + j) / 2 + 1
        rank_sum_pos += mean_rank * sum(bool(correct[order[k]]) for k in range(i, j + 1))
        i = j + 1
    return (rank_sum_pos - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)


METRICS = {"ece": expected_calibration_error, "brier": brier_score, "auroc": auroc}


def summary_entries(task_pairs: Sequence[Sequence[tuple[float, bool]]], *, decided: int, seed: int = 0,
                    resamples: int = RESAMPLES) -> dict[str, Any]:
    """The summary's calibration entries from each task's (confidence, correct) pairs; {} when no sample stated a
    confidence. ``decided``: the samples whose verifier decided (the denominator of ``confidence_stated``).
    Intervals: percentile bootstrap over tasks (tasks resampled with replacement, the metric recomputed on the
    pooled pairs of the drawn tasks; the metrics vectorised with numpy, checked against the functions above)."""
    pooled = [p for pairs in task_pairs for p in pairs]
    if not pooled:
        return {}
    with_pairs = [list(pairs) for pairs in task_pairs if pairs]
    conf = np.array([q for pairs in with_pairs for q, _ in pairs], dtype=np.float64)
    right = np.array([c for pairs in with_pairs for _, c in pairs], dtype=bool)
    sizes = np.array([len(pairs) for pairs in with_pairs])
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    rng = np.random.default_rng(seed)
    draws: dict[str, list[float]] = {name: [] for name in METRICS}
    for _ in range(resamples if len(with_pairs) > 1 else 0):
        tasks = rng.integers(0, len(with_pairs), len(with_pairs))
        rows = np.concatenate([np.arange(starts[t], starts[t] + sizes[t]) for t in tasks])
        for name, value in _vector_metrics(conf[rows], right[rows]).items():
            if value is not None:
                draws[name].append(value)
    out: dict[str, Any] = {}
    for name, fn in METRICS.items():
        value = fn(conf.tolist(), right.tolist())
        if value is None:
            continue
        d = sorted(draws[name])
        ci = [d[int(0.025 * len(d))], d[min(int(0.975 * len(d)), len(d) - 1)]] if d else [value, value]
        out[name] = {"value": value, "ci95": ci}
    out["ece_bins"] = BINS
    out["calibration_n"] = len(pooled)
    out["confidence_stated"] = len(pooled) / decided if decided else 0.0
    return out


def _vector_metrics(conf: np.ndarray, right: np.ndarray) -> dict[str, float | None]:
    """ECE, Brier and AUROC of arrays, as the functions above compute them (for the bootstrap's many resamples)."""
    y = right.astype(np.float64)
    b = np.minimum((conf * BINS).astype(np.int64), BINS - 1)
    count = np.bincount(b, minlength=BINS)
    gap = np.abs(np.bincount(b, y, BINS) - np.bincount(b, conf, BINS))  # per bin: n_b |acc_b - conf_b|
    out: dict[str, float | None] = {"ece": float(gap[count > 0].sum() / len(conf)),
                                    "brier": float(((conf - y) ** 2).mean())}
    n_pos = int(right.sum())
    n_neg = len(right) - n_pos
    if n_pos and n_neg:
        values, inverse, counts = np.unique(conf, return_inverse=True, return_counts=True)
        mean_rank = np.cumsum(counts) - (counts - 1) / 2  # 1-based average rank of each distinct value
        out["auroc"] = float((mean_rank[inverse][right].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))
    else:
        out["auroc"] = None
    return out
