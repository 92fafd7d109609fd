"""Pure decisions of the collection stages (docs/api.md, "Algorithms"): how much of a reference solution a hint
shows, how many extra rollouts a hard prompt gets, which rollouts a process-consistency filter keeps.

The stages that generate, score and append rows live in ``rlvr.rollout``; these functions hold only the arithmetic,
each pinned to the released code of its paper.
"""

from __future__ import annotations

import math
from typing import Callable, Sequence


def hint_prefix(solution: str, ratio: float) -> str:
    """The first round(len(solution) * ratio) characters of ``solution``: GHPO's hint (Liu et al., 2025, "GHPO:
    Adaptive Guidance for Stable and Efficient LLM Reinforcement Learning", arXiv 2507.10628; released trainer
    hkgc-1/GHPO ``src/ghpo/ghpo_trainer.py``, ``_generate_and_score_completions``, which cuts the solution at
    ``round(len(solution) * ratio)`` for the stages 0.25 / 0.5 / 0.75).

    Python's ``round`` rounds halves to even, as the released code does: 13 characters at 0.5 give 6, not 7.
    """
    if not isinstance(solution, str):
        raise TypeError(f"hint_prefix: solution must be a str, got {type(solution).__name__}")
    ratio = float(ratio)
    if not 0.0 <= ratio <= 1.0 or math.isnan(ratio):
        raise ValueError(f"hint_prefix: ratio must lie in [0, 1] (the fraction of the solution shown), got {ratio}")
    return solution[: round(len(solution) * ratio)]


# DARS (Yang et al., 2025, "Depth-Breadth Synergy in RLVR: Unlocking LLM Reasoning Gains with Adaptive Exploration",
# arXiv 2508.13755, Sec. 3; released code yangzhch6/DARS ``verl/verl/trainer/ppo/ray_dars_trainer.py``,
# ``schedule_ET`` and ``schedule_HW``). With binary rewards and accuracy a, a group of N rollouts carries a
# cumulative advantage sum_i |A_i| = N * spread(a), where spread(a) = 2 sqrt(a(1-a)) when the advantage divides by
# the group std (GRPO) and 2 a(1-a) when it does not (Dr. GRPO, the released scripts' ``grpo_use_std=False``).
# A schedule names the cumulative advantage a prompt of accuracy a should reach; the prompt is topped up with
# ceil(target / spread(a) - N) more rollouts.


def _spread(accuracy: float, use_std: bool) -> float:
    """Mean |advantage| per rollout of a group with accuracy ``accuracy`` (binary rewards)."""
    if use_std:
        return 2.0 * math.sqrt(accuracy * (1.0 - accuracy))
    return 2.0 * accuracy * (1.0 - accuracy)


def _equal_treatment(accuracy: float, n: int, use_std: bool) -> float:
    """Equal treatment (ET): every hard prompt reaches the cumulative advantage of a prompt at accuracy 0.5."""
    return n * _spread(0.5, use_std)


def _hardness_weighted(accuracy: float, n: int, use_std: bool) -> float:
    """Hardness weighted (HW): the accuracy-0.5 level scaled by 2(1 - a), so harder prompts get more."""
    return 2.0 * (1.0 - accuracy) * n * _spread(0.5, use_std)


DARS_SCHEDULES: dict[str, Callable[[float, int, bool], float]] = {
    "equal": _equal_treatment,
    "hardness": _hardness_weighted,
}


def _dars_check(accuracy: float, n: int, schedule: str) -> float:
    if schedule not in DARS_SCHEDULES:
        raise ValueError(f"unknown DARS schedule {schedule!r}; known: {', '.join(DARS_SCHEDULES)}")
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ValueError(f"DARS: n (rollouts per prompt) must be a positive int, got {n!r}")
    accuracy = float(accuracy)
    if not 0.0 <= accuracy <= 1.0:
        raise ValueError(f"DARS: accuracy must lie in [0, 1], got {accuracy}")
    return accuracy


def dars_total(accuracy: float, n: int, schedule: str = "equal", *, use_std: bool = True) -> int:
    """Rollouts a prompt should have under the DARS ``schedule`` ("equal" or "hardness"), before any cap.

    Prompts with accuracy >= 0.5 keep n. A prompt no rollout solved (a = 0) is treated as a = 0.5 / n, half a
    success, as the released ``schedule_ET`` / ``schedule_HW`` do. ``use_std`` matches the advantage estimator:
    True for GRPO (std-normalised), False for Dr. GRPO-style centring. Examples (n = 8, equal, use_std):
    a = 1/8 -> 8 / (2 sqrt(7/64)) = 12.09 -> 13; a = 3/8 -> 8.26 -> 9; a = 0 -> 16.52 -> 17.
    """
    accuracy = _dars_check(accuracy, n, schedule)
    if accuracy >= 0.5:
        return n
    if accuracy <= 1e-6:
        accuracy = 0.5 / n
    target = DARS_SCHEDULES[schedule](accuracy, n, use_std)
    return n + max(0, math.ceil(target / _spread(accuracy, use_std) - n))


