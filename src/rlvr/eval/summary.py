"""Per-task rows and the summary of an evaluation: pass@k, maj@k, mean reward and response length, each with a
95% bootstrap interval over tasks (docs/api.md, "Evaluation")::

    {"pass@1": {"value": 0.52, "ci95": [0.48, 0.56]}, "pass@4": {...}, "maj@4": {...},
     "reward_mean": {...}, "response_length": {...}, "n_tasks": 500, "samples_per_task": 4, ...}

Verdicts that carry a stated confidence (the ``calibrated`` verifier) add, per sample, ``confidence`` and ``correct``,
and to the summary ``ece``, ``brier``, ``auroc`` (with intervals), ``ece_bins``, ``calibration_n`` and
``confidence_stated`` (rlvr.eval.calibration); other summaries have none of these keys.

Tasks run in an environment add, per task and in the summary: "turns" (assistant turns per episode), "tool_calls"
(per episode) and "tool_error_rate" (failed calls over calls; 0 for a task without calls).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rlvr.eval.calibration import summary_entries as calibration_entries, verdict_confidence
from rlvr.eval.intervals import stat as _stat
from rlvr.eval.majority import equivalence_for, task_majority
from rlvr.eval.passk import pass_at_k
from rlvr.eval.sampling import TaskResult
from rlvr.jsonl import write_jsonl
from rlvr.errors import UserError

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
            "verifier": name,
            "n": n,
            "correct": r.n_correct,
            **{f"pass@{k}": pass_at_k(n, r.n_correct, k) for k in ks},
            **{f"maj@{k}": maj[k] for k in ks},
            "reward_mean": sum(v.score for v in r.verdicts) / n,
            "response_length": sum(r.lengths) / n if r.lengths else 0.0,
            **(episode_stats(r.episodes) if r.episodes is not None else {}),
            "samples": [
                {"response": text, "score": v.score, "status": v.status.value, "reason": v.reason,
                 "extracted": v.extracted, "length": length, **_stated_confidence(v),
                 **({"transcript": talk} if talk is not None else {})}
                for text, v, length, talk in zip(r.responses, r.verdicts, r.lengths or [0] * n,
                                                 r.transcripts or [None] * n)
            ],
        })
    return rows


def _stated_confidence(verdict) -> dict[str, Any]:
    pair = verdict_confidence(verdict)
    return {"confidence": pair[0], "correct": pair[1]} if pair is not None else {}


_UNDECIDED = ("timeout", "error", "undecidable")


def calibration_of_rows(rows: list[dict[str, Any]], *, seed: int = 0) -> dict[str, Any]:
    """The calibration entries of the summary from the rows' samples ({} when none stated a confidence)."""
    pairs = [[(s["confidence"], s["correct"]) for s in row.get("samples", ()) if "confidence" in s] for row in rows]
    decided = sum(s.get("status") not in _UNDECIDED for row in rows for s in row.get("samples", ()))
    return calibration_entries(pairs, decided=decided, seed=seed)


def episode_stats(episodes: list[dict[str, int]]) -> dict[str, float]:
    """A task's agent metrics over its episodes: mean turns and tool calls, and the share of calls that failed."""
    n, calls = len(episodes), sum(e["tool_calls"] for e in episodes)
    return {"turns": sum(e["turns"] for e in episodes) / n, "tool_calls": calls / n,
            "tool_error_rate": sum(e["tool_errors"] for e in episodes) / calls if calls else 0.0}


AGENT_STATS = ("turns", "tool_calls", "tool_error_rate")


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
    for name in AGENT_STATS:
        if all(name in row for row in rows):
            summary[name] = _stat([row[name] for row in rows], seed)
    summary.update(calibration_of_rows(rows, seed=seed))
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
        raise UserError(f"--k {','.join(map(str, bad)) or '(none)'}: each k must be between 1 and --samples ({samples})")
    return ks


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
