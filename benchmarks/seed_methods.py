"""The seed papers' qualitative claims, each method against its baseline on multi-term arithmetic chains, on a CPU.

    python benchmarks/seed_methods.py --family guidance   # GHPO vs GRPO on chains the warm model rarely solves
    python benchmarks/seed_methods.py --family expert     # LUFFY vs GRPO vs SFT-then-GRPO: pass@1 and pass@16
    python benchmarks/seed_methods.py --family process    # sum-form step credit vs PURE; PRIME vs RLOO
    python benchmarks/seed_methods.py --family verification  # RISE / Critique-RL, trained judge and PRM, co-trained verifiers
    options: [--steps N] [--seed 0] [--out runs/seed_methods] [--threads 2]

Every family starts from the same warm model: the demo's tiny character-level Llama (0.4M parameters; a 256-token
context, so GHPO's hinted prompts fit), trained
supervised on the worked solutions of 2- and 3-term chains (``arithmetic:chain``: one line ``a+b=c`` per step, then
``#answer``). Held-out problems come from the chains' eval split, disjoint from training. Each method trains the same
number of steps from the same seed, with the same prompts per step and group size; only the method's keys differ.
Held-out pass@1 is greedy and unhinted; pass@16 samples 16 answers at temperature 1.0. GHPO's hint is given as the
start of the model's own answer (``algo.hint_template="{prompt}{hint}"``): a character-level model trained on bare
problems cannot read GHPO's English instruction. A claim that does not reproduce is
reported as measured: the table prints numbers, not verdicts.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

import torch

from rlvr.config import config_from_dict
from rlvr.models import TinySpec, build_tiny_model, load_model
from rlvr.rewards.process import line_verdict
from rlvr.rollout import SamplingParams, build_engine
from rlvr.rollout.episodes import Scoring, generate_and_score
from rlvr.tasks import load_tasks
from rlvr.train import sft, train
from rlvr.train.metrics import read_metrics

MODEL = TinySpec(hidden_size=128, num_layers=2, num_heads=4, intermediate_size=512, max_positions=256)
WARM_TERMS = (2, 3)
WARM_STEPS = 600
HELDOUT = 200
MAX_NEW_TOKENS = 40

BASE: dict[str, Any] = {
    "data": {"verifier": "chain_answer", "prompts_per_step": 16},
    "rollout": {"group_size": 8, "max_new_tokens": MAX_NEW_TOKENS, "temperature": 1.0},
    "train": {"lr": 3e-4, "max_grad_norm": 1.0, "progress": False, "log_samples": 0},
}

# The rule step checker as a PRM would judge: the final step's answer is checked against the reference, and a line
# that is no step (or an empty response) scores like a false step, so writing nothing is not a way out.
STEP_CHECKER = {"source": "arith_steps", "options": {"answer": "check", "other": -1.0}}

# family -> (training terms, [(run name, algo/reward overrides)])
FAMILIES: dict[str, tuple[int, list[tuple[str, dict[str, Any]]]]] = {
    "guidance": (4, [
        ("grpo", {"algo": {"recipe": "grpo", "kl_coef": 0.0}}),
        # the tiny model follows no instructions: the hint is given as the start of its own answer
        ("ghpo", {"algo": {"recipe": "ghpo", "hint_template": "{prompt}{hint}"}}),
    ]),
    "expert": (5, [
        ("grpo", {"algo": {"recipe": "grpo", "kl_coef": 0.0}}),
        ("luffy", {"algo": {"recipe": "luffy"}}),
        ("sft_then_grpo", {"algo": {"recipe": "grpo", "kl_coef": 0.0}, "sft_first": True}),
    ]),
    "process": (4, [
        ("sum_form", {"algo": {"recipe": "grpo", "kl_coef": 0.0, "advantage": "process_sum"},
                      "reward": {"process": STEP_CHECKER}}),
        ("pure", {"algo": {"recipe": "pure"}, "reward": {"process": STEP_CHECKER}}),
        ("rloo", {"algo": {"recipe": "rloo"}}),
        ("prime", {"algo": {"recipe": "prime"}}),
    ]),
}


def chain_tasks(terms: int, split: str, n: int, seed: int):
    return load_tasks(f"arithmetic:chain:terms={terms},split={split},n={n},seed={seed}")


def warm_start(out: Path, seed: int) -> Path:
    """The family's common starting point: supervised on 2- and 3-term chain solutions (built once per seed)."""
    folder = out / f"warm-seed{seed}"
    if (folder / "config.json").is_file():
        return folder
    torch.manual_seed(seed)
    model, tokenizer = build_tiny_model(MODEL, seed=seed)
    pairs = [(t.prompt, t.meta["solution"]) for terms in WARM_TERMS for t in chain_tasks(terms, "train", 4000, seed)]
    sft(model, tokenizer, pairs, steps=WARM_STEPS, batch_size=64, lr=1e-3, seed=seed, progress=False)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def sft_on(model_dir: Path, tasks, out: Path, *, steps: int, batch_size: int, seed: int) -> Path:
    """A copy of ``model_dir`` trained supervised on the tasks' worked solutions (the SFT-then-RL baseline)."""
    if (out / "config.json").is_file():
        return out
    model, tokenizer = load_model(str(model_dir))
    sft(model, tokenizer, [(t.prompt, t.meta["solution"]) for t in tasks], steps=steps, batch_size=batch_size,
        lr=3e-4, seed=seed, progress=False)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def heldout(model_dir: Path, tasks, *, samples: int, seed: int) -> dict[str, float]:
    """Greedy pass@1 and, with ``samples`` > 1, pass@samples at temperature 1.0; lines per greedy response, the
    share of greedy responses with a false step, and of correct ones with a false step."""
    model, tokenizer = load_model(str(model_dir))
    model.eval()
    engine = build_engine("hf", model, tokenizer)
    scoring = Scoring("chain_answer")
    torch.manual_seed(seed)
    greedy = generate_and_score(engine, tokenizer, tasks, SamplingParams(n=1, max_new_tokens=MAX_NEW_TOKENS,
                                                                         temperature=0.0), scoring)
    lines = [[line_verdict(x) for x in r.splitlines() if x.strip()] for r in greedy.responses]
    correct = [v.score >= 1.0 for v in greedy.verdicts]
    result = {"pass@1": sum(correct) / len(tasks),
              "lines": sum(len(x) for x in lines) / len(tasks),
              "false_step": sum("false" in x for x in lines) / len(tasks),
              "correct_with_false_step": sum(c and "false" in x for c, x in zip(correct, lines)) / max(sum(correct), 1)}
    if samples > 1:
        sampled = generate_and_score(engine, tokenizer, tasks, SamplingParams(n=samples, max_new_tokens=MAX_NEW_TOKENS,
                                                                              temperature=1.0), scoring)
        hits = [any(v.score >= 1.0 for v in sampled.verdicts[i * samples:(i + 1) * samples]) for i in range(len(tasks))]
        result[f"pass@{samples}"] = sum(hits) / len(tasks)
    return result


