"""Noisy-verifier corrections ("Reinforcement Learning with Verifiable yet Noisy Rewards under
Imperfect Verifiers", 2025, arXiv 2510.00915) and the check of which advantage estimators undo them.

The verifier's reward R~ in {0, 1} is the true reward R seen through a noise channel with
    rho0 = P(R~ = 1 | R = 0)   (false positives)      rho1 = P(R~ = 0 | R = 1)   (false negatives).

- backward correction: R^ = (R~ - rho0) / (1 - rho0 - rho1), an unbiased estimate of R (E[R^ | R] = R);
- forward correction: score-function weights w(R~ = 1) = rho1, w(R~ = 0) = rho1 - 1, which need rho1 only and give
  E[update] = (1 - rho0 - rho1) grad J.

Both maps are affine in R~ (backward: scale 1/(1 - rho0 - rho1) and shift; forward: a pure shift R~ + rho1 - 1), so
an estimator that subtracts a baseline computed from the same rewards removes the forward correction, and one that
also divides by their spread (GRPO's std) removes the backward one too. Which estimator does what is not read from
its name: ``noise_correction_problem`` runs the registered estimator on a probe batch with and without the map.
"""

from __future__ import annotations

import math

import torch

from rlvr.algos import advantages

KINDS = ("backward", "forward")

# Estimator inputs the probe can supply: a greedy baseline's reward goes through the same noisy verifier (so it is
# mapped as well); per-token reward terms are absent. An estimator needing anything else (a critic's values, log-probs,
# state carried across steps) depends on more than this batch's rewards, so the probe cannot decide it.
_PROBE_NEEDS = {"baseline_rewards", "token_rewards"}


def check_rates(false_positive: float, false_negative: float) -> None:
    """Raise ValueError unless both rates lie in [0, 1) and their sum is below 1 (else the channel carries no
    information and the backward map divides by zero or flips sign)."""
    for name, rate in (("false_positive", false_positive), ("false_negative", false_negative)):
        if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not math.isfinite(rate) or not 0 <= rate < 1:
            raise ValueError(f"{name}: expected a rate in [0, 1), got {rate!r}")
    if false_positive + false_negative >= 1:
        raise ValueError(f"false_positive + false_negative must be below 1 (the verifier must carry information), "
                         f"got {false_positive} + {false_negative}")


def backward(rewards: torch.Tensor, false_positive: float, false_negative: float) -> torch.Tensor:
    """Backward correction (arXiv 2510.00915, the unbiased estimator): (R~ - rho0) / (1 - rho0 - rho1).

    E[R^ | R = 1] = ((1 - rho1) - rho0) / (1 - rho0 - rho1) = 1 and E[R^ | R = 0] = (rho0 - rho0) / (...) = 0."""
    check_rates(false_positive, false_negative)
    return (rewards - false_positive) / (1.0 - false_positive - false_negative)


def forward(rewards: torch.Tensor, false_negative: float) -> torch.Tensor:
    """Forward correction weights (arXiv 2510.00915): rho1 where R~ = 1, rho1 - 1 where R~ = 0 (R~ read as 1 when
    above 0.5), the weight each response's score function gets in the policy gradient."""
    check_rates(0.0, false_negative)
    return torch.where(rewards > 0.5, torch.full_like(rewards, false_negative), torch.full_like(rewards, false_negative - 1.0))


def forward_as_psr_nsr(false_negative: float) -> dict[str, float]:
    """The forward correction used as advantages without a baseline is the ``psr_nsr`` estimator with these
    ``algo.advantage_options`` (pos_weight = rho1, neg_weight = 1 - rho1; W-REINFORCE's 0.1 / 1.0 is rho1 ~ 0.091
    up to scale)."""
    check_rates(0.0, false_negative)
    return {"pos_weight": float(false_negative), "neg_weight": 1.0 - float(false_negative)}


def apply(kind: str, rewards: torch.Tensor, false_positive: float, false_negative: float) -> torch.Tensor:
    """The correction ``kind`` ("backward" or "forward") applied to binary rewards."""
    if kind == "backward":
        return backward(rewards, false_positive, false_negative)
    if kind == "forward":
        return forward(rewards, false_negative)
    raise ValueError(f"unknown noise correction {kind!r}; expected one of {', '.join(KINDS)}")


