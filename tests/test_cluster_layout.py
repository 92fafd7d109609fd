"""Layouts that cannot run fail before anything starts, with one line naming the key (or the extra to install)."""

from __future__ import annotations

import sys

import pytest

from rlvr.cluster import launch
from rlvr.config import ConfigError, config_from_dict
from rlvr.train.group import LearnerGroup


def _cfg(tmp_path, cluster, **algo):
    return config_from_dict({"model": {"path": str(tmp_path / "none")}, "data": {"train": "arithmetic:train"},
                             "algo": algo, "train": {"out": str(tmp_path / "run")}, "cluster": cluster})


@pytest.mark.parametrize("cluster, algo, key", [
    ({"rollout_workers": 2}, {}, "cluster.rollout_workers=2 needs cluster.backend=ray"),
    ({"reward_workers": 1}, {}, "cluster.reward_workers=1 needs cluster.backend=ray"),
    ({"async_rollouts": 1}, {}, "cluster.async_rollouts=1 needs cluster.backend=ray"),
    ({"learners": 2, "learner_strategy": "fsdp2"}, {"ref_update_every": 5}, "algo.ref_update_every"),
])
def test_impossible_layouts_are_refused(tmp_path, cluster, algo, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        launch(_cfg(tmp_path, cluster, **algo))
    assert not (tmp_path / "run").exists()


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
