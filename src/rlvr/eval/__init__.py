"""Evaluation: the same generate-and-score path as training without the update, unbiased pass@k and maj@k with
intervals, comparisons and run reports."""

from rlvr.eval.evaluate import evaluate_model, evaluate_tasks
from rlvr.eval.passk import pass_at_k
from rlvr.eval.sampling import TaskResult, mean_pass_at_k, sample_and_score, sample_tasks

__all__ = ["TaskResult", "evaluate_model", "evaluate_tasks", "mean_pass_at_k", "pass_at_k", "sample_and_score",
           "sample_tasks"]
