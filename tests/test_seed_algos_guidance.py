"""Hints, extra rollouts and expert traces: GHPO's hint prefix, DARS's top-up counts and the ``mixed_policy`` loss
of LUFFY / RL-PLUS, against hand-computed float64 values (docs/api.md, "Algorithms")."""

import math

import pytest
import torch

from rlvr.algos import advantages, losses
from rlvr.algos.collection import dars_extra, dars_total, hint_prefix
from rlvr.algos.mixed_policy import luffy_shaping, mixed_policy

F64 = torch.float64
TOL = 1e-6


# ------------------------------------------------------------------------------------------------ GHPO hint prefix

SOLUTION = "3+4=7, 7*2=14"  # 13 characters


@pytest.mark.parametrize(
    "solution, ratio, expected",
    [
        (SOLUTION, 0.25, "3+4"),  # 3.25 -> 3
        (SOLUTION, 0.5, "3+4=7,"),  # 6.5 -> 6: halves round to even
        (SOLUTION, 0.75, "3+4=7, 7*2"),  # 9.75 -> 10
        (SOLUTION, 0.0, ""),
        (SOLUTION, 1.0, SOLUTION),
        ("0123456789", 0.25, "01"),  # 2.5 -> 2 (even)
        ("0123456789abcd", 0.25, "0123"),  # 3.5 -> 4 (even)
        ("", 0.5, ""),
    ],
)
def test_hint_prefix_rounds_half_to_even(solution, ratio, expected):
    assert hint_prefix(solution, ratio) == expected


@pytest.mark.parametrize("ratio", [-0.1, 1.5, float("nan")])
def test_hint_prefix_rejects_ratios_outside_unit_interval(ratio):
    with pytest.raises(ValueError, match="ratio"):
        hint_prefix(SOLUTION, ratio)


def test_hint_prefix_rejects_non_text_solution():
    with pytest.raises(TypeError, match="str"):
        hint_prefix(None, 0.5)


@pytest.mark.parametrize("adv, loss, grad", [(1.0, -0.4, -0.4), (-1.0, 0.8, 0.0)])
def test_guide_ratio_against_the_hinted_behaviour_policy(adv, loss, grad):
    """Guide trains pi_theta(o | q) against old log-probs taken with the hint, pi_old(o | q, h), through ``ppo``:
    rho = 0.2 / 0.5 = 0.4; A = +1 is unclipped, A = -1 takes the clipped branch 1 - eps = 0.8 with no gradient."""
    logp = torch.tensor([[math.log(0.2)]], dtype=F64, requires_grad=True)
    behaviour = torch.tensor([[math.log(0.5)]], dtype=F64)
    value, _ = losses.compute("ppo", logp, behaviour, torch.tensor([[adv]], dtype=F64), torch.ones(1, 1))
    value.backward()
    assert value.item() == pytest.approx(loss, abs=TOL)
    assert logp.grad.item() == pytest.approx(grad, abs=TOL)


# ------------------------------------------------------------------------------------------------ DARS


@pytest.mark.parametrize(
    "accuracy, schedule, use_std, total",
    [
        (1 / 8, "equal", True, 13),  # 8 / (2 sqrt(7/64)) = 12.094863 -> 13
        (3 / 8, "equal", True, 9),  # 8.262364 -> 9
        (0.5, "equal", True, 8),
        (0.75, "equal", True, 8),
        (1.0, "equal", True, 8),
        (0.0, "equal", True, 17),  # a = 0 is taken as 0.5 / n = 1/16: 8 / (2 sqrt(15/256)) = 16.52 -> 17
        (1 / 8, "hardness", True, 22),  # 2 (7/8) 8 / (2 sqrt(7/64)) = 8 sqrt(7) = 21.166 -> 22
        (3 / 8, "hardness", True, 11),  # 8 sqrt(5/3) = 10.328 -> 11
        (1 / 8, "equal", False, 19),  # 0.5 * 8 / (2 (1/8)(7/8)) = 18.286 -> 19
        (3 / 8, "equal", False, 9),  # 4 / 0.46875 = 8.533 -> 9
        (1 / 8, "hardness", False, 32),  # n / (2a) = 32
    ],
)
def test_dars_total_per_schedule(accuracy, schedule, use_std, total):
    assert dars_total(accuracy, 8, schedule, use_std=use_std) == total


def test_dars_spec_counts_and_their_real_values():
    assert 8 / (2 * math.sqrt(1 / 8 * 7 / 8)) == pytest.approx(12.094863, abs=TOL)
    assert 8 / (2 * math.sqrt(3 / 8 * 5 / 8)) == pytest.approx(8.262364, abs=TOL)
    assert [dars_extra(a, 8, 24) for a in (1 / 8, 3 / 8, 0.5, 0.9)] == [5, 1, 0, 0]


