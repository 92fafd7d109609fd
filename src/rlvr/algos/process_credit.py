"""Credit assignment from step rewards (docs/api.md, "Algorithms"): PURE's min-form credit, the sum-form it
replaces, and PRIME's implicit process rewards with the recipe's leave-one-out terms.

Conventions: N responses, T response positions. ``process_rewards`` [N, T] holds each step's reward on the step's
last token and 0 elsewhere; ``step_end`` [N, T] bool marks those tokens (the trainer passes both to an estimator that
declares ``needs=("process_rewards",)``). ``index`` [N] is the group (prompt) id of each response. Groups may have
any size: a response alone in its group has a leave-one-out baseline of 0, and PRIME's ``masked_rloo``, which
scales by n / (n - 1), gives it 0.
"""

from __future__ import annotations

import torch

from rlvr.algos.advantages import group_stats, outcome_token_rewards, register


def _reverse_cumsum(x: torch.Tensor) -> torch.Tensor:
    """out[:, t] = sum_{t' >= t} x[:, t']."""
    return x.flip(-1).cumsum(-1).flip(-1)


def _leave_one_out_mean(values: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """Per row: the mean of ``values`` over the OTHER rows of its group (0 for a group of one)."""
    count, total, _ = group_stats(values, index)
    others = count - 1
    return torch.where(others > 0, (total - values) / others.clamp(min=1), torch.zeros_like(values))


# ------------------------------------------------------------------------------------------------ PURE (min-form)


def min_form(step_rewards: torch.Tensor, temperature: float = 0.1, exact: bool = False,
             mask: torch.Tensor | None = None) -> torch.Tensor:
    """Min-form step rewards whose reverse cumulative sum is the min-form value (Cheng et al., 2025, "Stop
    Summation: Min-Form Credit Assignment Is All Process Reward Model Needs for Reasoning", arXiv 2504.15275,
    Sec. 4, Eq. 6).

    ``step_rewards`` [..., S] (or [N, T] with ``mask`` = ``step_end`` marking the steps); positions outside
    ``mask`` are not steps and come back 0.

    exact=False, the released code (CJReinforce/PURE ``openrlhf/utils/utils.py``,
    ``turn_process_reward_logits_to_reward``): w = softmax over the steps of -r / temperature, r' = w r. Summed from
    a step to the end, r' is about the minimum up to the worst step and about 0 after it (temperature 0.1 in the
    code). exact=True, the paper's definition V_k = min_{s >= k} r_s: r'_k = V_k - V_{k+1} (V after the last step is
    0), so the returns at the steps are exactly V_k. Example r = [0.5, -0.2, 0.8], T = 0.1: w = [0.000911,
    0.999044, 0.0000454]; exact returns [-0.2, -0.2, 0.8].
    """
    if temperature <= 0:
        raise ValueError(f"min_form: temperature must be > 0, got {temperature}")
    m = torch.ones_like(step_rewards, dtype=torch.bool) if mask is None else mask.to(torch.bool)
    r = step_rewards.masked_fill(~m, 0.0)
    has_step = m.any(-1, keepdim=True)
    if not exact:
        logits = (-r / temperature).masked_fill(~m, float("-inf"))
        weights = torch.softmax(torch.where(has_step, logits, torch.zeros_like(logits)), dim=-1)
        return (weights * r).masked_fill(~m, 0.0)
    inf = torch.full_like(r, float("inf"))
    suffix_min = torch.where(m, r, inf).flip(-1).cummin(-1).values.flip(-1)  # min over steps at or after t
    next_min = torch.cat([suffix_min[..., 1:], inf[..., :1]], dim=-1)  # min over steps strictly after t
    next_min = torch.where(torch.isinf(next_min), torch.zeros_like(next_min), next_min)
    return torch.where(m, suffix_min - next_min, torch.zeros_like(r))


def step_token_counts(step_end: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """[N, T] with, on each step's last token, the number of valid tokens of that step (from the token after the
    previous step's end through this one), 0 elsewhere."""
    m = response_mask.to(torch.long)
    ends = step_end.to(torch.bool) & response_mask.to(torch.bool)
    seen = m.cumsum(-1)  # valid tokens up to and including t
    at_end = torch.where(ends, seen, torch.zeros_like(seen))
    before = torch.cat([torch.zeros_like(at_end[:, :1]), at_end.cummax(-1).values[:, :-1]], dim=-1)
    return torch.where(ends, seen - before, torch.zeros_like(seen))


def pure_baseline(step_rewards: torch.Tensor, step_end: torch.Tensor, response_mask: torch.Tensor,
                  index: torch.Tensor, kind: str = "token") -> torch.Tensor:
    """Step rewards minus PURE's leave-one-out baseline (released code: CJReinforce/PURE
    ``openrlhf/trainer/ppo_utils/experience_maker.py``, ``NaiveExperienceMaker.process_experiences``).

    kind="token" (the released script's ``--reward_baseline token``): b_i = sum of the other responses' step rewards
    / their total length in tokens (every valid token); step s of response i loses b_i x (tokens in step s WITHOUT its
    last token, the one its reward sits on), as the released code counts them: ``num_tokens_per_step`` is j - 1 for
    the first step and j - j' - 1 after it, j the step's ``score_ids`` entry (its end token's index + 1), so a step
    ending at token 1 counts 1 token, not 2 (CJReinforce/PURE commit 41f9363b8cc4af044b7fc5f7f9bbbf62139e9553,
    ``openrlhf/trainer/ppo_utils/experience_maker.py``, ``make_experience`` and ``process_experiences``).
    kind="step": b_i = mean over the other responses of (their step-reward sum / their number of steps); every step
    loses b_i.
    """
    ends = step_end.to(torch.bool) & response_mask.to(torch.bool)
    r = step_rewards.masked_fill(~ends, 0.0)
    total = r.sum(-1)
    if kind == "token":
        length = response_mask.to(r.dtype).sum(-1)
        _, total_group, _ = group_stats(total, index)
        _, length_group, _ = group_stats(length, index)
        other_length = length_group - length
        b = torch.where(other_length > 0, (total_group - total) / other_length.clamp(min=1), torch.zeros_like(total))
        before_end = (step_token_counts(ends, response_mask) - 1).clamp(min=0).to(r.dtype)
        return (r - b.unsqueeze(-1) * before_end).masked_fill(~ends, 0.0)
    if kind == "step":
        steps = ends.sum(-1).to(r.dtype)
        average = torch.where(steps > 0, total / steps.clamp(min=1), torch.zeros_like(total))
        return (r - _leave_one_out_mean(average, index).unsqueeze(-1)).masked_fill(~ends, 0.0)
    raise ValueError(f"unknown PURE baseline {kind!r} (algo.advantage_options.baseline); known: token, step")


def verifiable_reward(solved: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """PURE's verifiable reward (mode PRMVR): VR_i = solved_i - 1 in {-1, 0}, minus the mean of the other responses
    of its group (same released function as ``pure_baseline``). solved [1, 0] -> VR [0, -1] -> [1, -1]."""
    vr = solved.to(torch.get_default_dtype() if not solved.is_floating_point() else solved.dtype) - 1.0
    return vr - _leave_one_out_mean(vr, index)


def _whiten_except(values: torch.Tensor, keep: torch.Tensor, epsilon: float) -> torch.Tensor:
    """(x - mean) / (std + epsilon) over the ``keep`` positions of the batch (population std), 0 elsewhere."""
    k = keep.to(values.dtype)
    n = k.sum()
    if n <= 1:
        return torch.zeros_like(values)
    mean = (values * k).sum() / n
    centred = (values - mean) * k
    std = ((centred**2).sum() / n).sqrt()
    return centred / (std + epsilon)


def pure_advantages(token_rewards: torch.Tensor, response_mask: torch.Tensor, step_end: torch.Tensor, *,
                    whiten: bool = False, epsilon: float = 1e-6) -> torch.Tensor:
    """PURE's advantages from per-token rewards (released ``NaiveExperienceMaker.make_experience_list`` and
    ``NaiveReplayBuffer.normalize``): reverse-cumsum returns (gamma = 1) with the step-end tokens set to 0 (they carry
    no loss), optionally whitened over the batch's other valid tokens (step ends stay 0)."""
    m = response_mask.to(torch.bool)
    ends = step_end.to(torch.bool) & m
    returns = _reverse_cumsum(token_rewards.masked_fill(~m, 0.0)).masked_fill(~m, 0.0)
    adv = returns.masked_fill(ends, 0.0)
    return _whiten_except(adv, m & ~ends, epsilon) if whiten else adv


def _solved(rewards: torch.Tensor, threshold: float) -> torch.Tensor:
    return (rewards > threshold).to(rewards.dtype)


def _checked_process(name: str, process_rewards, step_end, response_mask):
    if process_rewards is None or step_end is None:
        raise ValueError(f"{name} needs process_rewards and step_end [N, T]: step rewards on each step's last token "
                         "(set reward.process, e.g. {source: arith_steps})")
    if process_rewards.shape != response_mask.shape or step_end.shape != response_mask.shape:
        raise ValueError(f"{name}: process_rewards {tuple(process_rewards.shape)} and step_end "
                         f"{tuple(step_end.shape)} must have the response shape {tuple(response_mask.shape)}")


@register("pure", needs=("process_rewards", "token_rewards"))
def pure(rewards, index, response_mask, *, process_rewards=None, step_end=None, token_rewards=None,
         temperature: float = 0.1, baseline: str = "token", vr_coef: float = 1.0, threshold: float = 0.5,
         exact: bool = False, whiten: bool = True, epsilon: float = 1e-6, **_):
    """PURE (Cheng et al., 2025, arXiv 2504.15275; released code CJReinforce/PURE, script
    ``examples/scripts/train_pure.sh``): min-form credit over step rewards, in the code's order:

    1. r' = ``min_form``(step rewards, temperature, exact) over each response's steps;
    2. minus the leave-one-out ``pure_baseline`` (``baseline`` "token" or "step");
    3. plus ``vr_coef`` x the leave-one-out ``verifiable_reward`` on the last valid token, with solved =
       ``rewards`` > ``threshold`` (the outcome verifier's score; 0.5 splits rlvr's 0/1 correctness scores). The
       released script uses coefficient 1.0 (its "10% verifiable rewards" is the share of training problems that
       have a reference answer; the others get VR 0). vr_coef=0 is the PRM-only mode;
    4. plus ``token_rewards`` (e.g. the KL penalty of ``kl_placement=reward``, 0.001 k1 in the script);
    5. returns = reverse cumulative sum; advantages = returns with every step-end token set to 0
       (``returns.masked_fill_(process_reward_mask, 0)``), then whitened over the batch's other valid tokens
       (the code's replay-buffer normalisation, which keeps step ends at 0; ``whiten=False`` skips it). The code's
       std also sums the zeroed step-end tokens' squared deviations; here mean and std use the same tokens.
    """
    _checked_process("pure", process_rewards, step_end, response_mask)
    m = response_mask.to(torch.bool)
    ends = step_end.to(torch.bool) & m
    dtype = rewards.dtype
    step = min_form(process_rewards.to(dtype), temperature, exact, mask=ends)
    step = pure_baseline(step, ends, m, index, baseline)
    total = step + outcome_token_rewards(vr_coef * verifiable_reward(_solved(rewards, threshold), index), m)
    if token_rewards is not None:
        total = total + token_rewards.to(dtype)
    return pure_advantages(total, m, ends, whiten=whiten, epsilon=epsilon)


@register("process_sum", needs=("process_rewards", "token_rewards"))
def process_sum(rewards, index, response_mask, *, process_rewards=None, step_end=None, token_rewards=None,
                outcome_coef: float = 1.0, whiten: bool = True, epsilon: float = 1e-6, **_):
    """The canonical sum-form credit PURE criticises (Cheng et al., 2025, arXiv 2504.15275, Sec. 3: the value is
    the sum of future rewards): per-token reward = the raw step rewards + ``outcome_coef`` x ``rewards`` on the last
    valid token + ``token_rewards``; advantages = their reverse cumulative sum (gamma = 1) on every valid token,
    whitened over the batch's valid tokens (``whiten=False``: the plain returns). No min-form, no baseline: every
    step that earns a positive reward raises the return of every token before it, which is what invites padding
    with easy, correct steps.
    """
    _checked_process("process_sum", process_rewards, step_end, response_mask)
    m = response_mask.to(torch.bool)
    ends = step_end.to(torch.bool) & m
    dtype = rewards.dtype
    total = process_rewards.to(dtype).masked_fill(~ends, 0.0) + outcome_token_rewards(outcome_coef * rewards, m)
    if token_rewards is not None:
        total = total + token_rewards.to(dtype)
    returns = _reverse_cumsum(total.masked_fill(~m, 0.0)).masked_fill(~m, 0.0)
    return _whiten_except(returns, m, epsilon) if whiten else returns


# ------------------------------------------------------------------------------------------------ PRIME


def implicit_token_rewards(prm_logp: torch.Tensor, ref_logp: torch.Tensor, mask: torch.Tensor,
                           beta: float = 0.05) -> torch.Tensor:
    """PRIME's implicit process reward (Cui et al., 2025, "Process Reinforcement through Implicit Rewards", arXiv
    2502.01456, Eq. 3): r_t = beta (log pi_phi(y_t) - log pi_ref(y_t)) on every valid token except the last, which
    carries the outcome ("token" granularity; released recipe volcengine/verl ``recipe/prime/prime_dp_rm.py``,
    ``DataParallelPRIMERewardModel._forward_micro_batch``, beta_train = 0.05). No gradient: these are rewards."""
    with torch.no_grad():
        m = mask.to(torch.bool)
        r = (beta * (prm_logp - ref_logp)).masked_fill(~m, 0.0)
        last = outcome_token_rewards(torch.ones(m.shape[0], dtype=r.dtype, device=r.device), m).to(torch.bool)
        return r.masked_fill(last, 0.0)


def prm_ce_loss(prm_logp: torch.Tensor, ref_logp: torch.Tensor, mask: torch.Tensor, acc: torch.Tensor,
                beta: float = 0.05) -> torch.Tensor:
    """PRIME's PRM loss (``loss_type: ce``; recipe ``prime_core_algos.py``, ``compute_ce_dpo_loss_rm``): binary cross
    entropy between sigmoid(beta sum_t (log pi_phi - log pi_ref)) and the outcome ``acc`` in {0, 1}, averaged over
    responses. The gradient flows into ``prm_logp``. Example: sum q = 1, beta 0.05 -> sigmoid 0.512497; loss
    0.668460 (acc 1), 0.718460 (acc 0)."""
    m = mask.to(prm_logp.dtype)
    logits = beta * ((prm_logp - ref_logp.detach()) * m).sum(-1)
    return torch.nn.functional.binary_cross_entropy_with_logits(logits, acc.to(logits.dtype))


def prime_norm(token_rewards: torch.Tensor, mask: torch.Tensor, epsilon: float = 1e-6) -> torch.Tensor:
    """``prime_norm: batch_norm`` (recipe ``prime_dp_rm.py``, ``prime_norm``): r / (max over the batch of |reverse
    cumulative sum of r| + 1e-6). Example: rows [0.1, -0.05, 0] and [0.2, 0] -> divisor 0.2 -> [0.4999975, ...]."""
    r = token_rewards.masked_fill(~mask.to(torch.bool), 0.0)
    if r.numel() == 0:
        return r
    return r / (_reverse_cumsum(r).abs().max() + epsilon)


def masked_rloo(values: torch.Tensor, mask: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """The recipe's leave-one-out over per-token rewards (``prime_core_algos.py``, ``masked_rloo`` in
    ``compute_rloo_advantage_return``): with n the group size and mean_j the mean of row j's rewards over its
    ``mask`` positions, each masked reward becomes r_t n / (n - 1) - (sum_j mean_j) / (n - 1); 0 outside the mask.

    For a single masked token per row (the outcome) this is plain RLOO, r_i - mean of the others; for token rewards
    it is this exact form, not a per-token leave-one-out. Rows without masked tokens count with mean 0; a group of
    one gets 0. Example n = 2: [0.1, -0.05, 0] and [0.2, 0.0] -> [0.083333, -0.216667, -0.116667] and
    [0.283333, -0.116667]."""
    m = mask.to(torch.bool)
    r = values.masked_fill(~m, 0.0)
    row_mean = r.sum(-1) / m.sum(-1).clamp(min=1).to(r.dtype)
    count, group_sum, _ = group_stats(row_mean, index)
    others = (count - 1).clamp(min=1).unsqueeze(-1)
    out = r * count.unsqueeze(-1) / others - (group_sum.unsqueeze(-1) / others)
    return torch.where(m & (count > 1).unsqueeze(-1), out, torch.zeros_like(out))


def _whiten_unbiased(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """verl's ``masked_whiten``: (x - mean) rsqrt(unbiased var + 1e-8) over the masked positions; 0 elsewhere and 0
    everywhere when fewer than two positions are masked."""
    m = mask.to(values.dtype)
    n = m.sum()
    if n <= 1:
        return torch.zeros_like(values)
    mean = (values * m).sum() / n
    var = (((values - mean) * m) ** 2).sum() / (n - 1)
    return (values - mean) * torch.rsqrt(var + 1e-8) * m


@register("prime", needs=("process_rewards", "token_rewards"))
def prime(rewards, index, response_mask, *, process_rewards=None, token_rewards=None, reward_gt_coef: float = 5.0,
          reward_dpo_coef: float = 5.0, normalize: bool = True, **_):
    """PRIME advantages (Cui et al., 2025, arXiv 2502.01456, Sec. 3.3; recipe volcengine/verl ``recipe/prime``,
    ``prime_core_algos.py`` ``compute_rloo_advantage_return`` and ``prime_dp_rm.py`` ``prime_norm``), in the recipe's
    order:

    1. ``process_rewards`` are the raw implicit rewards r_t = beta q_t (``implicit_token_rewards``, after the PRM's
       update on this batch); ``prime_norm`` divides them by the batch's largest |return| (``normalize=False``
       skips it, the recipe's ``prime_norm: none``);
    2. ``masked_rloo`` over every valid token x ``reward_dpo_coef`` (5), plus the outcome ``rewards`` on the last
       valid token, ``masked_rloo`` over that token alone (plain RLOO) x ``reward_gt_coef`` (5);
    3. plus ``token_rewards`` (the recipe runs with KL 0, so it has none);
    4. returns = reverse cumulative sum; advantages = the returns whitened over the batch's valid tokens (verl's
       ``masked_whiten``: unbiased variance, rsqrt(var + 1e-8)).
    """
    if process_rewards is None:
        raise ValueError("prime needs process_rewards [N, T]: the implicit PRM's beta * (log pi_phi - log pi_ref) "
                         "on each token (set algo.implicit_prm)")
    if process_rewards.shape != response_mask.shape:
        raise ValueError(f"prime: process_rewards {tuple(process_rewards.shape)} must have the response shape "
                         f"{tuple(response_mask.shape)}")
    m = response_mask.to(torch.bool)
    r = process_rewards.to(rewards.dtype).masked_fill(~m, 0.0)
    if normalize:
        r = prime_norm(r, m)
    last = outcome_token_rewards(torch.ones_like(rewards), m).to(torch.bool)
    total = reward_dpo_coef * masked_rloo(r, m, index)
    total = total + reward_gt_coef * masked_rloo(outcome_token_rewards(rewards, m), last, index)
    if token_rewards is not None:
        total = total + token_rewards.to(rewards.dtype).masked_fill(~m, 0.0)
    returns = _reverse_cumsum(total).masked_fill(~m, 0.0)
    return _whiten_unbiased(returns, m)


def pairwise_accuracy(scores: torch.Tensor, acc: torch.Tensor, index: torch.Tensor) -> float:
    """PRM pairwise accuracy (recipe ``prime_core_algos.py``, ``compute_dpo_accuracy``): within each group, over the
    pairs i < j (row order) whose outcomes differ, the |acc_i - acc_j|-weighted share where (score_i - score_j > 0)
    equals (acc_i - acc_j > 0); a group with no such pair counts 0.5; the mean over groups. ``scores`` [N] are the
    responses' summed implicit rewards. As in the recipe, a score tie counts as right when acc_i < acc_j."""
    scores, acc = scores.detach().reshape(-1), acc.detach().reshape(-1).to(scores.dtype)
    if scores.numel() != acc.numel() or scores.numel() != index.numel():
        raise ValueError(f"pairwise_accuracy: scores {scores.numel()}, acc {acc.numel()}, index {index.numel()}")
    if scores.numel() == 0:
        return 0.5
    per_group = []
    for g in torch.unique(index):
        rows = (index == g).nonzero().reshape(-1)
        s, a = scores[rows], acc[rows]
        upper = torch.triu(torch.ones(len(rows), len(rows), dtype=torch.bool, device=s.device), diagonal=1)
        ds = (s.unsqueeze(1) - s.unsqueeze(0))[upper]
        da = (a.unsqueeze(1) - a.unsqueeze(0))[upper]
        weight = da.abs().sum()
        per_group.append(0.5 if weight == 0 else float((((ds > 0) == (da > 0)).to(s.dtype) * da.abs()).sum() / weight))
    return sum(per_group) / len(per_group)
