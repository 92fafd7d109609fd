"""Learner groups of several torch.distributed ranks (``cluster.learners`` > 1), one per ``cluster.learner_strategy``:

- ddp (data parallel; our own all-reduce, not torch's DistributedDataParallel wrapper): every rank holds the whole
  model; after each rank's backward passes on its shard of a mini-batch the gradients are summed across ranks in
  one all-reduce of a flat buffer (the scheme of Li et al., 2020, "PyTorch Distributed", Sec. 3, without DDP's
  bucketed overlap, so a rank may run any number of micro-batches, none included);
- fsdp2: every decoder layer and the root are sharded with ``fully_shard`` (Zhao et al., 2023, "PyTorch FSDP");
  gradients are reduce-scattered as sums; the main rank keeps a full copy of the weights for its rollout engine,
  refreshed after each step, which is also what checkpoints save (plain Hugging Face folders).

Both run with gloo on CPU and NCCL on CUDA. The process group comes from torchrun's environment (RANK, WORLD_SIZE,
MASTER_ADDR, MASTER_PORT) or from ``init_method`` (the Ray backend's learner actors).
"""

from __future__ import annotations

import copy
import os
import sys
from typing import Any

import torch
import torch.distributed as dist

from rlvr.train.group import LearnerGroup
from rlvr.errors import UserError


class TorchLearnerGroup(LearnerGroup):
    """The ranks of one torch.distributed process group holding the policy with ``strategy`` (ddp or fsdp2)."""

    def __init__(self, strategy: str, *, device: str = "cpu", init_method: str | None = None,
                 rank: int | None = None, world: int | None = None):
        if strategy not in ("ddp", "fsdp2"):
            raise UserError(f"cluster.learner_strategy={strategy!r}: expected ddp or fsdp2")
        self.strategy = strategy
        self.device = torch.device(device)
        backend = "nccl" if self.device.type == "cuda" else "gloo"
        if not dist.is_initialized():
            kwargs: dict[str, Any] = {"backend": backend}
            if init_method is not None:
                kwargs.update(init_method=init_method, rank=rank, world_size=world)
            dist.init_process_group(**kwargs)
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        self.symmetric_forwards = strategy == "fsdp2"
        self._closed = False

    # ------------------------------------------------------------------ reductions
    def sum(self, values: list[float]) -> list[float]:
        t = torch.tensor(values, dtype=torch.float64, device=self._comm_device)
        dist.all_reduce(t)
        return t.tolist()

    def max_int(self, n: int) -> int:
        t = torch.tensor([n], dtype=torch.long, device=self._comm_device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return int(t.item())

    def gather(self, obj: Any) -> list[Any]:
        out: list[Any] = [None] * self.world
        dist.all_gather_object(out, obj)
        return out

    def broadcast(self, obj: Any) -> Any:
        box = [obj if self.rank == 0 else None]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def barrier(self) -> None:
        dist.barrier()

    @property
    def _comm_device(self) -> torch.device:
        return self.device if self.device.type == "cuda" else torch.device("cpu")

    def reduce_gradients(self, params: list[torch.nn.Parameter]) -> None:
        """Sum the gradients of the parameters every rank holds whole (all under ddp; under fsdp2 those outside the
        sharded model, such as a value head) across ranks; a parameter without a gradient counts as zeros."""
        whole = [p for p in params if not _is_sharded(p)]
        if not whole:
            return
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in whole]
        flat = torch.cat([g.reshape(-1) for g in grads])
        dist.all_reduce(flat)
        offset = 0
        for p in whole:
            n = p.numel()
            p.grad = flat[offset:offset + n].view_as(p).clone()
            offset += n

    # ------------------------------------------------------------------ weights
    def prepare(self, model: torch.nn.Module) -> torch.nn.Module:
        """Every rank starts from rank 0's weights; under fsdp2 the decoder layers and the root are then sharded."""
        with torch.no_grad():
            for tensor in list(model.parameters()) + list(model.buffers()):
                dist.broadcast(tensor.data, src=0)
        if self.strategy == "ddp":
            return model
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import FSDPModule, fully_shard

        mesh = init_device_mesh(self.device.type, (self.world,))
        for layer in decoder_layers(model):
            fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
        for module in model.modules():
            if isinstance(module, FSDPModule):
                module.set_gradient_divide_factor(1.0)  # gradients are sums over ranks, as under ddp,
                module.set_force_sum_reduction_for_comms(True)  # reduced with plain SUM (gloo has no pre-scaled sum)
        return model

    def engine_model(self, model: torch.nn.Module) -> torch.nn.Module | None:
        if self.strategy == "ddp":
            return model
        return copy.deepcopy(model) if self.is_main else None

    def sync_engine_model(self, engine_model, model):
        if self.strategy == "ddp":
            return model
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        full = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
        if self.is_main:
            engine_model.load_state_dict(full)
        return engine_model

    def optimizer_state(self, model, optimizer) -> dict[str, Any]:
        """The whole optimizer state in torch's own layout (parameters numbered in optimizer order), whatever the
        strategy, so a checkpoint resumes in any layout."""
        if self.strategy == "ddp":  # every rank's optimizer holds the same state
            return optimizer.state_dict()
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

        full = get_optimizer_state_dict(model, optimizer, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
        if not full:  # gathered on the main rank only
            return {}
        number: dict[str, int] = {}
        groups = []
        for group in full["param_groups"]:
            ids = [number.setdefault(name, len(number)) for name in group["params"]]
            groups.append({**group, "params": ids})
        return {"state": {number[name]: value for name, value in full["state"].items()}, "param_groups": groups}

    def load_optimizer_state(self, model, optimizer, state: dict[str, Any]) -> None:
        if self.strategy == "ddp":
            optimizer.load_state_dict(state)
            return
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

        names = {id(p): n for n, p in model.named_parameters()}
        order = [names[id(p)] for group in optimizer.param_groups for p in group["params"]]
        full = {"state": {order[i]: value for i, value in state["state"].items()},
                "param_groups": [{**g, "params": [order[i] for i in g["params"]]} for g in state["param_groups"]]}
        set_optimizer_state_dict(model, optimizer, full, options=StateDictOptions(full_state_dict=True))

    def close(self) -> None:
        if not self._closed and dist.is_initialized():
            dist.destroy_process_group()
        self._closed = True


def exit_rank(code: int) -> None:
    """End a finished rank process now, with ``code``, after Python's exit handlers (multiprocessing stops the
    processes this rank spawned, such as a vLLM engine's; weakref finalizers; logging flushes) and a flush of its
    output. A normal interpreter exit then also runs the C++ static destructors while the process group's background
    threads may still be joinable, and the C++ runtime aborts a rank that finished its work ("terminate called
    without an active exception", exit status -6), now and then; ``os._exit`` skips that last part. Call it after
    the group is closed."""
    import atexit

    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


def _is_sharded(p: torch.Tensor) -> bool:
    return type(p).__name__ == "DTensor" or type(getattr(p, "data", None)).__name__ == "DTensor"


def decoder_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The transformer blocks of a Hugging Face causal LM (``model.model.layers`` in Llama, Qwen, Mistral ...)."""
    decoder = model.get_decoder() if hasattr(model, "get_decoder") else None
    layers = getattr(decoder, "layers", None)
    if layers is None:
        raise UserError(f"cluster.learner_strategy=fsdp2: cannot find the decoder layers of {type(model).__name__} "
                         "(expected model.get_decoder().layers); use cluster.learner_strategy=ddp")
    return list(layers)


def local_rank() -> int:
    return int(os.environ.get("LOCAL_RANK", "0"))