def test_dars_extra_is_capped_and_never_negative():
    assert dars_extra(1 / 8, 8, 3) == 3
    assert dars_extra(0.0, 8, 24) == 9
    assert dars_extra(0.0, 8, 0) == 0
    assert dars_extra(1 / 8, 8, 56, "hardness") == 14


def test_dars_harder_prompts_never_get_fewer_rollouts():
    for schedule in ("equal", "hardness"):
        totals = [dars_total(k / 16, 8, schedule) for k in range(1, 9)]
        assert totals == sorted(totals, reverse=True), schedule


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: dars_total(0.2, 8, "triangular"), "schedule"),
        (lambda: dars_total(0.2, 0), "positive int"),
        (lambda: dars_total(1.5, 8), r"\[0, 1\]"),
        (lambda: dars_extra(0.2, 8, -1), "max_extra"),
    ],
)
def test_dars_rejects_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_grpo_advantages_of_a_topped_up_group():
    """13 rollouts after the top-up, 2 correct: mean 2/13, unbiased std sqrt(286/169/12)."""
    rewards = torch.tensor([1.0, 1.0] + [0.0] * 11, dtype=F64)
    adv = advantages.compute("grpo", rewards, torch.zeros(13, dtype=torch.long), torch.ones(13, 1))[:, 0]
    assert adv[0].item() == pytest.approx(2.253197, abs=TOL)
    assert adv[2].item() == pytest.approx(-0.409672, abs=TOL)
    assert adv.sum().item() == pytest.approx(0.0, abs=1e-9)


# ------------------------------------------------------------------------------------------------ mixed_policy


def _token(p, *, old=None, adv=1.0, expert=True, **options):
    """One token: (per-token loss, d loss / d logp, metrics)."""
    logp = torch.tensor([[math.log(p)]], dtype=F64, requires_grad=True)
    old_logp = torch.tensor([[math.log(old if old is not None else p)]], dtype=F64)
    a = torch.tensor([[adv]], dtype=F64)
    loss, metrics = mixed_policy(logp, old_logp, a, torch.ones(1, 1, dtype=torch.bool),
                                 is_expert=torch.tensor([expert]), **options)
    loss.sum().backward()
    return loss.item(), logp.grad.item(), metrics


def test_expert_row_in_the_group_gets_the_dr_grpo_advantage():
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0], dtype=F64)  # the expert trace first, scored like the others
    adv = advantages.compute("dr_grpo", rewards, torch.zeros(4, dtype=torch.long), torch.ones(4, 1))[:, 0]
    torch.testing.assert_close(adv, torch.tensor([0.75, -0.25, -0.25, -0.25], dtype=F64), atol=TOL, rtol=0)


@pytest.mark.parametrize(
    "p, f, grad, plain_grad",
    [
        (0.1, 0.5, -0.25, -0.1),  # low-probability expert token: 2.5x the plain ratio's gradient
        (0.9, 0.9, -0.09, -0.9),  # confident token: a tenth
    ],
)
def test_luffy_policy_shaping_values_and_gradients(p, f, grad, plain_grad):
    assert luffy_shaping(torch.tensor(p, dtype=F64), 0.1).item() == pytest.approx(f, abs=TOL)
    loss, g, _ = _token(p, shaping="luffy", gamma=0.1)
    assert loss == pytest.approx(-f, abs=TOL)
    assert g == pytest.approx(grad, abs=TOL)
    # the plain ratio with behaviour probability 1 is -A p, whose gradient is -p
    logp = torch.tensor(math.log(p), dtype=F64, requires_grad=True)
    (-torch.exp(logp)).backward()
    assert logp.grad.item() == pytest.approx(plain_grad, abs=TOL)


def test_rl_plus_multiple_importance_sampling_and_exploration_weight():
    loss, grad, metrics = _token(0.1, old=0.1, shaping="rl_plus")
    # pi_omega = (0.1 + 1) / 2 = 0.55; rho = 0.2 / 0.65 = 0.307692; weight sqrt(0.9) = 0.948683
    assert metrics["expert_ratio_mean"] == pytest.approx(0.307692, abs=TOL)
    assert loss == pytest.approx(-0.291903, abs=TOL)
    assert grad == pytest.approx(-0.291903, abs=TOL), "rho is linear in pi_theta; the weight carries no gradient"


def test_rl_plus_exploration_exponent_is_an_option():
    loss, _, _ = _token(0.1, old=0.1, shaping="rl_plus", explore_exp=1.0)
    assert loss == pytest.approx(-0.2 / 0.65 * 0.9, abs=TOL)


