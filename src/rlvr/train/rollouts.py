"""One step's samples for training: prompts from the sampler through the shared generate-and-score path
(rlvr.rollout.episodes; tasks that name an environment run there as multi-turn episodes), DAPO's dynamic sampling
of informative groups, and ReMax's greedy baseline."""

from __future__ import annotations

from collections.abc import Callable

import torch

from rlvr.algos import filters
from rlvr.rollout import SamplingParams
from rlvr.rollout.base import select_rows
from rlvr.rollout.episodes import PromptPolicy, Scoring, ScoredSamples, generate_and_score
from rlvr.tasks import PromptSampler
from rlvr.train.policy import logits_forward

# What DAPO's dynamic sampling compares within a group (algo.dynamic_sampling_metric): "score", the task verifier's
# scores, is DAPO's constraint 0 < |{o_i | is_equivalent(a, o_i)}| < G (Yu et al., 2025, Eq. 11) and verl's
# filter_groups metric "acc"; "reward", the composed reward, also counts shaping terms such as the soft overlong
# penalty, so a group of wrong answers of different lengths would pass as informative.
DYNAMIC_SAMPLING_METRICS: dict[str, Callable[[ScoredSamples], list[float]]] = {
    "score": lambda samples: [v.score for v in samples.verdicts],
    "reward": lambda samples: list(samples.rewards),
}


def dynamic_sampling_metric(metric: str) -> Callable[[ScoredSamples], list[float]]:
    """The per-row values whose spread within a group makes the group informative (DYNAMIC_SAMPLING_METRICS)."""
    if metric not in DYNAMIC_SAMPLING_METRICS:
        raise ValueError(f"algo.dynamic_sampling_metric: expected one of {', '.join(DYNAMIC_SAMPLING_METRICS)}, "
                         f"got {metric!r}")
    return DYNAMIC_SAMPLING_METRICS[metric]


def collect_rollouts(engine, tokenizer, sampler: PromptSampler, params: SamplingParams, scoring: Scoring, *,
                     prompts: int, dynamic_sampling: bool, max_rounds: int, step: int = 0,
                     prompt_policy: PromptPolicy | None = None, metric: str = "score") -> tuple[ScoredSamples, dict]:
    """``prompts`` prompts x params.n responses, and metrics of the collection. With DAPO dynamic sampling (Yu et al.,
    2025, Eq. 11), keep only groups whose verifier scores differ (``metric="reward"``: whose composed rewards differ)
    and sample more rounds until the step holds ``prompts`` such groups or ``max_rounds`` rounds were spent (logged
    as "dynamic_sampling_cap_hit")."""
    values_of = dynamic_sampling_metric(metric) if dynamic_sampling else None  # an unknown metric fails first
    first = generate_and_score(engine, tokenizer, sampler.next(prompts), params, scoring, step=step, prompts=prompt_policy)
    observe(sampler, first)
    if not dynamic_sampling:
        return first, {"sampling_rounds": 1, **first.metrics}
    kept: list[ScoredSamples] = []
    n_kept, rounds, current = 0, 1, first
    while True:
        values = torch.tensor(values_of(current), dtype=torch.float64)
        useful = filters.informative(values, current.batch.group_index.cpu()).view(-1, params.n)[:, 0]
        groups = useful.nonzero().squeeze(-1)[: prompts - n_kept]
        if groups.numel():
            rows = (groups.unsqueeze(-1) * params.n + torch.arange(params.n)).flatten()
            kept.append(current.select(rows.tolist(), select_rows(current.batch, rows.to(current.batch.response_ids.device))))
            n_kept += groups.numel()
        if n_kept >= prompts or rounds >= max_rounds:
            break
        current = generate_and_score(engine, tokenizer, sampler.next(prompts), params, scoring, step=step,
                                     prompts=prompt_policy)
        observe(sampler, current)  # every round, so a curriculum also sees the groups dynamic sampling drops
        rounds += 1
    metrics = {"sampling_rounds": rounds, "dynamic_sampling_cap_hit": int(n_kept < prompts),
               "informative_groups": n_kept, **first.metrics}
    if not kept:  # no group had answers of different correctness: train on the first round
        return first, metrics
    merged = ScoredSamples.concat(kept, tokenizer.pad_token_id)
    merged.metrics = {}
    return merged, metrics


def observe(sampler: PromptSampler, samples: ScoredSamples) -> None:
    """Tell the sampler how each task fared (verifier scores in [0, 1], not shaped rewards): curricula use it."""
    sampler.observe([t.id for t in samples.tasks], [v.score for v in samples.verdicts])


def greedy_baseline(engine, tokenizer, samples: ScoredSamples, params: SamplingParams, scoring: Scoring,
                    step: int, prompt_policy: PromptPolicy | None = None) -> torch.Tensor:
    """ReMax's baseline (Li et al., 2023): the reward of a greedy response to each row's prompt."""
    group = samples.batch.group_index
    firsts = [int((group == g).nonzero()[0]) for g in torch.unique(group, sorted=True)]
    greedy = generate_and_score(
        engine, tokenizer, [samples.tasks[i] for i in firsts],
        SamplingParams(n=1, max_new_tokens=params.max_new_tokens, temperature=0.0), scoring, step=step,
        prompts=prompt_policy,
    )
    per_group = torch.tensor(greedy.rewards, device=group.device)
    return per_group[torch.searchsorted(torch.unique(group, sorted=True), group)]


def add_policy_rewards(samples: ScoredSamples, terms: list[dict], model, tokenizer) -> dict[str, float]:
    """Rewards computed from the policy (rlvr.rewards: RLPR, VeriFree, self-certainty, ...) added to each row's
    reward with their weights (``reward.policy``); each term's mean is logged as ``reward/<name>``. The reference
    answer is tokenized for the sources that score it; the verifier's extracted answers serve the voting ones."""
    from rlvr.rewards import PolicyBatch, compute

    batch = samples.batch
    device = batch.response_ids.device
    refs = [tokenizer(str(t.reference), add_special_tokens=False)["input_ids"] for t in samples.tasks]
    width = max(1, max(len(r) for r in refs))
    reference_ids = torch.full((len(refs), width), tokenizer.pad_token_id, dtype=torch.long, device=device)
    reference_mask = torch.zeros((len(refs), width), dtype=torch.long, device=device)
    for i, r in enumerate(refs):
        reference_ids[i, : len(r)] = torch.tensor(r, dtype=torch.long)
        reference_mask[i, : len(r)] = 1
    policy_batch = PolicyBatch(batch.prompt_ids, batch.prompt_mask, batch.response_ids, batch.response_mask,
                               batch.group_index, reference_ids=reference_ids, reference_mask=reference_mask,
                               answers=[v.extracted for v in samples.verdicts])

    forward = logits_forward(model, batch.image_inputs(torch.arange(batch.size, device=device)))

    was_training = model.training
    model.eval()
    metrics = {}
    try:
        for term in terms:
            name = term.get("name", term["source"])
            values = compute(term["source"], policy_batch, forward, **term.get("options", {}))
            weight = float(term.get("weight", 1.0))
            samples.rewards = [r + weight * float(v) for r, v in zip(samples.rewards, values.tolist())]
            samples.components[name] = values.tolist()
            metrics[f"reward/{name}"] = float(values.mean())
    finally:
        model.train(was_training)
    return metrics
