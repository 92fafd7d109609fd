"""``rlvr data stats``: what a data source holds before a run trains on it.

    rlvr data stats gsm8k:train.parquet --eval gsm8k:test.parquet --tokenizer MODEL

Reports rows; fields and how many rows fill each; prompt and reference length percentiles (characters, and
tokens with a tokenizer); verifier coverage (rows per verifier, whether it is registered, and whether the
verifier accepts the row's own reference, or its ``completion``, as a response); duplicate prompts (and
prompts repeated with a different reference); prompts shared with the eval data.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from typing import Any

from rlvr.tasks.base import Prompt, Task

PERCENTILES = (0, 50, 90, 99, 100)
# verifiers whose self-check would run programs or call models: not run by stats
NO_SELF_CHECK = frozenset({"code", "code.python", "judge", "rubric", "sql"})


def prompt_text(prompt: Prompt) -> str:
    if isinstance(prompt, str):
        return prompt
    return "\n".join(f"{m['role']}: {m['content']}" for m in prompt)


def normalized(prompt: Prompt) -> str:
    """The prompt's text with case and whitespace folded, for duplicate and overlap checks."""
    return " ".join(prompt_text(prompt).split()).casefold()


def reference_text(reference: Any) -> str:
    """The reference as text; for a reasoning-gym entry, its gold answer rather than the whole generated row."""
    if isinstance(reference, dict) and isinstance(reference.get("entry"), dict) and "dataset" in reference:
        return str(reference["entry"].get("answer"))
    return reference if isinstance(reference, str) else json.dumps(reference, sort_keys=True, default=str)


