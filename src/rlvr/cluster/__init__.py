"""Placement and orchestration of a training run (the `cluster` config section): which processes hold the learner,
the rollout engines and the reward scorers. ``launch`` is what `rlvr train` calls."""

from __future__ import annotations

from pathlib import Path

from rlvr.config import Config, ConfigError


def launch(cfg: Config, *, resume: bool = False) -> Path:
    """Run the training described by ``cfg`` in the layout its `cluster` section asks for; returns the run directory."""
    c = cfg.cluster
    if c.backend == "local" and c.learners == 1 and c.rollout_workers == 1 and not c.async_rollouts:
        from rlvr.train import train

        return train(cfg, resume=resume)
    raise ConfigError(f"cluster: backend={c.backend} learners={c.learners} rollout_workers={c.rollout_workers} "
                      f"async_rollouts={c.async_rollouts}: only the single-process layout (cluster.backend=local, "
                      "cluster.learners=1, cluster.rollout_workers=1, cluster.async_rollouts=0) is available")
