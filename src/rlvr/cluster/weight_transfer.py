"""Weights from the main learner to vLLM rollout workers over NCCL (``rollout.engine_options.weight_sync: nccl``,
Ray backend, GPUs), through vLLM's weight-transfer API: the learner opens the sending end as rank 0 of an NCCL group
(``NCCLTrainerWeightTransferEngine``), each rollout worker's ``LLM`` joins it (``init_weight_transfer_engine``), and
every update is one broadcast, the workers receiving inside ``update_weights``. The tensors go GPU to GPU; only the
names, dtypes and shapes travel through Ray.

Untested on CPU machines (NCCL needs CUDA devices); written against vLLM's documented trainer/worker protocol
(``vllm.distributed.weight_transfer``). The CPU path sends weights through Ray's object store instead.
"""

from __future__ import annotations

from typing import Any

import torch

from rlvr.cluster import free_port
from rlvr.rollout.vllm import policy_weights


def worker_init_infos(init_info: dict[str, Any], workers: int, ranks_per_worker: int) -> list[dict[str, Any]]:
    """The init info of each of ``workers`` separate vLLM engines from the one the sender built for "the workers":
    vLLM numbers an engine's own ranks from ``rank_offset`` (tensor x pipeline parallel ranks of one engine), so
    worker i starts after the sender (rank 0) and the ``ranks_per_worker`` ranks of each worker before it."""
    world = 1 + workers * ranks_per_worker
    if init_info.get("world_size") != world:
        raise ValueError(f"the NCCL group was opened for {init_info.get('world_size')} ranks, but the sender and "
                         f"{workers} workers of {ranks_per_worker} rank(s) are {world}")
    return [{**init_info, "rank_offset": 1 + i * ranks_per_worker} for i in range(workers)]


def policy_source(model: torch.nn.Module):
    """A vLLM ``WeightSource`` over ``policy_weights(source.model)``: the names and tensors of the folder the
    engines started from, contiguous (NCCL sends raw memory); ``source.model`` may be replaced between sends."""
    from vllm.distributed.weight_transfer.base import ParamMeta, WeightSource

    class PolicySource(WeightSource):
        def __init__(self, model):
            self.model = model

        def metadata(self):
            return [ParamMeta(name, t.dtype, tuple(t.shape)) for name, t in policy_weights(self.model)]

        def __iter__(self):
            return ((name, t.contiguous()) for name, t in policy_weights(self.model))

    return PolicySource(model)


class WorkerClient:
    """vLLM's ``VLLMWeightSyncClient`` protocol for a list of RolloutWorker actors: each call runs on every worker
    (its engine's ``weight_transfer``) and returns when all have done it."""

    def __init__(self, ray, workers: list, ranks_per_worker: int):
        self.ray, self.workers, self.ranks_per_worker = ray, list(workers), ranks_per_worker

    def _on_each(self, call: str, payloads: list) -> None:
        self.ray.get([w.weight_transfer.remote(call, p) for w, p in zip(self.workers, payloads)])

    def init_weight_transfer_engine(self, init_info: dict[str, Any]) -> None:
        self._on_each("init_weight_transfer_engine",
                      worker_init_infos(init_info, len(self.workers), self.ranks_per_worker))

    def start_weight_update(self) -> None:
        self._on_each("start_weight_update", [None] * len(self.workers))

    def update_weights(self, update_info: dict[str, Any]) -> None:
        self._on_each("update_weights", [update_info] * len(self.workers))

    def finish_weight_update(self, weight_version: str | None = None) -> None:
        self._on_each("finish_weight_update", [None] * len(self.workers))

    def shutdown_weight_transfer_engine(self) -> None:
        self._on_each("shutdown_weight_transfer_engine", [None] * len(self.workers))


class NcclSender:
    """The sending end: ``send(model)`` broadcasts the model's weights (as ``policy_weights`` names them: a merged
    LoRA, an untied LM head) to every worker of the group opened at construction."""

    def __init__(self, ray, workers: list, ranks_per_worker: int, model: torch.nn.Module):
        from vllm.distributed.weight_transfer.nccl_engine import NCCLTrainerInitInfo, NCCLTrainerWeightTransferEngine

        self.client = WorkerClient(ray, workers, ranks_per_worker)
        self.source = policy_source(model)
        info = NCCLTrainerInitInfo(master_address=ray.util.get_node_ip_address(), master_port=free_port(),
                                   world_size=1 + len(workers) * ranks_per_worker, rank=0)
        self.engine = NCCLTrainerWeightTransferEngine.trainer_init(info, client=self.client, source=self.source)

    def send(self, model: torch.nn.Module) -> None:
        self.source.model = model
        with torch.no_grad():
            self.engine.send_weights()

    def close(self) -> None:
        """Leave the group on both ends; the workers' engines keep serving, and a worker that died is passed over."""
        from ray.exceptions import RayActorError

        refs = [w.weight_transfer.remote("shutdown_weight_transfer_engine", None) for w in self.client.workers]
        for ref in refs:
            try:
                self.client.ray.get(ref)
            except RayActorError:
                pass
        self.engine.shutdown()
