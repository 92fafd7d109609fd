"""Two learner ranks take exactly the update one learner takes on the same batch (ddp and fsdp2): real torchrun,
real gloo process group. The same file is the ranks' program (run under torchrun it executes ``_rank_main``)."""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from pathlib import Path

import torch

from rlvr.config import config_from_dict
from rlvr.models import encode_prompt
from rlvr.models.tiny import build_tiny_model
from rlvr.rollout import SamplingParams, make_engine
from rlvr.train.group import SINGLE
from rlvr.train.learner import learn, prepare_experience
from rlvr.train.parts import PartContext, build_parts

from conftest import SMALL

SRC = Path(__file__).resolve().parents[1] / "src"

# recipe settings, each with several updates per batch; together they cover every loss aggregation, a KL term
# with its reference model, the entropy mask (a selection across ranks), micro-batches and skipped rows
CASES = {
    "grpo_kl": {"recipe": "grpo", "ppo_epochs": 2, "mini_batches": 2, "kl_coef": 0.1},
    "dapo_entropy_mask": {"recipe": "dapo", "dynamic_sampling": False, "overlong_buffer_frac": 0.0,
                          "mini_batches": 2, "entropy_mask_rho": 0.3},
    "dr_grpo_micro": {"recipe": "dr_grpo", "ppo_epochs": 2, "mini_batches": 3},
    "rloo_token_budget": {"recipe": "rloo", "mini_batches": 2},
}
TRAIN = {"dr_grpo_micro": {"micro_batch_size": 3}, "rloo_token_budget": {"max_tokens_per_micro_batch": 40}}


def _config(name):
    return config_from_dict({
        "model": {"path": "unused"}, "data": {"train": "arithmetic:train"},
        "rollout": {"temperature": 0.8, "max_new_tokens": 6},
        "algo": CASES[name], "train": {"max_grad_norm": 1e9, **TRAIN.get(name, {})},
    })


def _batch():
    model, tokenizer = build_tiny_model(SMALL, seed=3)
    torch.manual_seed(0)
    prompts = [encode_prompt(tokenizer, p) for p in ("1+2=", "3+4=", "5+1=", "2+2=", "9+0=")]
    batch = make_engine("hf", model, tokenizer).generate(prompts, SamplingParams(n=4, max_new_tokens=6, temperature=0.8))
    rewards = torch.tensor([float((i * 7) % 3 == 0) for i in range(batch.size)])
    rewards[batch.group_index == 2] = 1.0  # a group whose advantages are all zero: its rows are skipped
    return batch, rewards


def _update(name, batch, rewards, group):
    """The learner's update of the tiny model on the batch; (final full weights, learner metrics)."""
    cfg = _config(name)
    model, _ = build_tiny_model(SMALL, seed=3)
    reference = copy.deepcopy(model).eval().requires_grad_(False)
    ctx = PartContext(model, lambda: reference, trainable=list(model.parameters()), group=group)
    parts = build_parts(cfg, ctx)
    full = group.engine_model(model)
    model = group.prepare(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    exp = prepare_experience(model, batch, rewards, parts, cfg, engine_logprobs_serve=True, reference=reference,
                             group=group)
    metrics = learn(model, optimizer, exp, parts, cfg, generator=torch.Generator().manual_seed(5), group=group)
    full = group.sync_engine_model(full, model)
    return ({k: v.detach().clone() for k, v in full.state_dict().items()} if group.is_main else None), metrics


def _rank_main(data: str, out: str) -> None:
    from rlvr.cluster.learners import TorchLearnerGroup

    torch.set_num_threads(1)
    batch, rewards = torch.load(data, weights_only=False)
    for strategy in ("ddp", "fsdp2"):
        group = TorchLearnerGroup(strategy)
        for name in CASES:
            weights, metrics = _update(name, batch, rewards, group)
            if group.is_main:
                torch.save((weights, metrics), Path(out) / f"{strategy}-{name}.pt")
    group.close()


def test_two_learners_take_the_single_learner_update(tmp_path):
    batch, rewards = _batch()
    data = tmp_path / "batch.pt"
    torch.save((batch, rewards), data)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join([str(SRC), str(Path(__file__).parent)])}
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                           __file__, str(data), str(tmp_path)], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    for name in CASES:
        expected, single = _update(name, batch, rewards, SINGLE)
        assert single["updates"] > 1
        assert single["rows_backpropagated"] == batch.size if name == "grpo_kl" else single["rows_backpropagated"] < batch.size
        for strategy in ("ddp", "fsdp2"):
            weights, metrics = torch.load(tmp_path / f"{strategy}-{name}.pt", weights_only=False)
            for key, value in expected.items():
                torch.testing.assert_close(weights[key], value, rtol=0, atol=1e-5, msg=f"{strategy} {name}: {key}")
            for key in ("loss", "grad_norm", "pg_loss", "approx_kl", "updates", "rows_backpropagated"):
                assert abs(metrics[key] - single[key]) <= 1e-5 * max(1.0, abs(single[key])), (strategy, name, key)
            moved = max(float((expected[k] - v).abs().max()) for k, v in build_tiny_model(SMALL, seed=3)[0].state_dict().items())
            assert moved > 1e-3, f"{name}: the update barely moved the weights ({moved})"


if __name__ == "__main__":
    from rlvr.cluster.learners import exit_rank

    _rank_main(sys.argv[1], sys.argv[2])
    exit_rank(0)
