"""Models that check, on a CPU: the policy trained to verify its own answers (RISE, Critique-RL) against GRPO, and a
judge trained by rlvr against the untrained judge.

    python benchmarks/seed_verification.py [--part self_verify|judge|prm] [--steps 100] [--judge-steps 100]
                                           [--judge-lr 3e-4] [--prm-sft-steps 600] [--prm-steps 40] [--seed 0]
                                           [--out runs/seed_verification] [--threads 1]

``run_verification(args) -> list[str]`` returns the table lines (``args``: an argparse namespace with steps, seed,
out and optionally part, judge_steps, judge_lr, prm_sft_steps, prm_steps); ``benchmarks/seed_methods.py --family
verification`` can call it.

Self-verification (2-digit addition; the warm start, fixed answers and plain rating template of
benchmarks/self_verify_tiny.py: a tiny character-level Llama trained supervised on answers and on coin-flip ratings,
so it answers in the format and rates at chance). Runs from that warm start with the same seed, prompts per step and
group size: GRPO; GRPO with RISE's stage (``algo.self_verify_per_step=16``); the ``rise`` recipe (its PPO with a
critic model, KL in the reward, 8 updates per batch, at lr 1e-4 where 8 updates are taken); the ``critique_rl``
recipe (correct/wrong judgements, RLOO, 2 x 4 updates, lr 1e-4). Held out: greedy solving pass@1 on 300 eval-split
problems; greedy verification of one FIXED set of answers (one sampled per problem from the warm start) through
``rlvr.eval.self_verify`` (what ``rlvr eval --self-verify`` reports): accuracy, accuracy on correct and on wrong
answers, and the verdict balance (share of answers called correct).

Judge (1-digit addition judgement tasks, ``judgement:arithmetic:...,near_miss=0``, the setting of
tests/test_judge_training.py): the untrained tiny judge, the judge after a short supervised warm start (it learns the
yes/no format), and that judge after ``--judge-steps`` steps of ``rlvr train`` on judgement tasks (GRPO, 16 prompts x
4 verdicts, lr ``--judge-lr``). Held out: greedy
judgement accuracy on 200 eval-split judgement tasks, per class and the share of "yes"; then each judge is served by
``rlvr.rollout.model_server`` on loopback and audited with ``rlvr.audit.audit_judge`` (the master keys of ``rlvr
audit judge``) under its training prompt, without and with the judge verifier's pre-checks: the key false-positive
rate, correct answers accepted, wrong answers accepted, undecided calls.

PRM (3-term chains): a tiny step labeller trained with ``rlvr sft`` on ``steps:`` tasks (the label string as the
target), then ``rlvr train`` on them (the labels checked by exact match), read by the ``prm`` process source with
``reader: labels`` on held-out worked solutions (half of them with one slipped step carried through): agreement of
each step score's sign with the step's label, on good and on bad steps apart, and the share of steps scored good.
A claim that does not reproduce is reported as measured.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import sys
import threading
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import self_verify_tiny as svt  # noqa: E402  (its warm start, fixed answers and template)
from seed_methods import fmt, mean  # noqa: E402  (the tables' number formats)

from rlvr.audit import Setup, audit_judge  # noqa: E402
from rlvr.config import config_from_dict  # noqa: E402
from rlvr.eval.self_verify import SelfVerifySetup, self_verify_answers  # noqa: E402
from rlvr.models import TinySpec, build_tiny_model, encode_prompt, load_model  # noqa: E402
from rlvr.rollout import SamplingParams, build_engine  # noqa: E402
from rlvr.rollout.episodes import Scoring, generate_and_score  # noqa: E402
from rlvr.tasks import load_tasks  # noqa: E402
from rlvr.tasks.judgement import NO, YES, judge_options  # noqa: E402
from rlvr.train import sft, train  # noqa: E402
from rlvr.train.metrics import read_metrics  # noqa: E402

TEMPLATE = svt.TEMPLATE
PER_STEP = 16
# run name -> (algo keys, learning rate, verification mode)
SELF_VERIFY_RUNS: dict[str, tuple[dict[str, Any], float, str]] = {
    "grpo": ({"recipe": "grpo", "kl_coef": 0.0}, 3e-4, "rise"),
    "grpo + RISE's stage": ({"recipe": "grpo", "kl_coef": 0.0, "self_verify_per_step": PER_STEP,
                             "self_verify_template": TEMPLATE}, 3e-4, "rise"),
    "rise recipe": ({"recipe": "rise", "self_verify_per_step": PER_STEP, "self_verify_template": TEMPLATE}, 1e-4,
                    "rise"),
    "critique_rl recipe": ({"recipe": "critique_rl", "self_verify_per_step": PER_STEP,
                            "self_verify_template": TEMPLATE}, 1e-4, "critique"),
}

JUDGE_SPEC = TinySpec(hidden_size=64, num_layers=2, num_heads=4, intermediate_size=256, max_positions=2048)
JUDGE_TRAIN = "judgement:arithmetic:train:digits=1,n=600,seed=0,near_miss=0"
JUDGE_HELD_OUT = "judgement:arithmetic:eval:digits=1,n=200,seed=1,near_miss=0"
JUDGE_WARM_STEPS = 250
AUDIT_ITEMS = 8


def pct(value: float | None) -> str:
    return fmt(value, True)


def stat(summary: dict[str, Any], key: str) -> float | None:
    return summary[key]["value"] if key in summary else None


# ------------------------------------------------------------------------------------------ self-verification

def self_verify_heldout(model_dir: Path, tasks, answers, mode: str) -> dict[str, Any]:
    """Greedy pass@1 on the held-out problems; the greedy verification summary of the fixed answers."""
    model, tokenizer = load_model(str(model_dir))
    engine = build_engine("hf", model.eval(), tokenizer)
    greedy = SamplingParams(n=1, max_new_tokens=svt.MAX_NEW_TOKENS, temperature=0.0)
    solved = generate_and_score(engine, tokenizer, tasks, greedy, Scoring("exact"))
    rated = self_verify_answers(engine, tokenizer, answers, SelfVerifySetup(TEMPLATE, mode), Scoring("exact"),
                                temperature=0.0, max_new_tokens=svt.MAX_NEW_TOKENS)
    return {"pass@1": sum(v.score >= 1.0 for v in solved.verdicts) / len(tasks), **rated}


def self_verify_cells(name: str, after: dict[str, Any], rows: list[dict] | None, seconds: float | None,
                      steps: int) -> str:
    cells = [name, pct(after["pass@1"])] + [pct(stat(after, k)) for k in
                                            ("accuracy", "accuracy_on_correct", "accuracy_on_wrong", "said_correct")]
    if rows:
        for key in ("reward_mean/on_policy", "verify/accuracy"):
            cells.append(f"{pct(mean(rows, key, slice(0, 10)))} / {pct(mean(rows, key, slice(-10, None)))}")
        cells.append(f"{seconds / steps:.2f}")
    else:
        cells += ["-", "-", "-"]
    return "| " + " | ".join(cells) + " |"


def run_self_verification(*, steps: int, seed: int, out: Path) -> list[str]:
    out = out / "self_verify"
    out.mkdir(parents=True, exist_ok=True)
    warm = svt.warm_start(out, seed)
    tasks, scored = svt.fixed_answers(warm, seed)
    answers = [(t, r, v) for t, r, v in zip(scored.tasks, scored.responses, scored.verdicts)]
    before = {mode: self_verify_heldout(warm, tasks, answers, mode) for mode in ("rise", "critique")}
    lines = [f"self-verification: 2-digit addition, {len(tasks)} held-out problems, {steps} steps x "
             f"{svt.BASE['data']['prompts_per_step']} prompts x {svt.BASE['rollout']['group_size']} responses "
             f"(+ {PER_STEP} verification tasks x {svt.BASE['rollout']['group_size']}), seed {seed}; fixed answers to "
             f"rate: {pct(stat(before['rise'], 'answers_correct'))} correct",
             "| run | held-out pass@1 | verification accuracy | on correct answers | on wrong answers | said correct "
             "| train: solving score (first 10 / last 10 steps) | train: verify/accuracy | s/step |",
             "|" + " --- |" * 9,
             self_verify_cells("warm start (rise rating)", before["rise"], None, None, steps),
             self_verify_cells("warm start (critique judgement)", before["critique"], None, None, steps)]
    print("\n".join(lines), flush=True)
    for name, (algo, lr, mode) in SELF_VERIFY_RUNS.items():
        tree = copy.deepcopy(svt.BASE)
        tree["model"] = {"path": str(warm)}
        tree["algo"] = dict(algo)
        folder = out / name.replace(" ", "_").replace("'", "").replace("+", "plus")
        tree["train"].update(steps=steps, seed=seed, lr=lr, out=str(folder), overwrite=True)
        svt.use_stage(False)  # RISE's own pick
        started = time.perf_counter()
        rows = read_metrics(train(config_from_dict(tree, source=f"seed_verification:{name}")))
        seconds = time.perf_counter() - started
        after = self_verify_heldout(folder / f"checkpoint-{steps}", tasks, answers, mode)
        lines.append(self_verify_cells(name, after, rows, seconds, steps))
        print(lines[-1], flush=True)
    return lines


# ------------------------------------------------------------------------------------------------ the judge

def judge_folders(out: Path, *, steps: int, seed: int, lr: float) -> dict[str, Path]:
    """The untrained judge, after its supervised warm start, and after ``steps`` steps of rlvr train."""
    folders = {"untrained": out / "untrained", "warm start (SFT)": out / "warm",
               f"warm start + rlvr train ({steps} steps)": out / "trained" / f"checkpoint-{steps}"}
    if not (folders["untrained"] / "config.json").is_file():
        model, tokenizer = build_tiny_model(JUDGE_SPEC, seed=seed)
        model.save_pretrained(folders["untrained"])
        tokenizer.save_pretrained(folders["untrained"])
    if not (folders["warm start (SFT)"] / "config.json").is_file():
        model, tokenizer = build_tiny_model(JUDGE_SPEC, seed=seed)
        torch.manual_seed(seed)
        pairs = [(t.prompt, t.reference) for t in load_tasks(JUDGE_TRAIN)]
        sft(model, tokenizer, pairs, steps=JUDGE_WARM_STEPS, batch_size=32, lr=2e-3, seed=seed, progress=False)
        model.save_pretrained(folders["warm start (SFT)"])
        tokenizer.save_pretrained(folders["warm start (SFT)"])
    tree = {"model": {"path": str(folders["warm start (SFT)"])},
            "data": {"train": JUDGE_TRAIN, "prompts_per_step": 16},
            "rollout": {"group_size": 4, "max_new_tokens": 4, "temperature": 1.0},
            "algo": {"recipe": "grpo", "kl_coef": 0.0},
            "train": {"steps": steps, "seed": seed, "lr": lr, "max_grad_norm": 1.0, "progress": False,
                      "log_samples": 0, "out": str(out / "trained"), "overwrite": True}}
    train(config_from_dict(tree, source="seed_verification:judge"))
    return folders


def judgement_accuracy(folder: Path) -> dict[str, float]:
    """Greedy verdicts on the held-out judgement tasks: accuracy, per class, the share of "yes" and of replies that
    are neither word."""
    model, tokenizer = load_model(str(folder))
    tasks = load_tasks(JUDGE_HELD_OUT)
    out = build_engine("hf", model.eval(), tokenizer).generate(
        [encode_prompt(tokenizer, t.prompt) for t in tasks], SamplingParams(n=1, max_new_tokens=4, temperature=0.0))
    said = [tokenizer.decode(out.response_ids[i, :int(out.response_mask[i].sum())].tolist(),
                             skip_special_tokens=True).strip() for i in range(len(tasks))]
    right = [s == t.reference for s, t in zip(said, tasks)]

    def share(rows):
        return sum(rows) / len(rows) if rows else None

    return {"accuracy": share(right),
            "on_yes": share([r for r, t in zip(right, tasks) if t.reference == YES]),
            "on_no": share([r for r, t in zip(right, tasks) if t.reference == NO]),
            "said_yes": share([s == YES for s in said]), "neither": share([s not in (YES, NO) for s in said])}


class LoopbackJudge:
    """The folder served by rlvr's model server on 127.0.0.1 (a free port), in a thread of this process."""

    def __init__(self, folder: Path):
        from rlvr.rollout.model_server import build_server, serve

        self.server = build_server(str(folder), port=0, name="judge", max_tokens=4, device="cpu")
        self.stop = threading.Event()
        self.thread = threading.Thread(target=serve, args=(self.server, self.stop), daemon=True)
        self.thread.start()

    def __enter__(self):
        return self.server.base_url

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join(timeout=30)
        self.server.close()