def _probe() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Binary rewards in groups of 4 (mixed, all wrong, all right, one right), their group ids, a response mask with
    rows of different lengths, and a greedy baseline reward per row."""
    rewards = torch.tensor([1, 0, 0, 1, 0, 0, 0, 0, 1, 1, 1, 1, 0, 1, 0, 0, 1, 1, 1, 0], dtype=torch.float64)
    index = torch.arange(5).repeat_interleave(4)
    lengths = torch.tensor([3, 1, 2, 3] * 5)
    mask = (torch.arange(3).unsqueeze(0) < lengths.unsqueeze(1)).long()
    baseline = torch.tensor([1, 0, 0, 1, 0], dtype=torch.float64).repeat_interleave(4)
    return rewards, index, mask, baseline


def noise_correction_problem(kind: str, estimator: str, *, false_positive: float = 0.1, false_negative: float = 0.2,
                             options: dict | None = None) -> str | None:
    """Why ``reward.noise.kind=kind`` does nothing useful under ``algo.advantage=estimator``, or None if it does.

    The estimator (with ``options``, its ``algo.advantage_options``) is run on a probe batch of binary rewards, once
    on R~ and once on the corrected rewards. It is a problem when the corrected advantages
    - equal the uncorrected ones: the estimator cancels the correction (GRPO for both maps, any group- or
      batch-mean baseline for the forward shift);
    - are the uncorrected ones times a constant: the correction only rescales the update, which AdamW's per-parameter
      normalisation undoes (Dr.GRPO / RLOO / ReMax with the backward map);
    - no longer rank a right response above a wrong one of its group: the estimator reads the reward against a
      threshold (``psr_nsr``), so the forward weights, all at or below rho1 < 0.5, erase the signal; the forward
      correction IS ``psr_nsr`` with ``forward_as_psr_nsr(rho1)`` as its options, without ``reward.noise``.
    Equality is checked to rtol 1e-4 / atol 1e-6, so GRPO's epsilon added to the std (1e-6) does not hide the
    cancellation. Estimators that need inputs beyond the rewards (a critic's values, log-probs, step state) return None.
    An unknown kind or estimator, or bad rates, is reported as a problem too.
    """
    if kind not in KINDS:
        return f"reward.noise.kind: expected one of {', '.join(KINDS)}, got {kind!r}"
    try:
        check_rates(false_positive, false_negative)
    except ValueError as exc:
        return f"reward.noise.{exc}"
    if kind == "backward" and false_positive == 0 and false_negative == 0:
        return ("reward.noise: false_positive and false_negative are both 0, so the backward correction is the "
                "identity; give the verifier's rates or leave reward.noise out")
    try:
        fn_needs = set(advantages.needs(estimator))
    except ValueError as exc:  # the registry's unknown-name error lists the known estimators
        return f"algo.advantage: {exc}"
    if fn_needs - _PROBE_NEEDS:
        return None
    rewards, index, mask, baseline = _probe()
    opts = dict(options or {})

    def run(r: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        kw = {**opts, "baseline_rewards": b} if "baseline_rewards" in fn_needs else opts
        return advantages.compute(estimator, r, index, mask, **kw).to(torch.float64)

    plain = run(rewards, baseline)
    corrected = run(apply(kind, rewards, false_positive, false_negative),
                    apply(kind, baseline, false_positive, false_negative))
    setting = f"reward.noise.kind={kind} with algo.advantage={estimator}"
    hint = (f"; the forward correction without a baseline is algo.advantage=psr_nsr with algo.advantage_options "
            f"{forward_as_psr_nsr(false_negative)} and no reward.noise" if kind == "forward" else
            "; use an estimator without a reward baseline, or leave reward.noise out")
    if torch.allclose(corrected, plain, rtol=1e-4, atol=1e-6):
        return f"{setting}: the estimator cancels the correction exactly (its advantages are unchanged){hint}"
    scale = float((corrected * plain).sum() / (plain * plain).sum()) if bool(plain.ne(0).any()) else 0.0
    if scale > 0 and torch.allclose(corrected, scale * plain, rtol=1e-4, atol=1e-6):
        return (f"{setting}: the correction only rescales the advantages by {scale:.6g}, which AdamW's normalised "
                f"step undoes (the same update as without it){hint}")
    per_row = corrected.sum(-1) / mask.sum(-1)
    for g in index.unique():
        rows = index == g
        right, wrong = per_row[rows & (rewards > 0.5)], per_row[rows & (rewards <= 0.5)]
        if right.numel() and wrong.numel() and float(right.min()) <= float(wrong.max()):
            return f"{setting}: the corrected advantages no longer rank right responses above wrong ones{hint}"
    return None
