"""`rlvr eval`: evaluate a model folder (or, during training, the run's engine) on tasks and write the summary
and per-task rows."""

from __future__ import annotations

import random
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from rlvr.eval.plan import EvalPlan, plan_eval, run_config_of  # noqa: F401  (run_config_of: public name)
from rlvr.eval.sampling import sample_tasks
from rlvr.eval.self_verify import SelfVerifySetup, self_verify_answers, setup_of
from rlvr.eval.summary import check_ks, evaluate_results, write_summary
from rlvr.jsonl import write_jsonl
from rlvr.rollout import RolloutEngine, build_engine
from rlvr.rollout.episodes import PromptPolicy, Scoring
from rlvr.errors import UserError


def evaluate_tasks(engine: RolloutEngine, tokenizer, tasks: list, scoring: Scoring, *, samples: int, ks: Sequence[int],
                   temperature: float, max_new_tokens: int, seed: int = 0, out: str | Path | None = None,
                   tasks_out: str | Path | None = None, extra: dict[str, Any] | None = None,
                   on_chunk=None, prompts: PromptPolicy | None = None,
                   self_verify: SelfVerifySetup | None = None) -> dict[str, Any]:
    """Sample and score ``samples`` responses per task with ``engine``; the summary (plus ``extra``), written to
    ``out`` with the per-task rows beside it (or to ``tasks_out``) when given. With ``self_verify``, the model then
    rates each of its answers and ``summary["self_verify"]`` holds its verification accuracy (rlvr.eval.self_verify)."""
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
    if self_verify is not None:
        answers = [(r.task, response, verdict) for r in results for response, verdict in zip(r.responses, r.verdicts)]
        summary["self_verify"] = self_verify_answers(engine, tokenizer, answers, self_verify, scoring,
                                                     temperature=temperature, max_new_tokens=max_new_tokens,
                                                     seed=seed, prompts=prompts)
    if out:
        return write_summary(out, summary, rows, tasks_out)
    if tasks_out:
        write_jsonl(tasks_out, rows)
        summary["tasks_file"] = str(tasks_out)
    return summary


def evaluate_model(
    model_path: str,
    data: str | None = None,
    *,
    verifier: str | None = None,
    samples: int = 1,
    ks: Sequence[int] = (1,),
    temperature: float | None = None,
    max_new_tokens: int | None = None,
    seed: int = 0,
    out: str | None = None,
    tasks_out: str | None = None,
    limit: int = 0,
    progress: bool = False,
    engine: str | None = None,
    engine_options: dict | None = None,
    config: str | None = None,
    use_run_config: bool = True,
    system_prompt: str | None = None,
    prompt_template: str | None = None,
    env: str | None = None,
    env_options: dict | None = None,
    stop: list[str] | None = None,
    chat_template_kwargs: dict | None = None,
    answer_after: str | None = None,
    on_plan: Callable[[EvalPlan], None] | None = None,
    self_verify: bool = False,
    self_verify_template: str | None = None,
    self_verify_mode: str | None = None,
) -> dict[str, Any]:
    """Sample ``samples`` responses per task from the model folder, score them, write the summary to ``out`` and
    the per-task rows to ``tasks_out`` (default: beside ``out`` as ``<name>.tasks.jsonl``). Everything not given
    comes from the model's run config (``config``, else a checkpoint's own; rlvr.eval.plan), as training used it.
    ``self_verify``: the model also rates its own answers (template and mode from the flags, else the run config's
    ``algo.self_verify_*``, else RISE's defaults; rlvr.eval.self_verify)."""
    import torch

    from rlvr.models import load_model
    from rlvr.models.loading import load_tokenizer
    from rlvr.rollout.agent import check_template
    from rlvr.progress import progress_bar
    from rlvr.rollout import check_engine_available, engine_names
    from rlvr.verifiers import get_verifier

    if samples < 1:
        raise UserError(f"--samples must be >= 1, got {samples}")
    ks = check_ks(ks, samples)
    plan = plan_eval(model_path, data, config=config, use_run_config=use_run_config, verifier=verifier,
                     system_prompt=system_prompt, prompt_template=prompt_template, env=env, env_options=env_options,
                     stop=stop, engine=engine, engine_options=engine_options, max_new_tokens=max_new_tokens,
                     limit=limit, chat_template_kwargs=chat_template_kwargs, answer_after=answer_after)
    get_verifier(plan.scoring.verifier)  # an unknown name fails before the model loads
    check_template(load_tokenizer(model_path), plan.tasks, plan.prompts.chat_template_kwargs)
    if plan.engine not in engine_names():
        raise UserError(f"--engine: unknown rollout engine {plan.engine!r}; known: {', '.join(engine_names())}")
    check_engine_available(plan.engine)
    verify_setup = setup_of(plan.config, template=self_verify_template, mode=self_verify_mode) if self_verify \
        else None
    if on_plan is not None:
        on_plan(plan)
    model, tokenizer = load_model(model_path)
    random.seed(seed)
    torch.manual_seed(seed)
    if temperature is None:
        temperature = 0.0 if samples == 1 else 1.0
    built = build_engine(plan.engine, model, tokenizer, **plan.engine_options)
    with progress_bar(len(plan.tasks), "eval", enabled=progress) as bar:
        return evaluate_tasks(
            built, tokenizer, plan.tasks, plan.scoring, samples=samples, ks=ks, temperature=temperature,
            max_new_tokens=plan.max_new_tokens, seed=seed, out=out, tasks_out=tasks_out, prompts=plan.prompts,
            extra={"temperature": temperature, "model": str(model_path), "data": plan.data, "seed": seed,
                   "max_new_tokens": plan.max_new_tokens, "engine": plan.engine, "verifier": plan.scoring.verifier,
                   "verifier_source": plan.config if plan.sources["verifier"] == "config" else
                   ("--verifier" if plan.sources["verifier"] == "command line" else "default"),
                   "config": plan.config, "stop": list(plan.prompts.stop)},
            on_chunk=lambda n: [bar.advance() for _ in range(n)], self_verify=verify_setup,
        )
