"""Layouts that cannot run fail before anything starts, with one line naming the key (or the extra to install)."""

from __future__ import annotations

import sys

import pytest
import torch

from rlvr.cluster import launch
from rlvr.config import ConfigError, config_from_dict
from rlvr.train.group import LearnerGroup


def _cfg(tmp_path, cluster, rollout=None, **algo):
    return config_from_dict({"model": {"path": str(tmp_path / "none")}, "data": {"train": "arithmetic:train"},
                             "rollout": rollout or {}, "algo": algo, "train": {"out": str(tmp_path / "run")},
                             "cluster": cluster})


@pytest.mark.parametrize("cluster, rollout, algo, key", [
    ({"rollout_workers": 2}, {}, {}, "cluster.rollout_workers=2 needs cluster.backend=ray"),
    ({"reward_workers": 1}, {}, {}, "cluster.reward_workers=1 needs cluster.backend=ray"),
    ({"async_rollouts": 1}, {}, {}, "cluster.async_rollouts=1 needs cluster.backend=ray"),
    ({"address": "auto"}, {}, {}, "cluster.address=auto joins an existing Ray cluster and needs cluster.backend=ray"),
    ({"learners": 2, "learner_strategy": "fsdp2"}, {}, {"ref_update_every": 5}, "algo.ref_update_every"),
    ({}, {"engine": "vllm", "engine_options": {"weight_sync": "nccl"}}, {},
     "rollout.engine_options.weight_sync=nccl needs cluster.backend=ray"),
])
def test_impossible_layouts_are_refused(tmp_path, cluster, rollout, algo, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        launch(_cfg(tmp_path, cluster, rollout, **algo))
    assert not (tmp_path / "run").exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA device")
def test_local_learners_on_a_device_this_machine_lacks_fail_before_torchrun(tmp_path, monkeypatch):
    import subprocess

    def no_torchrun(*args, **kwargs):
        raise AssertionError("torchrun was started")

    monkeypatch.setattr(subprocess, "Popen", no_torchrun)
    monkeypatch.setattr(subprocess, "run", no_torchrun)
    cfg = _cfg(tmp_path, {"learners": 2})
    cfg.model.device = "cuda"
    with pytest.raises(ValueError, match="model.device=cuda: .*use model.device=cpu or auto"):
        launch(cfg)


def test_ray_backend_without_ray_names_the_extra(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray raises ImportError
    with pytest.raises(ValueError, match=r"pip install 'rlvr\[ray\]'"):
        launch(_cfg(tmp_path, {"backend": "ray"}))


def test_shards_are_contiguous_and_cover_every_row():
    class Rank(LearnerGroup):
        def __init__(self, rank, world):
            self.rank, self.world = rank, world

    for n, world in [(10, 2), (7, 3), (1, 2), (0, 2)]:
        shards = [Rank(r, world).shard(list(range(n))) for r in range(world)]
        assert sum(shards, []) == list(range(n))
        assert [len(s) for s in shards] == Rank(0, world).shard_sizes(n)


@pytest.mark.parametrize("workers, ranks_per_worker, offsets", [(1, 1, [1]), (3, 1, [1, 2, 3]), (2, 4, [1, 5])])
def test_each_vllm_worker_joins_the_weight_broadcast_at_its_own_ranks(workers, ranks_per_worker, offsets):
    from rlvr.cluster.weight_transfer import worker_init_infos

    sent = {"master_address": "10.0.0.1", "master_port": 29500, "rank_offset": 1,
            "world_size": 1 + workers * ranks_per_worker, "packed": True}
    infos = worker_init_infos(sent, workers, ranks_per_worker)
    assert [i["rank_offset"] for i in infos] == offsets
    assert all({**i, "rank_offset": 1} == sent for i in infos)
    with pytest.raises(ValueError, match="opened for"):
        worker_init_infos({**sent, "world_size": 2}, workers + 1, ranks_per_worker)
