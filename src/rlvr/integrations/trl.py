"""rlvr verifiers as TRL reward functions.

    from trl import GRPOTrainer
    from rlvr.integrations.trl import reward_function

    trainer = GRPOTrainer(model=..., reward_funcs=[reward_function("math")], train_dataset=dataset, ...)

The dataset needs a column with each prompt's reference answer ("reference" unless ``reference_column``
says otherwise); TRL passes dataset columns to reward functions as keyword arguments.
"""

from __future__ import annotations

from typing import Any, Callable

from rlvr.verifiers import ScoreRequest, score_batch
from rlvr.verifiers.registry import get_verifier


def completion_text(completion: Any) -> str:
    """TRL completions are strings (standard format) or lists of chat messages (conversational format)."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, list) and completion and isinstance(completion[-1], dict):
        return str(completion[-1].get("content", ""))
    return str(completion)


def reward_function(name: str, *, reference_column: str = "reference", **options: Any) -> Callable[..., list[float]]:
    """A callable with TRL's reward-function signature ``(prompts, completions, **columns) -> list[float]``
    that scores each completion with the verifier ``name`` against the row's reference.

    A row may carry its own verifier options in a "verifier_options" column. Scoring goes through rlvr's
    reward runner, so a hanging or crashing verifier costs a 0.0 reward for that sample, not the run.
    """
    get_verifier(name)  # an unknown name fails now, not at the first training step

    def reward(prompts: list[Any], completions: list[Any], **columns: Any) -> list[float]:
        if reference_column not in columns:
            raise KeyError(
                f"rlvr reward {name!r}: the dataset has no {reference_column!r} column "
                f"(columns: {', '.join(sorted(columns)) or 'none'}); pass reference_column=..."
            )
        references = columns[reference_column]
        row_options = columns.get("verifier_options") or [None] * len(completions)
        requests = [
            ScoreRequest(name, completion_text(c), ref, {**options, **(row or {})}, prompt=p)
            for p, c, ref, row in zip(prompts, completions, references, row_options)
        ]
        return [v.score for v in score_batch(requests)]

    reward.__name__ = f"rlvr_{name.replace('.', '_')}"
    reward.__qualname__ = reward.__name__
    return reward
