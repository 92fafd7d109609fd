"""Two learner ranks train the implicit PRM as one process does (ddp and fsdp2): real torchrun, real gloo process
group. Each rank holds the whole PRM; the ranks split every mini-batch's rows and sum their gradients. The same
file is the ranks' program (run under torchrun it executes ``_rank_main``)."""

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
from rlvr.train.learner import prepare_experience
from rlvr.train.parts import PartContext, build_parts

from conftest import SMALL

SRC = Path(__file__).resolve().parents[1] / "src"
CASES = {"one_mini_batch": ({"mini_batches": 1}, {}),
         "mini_and_micro_batches": ({"mini_batches": 2}, {"micro_batch_size": 2}),
         "token_budget": ({"mini_batches": 3}, {"max_tokens_per_micro_batch": 40})}


def _config(name):
    algo, train = CASES[name]
    return config_from_dict({
        "model": {"path": "unused"}, "data": {"train": "arithmetic:train"},
        "rollout": {"temperature": 0.8, "max_new_tokens": 6},
        "algo": {"advantage": "prime", "implicit_prm": True, "prm_lr": 1e-2, **algo}, "train": train,
    })


def _batch():
    model, tokenizer = build_tiny_model(SMALL, seed=3)
    torch.manual_seed(0)
    prompts = [encode_prompt(tokenizer, p) for p in ("1+2=", "3+4=", "5+1=", "2+2=", "9+0=")]
    params = SamplingParams(n=4, max_new_tokens=6, temperature=0.8)
    batch = make_engine("hf", model, tokenizer).generate(prompts, params)
    rewards = torch.tensor([float((i * 7) % 3 == 0) for i in range(batch.size)])
    return batch, rewards


def _shape(name, batch, rewards, group):
    """The experience of one PRIME step: (PRM weights, process rewards, advantages, metrics)."""
    cfg = _config(name)
    model, _ = build_tiny_model(SMALL, seed=3)
    reference = copy.deepcopy(model).eval().requires_grad_(False)
    parts = build_parts(cfg, PartContext(model, lambda: reference, trainable=list(model.parameters()), group=group))
    model = group.prepare(model)
    exp = prepare_experience(model, batch, rewards, parts, cfg, engine_logprobs_serve=True, reference=reference,
                             group=group)
    prm = parts["implicit_prm"].model
    return ({k: v.detach().clone() for k, v in prm.state_dict().items()}, exp.process_rewards, exp.advantages,
            exp.metrics)


def _rank_main(data: str, out: str) -> None:
    from rlvr.cluster.learners import TorchLearnerGroup

    torch.set_num_threads(1)
    batch, rewards = torch.load(data, weights_only=False)
    for strategy in ("ddp", "fsdp2"):
        group = TorchLearnerGroup(strategy)
        for name in CASES:
            result = _shape(name, batch, rewards, group)
            if group.is_main:
                torch.save(result, Path(out) / f"{strategy}-{name}.pt")
    group.close()


def test_two_learners_train_the_prm_as_one_does(tmp_path):
    batch, rewards = _batch()
    data = tmp_path / "batch.pt"
    torch.save((batch, rewards), data)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join([str(SRC), str(Path(__file__).parent)])}
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                           __file__, str(data), str(tmp_path)], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    initial = build_tiny_model(SMALL, seed=3)[0].state_dict()
    for name in CASES:
        weights, process, adv, metrics = _shape(name, batch, rewards, SINGLE)
        assert max(float((weights[k] - initial[k]).abs().max()) for k in weights) > 1e-3  # the PRM moved
        for strategy in ("ddp", "fsdp2"):
            w2, process2, adv2, metrics2 = torch.load(tmp_path / f"{strategy}-{name}.pt", weights_only=False)
            # Adam divides by the gradient's own size, so float rounding of sums in another order shows in the
            # second step at ~1e-5 (lr 1e-2); a rank's gradient left out or counted twice moves weights by ~lr
            for key, value in weights.items():
                torch.testing.assert_close(w2[key], value, rtol=0, atol=1e-4, msg=f"{strategy} {name}: {key}")
            torch.testing.assert_close(process2, process, rtol=0, atol=1e-6)
            torch.testing.assert_close(adv2, adv, rtol=0, atol=1e-4)
            for key in ("prm/loss", "prm/grad_norm", "prm/pairwise_acc", "prm/token_reward_mean"):
                assert abs(metrics2[key] - metrics[key]) <= 1e-5 * max(1.0, abs(metrics[key])), (strategy, name, key)


if __name__ == "__main__":
    from rlvr.cluster.learners import exit_rank

    _rank_main(sys.argv[1], sys.argv[2])
    exit_rank(0)
