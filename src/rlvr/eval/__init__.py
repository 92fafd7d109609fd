"""Evaluation: unbiased pass@k and scoring models with the training verifiers."""

from rlvr.eval.passk import pass_at_k
from rlvr.eval.runner import TaskResult, mean_pass_at_k, sample_and_score

__all__ = ["TaskResult", "mean_pass_at_k", "pass_at_k", "sample_and_score"]
