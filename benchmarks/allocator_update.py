"""What glibc's mmap threshold costs one LoRA + checkpointing update: a forward and backward pass of
benchmarks/memory.py's batch (8 rows of a 24-token prompt and 256 response tokens) through its 100m model with
LoRA on every projection and gradient checkpointing, timed in a fresh process for each threshold.

    python benchmarks/allocator_update.py [--size 100m] [--threads 2] [--thresholds default,4,32] [--passes 3]

"default" leaves glibc's dynamic threshold alone (what TRL's process runs with); a number fixes the threshold at
that many MiB, as rlvr.train.allocator does (4 MiB) for RL and SFT runs on glibc's malloc; "tcmalloc" runs the
passes with TCMalloc in LD_PRELOAD (what the rlvr command starts itself on when it is installed). Prints, per
setting, the seconds of each pass (the first pays one-off costs), the process's system CPU seconds and its peak
resident set.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _passes(model_dir: str, threshold: str, passes: int, threads: int) -> dict:
    import torch

    torch.set_num_threads(threads)
    if threshold not in ("default", "tcmalloc"):
        from rlvr.train.allocator import return_large_blocks_to_the_system

        return_large_blocks_to_the_system(int(threshold) * 1024 * 1024)
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from rlvr.train.policy import policy_forward

    memory = _memory_module()
    lora = memory.LORA
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    model = get_peft_model(model, LoraConfig(r=lora["r"], lora_alpha=lora["alpha"], lora_dropout=0.0,
                                             target_modules=lora["target_modules"], task_type="CAUSAL_LM"))
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    g = torch.Generator().manual_seed(0)
    vocab, rows = model.config.vocab_size, 2 * 4
    prompt = torch.randint(3, vocab, (rows, 24), generator=g)
    prompt_mask = torch.ones_like(prompt)
    prompt_mask[: rows // 2, :5] = 0  # left padding, as in a batch of prompts of different lengths
    response = torch.randint(3, vocab, (rows, memory.RESPONSE), generator=g)
    seconds = []
    for _ in range(passes):
        started = time.perf_counter()
        out = policy_forward(model, prompt, prompt_mask, response, torch.ones_like(response), with_entropy=True)
        out.logp.sum().backward()
        model.zero_grad(set_to_none=True)
        seconds.append(time.perf_counter() - started)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return {"seconds": seconds, "system_s": usage.ru_stime, "peak_gib": usage.ru_maxrss / 2**20}


def _memory_module():
    spec = importlib.util.spec_from_file_location("memory", HERE / "memory.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="100m")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--thresholds", default="default,4,32,tcmalloc",
                        help="comma-separated: default, a number of MiB, or tcmalloc")
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--workdir", default=None)
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(_passes(args.child[0], args.child[1], args.passes, args.threads)))
        return
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="rlvr-allocator-"))
    model_dir, _ = _memory_module().build_workload(workdir, args.size)
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "MKL_NUM_THREADS": str(args.threads)}
    print(f"{args.size}: one forward + backward of 8 x (24 + 256) tokens, LoRA + checkpointing, {args.threads} threads")
    print(f"{'malloc':<16}{'s per pass':>28}{'system s':>10}{'peak GiB':>10}")
    for threshold in args.thresholds.split(","):
        child_env = {**env, "LD_PRELOAD": _memory_module()._tcmalloc()} if threshold == "tcmalloc" else env
        proc = subprocess.run([sys.executable, __file__, "--child", str(model_dir), threshold, "--passes",
                               str(args.passes), "--threads", str(args.threads)],
                              env=child_env, capture_output=True, text=True, check=True)
        result = json.loads(proc.stdout.strip().splitlines()[-1])
        label = {"default": "glibc default", "tcmalloc": "TCMalloc"}.get(threshold, f"{threshold} MiB")
        passes = " ".join(f"{s:.2f}" for s in result["seconds"])
        print(f"{label:<16}{passes:>28}{result['system_s']:>10.1f}{result['peak_gib']:>10.2f}")


if __name__ == "__main__":
    main()
