"""`rlvr eval`: evaluate a model folder (or, during training, the run's engine) on tasks and write the summary
and per-task rows."""

from __future__ import annotations

import random
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rlvr.eval.sampling import sample_tasks
from rlvr.eval.summary import check_ks, evaluate_results, write_summary
from rlvr.jsonl import write_jsonl
from rlvr.rollout import RolloutEngine, build_engine
from rlvr.rollout.episodes import PromptPolicy, Scoring
from rlvr.errors import UserError


def evaluate_tasks(engine: RolloutEngine, tokenizer, tasks: list, scoring: Scoring, *, samples: int, ks: Sequence[int],
                   temperature: float, max_new_tokens: int, seed: int = 0, out: str | Path | None = None,
                   tasks_out: str | Path | None = None, extra: dict[str, Any] | None = None,
                   on_chunk=None, prompts: PromptPolicy | None = None) -> dict[str, Any]:
    """Sample and score ``samples`` responses per task with ``engine``; the summary (plus ``extra``), written to
    ``out`` with the per-task rows beside it (or to ``tasks_out``) when given."""
    results = sample_tasks(engine, tokenizer, tasks, scoring, samples=samples, temperature=temperature,
                           max_new_tokens=max_new_tokens, on_chunk=on_chunk, prompts=prompts)
    verdicts = [v for r in results for v in r.verdicts]
    if verdicts and all(v.status.value in ("undecidable", "error") for v in verdicts):
        reasons = sorted({v.reason for v in verdicts})[:3]
        warnings.warn(f"every one of the {len(verdicts)} verdicts of verifier {scoring.verifier!r} was undecidable or an "
                      f"error ({', '.join(reasons)}): the responses may not be in the form this verifier reads; "
                      "check --verifier", stacklevel=2)
    summary, rows = evaluate_results(results, ks, verifier=scoring.verifier, seed=seed,
                                     verifier_options=scoring.verifier_options)
    summary.update(extra or {})
    if out:
        return write_summary(out, summary, rows, tasks_out)
    if tasks_out:
        write_jsonl(tasks_out, rows)
        summary["tasks_file"] = str(tasks_out)
    return summary


def run_config_of(model_path: str | Path) -> Path | None:
    """The config.yaml of the training run a checkpoint belongs to (RUN_DIR/checkpoint-N -> RUN_DIR/config.yaml)."""
    folder = Path(model_path)
    for candidate in (folder / "config.yaml", folder.parent / "config.yaml"):
        if candidate.is_file() and candidate.parent != Path.cwd():
            return candidate
    return None


def verifier_for(model_path: str | Path, verifier: str | None) -> tuple[str, dict, str]:
    """(verifier, options, where it came from): the one given, else the model's run config's data.verifier and
    data.verifier_options (its plugins imported), else "exact"."""
    if verifier is not None:
        return verifier, {}, "--verifier"
    config = run_config_of(model_path)
    if config is not None:
        from rlvr.config import load_config

        cfg = load_config(config)
        return cfg.data.verifier, dict(cfg.data.verifier_options), str(config)
    return "exact", {}, "default"


def evaluate_model(
    model_path: str,
    data: str,
    *,
    verifier: str | None = None,
    samples: int = 1,
    ks: Sequence[int] = (1,),
    temperature: float | None = None,
    max_new_tokens: int = 256,
    seed: int = 0,
    out: str | None = None,
    tasks_out: str | None = None,
    limit: int = 0,
    progress: bool = False,
    engine: str = "hf",
    engine_options: dict | None = None,
) -> dict[str, Any]:
    """Sample ``samples`` responses per task from the model folder with the engine named ``engine`` (a
    registered rollout engine), score them, write the summary to ``out`` and the per-task rows to ``tasks_out``
    (default: beside ``out`` as ``<name>.tasks.jsonl``)."""
    import torch

    from rlvr.models import load_model
    from rlvr.progress import progress_bar
    from rlvr.rollout import engine_names
    from rlvr.tasks import load_tasks
    from rlvr.verifiers import get_verifier

    if samples < 1:
        raise UserError(f"--samples must be >= 1, got {samples}")
    ks = check_ks(ks, samples)
    verifier, options, verifier_source = verifier_for(model_path, verifier)
    get_verifier(verifier)  # an unknown name fails before the model loads
    if engine not in engine_names():
        raise UserError(f"--engine: unknown rollout engine {engine!r}; known: {', '.join(engine_names())}")
    tasks = load_tasks(data)
    if limit:
        tasks = tasks[:limit]
    model, tokenizer = load_model(model_path)
    random.seed(seed)
    torch.manual_seed(seed)
    if temperature is None:
        temperature = 0.0 if samples == 1 else 1.0
    built = build_engine(engine, model, tokenizer, **(engine_options or {}))
    with progress_bar(len(tasks), "eval", enabled=progress) as bar:
        return evaluate_tasks(
            built, tokenizer, tasks, Scoring(verifier, options), samples=samples, ks=ks, temperature=temperature,
            max_new_tokens=max_new_tokens, seed=seed, out=out, tasks_out=tasks_out,
            extra={"temperature": temperature, "model": str(model_path), "data": data, "seed": seed,
                   "max_new_tokens": max_new_tokens, "engine": engine, "verifier": verifier,
                   "verifier_source": verifier_source},
            on_chunk=lambda n: [bar.advance() for _ in range(n)],
        )
