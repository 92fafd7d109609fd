"""`rlvr demo`: build a tiny model, warm it up with supervised learning, then show GRPO making it better.

Every step runs offline on a laptop CPU in a few minutes: a character-level Llama is built from scratch,
trained briefly on generated addition problems until it is right some of the time, evaluated on held-out
problems it never saw, trained with GRPO against the exact-match verifier using the same config as
examples/arithmetic.yaml, and evaluated again.
"""

from __future__ import annotations

import copy
import json
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml
from transformers.utils import logging as hf_logging

from rlvr.config import Config, config_from_dict, load_config
from rlvr.eval import evaluate_tasks
from rlvr.eval.run_report import write_run_report
from rlvr.models import TinySpec, build_tiny_model, load_model
from rlvr.rollout import build_engine
from rlvr.rollout.episodes import Scoring
from rlvr.tasks.arithmetic import ArithmeticSpec, all_problems, sample_problems
from rlvr.cluster import launch
from rlvr.train import sft
from rlvr.train.determinism import pin_numerics
from rlvr.train.loop import seed_everything

MODEL = TinySpec(hidden_size=128, num_layers=2, num_heads=4, intermediate_size=512)
TASKS = ArithmeticSpec(digits=2, ops="+")
HELDOUT_TASKS = 500
SFT_STEPS = 500
SFT_BATCH = 64
SFT_LR = 1e-3

# The RL phase; examples/arithmetic.yaml holds the same settings (a test keeps the two in step).
RL_CONFIG: dict[str, Any] = {
    "data": {"train": "arithmetic:train", "verifier": "exact", "prompts_per_step": 32},
    "rollout": {"group_size": 16, "max_new_tokens": 8, "temperature": 1.0},
    "algo": {"advantage": "grpo", "loss": "ppo", "clip_low": 0.2, "clip_high": 0.2, "kl_coef": 0.0},
    "train": {"steps": 500, "lr": 3e-4, "max_grad_norm": 1.0, "save_every": 100},
}


@dataclass
class DemoResult:
    before: float
    after: float
    n_heldout: int
    seconds: float
    final_checkpoint: str


def heldout_pass_at_1(model, tokenizer, tasks, cfg: Config, out: Path) -> float:
    """Greedy pass@1 on held-out tasks with the configured engine; the summary is written to ``out``."""
    options = dict(cfg.rollout.engine_options)
    engine = build_engine(cfg.rollout.engine, model, tokenizer, **options)
    summary = evaluate_tasks(engine, tokenizer, tasks, Scoring(cfg.data.verifier, dict(cfg.data.verifier_options)),
                             samples=1, ks=[1], temperature=0.0, max_new_tokens=cfg.rollout.max_new_tokens, out=out)
    return summary["pass@1"]["value"]


def rl_config(warm: Path, out: Path, *, seed: int, progress: bool, rl_steps: int | None,
              overrides: Sequence[str] = (), base: dict[str, Any] | None = None) -> Config:
    """The RL phase's config: ``base`` (default RL_CONFIG) with the run's paths and seed, then ``overrides``
    (dotted key=value)."""
    tree = copy.deepcopy(base or RL_CONFIG)
    tree["model"] = {"path": str(warm)}
    tree["train"].update(steps=rl_steps or tree["train"]["steps"], seed=seed, out=str(out / "rl"), progress=progress,
                         overwrite=True,  # a demo run again replaces the previous one
                         deterministic=True)  # the same line on any x86-64 CPU (rlvr.train.determinism)
    if not overrides:
        return config_from_dict(tree, source="demo")
    base = out / "demo-config.yaml"
    base.write_text(yaml.safe_dump(tree, sort_keys=False))
    return load_config(base, list(overrides))


