"""Co-trained verifier vs rule verifier on one-digit addition (the tiny model, fixed seeds, a few minutes on 2 cores).

    python benchmarks/seed_cotrained.py --steps 80 --threads 1

Four runs from one warm start (a tiny model supervised briefly on one-digit sums, as the tests' warm model): GRPO
on the rule verifier (``exact``); ``algo.recipe=tango`` (the policy paid the rule's score plus a verifier's, the
verifier trained by RL on its verdicts); ``algo.recipe=cooper`` (the policy paid the verifier's score alone, the
verifier trained by Cooper's pairwise loss, every correct x wrong pair of a group); and the same Cooper verifier
trained on the same kind of labels while its term pays the policy nothing (weight 0, the rule pays): what the
verifier learns when the policy cannot exploit it, beside what it learns when it can. Verdict words are the digits 1 (correct) and 0 (wrong), which the
digit-trained starting model already writes: RL sharpens a verdict it sometimes samples, it cannot find one it never
does.

At the warm start and every quarter of the run it prints, from the checkpoints' own folders:
- ``agree``: the verifier's agreement with the rule verifier on held-out answers (each held-out question
  ``arithmetic:eval:digits=1`` with its right answer and four wrong ones: off by 1, 2, 10, and a digit swap), the
  verdict read as the sign of log P(1) - log P(0) (its readout for both objectives), with its share on right and on
  wrong answers;
- ``acc``: the policy's true (rule-verified) greedy accuracy on the held-out questions;
and, over each quarter of training, the mean score the checker gave the policy's sampled answers (the verifier's
``model_verifier`` term before its weight; the rule's score for the GRPO run) and their true accuracy (the hacking
gap is the difference).
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

import torch

import rlvr.train.parts_verifier as pv
from rlvr.config import config_from_dict
from rlvr.models import TinySpec, build_tiny_model, encode_prompt, load_model
from rlvr.rollout import SamplingParams, build_engine
from rlvr.rollout.episodes import Scoring, generate_and_score
from rlvr.tasks import load_tasks
from rlvr.train import sft, train
from rlvr.train.metrics import read_metrics

MODEL = TinySpec(hidden_size=64, num_layers=2, num_heads=4, intermediate_size=256)
VERDICTS = {"yes": "1", "no": "0"}
VERIFIER_LR = 3e-3
COOPER = {"recipe": "cooper", "verifier_options": {**VERDICTS, "pairs": "all"}}
WATCHING = [{"name": "correct", "verifier": "task"}, {"name": "checker", "verifier": "model_verifier", "weight": 0.0}]
# name -> (algo keys, reward.terms or None for the recipe's)
RUNS = {
    "rule (grpo)": ({}, None),
    "tango": ({"recipe": "tango", "verifier_options": dict(VERDICTS)}, None),
    "cooper": (COOPER, None),
    "cooper, pays 0": (COOPER, WATCHING),
}


def warm_start(out: Path, seed: int) -> Path:
    folder = out / f"warm-seed{seed}"
    if (folder / "config.json").is_file():
        return folder
    model, tokenizer = build_tiny_model(MODEL, seed=seed)
    torch.manual_seed(seed)
    pairs = [(t.prompt, t.reference) for t in load_tasks("arithmetic:train:digits=1")]
    sft(model, tokenizer, pairs, steps=100, batch_size=32, lr=3e-3, seed=seed, progress=False)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def verifier_start(warm: Path, out: Path, seed: int) -> Path:
    """The verifiers' common start: the warm model taught the verdict format only, "1" or "0" after each template
    (both objectives') on training questions with right and wrong answers, the verdict drawn at random, independent
    of the answer. It then says 1 or 0 about equally often whatever it reads: co-training has to teach the judgement,
    and RL has both verdicts to sample (the papers start from instruction-tuned models that follow a verdict format)."""
    folder = out / f"verifier-start-seed{seed}"
    if (folder / "config.json").is_file():
        return folder
    model, tokenizer = load_model(str(warm))
    g = torch.Generator().manual_seed(seed)
    pairs = []
    for t in load_tasks("arithmetic:train:digits=1"):
        for answer in (str(t.reference), str(int(t.reference) + 1)):
            for objective in ("rl", "contrastive"):
                text = pv.parse_options(dict(VERDICTS), objective).prompt(t.prompt, answer, t.reference)
                pairs.append((text, VERDICTS["yes"] if torch.rand(1, generator=g).item() < 0.5 else VERDICTS["no"]))
    sft(model, tokenizer, pairs, steps=60, batch_size=32, lr=1e-3, seed=seed, progress=False)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def heldout_answers(tasks) -> list[tuple[object, str, str, float]]:
    """(prompt, answer, reference, label) for every held-out question: its right answer and four wrong ones."""
    rows = []
    for t in tasks:
        ref = str(t.reference)
        wrong = {str(int(ref) + 1), str(max(int(ref) - 2, 0) if int(ref) != 2 else 5), str(int(ref) + 10), ref[::-1]}
        wrong.discard(ref)
        rows.append((t.prompt, ref, ref, 1.0))
        rows += [(t.prompt, w, ref, 0.0) for w in sorted(wrong)]
    return rows


def verifier_agreement(folder: Path, objective: str, answers) -> dict[str, float]:
    model, tokenizer = load_model(str(folder))
    model.eval()
    options = pv.parse_options(dict(VERDICTS), objective)
    prompts = [encode_prompt(tokenizer, options.prompt(p, a, r)) for p, a, r, _ in answers]
    yes = pv._word_ids(tokenizer, options.yes, "yes")
    no = pv._word_ids(tokenizer, options.no, "no")
    with torch.no_grad():
        said_yes = (pv.yes_log_odds(model, tokenizer.pad_token_id, prompts, yes, no) > 0).tolist()
    right = [s == (label >= 1.0) for s, (_, _, _, label) in zip(said_yes, answers)]
    on = lambda want: [r for r, (_, _, _, label) in zip(right, answers) if (label >= 1.0) == want]  # noqa: E731
    return {"agree": sum(right) / len(right), "on_right": sum(on(True)) / len(on(True)),
            "on_wrong": sum(on(False)) / len(on(False))}


def policy_accuracy(folder: Path, tasks) -> float:
    model, tokenizer = load_model(str(folder))
    model.eval()
    samples = generate_and_score(build_engine("hf", model, tokenizer), tokenizer, tasks,
                                 SamplingParams(n=1, max_new_tokens=4, temperature=0.0), Scoring("exact"))
    return sum(v.score >= 1.0 for v in samples.verdicts) / len(tasks)


def run(name: str, algo: dict, terms: list | None, warm: Path, verifier: Path, out: Path, *, steps: int,
        seed: int) -> Path:
    folder = out / name.replace(" ", "").replace(",", "_").replace("(", "").replace(")", "")
    if (folder / f"checkpoint-{steps}").is_dir():
        return folder
    cfg = config_from_dict({
        "model": {"path": str(warm)},
        "data": {"train": "arithmetic:train:digits=1", "verifier": "exact", "prompts_per_step": 8},
        "rollout": {"group_size": 4, "max_new_tokens": 4},
        **({"reward": {"terms": terms}} if terms is not None else {}),
        "algo": {**copy.deepcopy(algo), **({"verifier_model": str(verifier), "verifier_lr": VERIFIER_LR} if algo else {})},
        "train": {"steps": steps, "lr": 1e-3, "seed": seed, "out": str(folder), "progress": False,
                  "save_every": max(1, steps // 4), "keep_last": 0},
    })
    return train(cfg)


def cotrained_table(*, steps: int, seed: int, out: Path) -> str:
    """The co-trained verifiers against the rule verifier (module docstring), as a markdown table."""
    warm = warm_start(out, seed)
    verifier = verifier_start(warm, out, seed)
    eval_tasks = load_tasks("arithmetic:eval:digits=1")
    answers = heldout_answers(eval_tasks)
    quarter = max(1, steps // 4)
    lines = [f"held-out: {len(eval_tasks)} questions, {len(answers)} answers; seed {seed}, {steps} steps",
             "| run | step | verifier agree (right / wrong) | policy held-out acc | checker score (quarter) | true acc (quarter) | gap |",
             "|---|---|---|---|---|---|---|"]
    for name, (algo, terms) in RUNS.items():
        folder = run(name, algo, terms, warm, verifier, out, steps=steps, seed=seed)
        rows = read_metrics(folder)
        objective = "rl" if algo.get("recipe") == "tango" else "contrastive"
        for step in range(0, steps + 1, quarter):
            point = folder / f"checkpoint-{step}"
            if step and not point.is_dir():
                continue
            agree = "-"
            if algo:
                a = verifier_agreement(verifier if step == 0 else point / "verifier", objective, answers)
                agree = f"{a['agree']:.2f} ({a['on_right']:.2f} / {a['on_wrong']:.2f})"
            paid = true = gap = "-"
            window = [r for r in rows if step - quarter < r["step"] <= step] if step else []
            if window:
                p = sum(r.get("reward/checker", r["reward_mean"]) for r in window) / len(window)
                t = sum(r["verifier_score_mean"] for r in window) / len(window)
                paid, true, gap = f"{p:.2f}", f"{t:.2f}", f"{p - t:+.2f}"
            acc = policy_accuracy(warm if step == 0 else point, eval_tasks)
            lines.append(f"| {name} | {step} | {agree} | {acc:.2f} | {paid} | {true} | {gap} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=80)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, default=Path("runs/seed_cotrained"))
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    started = time.perf_counter()
    table = cotrained_table(steps=args.steps, seed=args.seed, out=args.out)
    print(table)
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}, threads {args.threads}; "
          f"total {time.perf_counter() - started:.0f} s")
    (args.out / "table.json").write_text(json.dumps({"table": table, "argv": sys.argv}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
