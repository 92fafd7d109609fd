"""Training: the RL loop, the supervised warm start, checkpoints and metrics."""

from rlvr.train.loop import train
from rlvr.train.sft import sft

__all__ = ["sft", "train"]
