"""Where an RL step's time goes: rlvr's step under torch.profiler, phase by phase, on the workloads of
benchmarks/memory.py (LoRA + gradient checkpointing, one update, GRPO's KL term) and benchmarks/vs_trl.py
(DAPO's structure: 4 mini-batch updates per rollout batch).

    python benchmarks/profile_step.py --regime lora-ckpt [--size 100m] [--steps 2] [--threads 1] [--ops 12]
                                      [--lora-sampling adapters]
    python benchmarks/profile_step.py --regime dapo [--size 25m] [--steps 4] [--threads 1]

The run is ``rlvr train`` with exactly the options the two benchmarks give it, in this process, which starts
itself again on TCMalloc as the rlvr command does (rlvr.train.allocator; RLVR_HOST_ALLOCATOR=system keeps glibc's
malloc); the steps after
the first are profiled (the first pays one-off costs). Each phase is a ``torch.profiler.record_function`` range
around the function that does it; the table gives each phase's wall seconds per step (inclusive: a phase
contains the phases indented under it) and its share of the step, then the operators that take the most time.
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _benchmark(name: str):
    spec = importlib.util.spec_from_file_location(name, HERE / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _command(regime: str, size: str, steps: int, threads: int, workdir: Path, lora_sampling: str) -> list[str]:
    """The ``rlvr train`` command line the regime's benchmark runs."""
    if regime == "lora-ckpt":
        memory = _benchmark("memory")
        model_dir, data = memory.build_workload(workdir, size)
        return memory.rlvr_command(model_dir, data, steps, threads, workdir / "run", lora=True, checkpointing=True,
                                   lora_sampling=lora_sampling)
    vs_trl = _benchmark("vs_trl")
    model_dir, data = vs_trl.build_workload(workdir, size)
    return vs_trl.rlvr_command(model_dir, data, steps, threads, workdir / "run", vs_trl.STRUCTURES["dapo"])


# (label, indent, module, attribute): each is timed as one record_function range
PHASES = [
    ("step", 0, None, None),
    ("collect: sample (engine.generate)", 1, "rlvr.rollout.hf", "HFEngine.generate"),
    ("prepare_experience", 1, "rlvr.train.learner", "prepare_experience"),
    ("learn", 1, "rlvr.train.learner", "learn"),
    ("update: forward + backward", 2, "rlvr.train.learner", "backward"),
    ("approx_kl forward", 2, "rlvr.train.learner", "approx_kl"),
    ("no-grad forwards (old / reference / approx_kl)", 1, "rlvr.train.learner", "forward_rows"),
]


def _wrap(label: str, fn):
    import torch

    @functools.wraps(fn)
    def timed(*args, **kwargs):
        with torch.profiler.record_function(label):
            return fn(*args, **kwargs)

    return timed


def instrument() -> None:
    """Wrap each phase's function in a record_function range named by its label."""
    import importlib

    for label, _, module_name, attribute in PHASES:
        if module_name is None:
            continue
        owner = importlib.import_module(module_name)
        *path, name = attribute.split(".")
        for part in path:
            owner = getattr(owner, part)
        original = getattr(owner, name)
        timed = _wrap(label, original)
        setattr(owner, name, timed)
        for module in list(sys.modules.values()):  # names imported elsewhere before this ran (the loop's)
            if getattr(module, "__name__", "").startswith("rlvr.") and getattr(module, name, None) is original:
                setattr(module, name, timed)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--regime", choices=("lora-ckpt", "dapo"), default="lora-ckpt")
    parser.add_argument("--size", help="model size (default: 100m for lora-ckpt, 25m for dapo)")
    parser.add_argument("--steps", type=int, default=None, help="steps run; all but the first are profiled")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--lora-sampling", default="adapters", choices=("adapters", "merged"),
                        help="lora-ckpt: how the LoRA policy is sampled (model.lora.sampling)")
    parser.add_argument("--ops", type=int, default=12, help="operators listed after the phases")
    parser.add_argument("--workdir", help="where the model, data and run go (default: a temporary folder)")
    args = parser.parse_args()
    _benchmark("memory").allocator_module().relaunch_with_tcmalloc()
    size = args.size or ("100m" if args.regime == "lora-ckpt" else "25m")
    steps = args.steps or (2 if args.regime == "lora-ckpt" else 4)
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="rlvr-profile-"))
    workdir.mkdir(parents=True, exist_ok=True)
    cmd = _command(args.regime, size, steps, args.threads, workdir, args.lora_sampling)
    config_path, overrides = cmd[4], [*cmd[5:], "train.overwrite=true"]

    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    from rlvr.config import load_config
    from rlvr.train import loop

    instrument()
    cfg = load_config(config_path, overrides)
    profiler = profile(activities=[ProfilerActivity.CPU], schedule=torch.profiler.schedule(
        wait=1, warmup=0, active=steps - 1, repeat=1))
    # a step's range opens when the collector is asked for its batch and closes when its metrics row is written
    from rlvr.train.collector import Collector

    take, open_range = Collector.take, []

    def timed_take(self, step):
        open_range.append(record_function("step"))
        open_range[-1].__enter__()
        return take(self, step)

    def close_step(row):
        open_range.pop().__exit__(None, None, None)
        profiler.step()

    Collector.take = timed_take
    with profiler:
        loop.train(cfg, on_step=close_step)
    profiled = steps - 1
    events = {e.key: e for e in profiler.key_averages()}
    total = events["step"].cpu_time_total / 1e6 / profiled
    sampled = f", LoRA sampled {args.lora_sampling}" if args.regime == "lora-ckpt" else ""
    print(f"regime {args.regime}{sampled}, model {size}, {args.threads} thread(s); {profiled} profiled step(s); "
          f"seconds per step, inclusive")
    print(f"{'phase':<52} {'s/step':>8} {'share':>6} {'calls/step':>10}")
    for label, indent, _, _ in PHASES + [("Optimizer.step#AdamW.step", 2, None, None)]:  # torch's own range
        event = events.get(label)
        if event is None:
            continue
        seconds = event.cpu_time_total / 1e6 / profiled
        print(f"{'  ' * indent + label:<52} {seconds:8.2f} {100 * seconds / total:5.0f}% "
              f"{event.count / profiled:10.1f}")
    level_one = sum(events[label].cpu_time_total for label, indent, _, function in PHASES  # consecutive phases
                    if indent == 1 and function != "forward_rows" and label in events)
    rest = events["step"].cpu_time_total - level_one
    print(f"{'  the rest of the step (rewards, phases not listed)':<52} {rest / 1e6 / profiled:8.2f} "
          f"{100 * rest / events['step'].cpu_time_total:5.0f}%")
    print(f"\ntop {args.ops} operators by self time (s/step, calls/step)")
    ops = sorted((e for e in events.values() if not any(e.key == p[0] for p in PHASES) and e.key != "step"),
                 key=lambda e: -e.self_cpu_time_total)
    for e in ops[: args.ops]:
        print(f"  {e.key:<50} {e.self_cpu_time_total / 1e6 / profiled:8.2f} {e.count / profiled:10.0f}")


if __name__ == "__main__":
    sys.exit(main())