def audit_items(seed: int) -> list[tuple[str, str, str, str]]:
    """Held-out 1-digit problems: (question, reference, the correct answer, a wrong answer)."""
    tasks = load_tasks(f"arithmetic:eval:digits=1,n={AUDIT_ITEMS},seed={seed}")
    return [(t.prompt, str(t.reference), str(t.reference), str(int(t.reference) + 1)) for t in tasks]


def audit(folder: Path, seed: int) -> dict[str, Any]:
    """The master-key audit under the prompt the judge was trained on, without and with pre-checks."""
    short = judge_options("short")
    setups = (Setup("training prompt", {**short, "prechecks": False}),
              Setup("training prompt + pre-checks", {**short, "prechecks": True}))
    os.environ.setdefault("OPENAI_API_KEY", "unused")  # the loopback server asks for no key
    with LoopbackJudge(folder) as base_url:
        report = audit_judge(audit_items(seed), {"base_url": base_url, "model": "judge", "max_tokens": 4,
                                                 "timeout_s": 60, "cache": False}, setups)
    return report["summary"]


def run_judge(*, steps: int, seed: int, out: Path, lr: float = 3e-4) -> list[str]:
    out = out / "judge"
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    folders = judge_folders(out, steps=steps, seed=seed, lr=lr)
    lines = [f"judge: 1-digit addition judgements ({JUDGE_TRAIN}); held out: {JUDGE_HELD_OUT}; master keys of rlvr "
             f"audit judge on {AUDIT_ITEMS} held-out problems, under the judge's training prompt; rlvr train at "
             f"lr {lr}, 16 prompts x 4 verdicts per step; seed {seed}",
             "| judge | held-out accuracy | on yes items | on no items | said yes | neither word | key false positives "
             "| with pre-checks | correct answers accepted | wrong answers accepted | undecided calls | train: sampled "
             "verdicts right (first 10 / last 10 steps) |",
             "|" + " --- |" * 12]
    rows = read_metrics(out / "trained")
    for name, folder in folders.items():
        held = judgement_accuracy(folder)
        summary = audit(folder, seed)
        plain, checked = summary["training prompt"], summary["training prompt + pre-checks"]
        lines.append("| " + " | ".join([name] + [pct(held[k]) for k in ("accuracy", "on_yes", "on_no", "said_yes",
                                                                         "neither")]
                                        + [pct(plain["key_false_positive_rate"]),
                                           pct(checked["key_false_positive_rate"]),
                                           pct(plain["true_positive_rate"]),
                                           pct(plain.get("wrong_answer_accept_rate")),
                                           str(plain["undecided_calls"])]
                                        + [f"{pct(mean(rows, 'verifier_score_mean', slice(0, 10)))} / "
                                           f"{pct(mean(rows, 'verifier_score_mean', slice(-10, None)))}"
                                           if folder.parent.name == "trained" else "-"]) + " |")
        print(lines[-1], flush=True)
    lines.append(f"judge part: {time.perf_counter() - started:.0f} s")
    return lines


