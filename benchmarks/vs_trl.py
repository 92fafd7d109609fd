"""Seconds per RL step: rlvr vs TRL's GRPOTrainer on the same model, data and machine, in one run.

    python benchmarks/vs_trl.py [--pairs 3] [--sizes 6m,25m] [--threads 2] [--workdir DIR]

The workload (identical for both): a Llama-family model with a character vocabulary built locally and
saved as a Hugging Face folder (6m: hidden 256, 6 layers, 4 heads, tied embeddings, ~6M parameters; 25m:
hidden 512, 6 layers, 8 heads, ~25M), 512 prompts like "37+58=", reward = exact match of the completion's
first line; per step 8 prompts x 8 samples, at most 32 new tokens, temperature 1.0, no KL term (no
reference model), learning rate 1e-5, float32, 2 torch threads; either one optimizer update per rollout batch
("single") or DAPO's structure scaled to this batch ("dapo": 4 mini-batch updates of 16 completions each, clip
0.2/0.28; rlvr algo.mini_batches=4, TRL steps_per_generation=4 with per_device_train_batch_size=16). rlvr
runs with train.approx_kl=false: TRL measures no KL between the policy before and after a step, so both
trainers do the same work.

Each trainer runs as its own process for 3 and for 13 steps; seconds per step = (time for 13 - time for 3)
/ 10, so start-up, model loading and the final save cancel out. The two trainers are run alternately,
--pairs times, and the median is reported. Needs `pip install trl` (the `bench` extra).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SIZES = {  # name -> TinySpec keyword arguments
    "6m": dict(hidden_size=256, num_layers=6, num_heads=4, intermediate_size=1024, max_positions=64),
    "25m": dict(hidden_size=512, num_layers=6, num_heads=8, intermediate_size=2048, max_positions=64),
}
SHORT, LONG = 3, 13

TRL_SCRIPT = r'''
import json, sys
import torch
torch.set_num_threads(int(sys.argv[4]))
import datasets
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl import GRPOConfig, GRPOTrainer

model_dir, data_path, steps, threads, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
updates = int(sys.argv[6])  # optimizer steps per generation batch of 64 completions (steps_per_generation)
rows = [json.loads(line) for line in open(data_path)]

def exact_first_line(prompts, completions, reference, **_):
    return [float(c.strip().split("\n")[0].strip() == str(r)) for c, r in zip(completions, reference)]

config = GRPOConfig(
    output_dir=out, per_device_train_batch_size=64 // updates, steps_per_generation=updates, num_generations=8,
    max_completion_length=32, temperature=1.0, beta=0.0, learning_rate=1e-5, max_steps=steps * updates,
    epsilon=0.2, epsilon_high=0.28 if updates > 1 else 0.2, use_cpu=True, bf16=False, fp16=False,
    report_to=[], logging_steps=1, save_strategy="no", dataloader_num_workers=0, seed=0,
)
trainer = GRPOTrainer(
    model=AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32),
    processing_class=AutoTokenizer.from_pretrained(model_dir),
    reward_funcs=[exact_first_line], args=config, train_dataset=datasets.Dataset.from_list(rows),
)
trainer.train()
assert trainer.state.global_step == steps * updates
'''


def build_workload(workdir: Path, size: str) -> tuple[Path, Path]:
    from rlvr.models.tiny import TinySpec, save_tiny_model
    from rlvr.tasks import load_tasks

    model_dir = workdir / f"model-{size}"
    if not model_dir.exists():
        save_tiny_model(model_dir, TinySpec(**SIZES[size]), seed=0)
    data = workdir / "prompts.jsonl"
    if not data.exists():
        tasks = load_tasks("arithmetic:train:n=512")
        data.write_text("".join(json.dumps({"prompt": t.prompt, "reference": str(t.reference)}) + "\n" for t in tasks))
    return model_dir, data


# update structures compared: optimizer steps per rollout batch of 8 prompts x 8 samples
STRUCTURES = {"single": 1, "dapo": 4}


def rlvr_command(model_dir: Path, data: Path, steps: int, threads: int, out: Path, updates: int = 1) -> list[str]:
    root = Path(__file__).resolve().parent.parent
    dapo = [f"algo.mini_batches={updates}", "algo.clip_high=0.28"] if updates > 1 else []
    return [
        sys.executable, "-m", "rlvr.cli", "train", str(root / "examples" / "arithmetic.yaml"),
        f"model.path={model_dir}", f"data.train={data}", "data.verifier=exact",
        "data.verifier_options={first_line: true}", "data.prompts_per_step=8", "rollout.group_size=8",
        "rollout.max_new_tokens=32", "rollout.temperature=1.0", "algo.kl_coef=0", "train.lr=1e-5",
        f"train.steps={steps}", f"train.threads={threads}", "train.save_every=0", "train.progress=false",
        f"train.out={out}", "train.approx_kl=false", *dapo,  # a diagnostic TRL does not compute (see the docstring)
    ]


def trl_command(script: Path, model_dir: Path, data: Path, steps: int, threads: int, out: Path,
                updates: int = 1) -> list[str]:
    return [sys.executable, str(script), str(model_dir), str(data), str(steps), str(threads), str(out), str(updates)]


def timed(cmd: list[str], threads: int) -> float:
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads),
           "TOKENIZERS_PARALLELISM": "false"}
    start = time.perf_counter()
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"command failed ({done.returncode}): {' '.join(cmd)}\n{done.stderr[-3000:]}")
    return elapsed


def seconds_per_step(make_cmd, threads: int, workdir: Path, tag: str) -> float:
    short = timed(make_cmd(SHORT, workdir / f"{tag}-short"), threads)
    long = timed(make_cmd(LONG, workdir / f"{tag}-long"), threads)
    return (long - short) / (LONG - SHORT)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--sizes", default="6m,25m")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--structures", default="single,dapo",
                        help="update structures: single (one optimizer step per rollout batch) and dapo (4 mini-batch "
                             "steps per rollout batch: rlvr algo.mini_batches=4, TRL steps_per_generation=4)")
    parser.add_argument("--workdir", help="where models, data and runs go (default: a temporary folder)")
    args = parser.parse_args()
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="rlvr-vs-trl-"))
    workdir.mkdir(parents=True, exist_ok=True)
    script = workdir / "trl_grpo.py"
    script.write_text(TRL_SCRIPT)
    import trl

    import rlvr

    print(f"rlvr {rlvr.__version__} vs trl {trl.__version__}; {args.threads} torch threads; "
          f"seconds per step = (time for {LONG} steps - time for {SHORT}) / {LONG - SHORT}, median of {args.pairs} pairs")
    print("a step = one rollout batch (generation, rewards and all its optimizer updates)")
    print(f"{'model':>6} {'params':>8} {'updates':>8} {'TRL s/step':>11} {'rlvr s/step':>12} {'ratio':>6}   pairs (TRL, rlvr)")
    for size in [s.strip() for s in args.sizes.split(",") if s.strip()]:
        model_dir, data = build_workload(workdir, size)
        from transformers import AutoModelForCausalLM

        params = sum(p.numel() for p in AutoModelForCausalLM.from_pretrained(model_dir).parameters())
        for structure in [s.strip() for s in args.structures.split(",") if s.strip()]:
            updates = STRUCTURES[structure]
            theirs, ours = [], []
            for i in range(args.pairs):
                theirs.append(seconds_per_step(
                    lambda n, out: trl_command(script, model_dir, data, n, args.threads, out, updates),
                    args.threads, workdir, f"trl-{size}-{structure}-{i}"))
                ours.append(seconds_per_step(
                    lambda n, out: rlvr_command(model_dir, data, n, args.threads, out, updates),
                    args.threads, workdir, f"rlvr-{size}-{structure}-{i}"))
            t, o = statistics.median(theirs), statistics.median(ours)
            pairs = ", ".join(f"({a:.2f}, {b:.2f})" for a, b in zip(theirs, ours))
            print(f"{size:>6} {params / 1e6:7.1f}M {updates:>8} {t:11.3f} {o:12.3f} {t / o:5.1f}x   {pairs}", flush=True)


if __name__ == "__main__":
    main()
