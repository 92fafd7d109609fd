"""Generation engines behind one interface (rollout.base.RolloutEngine); ``hf`` is the built-in one."""

from rlvr.rollout.base import RolloutBatch, RolloutEngine, SamplingParams
from rlvr.rollout.hf import HFEngine

ENGINES = ("hf",)


def make_engine(name: str, model, tokenizer, *, batch_size: int = 0) -> RolloutEngine:
    if name != "hf":
        raise ValueError(f"unknown rollout engine {name!r}; known: {', '.join(ENGINES)}")
    eos = model.generation_config.eos_token_id if model.generation_config.eos_token_id is not None else tokenizer.eos_token_id
    return HFEngine(model, pad_id=tokenizer.pad_token_id, eos_ids=eos, batch_size=batch_size)


__all__ = ["ENGINES", "HFEngine", "RolloutBatch", "RolloutEngine", "SamplingParams", "make_engine"]