# -------------------------------------------------------------------------------------------------- the PRM

PRM_SPEC = TinySpec(hidden_size=64, num_layers=2, num_heads=4, intermediate_size=256)
PRM_TRAIN = "steps:arithmetic:chain:terms=3,n=4000,seed=0"
PRM_HELD_OUT = "steps:arithmetic:chain:terms=3,split=eval,n=200,seed=5"


def prm_agreement(folder: Path) -> dict[str, float]:
    """The ``prm`` source (reader labels) on held-out worked solutions, against the step labels: agreement of the
    score's sign with the label, on good steps and on bad steps apart, and the share of steps scored good."""
    from types import SimpleNamespace

    from rlvr.rewards.process import compute_process
    from rlvr.tasks import Task

    _, tokenizer = load_model(str(folder))
    held = load_tasks(PRM_HELD_OUT)
    texts = ["\n".join(t.meta["steps"]) for t in held]
    rows = [tokenizer(x, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id] for x in texts]
    ids = torch.full((len(rows), max(map(len, rows))), tokenizer.pad_token_id)
    mask = torch.zeros_like(ids)
    for i, r in enumerate(rows):
        ids[i, :len(r)], mask[i, :len(r)] = torch.tensor(r), 1
    tasks = [Task(prompt=t.meta["problem"], reference="", id=t.id) for t in held]
    scored = compute_process("prm", SimpleNamespace(response_ids=ids, response_mask=mask), texts, tasks, tokenizer,
                             path=str(folder), reader="labels")
    pairs = [(s > 0, label == "+") for i, t in enumerate(held)
             for s, label in zip(scored.values[i][scored.step_end[i]].tolist(), t.meta["labels"])]
    good = [said for said, truth in pairs if truth]
    bad = [not said for said, truth in pairs if not truth]
    return {"agreement": sum(said == truth for said, truth in pairs) / len(pairs), "on_good": sum(good) / len(good),
            "on_bad": sum(bad) / len(bad), "said_good": sum(said for said, _ in pairs) / len(pairs),
            "steps": len(pairs)}