def run_method(name: str, spec: dict[str, Any], warm: Path, terms: int, out: Path, *, steps: int, seed: int) -> dict:
    tree = copy.deepcopy(BASE)
    start = warm
    if spec.get("sft_first"):  # as many worked solutions as LUFFY's expert rows over the run: one per prompt per step
        per_step = tree["data"]["prompts_per_step"]
        start = sft_on(warm, chain_tasks(terms, "train", steps * per_step, seed), out / f"sft-{name}",
                       steps=steps, batch_size=per_step, seed=seed)
    tree["model"] = {"path": str(start)}
    tree["data"]["train"] = f"arithmetic:chain:terms={terms}"
    tree["train"].update(steps=steps, seed=seed, out=str(out / name), overwrite=True)
    for section in ("algo", "reward"):
        tree.setdefault(section, {}).update(spec.get(section, {}))
    started = time.perf_counter()
    run_dir = train(config_from_dict(tree, source=f"seed_methods:{name}"))
    rows = read_metrics(run_dir)
    return {"rows": rows, "seconds": time.perf_counter() - started, "final": run_dir / f"checkpoint-{steps}"}


def mean(rows: list[dict], key: str, part: slice) -> float | None:
    values = [r[key] for r in rows[part] if key in r]
    return sum(values) / len(values) if values else None


def fmt(value: float | None, pct: bool = False) -> str:
    if value is None:
        return "-"
    return f"{100 * value:.1f}%" if pct else f"{value:.3f}"


