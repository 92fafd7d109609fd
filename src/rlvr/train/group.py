"""The learner group: the processes that hold the policy and share each update. One process is the trivial group
(``SINGLE``); rlvr.cluster supplies groups of several torch.distributed ranks (``cluster.learners``).

Every rank holds the whole experience batch, so advantages and every group or whitening statistic are computed on
the full batch, and every loss normaliser (token or row counts of a mini-batch) is the mini-batch's global value.
Only the forward and backward passes are split: each rank takes a contiguous shard of a mini-batch's rows, weights
its micro-batches by units / global units, and the gradients are summed across ranks, so N ranks take the update
one process takes on the same batch. What needs all ranks at once goes through this interface:

- ``shard(items)``: this rank's contiguous part of a list (nearly equal parts, in rank order);
- ``sum(values)`` / ``gather(obj)`` / ``broadcast(obj)`` / ``max_int(n)``: reductions across ranks;
- ``reduce_gradients(params)``: after the local backward passes, every rank's gradients become the sum over ranks;
- ``symmetric_forwards``: every forward pass is a collective (sharded weights), so all ranks must run the same
  number of them (a rank with nothing to do runs a throwaway one);
- ``prepare(model)``, ``engine_model(model)``, ``sync_engine_model(engine_model, model)``, ``optimizer_state`` and
  ``load_optimizer_state``: how the strategy holds the weights, gives the engine and checkpoints full ones.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch


class LearnerGroup:
    """One process: every method is the identity or a no-op."""

    rank = 0
    world = 1
    symmetric_forwards = False
    strategy = "single"

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def shard_sizes(self, n: int) -> list[int]:
        """How many of ``n`` items each rank takes: nearly equal parts, the first ranks one more."""
        return [n // self.world + (r < n % self.world) for r in range(self.world)]

    def shard(self, items: Sequence) -> list:
        """This rank's part of ``items``: contiguous parts in rank order, sized as ``shard_sizes``."""
        sizes = self.shard_sizes(len(items))
        start = sum(sizes[:self.rank])
        return list(items[start:start + sizes[self.rank]])

    def sum(self, values: list[float]) -> list[float]:
        return list(values)

    def max_int(self, n: int) -> int:
        return n

    def gather(self, obj: Any) -> list[Any]:
        return [obj]

    def broadcast(self, obj: Any) -> Any:
        """Rank 0's ``obj`` on every rank."""
        return obj

    def barrier(self) -> None:
        pass

    def reduce_gradients(self, params: list[torch.nn.Parameter]) -> None:
        pass

    def prepare(self, model: torch.nn.Module) -> torch.nn.Module:
        return model

    def engine_model(self, model: torch.nn.Module) -> torch.nn.Module:
        """The model the rollout engine samples from on the main rank."""
        return model

    def sync_engine_model(self, engine_model: torch.nn.Module, model: torch.nn.Module) -> torch.nn.Module:
        """Bring ``engine_model`` to the trained weights (a collective where the weights are sharded); returns it."""
        return model

    def optimizer_state(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
        return optimizer.state_dict()

    def load_optimizer_state(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, state: dict[str, Any]) -> None:
        optimizer.load_state_dict(state)

    def close(self) -> None:
        pass


SINGLE = LearnerGroup()


def gather_rows(group: LearnerGroup, mine: torch.Tensor, counts: list[int]) -> torch.Tensor:
    """The rows [n_r, ...] each rank computed, concatenated in rank order; ``counts`` are every rank's n_r."""
    if group.world == 1:
        return mine
    parts = group.gather(mine.cpu())
    return torch.cat([p[:c] for p, c in zip(parts, counts)]).to(mine.device)