def run_demo(
    out: Path,
    *,
    seed: int = 0,
    progress: bool = True,
    sft_steps: int = SFT_STEPS,
    rl_steps: int | None = None,
    heldout_tasks: int = HELDOUT_TASKS,
    overrides: Sequence[str] = (),
) -> DemoResult:
    """The whole demo; the keyword arguments shrink it for smoke tests (the defaults are the real demo).
    ``overrides`` (dotted key=value, e.g. ``rollout.engine=NAME``) change the RL phase's config; the held-out
    evaluations use the same engine."""
    pin_numerics()  # first, before any tensor operation: the same line on any x86-64 CPU
    started = time.perf_counter()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    hf_logging.disable_progress_bar()  # rlvr shows its own progress; the per-save shard bars are noise
    seed_everything(seed)

    model, tokenizer = build_tiny_model(MODEL, seed=seed)
    n_params = sum(p.numel() for p in model.parameters())
    train_tasks = all_problems(TASKS, "train")
    heldout = sample_problems(TASKS, "eval", heldout_tasks, seed)
    print(f"demo: tiny Llama with {n_params / 1e6:.2f}M parameters; {len(train_tasks)} training problems, "
          f"{len(heldout)} held-out problems")

    sft(model, tokenizer, [(t.prompt, t.reference) for t in train_tasks],
        steps=sft_steps, batch_size=SFT_BATCH, lr=SFT_LR, seed=seed, progress=progress)
    phase = rl_phase(model, tokenizer, heldout, out,
                     lambda warm: rl_config(warm, out, seed=seed, progress=progress, rl_steps=rl_steps,
                                            overrides=overrides))
    result = DemoResult(phase.before, phase.after, len(heldout), time.perf_counter() - started, str(phase.final))
    write_results(out, phase, result)
    print(f"demo: pass@1 before={100 * result.before:.1f}% after={100 * result.after:.1f}% on {len(heldout)} held-out tasks")
    return result


@dataclass
class RLPhase:
    """What the RL phase of a demo leaves: held-out pass@1 before and after, the run, the trained model."""

    before: float
    after: float
    cfg: Config
    run_dir: Path
    final: Path
    heldout_dir: Path
    model: Any
    tokenizer: Any


def rl_phase(model, tokenizer, heldout, out: Path, make_config: Callable[[Path], Config]) -> RLPhase:
    """Save the warm-started model, evaluate it on the held-out tasks, train it with RL as ``make_config(warm)``
    says, and evaluate the final checkpoint the same way."""
    warm = out / "sft-model"
    model.save_pretrained(warm)
    tokenizer.save_pretrained(warm)
    cfg = make_config(warm)
    heldout_dir = out / "heldout"
    before = heldout_pass_at_1(model, tokenizer, heldout, cfg, heldout_dir / "heldout-before-rl.json")
    print(f"demo: after the supervised warm start, held-out pass@1 = {100 * before:.1f}%")
    run_dir = launch(cfg)  # one process, or the layout the cluster section asks for (cluster.backend=ray, ...)
    final = run_dir / f"checkpoint-{cfg.train.steps}"
    trained, trained_tokenizer = load_model(final)
    after = heldout_pass_at_1(trained, trained_tokenizer, heldout, cfg, heldout_dir / "heldout-after-rl.json")
    return RLPhase(before, after, cfg, run_dir, final, heldout_dir, trained, trained_tokenizer)


def write_results(out: Path, phase: RLPhase, result: DemoResult) -> Path:
    """result.json, the held-out evaluations copied into the run, and the run report (whose path is printed)."""
    (out / "result.json").write_text(json.dumps(asdict(result), indent=2) + "\n")
    (phase.run_dir / "eval").mkdir(exist_ok=True)
    for path in phase.heldout_dir.iterdir():  # the held-out evaluations appear in the run's report
        shutil.copy(path, phase.run_dir / "eval" / path.name)
    report = write_run_report(phase.run_dir, out / "report")
    print(f"demo: report {report}; final checkpoint {phase.final}")
    return report
