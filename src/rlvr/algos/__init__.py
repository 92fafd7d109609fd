"""Pure tensor functions for RLVR: advantages, policy losses, KL estimators, entropy (CONTRACTS.md C2)."""

from rlvr.algos import advantages, entropy, kl, losses
from rlvr.algos.registry import UnknownNameError

__all__ = ["advantages", "entropy", "kl", "losses", "UnknownNameError"]
