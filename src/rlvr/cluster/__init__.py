"""Placement and orchestration of a training run (the `cluster` config section): which processes hold the learner,
the rollout engines and the reward scorers. ``launch`` is what `rlvr train` calls.

- backend=local, learners=1: the single-process loop (rlvr.train.train);
- backend=local, learners=N: N learner ranks started by torchrun (rlvr.cluster.local), DDP or FSDP2;
- backend=ray: learners, rollout workers and reward workers as Ray actors (rlvr.cluster.ray_backend).
"""

from __future__ import annotations

import socket
from pathlib import Path

from rlvr.config import Config, ConfigError


def free_port() -> int:
    """A TCP port nothing on this host listens on now (for a rendezvous that rank 0 hosts)."""
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def check_layout(cfg: Config) -> None:
    """One-line errors for layouts that cannot run, before anything starts."""
    c = cfg.cluster
    if c.backend == "local":
        for key, value, single in (("rollout_workers", c.rollout_workers, 1), ("reward_workers", c.reward_workers, 0),
                                   ("async_rollouts", c.async_rollouts, 0)):
            if value != single:
                raise ConfigError(f"cluster.{key}={value} needs cluster.backend=ray (the local backend's engine shares "
                                  f"the main learner's model; use cluster.{key}={single} or cluster.backend=ray)")
    reserved = [key for key in ("cpus_per_learner", "cpus_per_rollout_worker", "cpus_per_reward_worker")
                if getattr(c, key) is not None]
    if c.backend == "local" and reserved:
        raise ConfigError(f"cluster.{reserved[0]}={getattr(c, reserved[0])} is what a Ray actor reserves and needs "
                          "cluster.backend=ray (the local backend's processes reserve nothing)")
    if c.backend == "local" and c.address is not None:
        raise ConfigError(f"cluster.address={c.address} joins an existing Ray cluster and needs cluster.backend=ray "
                          "(the local backend starts no cluster)")
    if c.backend == "local" and cfg.rollout.engine_options.get("weight_sync") == "nccl":
        raise ConfigError("rollout.engine_options.weight_sync=nccl needs cluster.backend=ray (it broadcasts the "
                          "learner's weights to rollout workers on other GPUs; one process uses weight_sync=inplace)")
    from rlvr.train.streaming import check_streaming

    check_streaming(cfg)
    if c.learners > 1 and c.learner_strategy == "fsdp2" and cfg.model.lora is not None:
        raise ConfigError("cluster.learner_strategy=fsdp2 with model.lora: LoRA adapters are small, "
                          "use cluster.learner_strategy=ddp")
    if c.learners > 1 and c.learner_strategy == "fsdp2" and cfg.algo.ref_update_every:
        raise ConfigError("cluster.learner_strategy=fsdp2 with algo.ref_update_every: the reference model is reset "
                          "from whole weights; use cluster.learner_strategy=ddp")


def launch(cfg: Config, *, resume: bool = False) -> Path:
    """Run the training described by ``cfg`` in the layout its `cluster` section asks for; returns the run directory."""
    from rlvr.rollout import check_engine_available

    check_layout(cfg)
    check_engine_available(cfg.rollout.engine)  # a missing engine package is one line before anything starts
    c = cfg.cluster
    if c.backend == "ray":
        from rlvr.cluster.ray_backend import run_on_ray

        return run_on_ray(cfg, resume=resume)
    if c.learners > 1:
        from rlvr.cluster.local import run_torchrun
        from rlvr.models.loading import resolve_device

        resolve_device(cfg.model.device)  # the ranks run here: a device this machine lacks fails before torchrun
        return run_torchrun(cfg, resume=resume)
    from rlvr.train import train

    return train(cfg, resume=resume)