def percentiles(values: list[int]) -> dict[str, int]:
    """Nearest-rank percentiles."""
    ordered = sorted(values)
    out = {}
    for p in PERCENTILES:
        index = min(len(ordered) - 1, max(0, -(-p * len(ordered) // 100) - 1))
        out[f"p{p}"] = ordered[index]
    return out


def _lengths(texts: list[str], tokenizer) -> dict[str, dict[str, int]]:
    out = {"chars": percentiles([len(t) for t in texts])}
    if tokenizer is not None:
        out["tokens"] = percentiles([len(tokenizer(t, add_special_tokens=False)["input_ids"]) for t in texts])
    return out


def _coverage(tasks: list[Task], default_verifier: str, self_check: int, seed: int) -> dict[str, Any]:
    from rlvr.verifiers import ScoreRequest, UnknownVerifierError, get_verifier
    from rlvr.verifiers.row_options import score_rows, task_problem

    by_name = Counter(task.verifier or default_verifier for task in tasks)
    out: dict[str, Any] = {}
    rng = random.Random(seed)
    for name, rows in sorted(by_name.items()):
        try:
            get_verifier(name)
            registered = True
        except UnknownVerifierError:
            registered = False
        entry: dict[str, Any] = {"rows": rows, "registered": registered}
        if registered and self_check and name not in NO_SELF_CHECK:
            mine = [t for t in tasks if (t.verifier or default_verifier) == name]
            sample = rng.sample(mine, min(self_check, len(mine)))
            requests = [(i, ScoreRequest(name, response, t.reference, dict(t.verifier_options)),
                         task_problem(t.verifier_options, t.reference))
                        for i, t in enumerate(sample) for response in _correct_responses(t, name)]
            verdicts = score_rows([r for _, r, _ in requests], [p for _, _, p in requests])
            passed = len({i for (i, _, _), v in zip(requests, verdicts) if v.score >= 1.0})
            entry["reference_passes"] = {"checked": len(sample), "passed": passed}
        out[name] = entry
    return out


def _correct_responses(task: Task, verifier: str) -> list[str]:
    """What a correct response would say: the row's completion when it has one; else its worked solution (a chain
    task's verifier reads the answer after the solution's last ``#``) and its reference (boxed for "math", whose
    extraction reads a bare LaTeX answer by its last number). The self-check passes when any of them is accepted."""
    completion = task.meta.get("completion")
    if isinstance(completion, str):
        return [completion]
    text = reference_text(task.reference)
    solution = task.meta.get("solution")
    return ([solution] if isinstance(solution, str) and solution.strip() else []) + \
        [f"\\boxed{{{text}}}" if verifier == "math" else text]


def data_stats(
    tasks: list[Task],
    *,
    eval_tasks: list[Task] | None = None,
    default_verifier: str = "exact",
    tokenizer=None,
    self_check: int = 200,
    seed: int = 0,
    examples: int = 5,
) -> dict[str, Any]:
    """The statistics described in the module docstring, as a JSON-ready dict."""
    fields = Counter(key for task in tasks for key, value in task.meta.items() if value not in (None, ""))
    groups: dict[str, list[Task]] = {}
    for task in tasks:
        groups.setdefault(normalized(task.prompt), []).append(task)
    repeated = [group for group in groups.values() if len(group) > 1]
    conflicting = [g for g in repeated if len({reference_text(t.reference) for t in g}) > 1]
    out: dict[str, Any] = {
        "rows": len(tasks),
        "fields": {"prompt": len(tasks), "reference": len(tasks), **dict(sorted(fields.items()))},
        "sources": dict(sorted(Counter(str(t.meta.get("source", "data")) for t in tasks).items())),
        "prompt_length": _lengths([prompt_text(t.prompt) for t in tasks], tokenizer),
        "reference_length": _lengths([reference_text(t.reference) for t in tasks], tokenizer),
        "verifiers": _coverage(tasks, default_verifier, self_check, seed),
        "duplicates": {
            "rows_with_a_repeated_prompt": sum(len(g) for g in repeated),
            "distinct_repeated_prompts": len(repeated),
            "with_different_references": len(conflicting),
            "examples": [[t.id for t in g] for g in repeated[:examples]],
        },
    }
    if eval_tasks is not None:
        eval_prompts = {normalized(t.prompt) for t in eval_tasks}
        shared = [t for t in tasks if normalized(t.prompt) in eval_prompts]
        out["eval_overlap"] = {"eval_rows": len(eval_tasks), "train_rows_in_eval": len(shared),
                               "distinct_shared_prompts": len({normalized(t.prompt) for t in shared}),
                               "examples": [t.id for t in shared[:examples]]}
    return out


def format_stats(stats: dict[str, Any]) -> str:
    """A short human-readable report of ``data_stats``."""
    lines = [f"rows: {stats['rows']}", "sources: " + ", ".join(f"{k} {v}" for k, v in stats["sources"].items()),
             "fields (rows filled): " + ", ".join(f"{k} {v}" for k, v in stats["fields"].items())]
    for what in ("prompt_length", "reference_length"):
        for unit, p in stats[what].items():
            lines.append(f"{what.replace('_', ' ')} ({unit}): " + " ".join(f"{k}={v}" for k, v in p.items()))
    for name, entry in stats["verifiers"].items():
        line = f"verifier {name}: {entry['rows']} rows, {'registered' if entry['registered'] else 'NOT REGISTERED'}"
        if "reference_passes" in entry:
            check = entry["reference_passes"]
            line += f", reference accepted as a response in {check['passed']}/{check['checked']} sampled rows"
        lines.append(line)
    dup = stats["duplicates"]
    lines.append(f"duplicates: {dup['rows_with_a_repeated_prompt']} rows share {dup['distinct_repeated_prompts']} "
                 f"prompts ({dup['with_different_references']} with different references)")
    if "eval_overlap" in stats:
        ov = stats["eval_overlap"]
        lines.append(f"eval overlap: {ov['train_rows_in_eval']} train rows ({ov['distinct_shared_prompts']} prompts) "
                     f"also in the {ov['eval_rows']} eval rows")
    return "\n".join(lines)