def dars_extra(accuracy: float, n: int, max_extra: int, schedule: str = "equal", *, use_std: bool = True) -> int:
    """Extra rollouts for a prompt: min(dars_total - n, max_extra), never negative.

    The released scripts cap the total at ``n_max`` (32 for equal treatment, 64 for hardness weighted, n = 8), i.e.
    ``max_extra = n_max - n``. The extra rollouts join the prompt's group; advantages use the enlarged group.
    """
    if not isinstance(max_extra, int) or isinstance(max_extra, bool) or max_extra < 0:
        raise ValueError(f"DARS: max_extra must be an int >= 0, got {max_extra!r}")
    return min(dars_total(accuracy, n, schedule, use_std=use_std) - n, max_extra)


def prof_keep(
    correct: Sequence[bool],
    step_means: Sequence[float],
    *,
    remove: int | None = None,
    step_counts: Sequence[int] | None = None,
    step_penalty: float = 10.0,
    min_steps: int = 2,
    max_steps: int = 30,
) -> list[int]:
    """Indices (ascending) of the rollouts of ONE group that PROF keeps (Ye et al., 2025, "Beyond Correctness:
    Harmonizing Process and Outcome Rewards through RL Training", arXiv 2509.03403, Algorithm 1; released code
    amazon-science/PROF-GRPO ``prof_grpo/prof_grpo_both/prof_ray_trainer.py``, ``filter_trajectories`` with the
    consistency score of ``compute_verify_step_level_score``).

    Consistency score, as the released code computes it (commit 8164ec2): with m the mean step value,
    2 (m - 0.5) for a correct rollout and -2 (m - 0.5) for an incorrect one (``compute_verify_step_level_score``
    centres each step value at 0.5 and doubles it), minus ``step_penalty`` when the rollout has fewer than
    ``min_steps`` or more than ``max_steps`` steps (only when ``step_counts`` is given; ``filter_trajectories``
    uses 10, 2 and 30). The shift by 0.5 changes no order within a group's correct or incorrect rollouts, but the
    doubling does against the penalty: on the scale of m the penalty weighs step_penalty / 2, so with
    step_penalty=1 a penalised correct rollout at m = 0.9 (score -0.2) outranks an unpenalised one at m = 0.3 (-0.4).

    Rule: ``remove`` rollouts leave the group (default: half the group, the released setting of 4 out of 8).
    With delta = #correct - #incorrect, k+ = min(remove, round((delta + remove) / 2)) correct rollouts with the
    lowest scores go first (Python ``round``, halves to even); the rest, remove - k+, come from the incorrect
    rollouts with the lowest scores (the highest mean step values). When k+ <= 0 all ``remove`` come from the
    incorrect ones. Ties keep the earlier rollout's rank (a stable sort), as the released code does.
    """
    n = len(correct)
    if len(step_means) != n:
        raise ValueError(f"prof_keep: {n} correctness flags but {len(step_means)} step means")
    if step_counts is not None and len(step_counts) != n:
        raise ValueError(f"prof_keep: {n} correctness flags but {len(step_counts)} step counts")
    if remove is None:
        remove = n // 2
    if not isinstance(remove, int) or isinstance(remove, bool) or remove < 0:
        raise ValueError(f"prof_keep: remove must be an int >= 0, got {remove!r}")
    remove = min(remove, n)
    if remove == 0:
        return list(range(n))

    def score(i: int) -> float:
        centred = 2.0 * (float(step_means[i]) - 0.5)
        s = centred if correct[i] else -centred
        if step_counts is not None and (step_counts[i] < min_steps or step_counts[i] > max_steps):
            s -= step_penalty
        return s

    pos = sorted((i for i in range(n) if correct[i]), key=score)
    neg = sorted((i for i in range(n) if not correct[i]), key=score)
    k_pos = min(remove, round((len(pos) - len(neg) + remove) / 2))
    if k_pos > 0:
        k_pos = min(k_pos, len(pos))
        dropped = set(pos[:k_pos]) | set(neg[: min(remove - k_pos, len(neg))])
    else:
        dropped = set(neg[: min(remove, len(neg))])
    return [i for i in range(n) if i not in dropped]
