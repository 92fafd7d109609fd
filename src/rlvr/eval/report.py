"""`rlvr eval`: pass@k, maj@k, mean reward and response length of a model on tasks, each with a 95% bootstrap
interval over tasks; per-task results as JSONL; and the paired comparison of two models on the same tasks.

Summary JSON (CONTRACTS.md C5)::

    {"pass@1": {"value": 0.52, "ci95": [0.48, 0.56]}, "pass@4": {...}, "maj@4": {...},
     "reward_mean": {...}, "response_length": {...}, "n_tasks": 500, "samples_per_task": 4, ...}

Comparison JSON (``compare_runs``): the pass@k-vs-k curve of both models, and for every k the difference
b - a with a paired bootstrap interval (tasks resampled together for both models, Efron & Tibshirani 1993).
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rlvr.eval.majority import equivalence_for, task_majority
from rlvr.eval.passk import pass_at_k
from rlvr.eval.runner import TaskResult, sample_and_score

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


def _stat(values: Sequence[float], seed: int) -> dict[str, Any]:
    low, high = bootstrap_ci(values, seed=seed)
    return {"value": sum(values) / len(values) if values else 0.0, "ci95": [low, high]}


def task_rows(results: list[TaskResult], ks: Sequence[int], *, verifier: str, seed: int = 0,
              verifier_options: dict | None = None) -> list[dict[str, Any]]:
    """One JSON-able row per task: its samples, verdicts and per-task pass@k / maj@k."""
    rows = []
    for r in results:
        n = len(r.verdicts)
        name = (r.task.verifier if r.task is not None and r.task.verifier else None) or verifier
        options = {**(verifier_options or {}), **(r.task.verifier_options if r.task is not None else {})}
        maj = task_majority(r.verdicts, ks, equivalence_for(name, options), seed=seed)
        rows.append({
            "task_id": r.task_id,
            "n": n,
            "correct": r.n_correct,
            **{f"pass@{k}": pass_at_k(n, r.n_correct, k) for k in ks},
            **{f"maj@{k}": maj[k] for k in ks},
            "reward_mean": sum(v.score for v in r.verdicts) / n,
            "response_length": sum(r.lengths) / n if r.lengths else 0.0,
            "samples": [
                {"response": text, "score": v.score, "status": v.status.value, "reason": v.reason,
                 "extracted": v.extracted, "length": length}
                for text, v, length in zip(r.responses, r.verdicts, r.lengths or [0] * n)
            ],
        })
    return rows


def summarize(rows: list[dict[str, Any]], ks: Sequence[int], *, seed: int = 0) -> dict[str, Any]:
    if not rows:
        raise ValueError("no tasks to summarize")
    summary: dict[str, Any] = {}
    for k in ks:
        summary[f"pass@{k}"] = _stat([row[f"pass@{k}"] for row in rows], seed)
    for k in ks:
        summary[f"maj@{k}"] = _stat([row[f"maj@{k}"] for row in rows], seed)
    summary["reward_mean"] = _stat([row["reward_mean"] for row in rows], seed)
    summary["response_length"] = _stat([row["response_length"] for row in rows], seed)
    summary["n_tasks"] = len(rows)
    summary["samples_per_task"] = rows[0]["n"]
    return summary


def evaluate_results(results: list[TaskResult], ks: Sequence[int], *, verifier: str, seed: int = 0,
                     verifier_options: dict | None = None) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    rows = task_rows(results, ks, verifier=verifier, seed=seed, verifier_options=verifier_options)
    return summarize(rows, ks, seed=seed), rows


def check_ks(ks: Sequence[int], samples: int) -> list[int]:
    ks = sorted(set(int(k) for k in ks))
    bad = [k for k in ks if not 1 <= k <= samples]
    if bad or not ks:
        raise ValueError(f"--k {','.join(map(str, bad)) or '(none)'}: each k must be between 1 and --samples ({samples})")
    return ks


def evaluate_model(
    model_path: str,
    data: str,
    *,
    verifier: str = "exact",
    samples: int = 1,
    ks: Sequence[int] = (1,),
    temperature: float | None = None,
    max_new_tokens: int = 256,
    seed: int = 0,
    out: str | None = None,
    tasks_out: str | None = None,
    limit: int = 0,
    progress: bool = False,
) -> dict[str, Any]:
    """Sample ``samples`` responses per task from the model folder, score them, write the summary to ``out``
    and the per-task rows to ``tasks_out`` (default: beside ``out`` as ``<name>.tasks.jsonl``)."""
    import torch

    from rlvr.models import load_model
    from rlvr.tasks import load_tasks
    from rlvr.train.progress import progress_bar
    from rlvr.verifiers import get_verifier

    if samples < 1:
        raise ValueError(f"--samples must be >= 1, got {samples}")
    ks = check_ks(ks, samples)
    get_verifier(verifier)  # an unknown name fails before the model loads
    tasks = load_tasks(data)
    if limit:
        tasks = tasks[:limit]
    model, tokenizer = load_model(model_path)
    random.seed(seed)
    torch.manual_seed(seed)
    if temperature is None:
        temperature = 0.0 if samples == 1 else 1.0
    with progress_bar(len(tasks), "eval", enabled=progress) as bar:
        results = sample_and_score(
            model, tokenizer, tasks, verifier=verifier, samples=samples, temperature=temperature,
            max_new_tokens=max_new_tokens, on_chunk=lambda n: [bar.advance() for _ in range(n)],
        )
    summary, rows = evaluate_results(results, ks, verifier=verifier, seed=seed)
    summary.update({"temperature": temperature, "model": str(model_path), "data": data, "seed": seed,
                    "max_new_tokens": max_new_tokens})
    if out:
        summary = write_summary(out, summary, rows, tasks_out)
    elif tasks_out:
        write_jsonl(tasks_out, rows)
        summary["tasks_file"] = str(tasks_out)
    return summary


def write_jsonl(path: str | Path, rows: list[dict[str, Any]]) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("".join(json.dumps(row) + "\n" for row in rows))
    tmp.replace(path)
    return path


def write_summary(out: str | Path, summary: dict[str, Any], rows: list[dict[str, Any]] | None = None,
                  tasks_out: str | Path | None = None) -> dict[str, Any]:
    """Write ``summary`` to ``out`` (and ``rows`` to the tasks file); returns the summary as written."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    if rows is not None:
        tasks_path = Path(tasks_out) if tasks_out else out.with_name(out.stem + ".tasks.jsonl")
        write_jsonl(tasks_path, rows)
        summary = {**summary, "tasks_file": str(tasks_path)}
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(json.dumps(summary, indent=2) + "\n")
    tmp.replace(out)
    return summary


