"""What `rlvr eval` samples and scores with, resolved once: the model's run config (a checkpoint's own
``RUN_DIR/config.yaml`` by default, or ``--config``) supplies what training used — prompt rendering
(``data.system_prompt``, ``data.prompt_template``, field names), the environment (``data.env``, ``env_options``),
stop strings and prompt limits, the engine and its options, the verifier and its options, the response length and
the held-out data — and each flag given on the command line overrides its piece. ``EvalPlan.describe`` says where
every piece came from, so a user sees what was evaluated.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlvr.config import Config, load_config
from rlvr.errors import UserError
from rlvr.rollout.episodes import PromptPolicy, Scoring
from rlvr.tasks import Task
from rlvr.tasks.sources import load_data

DEFAULT_MAX_NEW_TOKENS = 256  # without a run config


@dataclass
class EvalPlan:
    data: str
    tasks: list[Task]
    scoring: Scoring
    prompts: PromptPolicy
    engine: str
    engine_options: dict[str, Any]
    max_new_tokens: int
    config: str | None  # the run config read, if any
    sources: dict[str, str] = field(default_factory=dict)  # piece -> "--flag", "config" or "default"

    def describe(self) -> list[str]:
        """One line per piece: its value and where it came from."""
        named = Counter(t.verifier for t in self.tasks if t.verifier)
        verifier = f"{self.scoring.verifier} ({self.sources['verifier']})"
        if named:
            rows = ", ".join(f"{name} ({n} rows)" for name, n in sorted(named.items()))
            verifier += f"; rows that name their own: {rows}" if len(named) < len(self.tasks) or len(named) > 1 \
                else f", but every row names its own: {rows}"
        envs = Counter(t.env for t in self.tasks if t.env)
        first = self.tasks[0] if self.tasks else None
        lines = [
            f"config: {self.config or 'none (no run config found; give --config RUN/config.yaml)'}",
            f"data: {self.data} ({self.sources['data']}), {len(self.tasks)} tasks",
            f"verifier: {verifier}",
            f"prompts: system prompt {'set' if self.sources.get('system_prompt_value') else 'none'} "
            f"({self.sources['system_prompt']}), template {self.sources.get('template_value') or 'none'} "
            f"({self.sources['prompt_template']})",
            f"environment: {', '.join(sorted(envs)) if envs else 'single_turn'} ({self.sources['env']})",
            f"stop: {list(self.prompts.stop)} ({self.sources['stop']}), max_new_tokens {self.max_new_tokens} "
            f"({self.sources['max_new_tokens']})",
            f"chat template kwargs: {self.prompts.chat_template_kwargs} ({self.sources['chat_template_kwargs']}); "
            f"answer after: {self.scoring.answer_after!r} ({self.sources['answer_after']})",
            f"engine: {self.engine} {self.engine_options or ''} ({self.sources['engine']})".replace("  ", " "),
        ]
        if first is not None:
            shown = first.prompt if isinstance(first.prompt, str) else first.prompt
            lines.append(f"first prompt: {shown!r}"[:300])
        return lines


def run_config_of(model_path: str | Path) -> Path | None:
    """The config.yaml of the training run a checkpoint belongs to (RUN_DIR/checkpoint-N -> RUN_DIR/config.yaml)."""
    folder = Path(model_path)
    for candidate in (folder / "config.yaml", folder.parent / "config.yaml"):
        if candidate.is_file() and candidate.parent != Path.cwd():
            return candidate
    return None


def plan_eval(model_path: str | Path, data: str | None = None, *, config: str | Path | None = None,
              use_run_config: bool = True, verifier: str | None = None, verifier_options: dict | None = None,
              system_prompt: str | None = None, prompt_template: str | None = None, env: str | None = None,
              env_options: dict | None = None, stop: list[str] | None = None, engine: str | None = None,
              engine_options: dict | None = None, max_new_tokens: int | None = None, limit: int = 0,
              chat_template_kwargs: dict | None = None, answer_after: str | None = None) -> EvalPlan:
    """Resolve every piece of an evaluation (module docstring); None means "from the run config, else the default"."""
    path = Path(config) if config is not None else (run_config_of(model_path) if use_run_config else None)
    if path is not None and not path.is_file():
        raise UserError(f"--config: {path} is not a file (expected a run's config.yaml)")
    cfg = load_config(path) if path is not None else Config()
    sources: dict[str, str] = {}

    def pick(name: str, given: Any, from_config: Any, default: Any) -> Any:
        if given is not None:
            sources[name] = "command line"
            return given
        if path is not None and from_config is not None:
            sources[name] = "config"
            return from_config
        sources[name] = "default"
        return default

    d, r = cfg.data, cfg.rollout
    data = pick("data", data, d.eval, None)
    if data is None:
        raise UserError("--data is required: the model has no run config naming data.eval (give --data FILE_OR_SPEC "
                        "or --config RUN/config.yaml)")
    chosen_verifier = pick("verifier", verifier, d.verifier, "exact")
    options = dict(verifier_options) if verifier_options is not None else \
        (dict(d.verifier_options) if sources["verifier"] == "config" else {})
    data_cfg = dataclasses.replace(
        d, eval=data,
        system_prompt=pick("system_prompt", system_prompt, d.system_prompt, None),
        prompt_template=pick("prompt_template", prompt_template, d.prompt_template, None),
        env=pick("env", env, d.env, None),
        env_options=dict(env_options) if env_options is not None else dict(d.env_options),
    )
    sources["system_prompt_value"] = data_cfg.system_prompt or ""
    sources["template_value"] = data_cfg.prompt_template or ""
    tasks = load_data(data_cfg, "eval")
    size = limit or (d.eval_size if sources["data"] == "config" else 0)
    tasks = tasks[:size or None]
    stops = pick("stop", stop, list(r.stop) if r.stop else None, [])
    engine_name = pick("engine", engine, r.engine, "hf")
    engine_opts = dict(engine_options) if engine_options is not None else \
        (dict(r.engine_options) if path is not None else {})
    if path is not None and engine_name == r.engine and "batch_size" not in engine_opts and r.batch_size:
        engine_opts["batch_size"] = r.batch_size
    template_kwargs = pick("chat_template_kwargs", chat_template_kwargs, dict(r.chat_template_kwargs) or None, {})
    marker = pick("answer_after", answer_after, d.answer_after, None)
    return EvalPlan(
        data=data, tasks=tasks,
        scoring=Scoring(chosen_verifier, options, answer_after=marker, require_answer_after=d.require_answer_after),
        prompts=PromptPolicy(r.max_prompt_tokens if path is not None else None,
                             r.prompt_overflow if path is not None else "error", tuple(stops), dict(template_kwargs),
                             r.agent_command if path is not None else None),
        engine=engine_name, engine_options=engine_opts,
        max_new_tokens=pick("max_new_tokens", max_new_tokens, r.max_new_tokens, DEFAULT_MAX_NEW_TOKENS),
        config=str(path) if path is not None else None, sources=sources,
    )
