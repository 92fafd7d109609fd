"""One learner rank of a ``cluster.learners`` > 1 run on the local backend; torchrun starts one per learner:

    python -m torch.distributed.run --standalone --nproc_per_node=N -m rlvr.cluster.rank CONFIG.yaml [--resume]
"""

from __future__ import annotations

import argparse

import torch

from rlvr.cluster.learners import TorchLearnerGroup, exit_rank, local_rank
from rlvr.cluster.lifeline import watch_driver
from rlvr.config import load_config
from rlvr.models import resolve_device


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="rlvr.cluster.rank")
    parser.add_argument("config")
    parser.add_argument("--resume", action="store_true")
    args = parser.parse_args(argv)
    watch_driver()
    cfg = load_config(args.config)
    device = resolve_device(cfg.model.device)
    if device.type == "cuda":
        torch.cuda.set_device(local_rank())  # "cuda" and "auto" mean this rank's GPU
    from rlvr.train import train

    group = TorchLearnerGroup(cfg.cluster.learner_strategy, device=device.type)
    try:
        train(cfg, resume=args.resume, group=group)
    finally:
        group.close()
    return 0


if __name__ == "__main__":
    exit_rank(main())  # an exception still exits through the interpreter, with its traceback