# ------------------------------------------------------------------------------------------ comparison


def read_task_rows(path: str | Path) -> list[dict[str, Any]]:
    from rlvr.tasks.jsonl import read_rows

    return read_rows(path, required=("task_id", "n", "correct"))


def compare_rows(rows_a: list[dict[str, Any]], rows_b: list[dict[str, Any]], *, ks: Sequence[int] | None = None,
                 seed: int = 0, names: tuple[str, str] = ("a", "b")) -> dict[str, Any]:
    """Model b against model a on the tasks both were evaluated on: pass@k of each for every k up to the
    smaller sample count (powers of two, plus any requested), and b - a with a paired bootstrap interval."""
    by_id_b = {row["task_id"]: row for row in rows_b}
    common = [row["task_id"] for row in rows_a if row["task_id"] in by_id_b]
    if not common:
        raise ValueError("the two evaluations share no task ids")
    by_id_a = {row["task_id"]: row for row in rows_a}
    n_max = min(min(int(by_id_a[t]["n"]) for t in common), min(int(by_id_b[t]["n"]) for t in common))
    if ks is None:
        ks = sorted({2 ** i for i in range(n_max.bit_length()) if 2 ** i <= n_max} | {n_max})
    ks = check_ks(ks, n_max)
    curve: dict[str, dict[str, float]] = {names[0]: {}, names[1]: {}}
    ci95: dict[str, dict[str, list[float]]] = {names[0]: {}, names[1]: {}}
    difference: dict[str, Any] = {}
    for k in ks:
        per = {}
        for name, table in ((names[0], by_id_a), (names[1], by_id_b)):
            per[name] = [pass_at_k(int(table[t]["n"]), int(table[t]["correct"]), k) for t in common]
            curve[name][str(k)] = sum(per[name]) / len(common)
            ci95[name][str(k)] = list(bootstrap_ci(per[name], seed=seed))
        low, high = paired_bootstrap_ci(per[names[1]], per[names[0]], seed=seed)
        difference[f"pass@{k}"] = {"value": curve[names[1]][str(k)] - curve[names[0]][str(k)], "ci95": [low, high]}
    return {"ks": ks, "curve": curve, "ci95": ci95, "difference": difference, "n_tasks": len(common),
            "samples_per_task": n_max}


def compare_runs(tasks_a: str | Path, tasks_b: str | Path, *, ks: Sequence[int] | None = None, seed: int = 0,
                 out: str | Path | None = None, models: tuple[str, str] | None = None) -> dict[str, Any]:
    """Compare two per-task files written by ``rlvr eval`` (a: the baseline, b: the model under test)."""
    result = compare_rows(read_task_rows(tasks_a), read_task_rows(tasks_b), ks=ks, seed=seed)
    a, b = models or (str(tasks_a), str(tasks_b))
    result["models"] = {"a": a, "b": b}
    if out:
        out = Path(out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result, indent=2) + "\n")
    return result


__all__ = [
    "bootstrap_ci", "compare_rows", "compare_runs", "evaluate_model", "evaluate_results", "paired_bootstrap_ci",
    "summarize", "task_rows", "write_summary",
]
