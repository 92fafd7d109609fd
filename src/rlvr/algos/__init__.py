"""Pure tensor functions for RLVR: advantages, policy losses, KL estimators, entropy, filters (docs/api.md, "Algorithms")."""

from rlvr.algos import advantages, entropy, filters, kl, losses, offpolicy, recipes
from rlvr.algos import collection, credit_shaping, distill, entropy_control, mixed_policy, noise, process_credit, trust_region  # noqa: F401  (they register)
from rlvr.algos.registry import UnknownNameError

__all__ = ["advantages", "entropy", "filters", "kl", "losses", "offpolicy", "recipes", "UnknownNameError"]
