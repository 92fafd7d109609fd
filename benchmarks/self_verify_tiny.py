"""RISE's claim on a CPU: training on its own verification tasks makes a policy a better checker of answers, without
making it a worse solver. GRPO vs GRPO + self-verification (``algo.self_verify_per_step``) on 2-digit addition.

    python benchmarks/self_verify_tiny.py [--steps 100] [--seed 0] [--out runs/self_verify_tiny] [--threads 1]

The warm start is the demo's tiny character-level Llama, trained supervised on addition ("37+58=" -> "95") and on
the verification format with RANDOM labels ("Q:37+58= A:96 ok? " -> "y" or "n", a coin flip), so it answers in the
format but rates at chance. Both runs start from it with the same seed, prompts per step and group size; the RISE run
adds ``algo.self_verify_per_step`` verification tasks per step (template ``Q:{prompt} A:{response} ok? ``, the
``plain`` rating: "y" rates 1, "n" rates -0.5; the reference is the exact verifier's verdict on the answer). The
``rise_balanced`` run picks half of them from correct answers and half from the others (``SelfVerify(balance=True)``),
so the step's verification tasks do not lean to the verdict the policy's accuracy makes common.

Held out (problems of the eval split, never trained on): greedy solving pass@1, and greedy verification accuracy on
one FIXED set of answers (one answer per problem sampled at temperature 1 from the warm start, so every model rates
the same answers), overall and on correct and on wrong answers apart (a checker that always says "y" scores 100% and
0%). A claim that does not reproduce is reported as measured.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import sys
import time
from pathlib import Path

import torch

from rlvr.config import config_from_dict
from rlvr.models import TinySpec, build_tiny_model, load_model
from rlvr.rollout import SamplingParams, build_engine
from rlvr.rollout.episodes import Scoring, generate_and_score
from rlvr.rollout import stage_self_verify
from rlvr.rollout.stage_self_verify import SelfVerify
from rlvr.rollout.stages import StageContext, register_stage
from rlvr.tasks.arithmetic import ArithmeticSpec, all_problems, sample_problems
from rlvr.train import sft, train
from rlvr.train.metrics import read_metrics

MODEL = TinySpec(hidden_size=128, num_layers=2, num_heads=4, intermediate_size=512)
TEMPLATE = "Q:{prompt} A:{response} ok? "
TASKS = ArithmeticSpec(digits=2, ops="+")
WARM_STEPS, HELDOUT, MAX_NEW_TOKENS = 500, 300, 6

BASE = {
    "data": {"train": "arithmetic:train", "verifier": "exact", "prompts_per_step": 16},
    "rollout": {"group_size": 8, "max_new_tokens": MAX_NEW_TOKENS, "temperature": 1.0},
    "algo": {"recipe": "grpo", "kl_coef": 0.0},
    "train": {"lr": 3e-4, "max_grad_norm": 1.0, "progress": False, "log_samples": 0, "deterministic": True},
}
# training columns: mean over the first 10 / the last 10 steps
TRAIN_KEYS = ("reward_mean/on_policy", "verify/accuracy", "verify/accuracy_on_correct", "verify/accuracy_on_wrong")
METHODS = {"grpo": {}, "rise": {"self_verify_per_step": 16, "self_verify_template": TEMPLATE},
           "rise_balanced": {"self_verify_per_step": 16, "self_verify_template": TEMPLATE}}
BALANCED = {"rise_balanced"}  # picks half correct, half other answers (SelfVerify(balance=True))


def use_stage(balance: bool) -> None:
    """The self_verify stage the next run builds: RISE's pick, or the class-balanced one (no config key yet)."""
    def balanced(cfg):
        stage = stage_self_verify._self_verify_stage(cfg)
        if stage is not None:
            stage.balance = True
        return stage

    register_stage("self_verify")(balanced if balance else stage_self_verify._self_verify_stage)


