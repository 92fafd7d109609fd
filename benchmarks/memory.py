"""Peak memory and seconds per RL step: full fine-tuning vs LoRA vs LoRA + gradient checkpointing, beside TRL's
GRPOTrainer with the same PEFT config, in one run.

    python benchmarks/memory.py [--size 100m] [--steps 3] [--threads 2] [--workdir DIR] [--configs full,lora,...]
                                [--lora-sampling adapters]

The workload (identical for every trainer): a Llama-family model with a character vocabulary built locally and
saved as a Hugging Face folder (100m: hidden 768, 12 layers, 12 heads, MLP 2560, ~99M parameters; 25m: hidden
512, 8 layers, MLP 1536, ~26M; 10m for a quick check), prompts like "37+58=", reward = exact match of the completion's first line; per step 2 prompts x
4 samples, exactly 256 new tokens (no response ends early: rlvr's engine is given an end id the model cannot
sample, TRL's generate min_new_tokens=256), temperature 1.0, the KL
term of GRPO with coefficient 0.04 (Shao et al., 2024), one optimizer update on the whole batch, learning rate
1e-5, float32, on the CPU. LoRA: r 16, alpha 32, dropout 0, all linear layers of the decoder; rlvr samples the LoRA
policy as --lora-sampling says: adapters (model.lora.sampling's default and the benchmark's: through the adapters in
place, no copy, several more small operations) or merged (from a fused copy of W0 + (alpha / r) B A built for each
generate call, which costs one more copy of the adapted weights while sampling). rlvr runs with
train.approx_kl=false: TRL's GRPOTrainer measures no KL between the policy before and after the update, so that
forward is left out of rlvr's step too and both trainers do the same work.

Each trainer runs as its users start it: rlvr through its command, which starts itself again on TCMalloc when the
library is installed (rlvr.train.allocator; the line after the table says which malloc rlvr's run used), TRL as a
Python script on the C library's malloc. Two more configurations, not in the default set, separate the allocator from
the rest: lora-ckpt-glibc (rlvr with RLVR_HOST_ALLOCATOR=system) and trl-lora-ckpt-tcmalloc (TRL's script with
TCMalloc in LD_PRELOAD).

Each configuration runs as its own process; peak memory is that process's peak resident set size (os.wait4's
ru_maxrss, which counts everything: weights, optimizer state, reference, activations, the Python runtime; the
benchmark's own process stays small, since a child's ru_maxrss starts from its parent's high-water mark). The
baseline is the peak of a process that only imports what a trainer's process imports (rlvr: torch, transformers,
peft and rlvr's trainer; TRL: torch, transformers, peft, datasets and trl); "added" is a run's peak above its
trainer's baseline, the memory the training itself costs. Seconds per step is the mean of
the steps after the first (the first pays one-off costs); CPU s is the process's user + system time over the
whole run, which a machine shared with other work inflates less than wall time. Needs trl and peft
(the `bench` and `lora` extras).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SIZES = {  # name -> TinySpec keyword arguments
    "10m": dict(hidden_size=256, num_layers=8, num_heads=4, intermediate_size=1024, max_positions=320),
    "25m": dict(hidden_size=512, num_layers=8, num_heads=8, intermediate_size=1536, max_positions=320),
    "100m": dict(hidden_size=768, num_layers=12, num_heads=12, intermediate_size=2560, max_positions=320),
}
RESPONSE = 256  # new tokens per response, every response full length
NO_END = 10**6  # generation_config.eos_token_id of the benchmark model: an id outside the vocabulary
PROMPTS, GROUP, KL, LR = 2, 4, 0.04, 1e-5
CONFIGS = {  # key -> (name, trainer, LoRA, gradient checkpointing, environment)
    "full": ("rlvr full fine-tuning", "rlvr", False, False, {}),
    "lora": ("rlvr LoRA", "rlvr", True, False, {}),
    "lora-ckpt": ("rlvr LoRA + checkpointing", "rlvr", True, True, {}),
    "trl-lora": ("TRL GRPOTrainer LoRA", "trl", True, False, {}),
    "trl-lora-ckpt": ("TRL GRPOTrainer LoRA + checkpointing", "trl", True, True, {}),
    "lora-ckpt-glibc": ("rlvr LoRA + checkpointing, glibc", "rlvr", True, True, {"RLVR_HOST_ALLOCATOR": "system"}),
    "trl-lora-ckpt-tcmalloc": ("TRL LoRA + checkpointing, TCMalloc", "trl", True, True, {"LD_PRELOAD": "tcmalloc"}),
}
DEFAULT_CONFIGS = ("full", "lora", "lora-ckpt", "trl-lora", "trl-lora-ckpt")
LORA = {"r": 16, "alpha": 32, "dropout": 0.0,
        "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]}

TRL_SCRIPT = r'''
import json, sys, time
import torch
torch.set_num_threads(int(sys.argv[4]))
import datasets
from peft import LoraConfig
from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
from trl import GRPOConfig, GRPOTrainer

model_dir, data_path, steps, threads, out, checkpointing = sys.argv[1:7]
settings = json.loads(sys.argv[7])
rows = [json.loads(line) for line in open(data_path)]

def exact_first_line(prompts, completions, reference, **_):
    return [float(c.strip().split("\n")[0].strip() == str(r)) for c, r in zip(completions, reference)]

class StepTimes(TrainerCallback):
    def __init__(self):
        self.times = [time.perf_counter()]
    def on_step_end(self, args, state, control, **kwargs):
        self.times.append(time.perf_counter())

lora = settings["lora"]
config = GRPOConfig(
    output_dir=out, per_device_train_batch_size=settings["prompts"] * settings["group"],
    num_generations=settings["group"], max_completion_length=settings["response"], temperature=1.0,
    beta=settings["kl"], learning_rate=settings["lr"], max_steps=int(steps), use_cpu=True, bf16=False, fp16=False,
    report_to=[], logging_steps=1, save_strategy="no", dataloader_num_workers=0, seed=0,
    gradient_checkpointing=checkpointing == "1", gradient_checkpointing_kwargs={"use_reentrant": False},
    generation_kwargs={"min_new_tokens": settings["response"]},
)
tokenizer = AutoTokenizer.from_pretrained(model_dir)
model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
model.generation_config.eos_token_id = tokenizer.eos_token_id  # the folder's out-of-vocabulary end id is for rlvr
timer = StepTimes()
trainer = GRPOTrainer(
    model=model, processing_class=tokenizer,
    reward_funcs=[exact_first_line], args=config, train_dataset=datasets.Dataset.from_list(rows),
    peft_config=LoraConfig(r=lora["r"], lora_alpha=lora["alpha"], lora_dropout=lora["dropout"],
                           target_modules=lora["target_modules"], task_type="CAUSAL_LM") if lora else None,
    callbacks=[timer],
)
trainer.train()
assert trainer.state.global_step == int(steps)
steps_s = [b - a for a, b in zip(timer.times, timer.times[1:])]
json.dump({"step_s": steps_s}, open(out + "/times.json", "w"))
'''


def build_workload(workdir: Path, size: str) -> tuple[Path, Path]:
    from rlvr.models.tiny import TinySpec, save_tiny_model
    from rlvr.tasks import load_tasks

    model_dir = workdir / f"model-{size}"
    if not model_dir.exists():
        from transformers import GenerationConfig

        save_tiny_model(model_dir, TinySpec(**SIZES[size]), seed=0)
        generation = GenerationConfig.from_pretrained(model_dir) if (model_dir / "generation_config.json").exists() \
            else GenerationConfig()
        generation.eos_token_id = NO_END
        generation.save_pretrained(model_dir)
    data = workdir / "prompts.jsonl"
    if not data.exists():
        tasks = load_tasks("arithmetic:train:n=64")
        data.write_text("".join(json.dumps({"prompt": t.prompt, "reference": str(t.reference)}) + "\n" for t in tasks))
    return model_dir, data


def rlvr_command(model_dir: Path, data: Path, steps: int, threads: int, out: Path, *, lora: bool,
                 checkpointing: bool, lora_sampling: str = "merged") -> list[str]:
    return [
        sys.executable, "-m", "rlvr.cli", "train", "/dev/null",
        f"model.path={model_dir}", f"data.train={data}", "data.verifier=exact",
        "data.verifier_options={first_line: true}", f"data.prompts_per_step={PROMPTS}", f"rollout.group_size={GROUP}",
        f"rollout.max_new_tokens={RESPONSE}", "rollout.temperature=1.0", f"algo.kl_coef={KL}", f"train.lr={LR}",
        f"train.steps={steps}", f"train.threads={threads}", "train.save_every=0", "train.progress=false",
        f"train.out={out}", f"model.lora={json.dumps({**LORA, 'sampling': lora_sampling}) if lora else 'null'}",
        f"train.gradient_checkpointing={str(checkpointing).lower()}", "train.overwrite=true",
        "train.approx_kl=false",  # a diagnostic TRL does not compute (see the docstring)
    ]


def measured(cmd: list[str], threads: int, extra_env: dict | None = None) -> tuple[float, float, float]:
    """(peak resident set size in GiB, wall seconds, CPU seconds) of one process."""
    env = {**os.environ, **(extra_env or {}), "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads),
           "TOKENIZERS_PARALLELISM": "false", "PYTHONWARNINGS": "ignore"}
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    stderr = proc.stderr.read().decode(errors="replace")
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"command failed ({proc.returncode}): {' '.join(cmd)}\n{stderr[-3000:]}")
    cpu = usage.ru_utime + usage.ru_stime
    return usage.ru_maxrss / 2**20, time.perf_counter() - start, cpu  # ru_maxrss is in KiB on Linux


def allocator_module():
    """rlvr.train.allocator loaded alone (rlvr.train's package imports torch): the calling process stays small."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("allocator", HERE.parent / "src" / "rlvr" / "train" / "allocator.py")
    allocator = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(allocator)
    return allocator


def _tcmalloc() -> str:
    library = allocator_module().find_tcmalloc()
    if library is None:
        raise SystemExit("trl-lora-ckpt-tcmalloc: no TCMalloc library found (apt-get install libtcmalloc-minimal4)")
    return library


def rlvr_step_s(out: Path) -> list[float]:
    return [json.loads(line)["time_s"] for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]


def prepare(workdir: Path, size: str) -> None:
    """Build the workload and print what the table's header reports (run in a child process: see main)."""
    model_dir, data = build_workload(workdir, size)
    import peft
    import torch
    import trl
    from transformers import AutoModelForCausalLM

    import rlvr

    params = sum(p.numel() for p in AutoModelForCausalLM.from_pretrained(model_dir).parameters())
    print(json.dumps({"model_dir": str(model_dir), "data": str(data), "params": params, "versions": (
        f"rlvr {rlvr.__version__}, trl {trl.__version__}, peft {peft.__version__}, torch {torch.__version__}")}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="100m", choices=sorted(SIZES))
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--workdir", help="where the model, data and runs go (default: a temporary folder)")
    parser.add_argument("--configs", default=",".join(DEFAULT_CONFIGS),
                        help=f"comma-separated subset of {','.join(CONFIGS)} (default: {','.join(DEFAULT_CONFIGS)})")
    parser.add_argument("--lora-sampling", default="adapters", choices=("adapters", "merged"),
                        help="how rlvr samples a LoRA policy (model.lora.sampling)")
    parser.add_argument("--prepare", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.prepare:
        return prepare(Path(args.workdir), args.size)
    chosen = [c.strip() for c in args.configs.split(",") if c.strip()]
    unknown = sorted(set(chosen) - set(CONFIGS))
    if unknown:
        parser.error(f"--configs: unknown {', '.join(unknown)}; choose from {', '.join(CONFIGS)}")
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="rlvr-memory-"))
    workdir.mkdir(parents=True, exist_ok=True)
    script = workdir / "trl_grpo.py"
    script.write_text(TRL_SCRIPT)
    # This process never imports torch: a child's ru_maxrss starts from its parent's high-water mark (Linux keeps
    # it across fork/vfork and exec), so a large parent would raise every measured peak to its own.
    info = json.loads(subprocess.run([sys.executable, __file__, "--prepare", "--size", args.size, "--workdir",
                                      str(workdir)], check=True, capture_output=True, text=True).stdout.splitlines()[-1])
    model_dir, data, params = Path(info["model_dir"]), Path(info["data"]), info["params"]
    settings = {"lora": LORA, "prompts": PROMPTS, "group": GROUP, "response": RESPONSE, "kl": KL, "lr": LR}
    print(f"{info['versions']}; "
          f"{params / 1e6:.1f}M parameters; {PROMPTS}x{GROUP} responses of {RESPONSE} tokens per step; KL {KL}; "
          f"LoRA r={LORA['r']} alpha={LORA['alpha']} on {len(LORA['target_modules'])} projections "
          f"(rlvr samples it {args.lora_sampling}); "
          f"{args.threads} threads; {args.steps} steps, s/step = mean after the first")
    baselines = {trainer: measured([sys.executable, "-c", imports], args.threads)[0] for trainer, imports in (
        ("rlvr", "import torch, transformers, peft, rlvr.cli, rlvr.train.loop"),
        ("trl", "import torch, transformers, peft, datasets, trl, trl.trainer.grpo_trainer"))}
    print(f"baseline (imports only): rlvr {baselines['rlvr']:.2f} GiB, TRL {baselines['trl']:.2f} GiB; "
          f"the model's float32 weights: {params * 4 / 2**30:.2f} GiB")
    print(f"{'configuration':<38} {'peak RSS GiB':>12} {'added GiB':>9} {'s/step':>8} {'wall s':>8} {'CPU s':>8}")
    results, added, allocators = {}, {}, {}
    for key in chosen:
        name, trainer, lora, checkpointing, extra_env = CONFIGS[key]
        if extra_env.get("LD_PRELOAD") == "tcmalloc":
            extra_env = {**extra_env, "LD_PRELOAD": _tcmalloc()}
        out = workdir / name.replace(" ", "-").replace("+", "and")
        if trainer == "rlvr":
            cmd = rlvr_command(model_dir, data, args.steps, args.threads, out, lora=lora, checkpointing=checkpointing,
                               lora_sampling=args.lora_sampling)
        else:
            out.mkdir(parents=True, exist_ok=True)
            cmd = [sys.executable, str(script), str(model_dir), str(data), str(args.steps), str(args.threads),
                   str(out), "1" if checkpointing else "0", json.dumps(settings)]
        peak, wall, cpu = measured(cmd, args.threads, extra_env)
        steps = rlvr_step_s(out) if trainer == "rlvr" else json.loads((out / "times.json").read_text())["step_s"]
        per_step = sum(steps[1:]) / max(len(steps) - 1, 1)
        results[key] = peak
        added[key] = peak - baselines[trainer]
        print(f"{name:<38} {peak:12.2f} {added[key]:9.2f} {per_step:8.1f} {wall:8.1f} {cpu:8.1f}", flush=True)
        if trainer == "rlvr":
            allocators[name] = json.loads((out / "manifest.json").read_text()).get("host_allocator", "?")
    if allocators:
        print("malloc of rlvr's runs: " + ", ".join(f"{name}: {a}" for name, a in allocators.items()))
    if {"full", "lora-ckpt"} <= set(chosen):
        full, lean = results["full"], results["lora-ckpt"]
        print(f"rlvr LoRA + checkpointing: {100 * lean / full:.0f}% of full fine-tuning's peak "
              f"({100 * added['lora-ckpt'] / added['full']:.0f}% of what full fine-tuning adds to its baseline)")
    if {"lora-ckpt", "trl-lora-ckpt"} <= set(chosen):
        print(f"rlvr LoRA + checkpointing {results['lora-ckpt']:.2f} GiB vs TRL GRPOTrainer LoRA + checkpointing "
              f"{results['trl-lora-ckpt']:.2f} GiB (added {added['lora-ckpt']:.2f} vs {added['trl-lora-ckpt']:.2f} GiB)")


if __name__ == "__main__":
    main()
