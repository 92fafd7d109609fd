"""The paired comparison of two evaluations on the same tasks: the pass@k-vs-k curve of both models, and for
every k the difference b - a with a paired bootstrap interval (tasks resampled together for both models)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rlvr.eval.intervals import bootstrap_ci, paired_bootstrap_ci
from rlvr.eval.passk import pass_at_k
from rlvr.eval.summary import check_ks
from rlvr.errors import UserError

def read_task_rows(path: str | Path) -> list[dict[str, Any]]:
    """The per-task rows of an `rlvr eval` run (its .tasks.jsonl); a summary JSON given instead is refused with
    the path of its tasks file."""
    from rlvr.tasks.jsonl import read_rows

    path = Path(path)
    if path.suffix == ".json" and path.is_file():
        try:
            summary = json.loads(path.read_text())
        except json.JSONDecodeError:
            summary = None
        if isinstance(summary, dict):
            hint = f" (its per-task file is {summary['tasks_file']})" if summary.get("tasks_file") else ""
            raise UserError(f"{path}: this is an evaluation summary; compare needs the per-task .tasks.jsonl "
                             f"files that `rlvr eval --out` writes beside it{hint}")
    return read_rows(path, required=("task_id", "n", "correct"))


def verifiers_of(rows: list[dict[str, Any]]) -> set[str]:
    return {str(row["verifier"]) for row in rows if row.get("verifier")}


def compare_rows(rows_a: list[dict[str, Any]], rows_b: list[dict[str, Any]], *, ks: Sequence[int] | None = None,
                 seed: int = 0, names: tuple[str, str] = ("a", "b")) -> dict[str, Any]:
    """Model b against model a on the tasks both were evaluated on: pass@k of each for every k up to the
    smaller sample count (powers of two, plus any requested), and b - a with a paired bootstrap interval."""
    by_id_b = {row["task_id"]: row for row in rows_b}
    common = [row["task_id"] for row in rows_a if row["task_id"] in by_id_b]
    if not common:
        raise UserError("the two evaluations share no task ids")
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
    """Compare two per-task files written by ``rlvr eval`` (a: the baseline, b: the model under test). Files scored
    by different verifiers are refused: their pass rates measure different things."""
    rows_a, rows_b = read_task_rows(tasks_a), read_task_rows(tasks_b)
    va, vb = verifiers_of(rows_a), verifiers_of(rows_b)
    if va and vb and va != vb:
        raise UserError(f"{tasks_a} was scored with verifier {', '.join(sorted(va))} and {tasks_b} with "
                         f"{', '.join(sorted(vb))}: evaluate both with the same --verifier before comparing")
    result = compare_rows(rows_a, rows_b, ks=ks, seed=seed)
    a, b = models or (str(tasks_a), str(tasks_b))
    result["models"] = {"a": a, "b": b}
    if out:
        out = Path(out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result, indent=2) + "\n")
    return result
