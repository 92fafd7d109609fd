"""What each Ray actor of a run reserves (the placement arithmetic, pure: no Ray here).

A run on the Ray backend has three kinds of actors: ``cluster.learners`` learners, ``cluster.rollout_workers``
rollout workers and ``cluster.reward_workers`` reward workers. Each reserves

- CPUs: ``cluster.cpus_per_learner`` / ``cluster.cpus_per_rollout_worker`` / ``cluster.cpus_per_reward_worker``;
  a key left null takes an equal share of the CPUs the set keys leave, divided among the actors whose key is null
  (learners and rollout workers take turns within a step, so sharing the cores loses little, and a 2-core machine
  still holds 2 learners, 2 rollout workers and reward workers);
- GPUs, when the policy runs on GPUs: one per learner, and per rollout worker the number of GPUs its engine's
  workers use (vLLM: tensor_parallel_size x pipeline_parallel_size, ``rlvr.rollout.vllm.engine_ranks``); reward
  workers none.

A layout that asks for more than the cluster has is a one-line error naming the keys, raised before any actor is
started (Ray would otherwise wait for resources that never come).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from rlvr.config import ConfigError

RESOURCE_UNIT = 1e-4  # Ray's smallest fraction of a resource


@dataclass(frozen=True)
class Reservation:
    """What one actor asks Ray for."""

    cpus: float
    gpus: int = 0


@dataclass(frozen=True)
class Placement:
    """The reservation of each kind of actor, and how many of each the run starts."""

    learner: Reservation
    rollout_worker: Reservation
    reward_worker: Reservation
    learners: int
    rollout_workers: int
    reward_workers: int

    @property
    def cpus(self) -> float:
        return (self.learners * self.learner.cpus + self.rollout_workers * self.rollout_worker.cpus
                + self.reward_workers * self.reward_worker.cpus)

    @property
    def gpus(self) -> int:
        return self.learners * self.learner.gpus + self.rollout_workers * self.rollout_worker.gpus


def _floor_unit(value: float) -> float:
    return math.floor(value / RESOURCE_UNIT + 1e-6) * RESOURCE_UNIT


def _fmt(value: float) -> str:
    return f"{value:g}"


def plan_placement(*, learners: int, rollout_workers: int, reward_workers: int, node_cpus: list[float],
                   node_gpus: list[float] | None = None, use_gpus: bool = False, engine_ranks: int = 1,
                   cpus_per_learner: float | None = None, cpus_per_rollout_worker: float | None = None,
                   cpus_per_reward_worker: float | None = None) -> Placement:
    """The reservations of a run's actors on a cluster whose nodes have ``node_cpus`` CPUs and ``node_gpus`` GPUs.

    A null ``cpus_per_*`` is an equal share: (cluster CPUs - the set keys' CPUs) / (actors whose key is null),
    rounded down to Ray's 0.0001 and at most the largest node's CPUs. Raises ConfigError naming the keys when the
    reservations exceed the cluster's CPUs or GPUs, or one actor's exceed every node's.
    """
    node_gpus = node_gpus or []
    total_cpus, largest_cpus = sum(node_cpus), max(node_cpus, default=0.0)
    roles = (("cluster.cpus_per_learner", "cluster.learners", learners, cpus_per_learner),
             ("cluster.cpus_per_rollout_worker", "cluster.rollout_workers", rollout_workers, cpus_per_rollout_worker),
             ("cluster.cpus_per_reward_worker", "cluster.reward_workers", reward_workers, cpus_per_reward_worker))
    fixed = sum(count * cpus for _, _, count, cpus in roles if cpus is not None)
    sharing = sum(count for _, _, count, cpus in roles if cpus is None)
    requested = " + ".join(f"{key}={_fmt(cpus)} x {count_key}={count}"
                           for key, count_key, count, cpus in roles if cpus is not None and count)
    if fixed > total_cpus + RESOURCE_UNIT / 2:
        raise ConfigError(f"{requested} = {_fmt(fixed)} CPUs, but the Ray cluster has {_fmt(total_cpus)}: lower these "
                          "keys or leave them null for an equal share")
    share = min(_floor_unit((total_cpus - fixed) / sharing), largest_cpus) if sharing else 0.0
    if sharing and share < RESOURCE_UNIT:
        nulls = ", ".join(key for key, _, count, cpus in roles if cpus is None and count)
        raise ConfigError(f"{requested} = {_fmt(fixed)} CPUs leave none of the Ray cluster's {_fmt(total_cpus)} for "
                          f"the actors whose keys are null ({nulls}): lower the set keys")
    for key, _, count, cpus in roles:
        if cpus is not None and count and cpus > largest_cpus + RESOURCE_UNIT / 2:
            raise ConfigError(f"{key}={_fmt(cpus)}, but the largest node of the Ray cluster has {_fmt(largest_cpus)} "
                              "CPUs: one actor runs on one node")

    learner_gpus = int(use_gpus)
    worker_gpus = engine_ranks if use_gpus else 0
    placement = Placement(Reservation(cpus_per_learner if cpus_per_learner is not None else share, learner_gpus),
                          Reservation(cpus_per_rollout_worker if cpus_per_rollout_worker is not None else share,
                                      worker_gpus),
                          Reservation(cpus_per_reward_worker if cpus_per_reward_worker is not None else share, 0),
                          learners, rollout_workers, reward_workers)
    if use_gpus:
        total_gpus, largest_gpus = sum(node_gpus), max(node_gpus, default=0)
        if placement.gpus > total_gpus:
            raise ConfigError(f"cluster.learners={learners} x 1 GPU + cluster.rollout_workers={rollout_workers} x "
                              f"{worker_gpus} GPUs (the engine's tensor x pipeline parallel ranks) = {placement.gpus} "
                              f"GPUs, but the Ray cluster has {_fmt(total_gpus)}: lower these or model.device=cpu")
        if rollout_workers and worker_gpus > largest_gpus:
            raise ConfigError(f"a rollout worker's engine uses {worker_gpus} GPUs (tensor x pipeline parallel ranks of "
                              f"rollout.engine_options.llm), but the largest node of the Ray cluster has "
                              f"{_fmt(largest_gpus)}: one actor runs on one node")
    return placement
