"""`rlvr eval`: pass@k of a model folder on a task file, each with a 95% bootstrap interval over tasks."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import torch

from rlvr.eval.passk import pass_at_k
from rlvr.eval.runner import sample_and_score
from rlvr.models import load_model
from rlvr.tasks import load_tasks


def bootstrap_ci(values: list[float], *, resamples: int = 1000, seed: int = 0) -> tuple[float, float]:
    """Percentile 95% interval of the mean of ``values`` under resampling of tasks with replacement."""
    if len(values) < 2:
        v = values[0] if values else 0.0
        return v, v
    rng = random.Random(seed)
    n = len(values)
    means = sorted(sum(values[rng.randrange(n)] for _ in range(n)) / n for _ in range(resamples))
    return means[int(0.025 * resamples)], means[min(int(0.975 * resamples), resamples - 1)]


def evaluate_model(
    model_path: str,
    data: str,
    *,
    verifier: str = "exact",
    samples: int = 1,
    ks: list[int] = (1,),
    temperature: float | None = None,
    max_new_tokens: int = 256,
    seed: int = 0,
    out: str | None = None,
) -> dict[str, Any]:
    bad = [k for k in ks if not 1 <= k <= samples]
    if bad:
        raise ValueError(f"--k {','.join(map(str, bad))}: each k must be between 1 and --samples ({samples})")
    tasks = load_tasks(data)
    model, tokenizer = load_model(model_path)
    torch.manual_seed(seed)
    if temperature is None:
        temperature = 0.0 if samples == 1 else 1.0
    results = sample_and_score(
        model, tokenizer, tasks, verifier=verifier, samples=samples, temperature=temperature, max_new_tokens=max_new_tokens
    )
    summary: dict[str, Any] = {}
    for k in ks:
        per_task = [pass_at_k(len(r.verdicts), r.n_correct, k) for r in results]
        low, high = bootstrap_ci(per_task, seed=seed)
        summary[f"pass@{k}"] = {"value": sum(per_task) / len(per_task), "ci95": [low, high]}
    summary["n_tasks"] = len(results)
    summary["samples_per_task"] = samples
    summary["temperature"] = temperature
    if out:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(json.dumps(summary, indent=2) + "\n")
    return summary
