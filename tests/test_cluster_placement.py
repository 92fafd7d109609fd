"""What each Ray actor reserves: the cluster.cpus_per_* keys or an equal share of the CPUs, GPUs counted with the
engine's tensor x pipeline ranks, and one-line errors for layouts the cluster cannot hold (no Ray needed)."""

import pytest

from rlvr.cluster import check_layout
from rlvr.cluster.placement import plan_placement
from rlvr.cluster.ray_backend import placement
from rlvr.config import ConfigError, config_from_dict

# (learners, rollout workers, reward workers, node CPUs, cpus_per_{learner, rollout_worker, reward_worker})
#   -> CPUs of (a learner, a rollout worker, a reward worker)
CPU_CASES = [
    ((1, 1, 0, [2], None, None, None), (1.0, 1.0, 0.0)),
    ((2, 2, 1, [2], None, None, None), (0.4, 0.4, 0.4)),  # a 2-core machine holds all five actors
    ((2, 2, 2, [2], None, None, None), (0.3333, 0.3333, 0.3333)),  # rounded down to Ray's 0.0001
    ((2, 2, 0, [16, 16], None, None, None), (8.0, 8.0, 0.0)),
    ((1, 1, 0, [4, 4], None, None, None), (4.0, 4.0, 0.0)),  # a share never exceeds the largest node
    ((2, 2, 1, [8], 2.0, None, None), (2.0, 4 / 3 // 1e-4 * 1e-4, 4 / 3 // 1e-4 * 1e-4)),
    ((1, 2, 2, [8], 2.0, 2.0, 1.0), (2.0, 2.0, 1.0)),  # every key set: exactly what they say
    ((1, 2, 2, [8], None, 1.5, 0.25), (8 - 3 - 0.5, 1.5, 0.25)),
    ((2, 2, 4, [2], None, None, 0.1), (0.4, 0.4, 0.1)),
]


@pytest.mark.parametrize("layout, cpus", CPU_CASES)
def test_cpus_are_the_keys_or_an_equal_share_of_what_they_leave(layout, cpus):
    learners, workers, rewards, nodes, per_learner, per_worker, per_reward = layout
    plan = plan_placement(learners=learners, rollout_workers=workers, reward_workers=rewards, node_cpus=nodes,
                          cpus_per_learner=per_learner, cpus_per_rollout_worker=per_worker,
                          cpus_per_reward_worker=per_reward)
    got = (plan.learner.cpus, plan.rollout_worker.cpus, plan.reward_worker.cpus if rewards else 0.0)
    assert got == pytest.approx(cpus, abs=1e-9)
    assert plan.cpus <= sum(nodes) + 1e-9
    assert (plan.learner.gpus, plan.rollout_worker.gpus, plan.reward_worker.gpus) == (0, 0, 0)


# (learners, rollout workers, node GPUs, engine ranks) -> GPUs of (a learner, a rollout worker), the run's total
GPU_CASES = [
    ((1, 1, [2], 1), (1, 1, 2)),
    ((2, 2, [8], 1), (1, 1, 4)),
    ((1, 1, [4], 2), (1, 2, 3)),  # a rollout worker with tensor_parallel_size=2 holds 2 GPUs
    ((2, 3, [8, 8], 4), (1, 4, 14)),  # tensor 2 x pipeline 2
]


@pytest.mark.parametrize("layout, gpus", GPU_CASES)
def test_gpus_count_the_engines_tensor_and_pipeline_ranks(layout, gpus):
    learners, workers, node_gpus, ranks = layout
    plan = plan_placement(learners=learners, rollout_workers=workers, reward_workers=1, node_cpus=[16] * len(node_gpus),
                          node_gpus=node_gpus, use_gpus=True, engine_ranks=ranks)
    assert (plan.learner.gpus, plan.rollout_worker.gpus, plan.gpus) == gpus
    assert plan.reward_worker.gpus == 0


# a layout the cluster cannot hold -> the error names these
TOO_MUCH = [
    (dict(learners=2, rollout_workers=2, reward_workers=0, node_cpus=[2], cpus_per_learner=1.0,
          cpus_per_rollout_worker=1.0),
     r"cluster.cpus_per_learner=1 x cluster.learners=2 \+ cluster.cpus_per_rollout_worker=1 x "
     r"cluster.rollout_workers=2 = 4 CPUs, but the Ray cluster has 2"),
    (dict(learners=1, rollout_workers=1, reward_workers=1, node_cpus=[2], cpus_per_learner=2.0),
     r"leave none .* \(cluster.cpus_per_rollout_worker, cluster.cpus_per_reward_worker\)"),
    (dict(learners=1, rollout_workers=1, reward_workers=0, node_cpus=[4, 4], cpus_per_rollout_worker=6.0),
     r"cluster.cpus_per_rollout_worker=6, but the largest node of the Ray cluster has 4 CPUs"),
    (dict(learners=2, rollout_workers=2, reward_workers=0, node_cpus=[8], node_gpus=[2], use_gpus=True),
     r"cluster.learners=2 x 1 GPU \+ cluster.rollout_workers=2 x 1 GPUs .* = 4 GPUs, but the Ray cluster has 2"),
    (dict(learners=1, rollout_workers=1, reward_workers=0, node_cpus=[8, 8], node_gpus=[2, 2], use_gpus=True,
          engine_ranks=4),
     r"cluster.learners=1 x 1 GPU \+ cluster.rollout_workers=1 x 4 GPUs"),
    (dict(learners=1, rollout_workers=1, reward_workers=0, node_cpus=[8, 8, 8], node_gpus=[2, 2, 2], use_gpus=True,
          engine_ranks=4),
     r"a rollout worker's engine uses 4 GPUs .* the largest node of the Ray cluster has 2"),
]


@pytest.mark.parametrize("layout, message", TOO_MUCH)
def test_a_layout_the_cluster_cannot_hold_is_a_one_line_error_naming_the_keys(layout, message):
    with pytest.raises(ConfigError, match=message) as err:
        plan_placement(**layout)
    assert "\n" not in str(err.value)


def _cfg(backend="ray", **cluster):
    return config_from_dict({"model": {"path": "unused"}, "data": {"train": "arithmetic:train:digits=1"},
                             "rollout": {"engine_options": {"llm": {"tensor_parallel_size": 2,
                                                                    "pipeline_parallel_size": 2}}},
                             "cluster": {"backend": backend, **cluster}})


def test_the_ray_backend_reads_the_keys_and_the_engines_ranks_from_the_config():
    cfg = _cfg(learners=2, rollout_workers=2, reward_workers=1, cpus_per_reward_worker=0.5)
    plan = placement(cfg, nodes=[{"CPU": 8.0, "GPU": 8.0}, {"CPU": 8.0, "GPU": 8.0}])
    assert (plan.learner.cpus, plan.rollout_worker.cpus, plan.reward_worker.cpus) == (3.875, 3.875, 0.5)
    assert (plan.learner.gpus, plan.rollout_worker.gpus) == (1, 4)
    on_cpu = placement(_cfg(learners=2, rollout_workers=2), nodes=[{"CPU": 2.0}])  # no GPU in the cluster
    assert (on_cpu.learner, on_cpu.rollout_worker.gpus, on_cpu.learner.cpus) == (on_cpu.rollout_worker, 0, 0.5)
    cpu_policy = _cfg(learners=1, rollout_workers=1)
    cpu_policy.model.device = "cpu"
    assert placement(cpu_policy, nodes=[{"CPU": 4.0, "GPU": 4.0}]).gpus == 0
    with pytest.raises(ConfigError, match="cluster.cpus_per_learner=4 x cluster.learners=2"):
        placement(_cfg(learners=2, cpus_per_learner=4), nodes=[{"CPU": 2.0}])


def test_reservations_on_the_local_backend_are_an_error():
    with pytest.raises(ConfigError, match=r"cluster.cpus_per_learner=1.0 .* needs cluster.backend=ray"):
        check_layout(_cfg(backend="local", cpus_per_learner=1.0))
    check_layout(_cfg(backend="ray", cpus_per_learner=1.0))
