"""Synchronous, one-step-off and streaming+partial rollouts on the Ray backend, with a long tail of response lengths:
seconds per step, tokens per second and the reward curves side by side, and a model of the gain at more workers.

    python benchmarks/async.py [--steps 12] [--workers 1] [--modes sync,one_off,stream_k1,stream_k2] [--lr 3e-4]
                               [--scales 8,64] [--workdir DIR] [--json OUT.json] [--timeout 900]

The workload: a tiny Llama-family model (hidden 128, 2 layers, character vocabulary) fine-tuned for a few seconds
to answer one-digit sums and then, for a minority of its answers, to keep writing filler: 60% of the training
answers end at once, 25% after 1-6 filler characters and 15% after 30-60, so a step's sampled lengths have a long
tail (a group is as slow as its longest response). RL: the arithmetic task scored by the ``numeric`` verifier
(the filler does not hide the number), 8 prompts x 4 samples per step, at most 64 new tokens, train.lr --lr, the
same seed in every mode. Modes (each a `rlvr train` run with ``cluster.backend=ray``, one learner, ``--workers`` rollout
workers): ``sync`` (collect, then update), ``one_off`` (``cluster.async_rollouts=1``), ``stream_k1`` and
``stream_k2`` (``cluster.partial_rollouts=true``, ``cluster.max_staleness`` 1 and 2). The off-policy modes use
truncated importance sampling (``algo.tis_cap=2``).

Figures: s/step is the median of metrics.jsonl's ``time_s`` over the steps after the first (start-up left out);
tokens/s the trained response tokens over the summed step times of those steps; the reward curve the verifier score
of each step, in windows of --window steps.

The model of more rollout workers (W) uses times measured here, in this process: the hf engine's seconds per
decoding step at each batch size (one torch thread, the same architecture), the per-row lengths sampled in the sync
run (its samples.jsonl, every row logged), and the learner's seconds per step (the sync run's s/step minus its
modelled generation time at the measured W). A step's rows are shared equally among W workers; a worker decodes its
share as one batch from which finished rows leave, so its time is the sum, over decoding steps up to its longest
row (streaming: up to the chunk, ceil(64 / K) tokens, over the rows of ``K x 8`` groups under way), of the step
time at the rows still live. sync = generation + learner; one-step-off and streaming = the larger of the two (they
overlap). Weight transfer, scoring and Ray's overheads are left out, so the modelled gain is an upper bound; the
table prints the model at the measured W beside the measured figures.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SPEC = dict(hidden_size=128, num_layers=2, num_heads=4, intermediate_size=512, max_positions=128)
PROMPTS, GROUP, MAX_NEW = 8, 4, 64
MODES = {
    "sync": [],
    "one_off": ["cluster.async_rollouts=1", "algo.tis_cap=2.0"],
    "stream_k1": ["cluster.partial_rollouts=true", "cluster.max_staleness=1", "algo.tis_cap=2.0"],
    "stream_k2": ["cluster.partial_rollouts=true", "cluster.max_staleness=2", "algo.tis_cap=2.0"],
}
STALENESS = {"sync": 0, "one_off": 1, "stream_k1": 1, "stream_k2": 2}


def filler_length(rng: random.Random) -> int:
    """The long tail the fine-tuning teaches: most answers end at once, a few run on."""
    u = rng.random()
    return 0 if u < 0.60 else rng.randint(1, 6) if u < 0.85 else rng.randint(30, 60)


def build_model(workdir: Path) -> Path:
    import torch

    from rlvr.models.tiny import TinySpec, build_tiny_model
    from rlvr.tasks.arithmetic import ArithmeticSpec, all_problems
    from rlvr.train import sft

    path = workdir / "model"
    if (path / "config.json").is_file():
        return path
    model, tokenizer = build_tiny_model(TinySpec(**SPEC), seed=0)
    torch.manual_seed(0)
    rng = random.Random(0)
    problems = all_problems(ArithmeticSpec(digits=1), "train")
    pairs = [(t.prompt, f"{t.reference}" + "." * filler_length(rng)) for t in problems for _ in range(8)]
    sft(model, tokenizer, pairs, steps=150, batch_size=32, lr=3e-3, seed=0, progress=False)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def train_command(model: Path, out: Path, mode: str, steps: int, workers: int, lr: float) -> list[str]:
    return [sys.executable, "-m", "rlvr.cli", "train", str(ROOT / "examples" / "arithmetic.yaml"),
            f"model.path={model}", f"train.out={out}", "train.overwrite=true", "data.train=arithmetic:train:digits=1",
            "data.verifier=numeric", f"data.prompts_per_step={PROMPTS}", f"rollout.group_size={GROUP}",
            f"rollout.max_new_tokens={MAX_NEW}", f"train.steps={steps}", "train.save_every=0", f"train.lr={lr:g}",
            f"train.log_samples={PROMPTS * GROUP}",
            "train.seed=0", "train.progress=false", "cluster.backend=ray", "cluster.learners=1",
            f"cluster.rollout_workers={workers}", *MODES[mode]]


def run_mode(model: Path, workdir: Path, mode: str, steps: int, workers: int, lr: float, timeout: float) -> dict:
    out = workdir / f"run-{mode}"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT / "src")}
    started = time.perf_counter()
    try:
        done = subprocess.run(train_command(model, out, mode, steps, workers, lr), env=env, capture_output=True,
                              text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"mode": mode, "failed": f"over --timeout {timeout:g}s"}
    if done.returncode != 0:
        return {"mode": mode, "failed": done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "failed"}
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    later = rows[1:]
    tokens = sum(r["response_len_mean"] * PROMPTS * GROUP for r in later)
    seconds = sum(r["time_s"] for r in later)
    return {"mode": mode, "s_per_step": statistics.median(r["time_s"] for r in later), "tokens_per_s": tokens / seconds,
            "wall_s": time.perf_counter() - started, "reward": [r["verifier_score_mean"] for r in rows],
            "response_len_mean": statistics.mean(r["response_len_mean"] for r in rows),
            "staleness_max": max(r.get("staleness_max", STALENESS[mode]) for r in rows),
            "staleness_mean": statistics.mean(r.get("staleness_mean", STALENESS[mode]) for r in later),
            "dir": str(out)}


def decode_step_seconds(batches: list[int], repeats: int = 3) -> dict[int, float]:
    """The hf engine's seconds per decoding step at each batch size (random weights of the benchmark's shape, which
    rarely end a response, so every row decodes MAX_NEW steps)."""
    import torch

    from rlvr.models.tiny import TinySpec, build_tiny_model
    from rlvr.rollout import SamplingParams, build_engine

    torch.set_num_threads(1)
    model, tokenizer = build_tiny_model(TinySpec(**SPEC), seed=1)
    engine = build_engine("hf", model, tokenizer)
    prompt = list(tokenizer("3+4=")["input_ids"])
    out = {}
    for b in batches:
        times = []
        for r in range(repeats):
            torch.manual_seed(r)
            started = time.perf_counter()
            batch = engine.generate([prompt] * b, SamplingParams(n=1, max_new_tokens=MAX_NEW))
            times.append((time.perf_counter() - started) / int(batch.response_mask.sum(-1).max()))
        out[b] = min(times)
    return out


def step_time(lengths: list[int], d: dict[int, float], workers: int, chunk: int | None, rows: int) -> float:
    """Modelled seconds one round of generation takes: ``rows`` rows drawn from ``lengths`` shared among
    ``workers``; a worker decodes its share as one batch from which finished rows leave (the hf engine), so its
    time is the sum over decoding steps, up to its longest row (or the chunk), of the step time at the rows still
    live; the round ends with the slowest worker."""
    rng = random.Random(0)
    sizes = sorted(d)

    def per_step(b: int) -> float:  # linear between the measured batch sizes, flat beyond the largest
        if b <= sizes[0]:
            return d[sizes[0]]
        for lo, hi in zip(sizes, sizes[1:]):
            if b <= hi:
                return d[lo] + (d[hi] - d[lo]) * (b - lo) / (hi - lo)
        return d[sizes[-1]] * b / sizes[-1]

    trials = []
    for _ in range(200):
        drawn = [rng.choice(lengths) for _ in range(rows)]
        bounds = [rows * i // workers for i in range(workers + 1)]
        shares = [drawn[a:b] for a, b in zip(bounds, bounds[1:]) if b > a]
        trials.append(max(sum(per_step(sum(n > t for n in share)) for t in range(min(max(share), chunk or MAX_NEW)))
                          for share in shares))
    return statistics.mean(trials)


def model_gain(results: dict[str, dict], lengths: list[int], d: dict[int, float], measured_workers: int,
               scales: list[int]) -> list[dict]:
    """Modelled s/step of each mode at each worker count (module docstring), with the learner's time taken from
    the sync run."""
    rows = PROMPTS * GROUP
    gen_sync = lambda w: step_time(lengths, d, w, None, rows)  # noqa: E731
    learner = max(0.0, results["sync"]["s_per_step"] - gen_sync(measured_workers))

    def modelled(mode: str, w: int) -> float:
        if mode == "sync":
            return gen_sync(w) + learner
        if mode == "one_off":
            return max(gen_sync(w), learner)
        k = int(mode[-1])
        # K x prompts groups under way: the unfinished rows of a round, about rows x K at the first chunk
        return max(step_time(lengths, d, w, math.ceil(MAX_NEW / k), rows * k), learner)

    table = []
    for w in [measured_workers, *scales]:
        sync = modelled("sync", w)
        table.append({"workers": w, "learner_s": learner,
                      **{mode: {"s_per_step": modelled(mode, w), "gain": sync / modelled(mode, w)} for mode in MODES}})
    return table


def sampled_lengths(run_dir: Path) -> list[int]:
    """Every sampled row's length in tokens, from samples.jsonl (all rows are logged; one character is one token,
    plus the end-of-sequence token of a response that was not cut off)."""
    rows = [json.loads(line) for line in (run_dir / "samples.jsonl").read_text().splitlines()]
    return [len(r["response"]) + (0 if r["truncated"] else 1) for r in rows]


def print_tables(results: dict[str, dict], model: list[dict], window: int) -> None:
    print("| mode | staleness (mean / max) | response tokens (mean) | s/step | tokens/s | s/step vs sync |")
    print("|---|---|---|---|---|---|")
    base = results.get("sync", {}).get("s_per_step")
    for mode, r in results.items():
        if "failed" in r:
            print(f"| {mode} | failed: {r['failed']} | | | | |")
            continue
        gain = f"{base / r['s_per_step']:.2f}x" if base else "-"
        print(f"| {mode} | {r['staleness_mean']:.2f} / {r['staleness_max']} | {r['response_len_mean']:.1f} | "
              f"{r['s_per_step']:.3f} | "
              f"{r['tokens_per_s']:.0f} | {gain} |")
    ok = {m: r for m, r in results.items() if "failed" not in r}
    if ok:
        n = len(next(iter(ok.values()))["reward"])
        print(f"\nReward (verifier score) per {window}-step window:\n")
        print("| steps | " + " | ".join(ok) + " |")
        print("|---|" + "---|" * len(ok))
        for start in range(0, n, window):
            cells = [f"{statistics.mean(r['reward'][start:start + window]):.3f}" for r in ok.values()]
            print(f"| {start + 1}-{min(n, start + window)} | " + " | ".join(cells) + " |")
    if model:
        print("\nModelled s/step (gain over sync) by rollout workers; learner "
              f"{model[0]['learner_s']:.3f} s/step:\n")
        print("| workers | " + " | ".join(MODES) + " |")
        print("|---|" + "---|" * len(MODES))
        for row in model:
            print(f"| {row['workers']} | " + " | ".join(f"{row[m]['s_per_step']:.3f} ({row[m]['gain']:.2f}x)"
                                                        for m in MODES) + " |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--workers", type=int, default=1, help="rollout workers of the measured runs")
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--scales", default="8,64", help="rollout worker counts to model")
    parser.add_argument("--window", type=int, default=4)
    parser.add_argument("--lr", type=float, default=3e-4, help="train.lr of every mode")
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--timeout", type=float, default=900)
    args = parser.parse_args(argv)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="rlvr-async-"))
    workdir.mkdir(parents=True, exist_ok=True)
    model = build_model(workdir)
    results = {}
    for mode in args.modes.split(","):
        results[mode] = run_mode(model, workdir, mode, args.steps, args.workers, args.lr, args.timeout)
        print(f"{mode}: {json.dumps({k: v for k, v in results[mode].items() if k != 'reward'})}", file=sys.stderr)
    table = []
    if "sync" in results and "failed" not in results["sync"]:
        lengths = sampled_lengths(Path(results["sync"]["dir"]))
        d = decode_step_seconds([1, 2, 4, 8, 16, 32, 64])
        table = model_gain(results, lengths, d, args.workers, [int(s) for s in args.scales.split(",")])
        results["decode_step_s"] = {"by_batch": d}
        results["lengths"] = {"mean": statistics.mean(lengths), "p50": statistics.median(lengths),
                              "p90": sorted(lengths)[int(0.9 * len(lengths))], "max": max(lengths)}
        print(f"lengths: {results['lengths']}; decode step s by batch: {d}", file=sys.stderr)
    print_tables({m: r for m, r in results.items() if m in MODES}, table, args.window)
    if args.json:
        args.json.write_text(json.dumps({"results": results, "model": table}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
