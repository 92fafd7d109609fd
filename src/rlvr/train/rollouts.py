"""One step's rollouts: sample prompts, generate responses, score them (with composed rewards), and DAPO's
dynamic sampling of informative groups."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from rlvr.algos import filters
from rlvr.config import Config
from rlvr.models import encode_prompt
from rlvr.rollout import RolloutBatch, SamplingParams
from rlvr.rollout.base import concat_batches, select_rows
from rlvr.tasks import PromptSampler, Task
from rlvr.verifiers import ScoreRequest, Verdict, score_batch
from rlvr.verifiers.compose import RewardSpec, Term, compose


def score(tasks: list[Task], responses: list[str], cfg: Config, term: Term | None = None) -> list[Verdict]:
    """Verdicts for responses; response i answers tasks[i]. The one place the trainer scores: with the
    task's own verifier (or data.verifier), or with the verifier a reward term names."""
    requests = []
    for task, response in zip(tasks, responses):
        if term is None or term.uses_task_verifier:
            name, options = task.verifier or cfg.data.verifier, {**cfg.data.verifier_options, **task.verifier_options}
        else:
            name, options = term.verifier, {}
        reference = task.reference if term is None or term.reference is None else term.reference
        requests.append(ScoreRequest(name, response, reference, {**options, **(term.options if term else {})}))
    return score_batch(requests)


@dataclass
class Rollouts:
    """One step's training batch: rollouts, the task each row answers, its verdict from the task verifier,
    its reward, and (with reward.terms) each term's score."""

    batch: RolloutBatch
    tasks: list[Task]
    verdicts: list[Verdict]
    rewards: list[float]
    components: dict[str, list[float]] = field(default_factory=dict)
    rounds: int = 1

    def select(self, rows: list[int], batch: RolloutBatch) -> Rollouts:
        return Rollouts(batch, [self.tasks[i] for i in rows], [self.verdicts[i] for i in rows],
                        [self.rewards[i] for i in rows], {k: [v[i] for i in rows] for k, v in self.components.items()})


def generate_and_score(
    engine, tokenizer, tasks: list[Task], params: SamplingParams, cfg: Config, spec: RewardSpec | None = None, step: int = 0
) -> Rollouts:
    batch = engine.generate([encode_prompt(tokenizer, t.prompt) for t in tasks], params)
    responses = tokenizer.batch_decode(batch.response_ids, skip_special_tokens=True)
    row_tasks = [t for t in tasks for _ in range(params.n)]
    if spec is None:
        verdicts = score(row_tasks, responses, cfg)
        return Rollouts(batch, row_tasks, verdicts, [v.score for v in verdicts])
    by_term = {term.name: score(row_tasks, responses, cfg, term) for term in spec.verifier_terms()}
    task_term = next((t.name for t in spec.verifier_terms() if t.uses_task_verifier), next(iter(by_term), None))
    verdicts = by_term[task_term] if task_term else score(row_tasks, responses, cfg)
    composed = compose(
        spec, {name: [v.score for v in vs] for name, vs in by_term.items()},
        lengths=batch.response_mask.sum(-1).tolist(), max_len=params.max_new_tokens,
        groups=batch.group_index.tolist(), step=step,
    )
    return Rollouts(batch, row_tasks, verdicts, composed.total, composed.components)


def collect_rollouts(
    engine, tokenizer, sampler: PromptSampler, params: SamplingParams, cfg: Config, spec: RewardSpec | None = None, step: int = 0
) -> Rollouts:
    """Sample prompts_per_step prompts x group_size responses. With DAPO dynamic sampling (Yu et al., 2025,
    Eq. 11), keep only groups whose rewards differ and sample more rounds until the step has prompts_per_step
    such groups or dynamic_sampling_max_batches rounds were spent."""
    want = cfg.data.prompts_per_step
    first = generate_and_score(engine, tokenizer, sampler.next(want), params, cfg, spec, step)
    if not cfg.algo.dynamic_sampling:
        return first
    kept: list[Rollouts] = []
    n_kept, rounds, current = 0, 1, first
    while True:
        rewards = torch.tensor(current.rewards)
        useful = filters.informative(rewards, current.batch.group_index.cpu()).view(-1, params.n)[:, 0]
        groups = useful.nonzero().squeeze(-1)[: want - n_kept]
        if groups.numel():
            rows = (groups.unsqueeze(-1) * params.n + torch.arange(params.n)).flatten()
            kept.append(current.select(rows.tolist(), select_rows(current.batch, rows.to(current.batch.response_ids.device))))
            n_kept += groups.numel()
        if n_kept >= want or rounds >= cfg.algo.dynamic_sampling_max_batches:
            break
        current = generate_and_score(engine, tokenizer, sampler.next(want), params, cfg, spec, step)
        rounds += 1
    if not kept:  # no group had mixed rewards: train on the first round (outcome advantages are 0 there)
        first.rounds = rounds
        return first
    return Rollouts(
        concat_batches([r.batch for r in kept], engine.pad_id),
        [t for r in kept for t in r.tasks], [v for r in kept for v in r.verdicts], [x for r in kept for x in r.rewards],
        {name: [x for r in kept for x in r.components[name]] for name in first.components}, rounds,
    )


def greedy_baseline(
    engine, tokenizer, rollouts: Rollouts, params: SamplingParams, cfg: Config, spec: RewardSpec | None, step: int
) -> torch.Tensor:
    """ReMax's baseline (Li et al., 2023): the reward of a greedy response to each row's prompt."""
    group = rollouts.batch.group_index
    firsts = [int((group == g).nonzero()[0]) for g in torch.unique(group, sorted=True)]
    greedy = generate_and_score(
        engine, tokenizer, [rollouts.tasks[i] for i in firsts],
        SamplingParams(n=1, max_new_tokens=params.max_new_tokens, temperature=0.0), cfg, spec, step,
    )
    per_group = torch.tensor(greedy.rewards, device=group.device)
    return per_group[torch.searchsorted(torch.unique(group, sorted=True), group)]
