"""Stage ``experts``: each group gets ``algo.expert_rows`` rows holding an expert's answer to its task (LUFFY, RL-PLUS).

LUFFY (Yan et al., 2025, "Learning to Reason under Off-Policy Guidance", arXiv 2504.14945; released code
ElliottYan/LUFFY ``luffy/verl/verl/mix_src/mix_vllm_rollout.py`` and ``exp_scripts/train.sh``) and RL-PLUS (Dong et
al., 2025, arXiv 2508.00222, built on the same code) put the whole expert trace (``min/max_prefix_ratio=1.0``) into
``n_prefix=1`` of the ``rollout.n=8`` rows of each prompt: the trace's tokens followed by EOS form the response, and
the other ``n - n_prefix`` = 7 rows are sampled. The group size COUNTS the expert rows, so here too a group keeps
``rollout.group_size`` rows: its last ``expert_rows`` sampled rows give way to the expert rows (G - k sampled + k
expert). The trace is cut at ``rollout.max_new_tokens`` tokens, as the released code cuts it at the response length.

An expert row is tokenised as the policy would have answered: the prompt is the group's (already rendered with the
chat template's generation prompt), the response is the tokenizer's ids of the trace plus EOS (the trace tokenized as
plain text: a trace that spells ``</s>`` or ``<|im_end|>`` holds those characters, never an EOS mid-row). Its ``logprobs`` are 0
(the engine did not sample it: the learner takes the old policy's log-probs from the trainer), its ``row_kind`` is
``expert`` and it keeps its group's id. It is scored by the run's scoring like every sampled row; a trace whose
verifier score is not 1 is dropped (the group then keeps all its sampled rows) and counted.

Config: ``algo.expert_rows`` (0 = off), ``algo.expert_field`` (the ``Task.meta`` key of the trace; a task without it
falls back to ``algo.hint_field``, the reference solution). Metrics: ``expert/dropped`` (traces scored below 1),
``expert/missing`` (groups whose task has no trace), ``expert/truncated`` (traces cut at max_new_tokens); the step
logs ``rows/expert`` and ``reward_mean/expert``.
"""

from __future__ import annotations

import torch

from rlvr.errors import UserError
from rlvr.models import encode_text
from rlvr.rollout import stage_hints  # noqa: F401  (registered first: stages run in registration order)
from rlvr.rollout.base import RolloutBatch, select_rows
from rlvr.rollout.episodes import ScoredSamples, score_samples
from rlvr.rollout.provenance import EXPERT
from rlvr.rollout.stage_rows import regroup
from rlvr.rollout.stages import CollectionStage, StageContext, group_rows, register_stage
from rlvr.tasks import Task


def expert_trace(task: Task, field: str, fallback: str) -> str | None:
    """The task's expert trace: ``meta[field]``, else ``meta[fallback]``, else None."""
    meta = task.meta or {}
    value = meta.get(field, meta.get(fallback))
    return None if value is None else str(value)


def trace_ids(tokenizer, trace: str, max_tokens: int) -> tuple[list[int], bool]:
    """(response ids, truncated): the trace's token ids then EOS, cut at ``max_tokens``. The trace is data: text in
    it that spells EOS or a template marker is plain text (rlvr.models.encode_text), so the row's only EOS is the
    one that ends it."""
    ids = encode_text(tokenizer, trace)
    if tokenizer.eos_token_id is not None:
        ids.append(int(tokenizer.eos_token_id))
    return ids[:max_tokens], len(ids) > max_tokens


def expert_batch(prompts: RolloutBatch, responses: list[list[int]], truncated: list[bool], pad_id: int) -> RolloutBatch:
    """Rows with ``prompts``' prompts (one row each) and the given responses: log-probs 0, row kind expert."""
    n, device = len(responses), prompts.prompt_ids.device
    width = max(1, max((len(r) for r in responses), default=1))
    ids = torch.full((n, width), pad_id, dtype=torch.long, device=device)
    mask = torch.zeros((n, width), dtype=prompts.response_mask.dtype, device=device)
    for i, r in enumerate(responses):
        ids[i, : len(r)] = torch.tensor(r, dtype=torch.long, device=device)
        mask[i, : len(r)] = 1
    return RolloutBatch(prompts.prompt_ids, prompts.prompt_mask, ids, mask,
                        torch.zeros((n, width), dtype=prompts.logprobs.dtype, device=device),
                        torch.tensor(truncated, dtype=torch.bool, device=device), prompts.group_index.clone(),
                        row_kind=torch.full((n,), EXPERT, dtype=torch.long, device=device))


class ExpertRows(CollectionStage):
    def __init__(self, rows: int, field: str = "expert", fallback: str = "solution"):
        self.rows, self.field, self.fallback = rows, field, fallback

    def run(self, samples: ScoredSamples, ctx: StageContext, step: int) -> tuple[ScoredSamples, dict[str, float]]:
        groups = group_rows(samples)
        traces = {g: expert_trace(samples.tasks[rows[0]], self.field, self.fallback) for g, rows in groups.items()}
        with_trace = [g for g, t in traces.items() if t is not None]
        metrics = {"expert/missing": float(len(groups) - len(with_trace)), "expert/dropped": 0.0,
                   "expert/truncated": 0.0}
        if not with_trace:
            return samples, metrics
        first = [groups[g][0] for g in with_trace for _ in range(self.rows)]
        encoded = [trace_ids(ctx.tokenizer, traces[g], ctx.params.max_new_tokens) for g in with_trace
                   for _ in range(self.rows)]
        device = samples.batch.response_ids.device
        prompts = select_rows(samples.batch, torch.tensor(first, dtype=torch.long, device=device))
        batch = expert_batch(prompts, [ids for ids, _ in encoded], [cut for _, cut in encoded], ctx.pad_id)
        texts = ctx.tokenizer.batch_decode(batch.response_ids, skip_special_tokens=True)
        experts = score_samples(batch, [samples.tasks[r] for r in first], texts, ctx.params, ctx.scoring, step, {})
        metrics["expert/truncated"] = float(sum(cut for _, cut in encoded[:: self.rows]))
        passed, kept = [], []
        for j, g in enumerate(with_trace):
            if experts.verdicts[j * self.rows].score < 1.0:  # the rows of a group hold the same trace
                metrics["expert/dropped"] += 1
                continue
            passed.extend(range(j * self.rows, (j + 1) * self.rows))
            kept.extend(groups[g][: len(groups[g]) - self.rows])
            groups[g] = []
        kept += [r for rows in groups.values() for r in rows]
        if not passed:
            return samples, metrics
        base = samples.select(sorted(kept))
        base.metrics = dict(samples.metrics)
        return regroup(base, [experts.select(passed)], ctx.pad_id, order=list(group_rows(samples))), metrics


@register_stage("experts")
def _experts(cfg) -> ExpertRows | None:
    rows = cfg.algo.expert_rows
    if not rows:
        return None
    if rows >= cfg.rollout.group_size:
        raise UserError(f"algo.expert_rows={rows}: the expert rows take the place of sampled rows in a group of "
                        f"rollout.group_size={cfg.rollout.group_size} (as LUFFY's rollout.n counts its n_prefix "
                        f"expert rows), so expert_rows must be below group_size")
    return ExpertRows(rows, cfg.algo.expert_field, cfg.algo.hint_field)