def run_family(family: str, *, steps: int, seed: int, out: Path, terms: int | None = None) -> str:
    default_terms, methods = FAMILIES[family]
    terms = terms or default_terms
    out = out / (family if terms == default_terms else f"{family}-{terms}terms")
    out.mkdir(parents=True, exist_ok=True)
    warm = warm_start(out.parent, seed)
    tasks = chain_tasks(terms, "eval", HELDOUT, seed)
    samples = 16 if family == "expert" else 1
    before = heldout(warm, tasks, samples=samples, seed=seed)
    lines = [f"family {family}: {terms}-term chains, {len(tasks)} held-out tasks, {steps} steps x "
             f"{BASE['data']['prompts_per_step']} prompts x {BASE['rollout']['group_size']} responses, seed {seed}; "
             f"warm start (2-3 term SFT): pass@1 {fmt(before['pass@1'], True)}"
             + (f", pass@16 {fmt(before['pass@16'], True)}" if samples > 1 else "") + f", {before['lines']:.2f} lines"]
    header = ["method", "held-out pass@1"] + (["pass@16"] if samples > 1 else []) + [
        "train score (first 10 / last 10 steps)", "informative rows", "lines", "correct with a false step",
        "method metrics (last 10 steps)", "s/step"]
    lines += ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    for name, spec in methods:
        result = run_method(name, spec, warm, terms, out, steps=steps, seed=seed)
        rows = result["rows"]
        after = heldout(result["final"], tasks, samples=samples, seed=seed)
        rows_per_step = [r.get("rows/on_policy", 0) + r.get("rows/hinted", 0) + r.get("rows/expert", 0) for r in rows]
        informative = sum(r["rows_backpropagated"] for r in rows) / max(sum(rows_per_step), 1)
        extra = [f"{key} {fmt(mean(rows, key, slice(-10, None)))}" for key in
                 ("hint_frac", "rows/expert", "process/reward_mean", "prm/pairwise_acc", "dars/extra_rollouts")
                 if mean(rows, key, slice(-10, None)) is not None]
        if "hint_frac" in rows[0]:
            extra.insert(0, f"hint_frac first 10 {fmt(mean(rows, 'hint_frac', slice(0, 10)))}")
        cells = [name, f"{fmt(before['pass@1'], True)} -> {fmt(after['pass@1'], True)}"]
        if samples > 1:
            cells.append(f"{fmt(before['pass@16'], True)} -> {fmt(after['pass@16'], True)}")
        cells += [f"{fmt(mean(rows, 'verifier_score_mean', slice(0, 10)))} / "
                  f"{fmt(mean(rows, 'verifier_score_mean', slice(-10, None)))}",
                  fmt(informative, True), f"{after['lines']:.2f}", fmt(after["correct_with_false_step"], True),
                  "; ".join(extra) or "-", f"{result['seconds'] / steps:.2f}"]
        lines.append("| " + " | ".join(cells) + " |")
        print(lines[-1], flush=True)
    return "\n".join(lines)


def more_families() -> dict[str, Any]:
    """The families of benchmarks/seed_families_more.py (exploration, trust regions, calibration, distillation), each
    a function (steps=, seed=, out=) -> printed table."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    try:
        from seed_families_more import FAMILIES as more
    except ImportError:
        return {}
    return {**more, "verification": verification_family}


def verification_family(*, steps: int, seed: int, out: Path) -> str:
    """Models that check: self-verification (GRPO, RISE, Critique-RL), a judge and a step labeller trained by rlvr
    (benchmarks/seed_verification.py), and verifiers co-trained beside the policy (benchmarks/seed_cotrained.py)."""
    from seed_cotrained import cotrained_table
    from seed_verification import run_verification

    lines = run_verification(argparse.Namespace(steps=steps, seed=seed, out=out / "verification"))
    return "\n".join([*lines, "", cotrained_table(steps=steps, seed=seed, out=out / "cotrained")])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    more = more_families()
    parser.add_argument("--family", choices=sorted([*FAMILIES, *more]), required=True)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--terms", type=int, default=None, help="chain length (default: the family's)")
    parser.add_argument("--threads", type=int, default=1)  # two threads on a shared 2-core machine wait on each other
    parser.add_argument("--out", type=Path, default=Path("runs/seed_methods"))
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    started = time.perf_counter()
    if args.family in FAMILIES:
        table = run_family(args.family, steps=args.steps, seed=args.seed, out=args.out, terms=args.terms)
    else:
        table = more[args.family](steps=args.steps, seed=args.seed, out=args.out)
    print(table)
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}, threads {args.threads}; "
          f"total {time.perf_counter() - started:.0f} s")
    (args.out / f"{args.family}{'-%dterms' % args.terms if args.terms else ''}.json").write_text(json.dumps({"table": table, "argv": sys.argv}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
