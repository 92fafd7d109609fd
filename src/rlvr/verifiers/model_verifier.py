"""The ``model_verifier`` reward term: a co-trained verifier's score of each response, combined with the other terms.

    reward:
      terms:
        - {name: correct, verifier: task, weight: 1.0}                 # the rule verifier (the outcome verifier)
        - {name: checker, verifier: model_verifier, weight: 0.5}       # the co-trained verifier's score in [0, 1]

A term names the verifier ``model_verifier`` and is then declared, weighted, gated and scheduled like any other
(rlvr.verifiers.compose). Its score comes from a model the trainer holds in its own process (``algo.verifier_model``,
rlvr.train.parts_verifier), not from a function the reward runner can call in a worker: the first scoring pass of a
step, through the runner, gives every ``model_verifier`` term the placeholder verdict below (undecidable, 0), and
the co-trained verifier's collection stage then puts the model's scores in their place and composes the reward again
from the raw scores of every term (``compose_with_model_scores``), so gates on or by the term see the model's
scores. Anywhere else (``rlvr verify``, a run without ``algo.verifier_model``) the placeholder is what a caller gets:
"could not decide", never a score that looks like a judgement.
"""

from __future__ import annotations

from typing import Sequence

from rlvr.verifiers.base import Status, Verdict
from rlvr.verifiers.compose import ComposedRewards, RewardSpec, Term, compose
from rlvr.verifiers.registry import register_verifier

NAME = "model_verifier"
NOT_HERE = ("no co-trained verifier scores here: a model_verifier term is scored by the trainer's model "
            "(algo.verifier_model) during a training run")


@register_verifier(NAME)
def model_verifier(response: str, reference: object, **_options: object) -> Verdict:
    """The runner's verdict for a ``model_verifier`` term: undecidable, score 0 (module docstring)."""
    return Verdict(0.0, Status.UNDECIDABLE, "scored_by_trainer", details={"note": NOT_HERE})


def model_terms(spec: RewardSpec | None) -> list[Term]:
    """The terms of ``spec`` the co-trained verifier scores."""
    return [t for t in spec.verifier_terms() if t.verifier == NAME] if spec is not None else []


def compose_with_model_scores(spec: RewardSpec, rule_scores: dict[str, Sequence[float]],
                              model_scores: Sequence[float], *, lengths: Sequence[float], max_len: int,
                              groups: Sequence[int], step: int) -> ComposedRewards:
    """The composed reward with every ``model_verifier`` term scored ``model_scores`` and every other verifier term
    its raw score from ``rule_scores`` (by term name)."""
    scores = {name: list(values) for name, values in rule_scores.items()}
    for term in model_terms(spec):
        scores[term.name] = [float(s) for s in model_scores]
    missing = [t.name for t in spec.verifier_terms() if t.name not in scores]
    if missing:
        raise KeyError(f"no scores for reward term(s) {', '.join(missing)}")
    return compose(spec, scores, lengths=lengths, max_len=max_len, groups=groups, step=step)
