"""What rlvr does on a GPU, checked in one run and printed as one table.

    python benchmarks/gpu_check.py                  # CUDA: bfloat16, a ~26M-parameter Llama-family model
    python benchmarks/gpu_check.py --device cpu     # the same checks as a quick dry run (float32, a tiny model)

Needs only what a GPU machine without network has: torch (with CUDA), transformers, peft, and rlvr's own
dependencies; no downloads (the model is built locally, the tasks are generated), no vLLM. Each row is one
check, run in this process:

- device          the accelerator, its name and whether it computes in bfloat16
- bf16 forward    the policy in the chosen dtype on the device: finite logits, their distance from float32's
- greedy parity   the hf rollout engine's greedy tokens equal the model's own ``generate``
- rl full         5 RL steps (GRPO on generated addition tasks): finite metrics, the weights moved
- rl lora         the same with a LoRA adapter (the base weights stay as they were)
- fsdp2 1 rank    3 RL steps with the policy sharded by FSDP2 in a process group of one rank
- exact resume    4 steps in one go against 2 steps, then ``--resume`` to 4: the same weights and metrics
Every row reports its seconds, the peak memory of the device during it (CUDA) or of the process (CPU: the
high-water mark so far) and, for training rows, the mean tokens per second of rollout generation.

The script exits 1 when any check fails; the table says which and why. Results on a real GPU are recorded in
docs/performance.md ("GPU check").
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))  # run from a checkout without installing

import torch  # noqa: E402

SIZES = {  # TinySpec keyword arguments
    "tiny": dict(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64, max_positions=128),
    "25m": dict(hidden_size=512, num_layers=8, num_heads=8, intermediate_size=1536, max_positions=320),
}
RL_STEPS = 5


@dataclass
class Row:
    check: str
    ok: bool
    detail: str
    seconds: float
    peak_gib: float
    tokens_per_s: float | None = None


@dataclass
class Context:
    device: str
    dtype: str
    model_dir: Path
    work: Path
    rows: list[Row] = field(default_factory=list)


def peak_gib(device: str) -> float:
    if device.startswith("cuda"):
        return torch.cuda.max_memory_allocated() / 2**30
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB on Linux


def run_check(ctx: Context, name: str, fn: Callable[[Context], tuple[bool, str, float | None]]) -> None:
    if ctx.device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    try:
        ok, detail, tokens_per_s = fn(ctx)
    except Exception as exc:  # a failed check is a row, and the other checks still run
        traceback.print_exc(file=sys.stderr)
        ok, detail, tokens_per_s = False, f"{type(exc).__name__}: {exc}".splitlines()[0][:160], None
    ctx.rows.append(Row(name, ok, detail, time.perf_counter() - start, peak_gib(ctx.device), tokens_per_s))


def rl_config(ctx: Context, out: Path, steps: int, **overrides: Any):
    from rlvr.config import config_from_dict

    sections: dict[str, dict[str, Any]] = {
        "model": {"path": str(ctx.model_dir), "device": ctx.device, "dtype": ctx.dtype},
        "data": {"train": "arithmetic:train:digits=1", "verifier": "exact", "prompts_per_step": 8},
        "rollout": {"group_size": 4, "max_new_tokens": 8},
        "algo": {"kl_coef": 0.04, "entropy_coef": 0.01},  # the entropy term moves the weights even when every
        # answer of the untrained model is wrong (all-equal rewards give zero advantages)
        "train": {"steps": steps, "lr": 1e-4, "out": str(out), "progress": False, "seed": 0},
    }
    for dotted, value in overrides.items():
        section, key = dotted.split("__", 1)
        sections[section][key] = value
    return config_from_dict(sections, source="gpu_check")


def weights(path: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    found = sorted(path.glob("*.safetensors"))
    out: dict[str, torch.Tensor] = {}
    for f in found:
        out.update(load_file(str(f)))
    return out


def last_checkpoint(run: Path) -> Path:
    return max(run.glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[1]))


def mean_tokens_per_s(run: Path) -> float | None:
    from rlvr.train.metrics import read_metrics

    rates = [row["tokens_per_s"] for row in read_metrics(run) if "tokens_per_s" in row]
    return sum(rates) / len(rates) if rates else None


def finite_metrics(run: Path) -> tuple[bool, str]:
    import math

    from rlvr.train.metrics import read_metrics

    rows = read_metrics(run)
    bad = [(r["step"], k) for r in rows for k in ("loss", "grad_norm", "reward_mean")
           if isinstance(r.get(k), float) and not math.isfinite(r[k])]
    return (not bad and len(rows) > 0), (f"non-finite {bad[:3]}" if bad else f"{len(rows)} steps logged")


# ------------------------------------------------------------------------------------------------------ checks

def check_device(ctx: Context):
    if ctx.device.startswith("cuda"):
        if not torch.cuda.is_available():
            return False, f"torch {torch.__version__} sees no CUDA device", None
        name = torch.cuda.get_device_name(torch.device(ctx.device))
        return True, f"{name}, torch {torch.__version__}, bf16 {torch.cuda.is_bf16_supported()}", None
    return True, f"CPU ({os.cpu_count()} cores), torch {torch.__version__}", None


def load_policy(ctx: Context):
    from rlvr.models.loading import load_model

    return load_model(ctx.model_dir, dtype=ctx.dtype, device=ctx.device)


def check_forward(ctx: Context):
    from transformers import AutoModelForCausalLM

    model, tokenizer = load_policy(ctx)
    ids = torch.tensor([tokenizer("12+34=")["input_ids"]], device=model.device)
    with torch.no_grad():
        logits = model(ids).logits.float()
        reference = AutoModelForCausalLM.from_pretrained(ctx.model_dir, dtype=torch.float32).to(model.device)(ids).logits
    gap = float((logits - reference).abs().max())
    ok = bool(torch.isfinite(logits).all()) and gap < (0.5 if ctx.dtype != "float32" else 1e-4)
    return ok, f"{ctx.dtype} logits finite, max |diff| to float32 {gap:.2e}", None


def check_greedy_parity(ctx: Context):
    from rlvr.rollout import SamplingParams, build_engine

    model, tokenizer = load_policy(ctx)
    prompts = [tokenizer(p)["input_ids"] for p in ("12+34=", "7+8=", "40+2=", "9+9=")]
    engine = build_engine("hf", model, tokenizer)
    batch = engine.generate(prompts, SamplingParams(n=1, max_new_tokens=12, temperature=0.0))
    same = 0
    for i, prompt in enumerate(prompts):
        ours = batch.response_ids[i, : int(batch.response_mask[i].sum())].tolist()
        with torch.no_grad():
            out = model.generate(torch.tensor([prompt], device=model.device), do_sample=False, max_new_tokens=12,
                                 pad_token_id=tokenizer.pad_token_id)
        theirs = out[0, len(prompt):].tolist()
        same += ours == theirs[: len(ours)] and (len(ours) == len(theirs) or theirs[len(ours)] == tokenizer.eos_token_id)
    return same == len(prompts), f"{same}/{len(prompts)} prompts token-identical", None


def check_rl(lora: bool):
    def run(ctx: Context):
        from rlvr.train import train

        extra = {"model__lora": {"r": 8, "alpha": 16}} if lora else {}
        out = train(rl_config(ctx, ctx.work / ("rl-lora" if lora else "rl-full"), RL_STEPS, train__save_every=1, **extra))
        finite, detail = finite_metrics(out)
        first, last = weights(out / "checkpoint-1"), weights(last_checkpoint(out))  # saved in the same dtype
        moved = any(not torch.equal(first[k], last[k]) for k in first)
        detail += f", {'adapter' if lora else 'weights'} {'moved' if moved else 'unchanged'} after step 1"
        return finite and moved, detail, mean_tokens_per_s(out)
    return run


def check_fsdp2_one_rank(ctx: Context):
    import torch.distributed as dist

    from rlvr.cluster import free_port
    from rlvr.cluster.learners import TorchLearnerGroup
    from rlvr.train import train

    group = TorchLearnerGroup("fsdp2", device=torch.device(ctx.device).type,
                              init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world=1)
    try:
        out = train(rl_config(ctx, ctx.work / "fsdp2", 3), group=group)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    finite, detail = finite_metrics(out)
    return finite, detail + ", sharded by fully_shard", mean_tokens_per_s(out)


def check_exact_resume(ctx: Context):
    from rlvr.train import train
    from rlvr.train.metrics import read_metrics

    whole = train(rl_config(ctx, ctx.work / "resume-whole", 4, train__save_every=2))
    part = ctx.work / "resume-part"
    train(rl_config(ctx, part, 2, train__save_every=2))
    train(rl_config(ctx, part, 4, train__save_every=2), resume=True)
    a, b = weights(last_checkpoint(whole)), weights(last_checkpoint(part))
    worst = max(float((a[k].float() - b[k].float()).abs().max()) for k in a)
    keys = ("reward_mean", "loss", "grad_norm")
    metrics_equal = [{k: r.get(k) for k in keys} for r in read_metrics(whole)] == \
                    [{k: r.get(k) for k in keys} for r in read_metrics(part)]
    ok = worst == 0.0 and metrics_equal
    return ok, f"max |weight diff| {worst:.1e}, metrics {'equal' if metrics_equal else 'differ'}", None


CHECKS = [
    ("device", check_device),
    ("forward", check_forward),
    ("greedy parity", check_greedy_parity),
    ("rl full", check_rl(lora=False)),
    ("rl lora", check_rl(lora=True)),
    ("fsdp2 1 rank", check_fsdp2_one_rank),
    ("exact resume", check_exact_resume),
]


def print_table(ctx: Context) -> None:
    mem = "peak GPU GiB" if ctx.device.startswith("cuda") else "peak RSS GiB"
    print(f"gpu_check: device={ctx.device} dtype={ctx.dtype} model={ctx.model_dir.name}")
    print(f"{'check':<14} {'result':<6} {'s':>7} {mem:>12} {'tokens/s':>9}  detail")
    for r in ctx.rows:
        rate = f"{r.tokens_per_s:9.0f}" if r.tokens_per_s is not None else f"{'-':>9}"
        print(f"{r.check:<14} {'ok' if r.ok else 'FAIL':<6} {r.seconds:7.1f} {r.peak_gib:12.2f} {rate}  {r.detail}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda", help="cuda, cuda:N or cpu (a dry run)")
    parser.add_argument("--dtype", default=None, help="default: bfloat16 on CUDA, float32 on the CPU")
    parser.add_argument("--size", choices=sorted(SIZES), default=None, help="default: 25m on CUDA, tiny on the CPU")
    parser.add_argument("--only", default=None, help="comma-separated check names to run (default: all)")
    parser.add_argument("--workdir", default=None, help="keep the runs here (default: a temporary folder)")
    args = parser.parse_args(argv)
    cuda = args.device.startswith("cuda")
    from rlvr.models.tiny import TinySpec, save_tiny_model

    work = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="rlvr-gpu-check-"))
    try:
        spec = TinySpec(**SIZES[args.size or ("25m" if cuda else "tiny")])
        model_dir = save_tiny_model(work / f"model-{args.size or ('25m' if cuda else 'tiny')}", spec, seed=0)
        ctx = Context(args.device, args.dtype or ("bfloat16" if cuda else "float32"), model_dir, work)
        wanted = set(args.only.split(",")) if args.only else None
        for name, fn in CHECKS:
            if wanted is None or name in wanted:
                run_check(ctx, name, fn)
        print_table(ctx)
        return 0 if all(r.ok for r in ctx.rows) else 1
    finally:
        if not args.workdir:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
