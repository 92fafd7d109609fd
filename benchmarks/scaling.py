"""Seconds per RL step by layout, side by side in one run: the local backend and the Ray backend, each with 1 and 2
learners (Ray: as many rollout workers as learners), with the hf engine and, where vLLM is installed, the vllm one.

    python benchmarks/scaling.py [--sizes 6m,25m] [--layouts local-1,local-2,ray-1,ray-2] [--engines hf,vllm]
                                 [--steps 8] [--repeats 1] [--workdir DIR] [--json OUT.json]

The workload: a Llama-family model with a character vocabulary built locally and saved as a Hugging Face folder
(6m: hidden 256, 6 layers, 4 heads, ~6M parameters; 25m: hidden 512, 6 layers, 8 heads, ~25M), the arithmetic task
of examples/arithmetic.yaml, 8 prompts x 8 samples per step, at most 32 new tokens, one update per step, float32.
The machine's cores are shared out: a run with N learners gives each rank cores / N torch threads.

Each layout runs as `rlvr train` for --steps steps; seconds per step is the median of the step times the run logs
(metrics.jsonl "time_s": sampling, scoring, updates, the weight sync and logging) over its steps after the first,
so start-up (torchrun, a local Ray cluster, actors, model loading) is left out and a passing load spike on a
shared machine moves the figure little. The median over --repeats runs is reported. An engine that is not
installed (vllm) is reported as skipped, a run that fails or passes --timeout as failed, each with the reason.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SIZES = {  # name -> TinySpec keyword arguments (the sizes of benchmarks/vs_trl.py)
    "6m": dict(hidden_size=256, num_layers=6, num_heads=4, intermediate_size=1024, max_positions=64),
    "25m": dict(hidden_size=512, num_layers=6, num_heads=8, intermediate_size=2048, max_positions=64),
}
LAYOUTS = {  # name -> cluster overrides
    "local-1": {"cluster.backend": "local", "cluster.learners": 1},
    "local-2": {"cluster.backend": "local", "cluster.learners": 2},
    "ray-1": {"cluster.backend": "ray", "cluster.learners": 1, "cluster.rollout_workers": 1},
    "ray-2": {"cluster.backend": "ray", "cluster.learners": 2, "cluster.rollout_workers": 2},
}


def engine_missing(engine: str) -> str | None:
    """Why ``rollout.engine=engine`` cannot run here, or None."""
    if engine == "vllm" and importlib.util.find_spec("vllm") is None:
        return "vllm is not installed in this environment"
    return None


def layout_missing(layout: str) -> str | None:
    if layout.startswith("ray") and importlib.util.find_spec("ray") is None:
        return "ray is not installed (pip install 'rlvr[ray]')"
    return None


def build_model(workdir: Path, size: str) -> Path:
    from rlvr.models.tiny import TinySpec, save_tiny_model

    model_dir = workdir / f"model-{size}"
    if not model_dir.exists():
        save_tiny_model(model_dir, TinySpec(**SIZES[size]), seed=0)
    return model_dir


def command(model_dir: Path, layout: str, engine: str, steps: int, out: Path, threads: int) -> list[str]:
    overrides = {
        "model.path": model_dir, "data.prompts_per_step": 8, "rollout.group_size": 8, "rollout.max_new_tokens": 32,
        "rollout.engine": engine, "algo.kl_coef": 0, "train.lr": 1e-5, "train.steps": steps,
        "train.threads": threads, "train.save_every": 0, "train.progress": "false", "train.out": out,
        **LAYOUTS[layout],
    }
    return [sys.executable, "-m", "rlvr.cli", "train", str(ROOT / "examples" / "arithmetic.yaml"),
            *(f"{k}={v}" for k, v in overrides.items())]


def run(cmd: list[str], env: dict[str, str], timeout_s: float) -> str | None:
    """Run one layout; None when it finished, else why not (a failure or a run past ``timeout_s``)."""
    try:
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return f"no result within {timeout_s:.0f} s: {' '.join(cmd)}"
    if done.returncode != 0:
        return f"failed ({done.returncode}): {' '.join(cmd)}\n{done.stderr[-3000:]}"
    return None


def seconds_per_step(model_dir: Path, layout: str, engine: str, workdir: Path, cores: int, steps: int, repeat: int,
                     threads: int | None = None, timeout_s: float = 900) -> float:
    """The median logged step time of one run after its first step; RuntimeError (with the reason) if it fails."""
    learners = int(LAYOUTS[layout]["cluster.learners"])
    threads = threads or max(1, cores // learners)
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "TOKENIZERS_PARALLELISM": "false",
           "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), *filter(None, [os.environ.get("PYTHONPATH")])])}
    env.setdefault("RAY_TMPDIR", str(workdir / "ray"))
    out = workdir / f"{model_dir.name}-{layout}-{engine}-{repeat}"
    failure = run(command(model_dir, layout, engine, steps, out, threads), env, timeout_s)
    if failure:
        raise RuntimeError(failure)
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return statistics.median(r["time_s"] for r in rows[1:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="6m,25m")
    parser.add_argument("--layouts", default=",".join(LAYOUTS))
    parser.add_argument("--engines", default="hf,vllm")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--cores", type=int, default=os.cpu_count() or 1, help="torch threads shared out per run")
    parser.add_argument("--threads", type=int, help="torch threads of every learner rank (default: cores / learners); "
                        "1 compares one core per learner, the fair figure on a machine others load too")
    parser.add_argument("--workdir", help="where models and runs go (default: a temporary folder)")
    parser.add_argument("--timeout", type=float, default=900, help="seconds one layout's run may take")
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="rlvr-scaling-"))
    workdir.mkdir(parents=True, exist_ok=True)
    sizes, layouts, engines = args.sizes.split(","), args.layouts.split(","), args.engines.split(",")
    share = f"{args.threads} torch thread(s) per learner rank" if args.threads else f"{args.cores} cores shared out per run"
    print(f"seconds per step: median step time of steps 2-{args.steps}, median of {args.repeats} runs; {share}")
    results: list[dict] = []
    header = f"{'size':<5} {'engine':<6} " + " ".join(f"{layout:>9}" for layout in layouts)
    print(header)
    for size in sizes:
        model_dir = build_model(workdir, size)
        for engine in engines:
            cells = []
            for layout in layouts:
                why = engine_missing(engine) or layout_missing(layout)
                if why:
                    results.append({"size": size, "engine": engine, "layout": layout, "skipped": why})
                    cells.append(f"{'skipped':>9}")
                    continue
                try:
                    runs = [seconds_per_step(model_dir, layout, engine, workdir, args.cores, args.steps, i, args.threads,
                                             args.timeout) for i in range(args.repeats)]
                except RuntimeError as failure:
                    results.append({"size": size, "engine": engine, "layout": layout, "failed": str(failure)})
                    cells.append(f"{'failed':>9}")
                    continue
                value = statistics.median(runs)
                results.append({"size": size, "engine": engine, "layout": layout, "s_per_step": value, "runs": runs})
                cells.append(f"{value:>9.3f}")
            print(f"{size:<5} {engine:<6} " + " ".join(cells), flush=True)
    for r in results:
        for outcome in ("skipped", "failed"):
            if outcome in r:
                print(f"{outcome} {r['size']} {r['engine']} {r['layout']}: {r[outcome]}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