@pytest.mark.parametrize(
    "adv, ratio, unclipped, clipped, clipped_grad",
    [
        (-1.0, 1.5, 1.5, 1.5, 1.5),  # A < 0 above 1 + eps: the pessimistic bound keeps the unclipped loss
        (1.0, 1.5, -1.5, -1.2, 0.0),  # A > 0 above 1 + eps: clipped, no gradient
        (-1.0, 0.5, 0.5, 0.8, 0.0),  # A < 0 below 1 - eps: clipped, no gradient
    ],
)
def test_on_policy_tokens_are_unclipped_unless_asked(adv, ratio, unclipped, clipped, clipped_grad):
    loss, grad, _ = _token(ratio * 0.4, old=0.4, adv=adv, expert=False)
    assert loss == pytest.approx(unclipped, abs=TOL)
    assert grad == pytest.approx(unclipped, abs=TOL), "d(-A r)/d logp = -A r"
    loss_c, grad_c, metrics = _token(ratio * 0.4, old=0.4, adv=adv, expert=False, on_policy_clip=True)
    assert loss_c == pytest.approx(clipped, abs=TOL)
    assert grad_c == pytest.approx(clipped_grad, abs=TOL)
    assert metrics["clip_frac"] == (0.0 if clipped == unclipped else 1.0)


def _batch():
    g = torch.Generator().manual_seed(3)
    logp = (-torch.rand(3, 4, generator=g, dtype=F64) * 2).requires_grad_()
    old = logp.detach() + 0.2 * torch.randn(3, 4, generator=g, dtype=F64)
    adv = torch.tensor([[0.75], [-0.25], [-0.5]], dtype=F64).expand(3, 4)
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0], [1, 1, 1, 1]], dtype=torch.bool)
    return logp, old, adv, mask


def test_mixed_rows_take_each_branch_and_report_expert_metrics():
    logp, old, adv, mask = _batch()
    is_expert = torch.tensor([True, False, False])
    loss, metrics = mixed_policy(logp, old, adv, mask, is_expert=is_expert, shaping="luffy")
    p = torch.exp(logp.detach())
    torch.testing.assert_close(loss[0], -adv[0] * p[0] / (p[0] + 0.1))
    torch.testing.assert_close(loss[1:], -adv[1:] * torch.exp(logp.detach()[1:] - old[1:]))
    assert metrics["expert_token_frac"] == pytest.approx(3 / 9, abs=TOL)
    assert metrics["expert_prob_mean"] == pytest.approx(float(p[0, :3].mean()), abs=TOL)
    assert metrics["ratio_mean"] == pytest.approx(float(torch.exp(logp.detach() - old)[1:][mask[1:]].mean()), abs=TOL)


def test_without_provenance_every_row_is_on_policy():
    logp, old, adv, mask = _batch()
    loss, metrics = mixed_policy(logp, old, adv, mask)
    torch.testing.assert_close(loss, -adv * torch.exp(logp.detach() - old))
    assert metrics["expert_token_frac"] == 0.0 and metrics["expert_prob_mean"] == 0.0


@pytest.mark.parametrize("shaping", ["luffy", "rl_plus"])
@pytest.mark.parametrize("on_policy_clip", [False, True])
def test_zero_advantage_gives_zero_loss_and_gradient(shaping, on_policy_clip):
    logp, old, _, mask = _batch()
    zero = torch.zeros(3, 4, dtype=F64)
    loss, _ = losses.compute("mixed_policy", logp, old, zero, mask, is_expert=torch.tensor([True, False, True]),
                             shaping=shaping, on_policy_clip=on_policy_clip)
    loss.backward()
    assert loss.item() == 0.0 and logp.grad.abs().sum().item() == 0.0
    assert losses.zero_at_zero_advantage("mixed_policy")


def test_default_aggregation_is_the_scripts_token_sum_over_max_length():
    logp, old, adv, mask = _batch()
    is_expert = torch.tensor([True, False, False])
    per_token, _ = mixed_policy(logp, old, adv, mask, is_expert=is_expert)
    loss, _ = losses.compute("mixed_policy", logp, old, adv, mask, is_expert=is_expert, norm_length=4)
    assert losses.default_agg("mixed_policy") == "seq-mean-token-sum-norm"
    assert loss.item() == pytest.approx(float((per_token.detach() * mask).sum() / (3 * 4)), abs=1e-12)


def test_expert_rows_with_far_off_old_logprobs_keep_finite_gradients():
    logp, old, adv, mask = _batch()
    old = old.clone()
    old[0] = -200.0  # a placeholder log-prob on an expert row must not leak inf * 0 into the gradient
    loss, _ = losses.compute("mixed_policy", logp, old, adv, mask, is_expert=torch.tensor([True, False, False]))
    loss.backward()
    assert torch.isfinite(logp.grad).all()


@pytest.mark.parametrize(
    "kwargs, match",
    [({"shaping": "sft"}, "shaping"), ({"is_expert": torch.tensor([True, False])}, "rows")],
)
def test_mixed_policy_rejects_bad_options(kwargs, match):
    logp, old, adv, mask = _batch()
    with pytest.raises(ValueError, match=match):
        mixed_policy(logp, old, adv, mask, **kwargs)