def run_prm(*, sft_steps: int, steps: int, seed: int, out: Path) -> list[str]:
    """A step labeller: ``rlvr sft`` on steps: tasks (the labels as target), then ``rlvr train`` on them."""
    from rlvr.models import save_tiny_model
    from rlvr.train.sft_run import run_sft

    out = out / "prm"
    started = time.perf_counter()
    base = save_tiny_model(out / "base", PRM_SPEC, seed=seed)
    common = {"data": {"train": PRM_TRAIN}, "train": {"seed": seed, "progress": False, "overwrite": True}}
    tree = copy.deepcopy(common)
    tree["model"] = {"path": str(base)}
    tree["data"].update(completion_field="reference", prompts_per_step=32)
    tree["train"].update(steps=sft_steps, lr=3e-3, out=str(out / "sft"))
    run_sft(config_from_dict(tree, source="seed_verification:prm-sft"))
    tree = copy.deepcopy(common)
    tree["model"] = {"path": str(out / "sft" / f"checkpoint-{sft_steps}")}
    tree["data"]["prompts_per_step"] = 16
    tree["rollout"] = {"group_size": 4, "max_new_tokens": 5}
    tree["train"].update(steps=steps, lr=1e-4, out=str(out / "rl"), log_samples=0)
    train(config_from_dict(tree, source="seed_verification:prm-rl"))
    folders = {"untrained": base, f"rlvr sft ({sft_steps} steps)": out / "sft" / f"checkpoint-{sft_steps}",
               f"+ rlvr train ({steps} steps)": out / "rl" / f"checkpoint-{steps}"}
    lines = [f"PRM: a step labeller trained on {PRM_TRAIN}, read by the prm source (reader: labels) on "
             f"{PRM_HELD_OUT}; seed {seed}",
             "| labeller | steps scored | agreement with the labels | on good steps | on bad steps | scored good |",
             "|" + " --- |" * 6]
    for name, folder in folders.items():
        a = prm_agreement(folder)
        lines.append(f"| {name} | {a['steps']} | {pct(a['agreement'])} | {pct(a['on_good'])} | {pct(a['on_bad'])} "
                     f"| {pct(a['said_good'])} |")
        print(lines[-1], flush=True)
    lines.append(f"PRM part: {time.perf_counter() - started:.0f} s")
    return lines