def warm_start(out: Path, seed: int) -> Path:
    """Supervised on addition answers and on coin-flip ratings of right and wrong answers (format, not judgement)."""
    folder = out / f"warm-seed{seed}"
    if (folder / "config.json").is_file():
        return folder
    rng = random.Random(seed)
    torch.manual_seed(seed)
    model, tokenizer = build_tiny_model(MODEL, seed=seed)
    problems = all_problems(TASKS, "train")
    pairs = [(t.prompt, t.reference) for t in problems]
    for t in problems:
        shown = t.reference if rng.random() < 0.5 else str(int(t.reference) + rng.choice([-10, -1, 1, 10]))
        pairs.append((TEMPLATE.format(prompt=t.prompt, response=shown), rng.choice("yn")))
    sft(model, tokenizer, pairs, steps=WARM_STEPS, batch_size=64, lr=1e-3, seed=seed, progress=False)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def fixed_answers(warm: Path, seed: int):
    """One sampled answer per held-out problem from the warm start: the answers every model is asked to rate."""
    model, tokenizer = load_model(str(warm))
    model.eval()
    engine = build_engine("hf", model, tokenizer)
    torch.manual_seed(seed)
    tasks = sample_problems(TASKS, "eval", HELDOUT, seed)
    return tasks, generate_and_score(engine, tokenizer, tasks, SamplingParams(n=1, max_new_tokens=MAX_NEW_TOKENS,
                                                                             temperature=1.0), Scoring("exact"))


def heldout(model_dir: Path, tasks, answers) -> dict[str, float]:
    """Greedy solving pass@1 on the held-out problems; greedy verification of the fixed answers."""
    model, tokenizer = load_model(str(model_dir))
    model.eval()
    engine = build_engine("hf", model, tokenizer)
    greedy = SamplingParams(n=1, max_new_tokens=MAX_NEW_TOKENS, temperature=0.0)
    solved = generate_and_score(engine, tokenizer, tasks, greedy, Scoring("exact"))
    stage = SelfVerify(len(answers.responses), TEMPLATE)
    _, metrics = stage.run(answers, StageContext(engine, tokenizer, greedy, Scoring("exact"), None, None), step=0)
    return {"pass@1": sum(v.score >= 1.0 for v in solved.verdicts) / len(tasks), **metrics}


def mean(rows, key, part):
    values = [r[key] for r in rows[part] if key in r]
    return sum(values) / len(values) if values else None


def pct(value):
    return "-" if value is None else f"{100 * value:.1f}%"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, default=Path("runs/self_verify_tiny"))
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    started = time.perf_counter()
    args.out.mkdir(parents=True, exist_ok=True)
    warm = warm_start(args.out, args.seed)
    tasks, answers = fixed_answers(warm, args.seed)
    before = heldout(warm, tasks, answers)
    lines = [f"2-digit addition, {len(tasks)} held-out problems, {args.steps} steps x "
             f"{BASE['data']['prompts_per_step']} prompts x {BASE['rollout']['group_size']} responses, "
             f"seed {args.seed}; fixed answers to rate: {pct(before['verify/answers_correct'])} correct",
             "| run | held-out pass@1 | held-out verification accuracy | on correct answers | on wrong answers | "
             "train: solving score | train: verification accuracy | on correct | on wrong | s/step |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
             f"| warm start | {pct(before['pass@1'])} | {pct(before['verify/accuracy'])} | "
             f"{pct(before.get('verify/accuracy_on_correct'))} | {pct(before.get('verify/accuracy_on_wrong'))} | "
             "- | - | - | - | - |"]
    print("\n".join(lines), flush=True)
    for name, algo in METHODS.items():
        tree = json.loads(json.dumps(BASE))
        tree["model"] = {"path": str(warm)}
        tree["algo"].update(algo)
        tree["train"].update(steps=args.steps, seed=args.seed, out=str(args.out / name), overwrite=True)
        use_stage(name in BALANCED)
        t0 = time.perf_counter()
        rows = read_metrics(train(config_from_dict(tree, source=f"self_verify_tiny:{name}")))
        seconds = time.perf_counter() - t0
        after = heldout(args.out / name / f"checkpoint-{args.steps}", tasks, answers)
        first, last = slice(0, 10), slice(-10, None)
        lines.append(
            f"| {name} | {pct(after['pass@1'])} | {pct(after['verify/accuracy'])} | "
            f"{pct(after.get('verify/accuracy_on_correct'))} | {pct(after.get('verify/accuracy_on_wrong'))} | "
            + " | ".join(f"{pct(mean(rows, key, first))} / {pct(mean(rows, key, last))}" for key in TRAIN_KEYS)
            + f" | {seconds / args.steps:.2f} |")
        print(lines[-1], flush=True)
    lines.append(f"machine: {platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}, "
                 f"threads {args.threads}; total {time.perf_counter() - started:.0f} s")
    print(lines[-1])
    (args.out / "table.json").write_text(json.dumps({"table": "\n".join(lines), "argv": sys.argv}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