# ------------------------------------------------------------------------------------------------ entry points

def run_verification(args: argparse.Namespace) -> list[str]:
    """The tables of the parts ``args.part`` names (both when it is None), as lines."""
    part = getattr(args, "part", None)
    lines: list[str] = []
    if part in (None, "self_verify"):
        lines += run_self_verification(steps=args.steps, seed=args.seed, out=Path(args.out))
    if part in (None, "judge"):
        lines += [""] if lines else []
        lines += run_judge(steps=getattr(args, "judge_steps", 100), seed=args.seed, out=Path(args.out),
                           lr=getattr(args, "judge_lr", 3e-4))
    if part in (None, "prm"):
        lines += [""] if lines else []
        lines += run_prm(sft_steps=getattr(args, "prm_sft_steps", 600), steps=getattr(args, "prm_steps", 40),
                         seed=args.seed, out=Path(args.out))
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--part", choices=["self_verify", "judge", "prm"], default=None, help="default: all three")
    parser.add_argument("--steps", type=int, default=100, help="RL steps of each self-verification run")
    parser.add_argument("--judge-steps", type=int, default=100, help="rlvr train steps of the judge")
    parser.add_argument("--judge-lr", type=float, default=3e-4, help="rlvr train learning rate of the judge")
    parser.add_argument("--prm-sft-steps", type=int, default=600, help="rlvr sft steps of the PRM")
    parser.add_argument("--prm-steps", type=int, default=40, help="rlvr train steps of the PRM")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)  # two threads on a shared 2-core machine wait on each other
    parser.add_argument("--out", type=Path, default=Path("runs/seed_verification"))
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    started = time.perf_counter()
    lines = run_verification(args)
    lines.append(f"machine: {platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}, "
                 f"threads {args.threads}; total {time.perf_counter() - started:.0f} s")
    print(lines[-1])
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"verification{'-' + args.part if args.part else ''}.json").write_text(
        json.dumps({"table": "\n".join(lines), "argv": sys.argv}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
