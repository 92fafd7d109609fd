"""Stage ``hints``: groups the policy failed entirely are sampled again with the start of the reference solution in
the prompt (GHPO), and, with ``algo.hint_mode=guide``, trained as if the hint had not been there (Guide).

GHPO (Liu et al., 2025, "GHPO: Adaptive Guidance for Stable and Efficient LLM Reinforcement Learning", arXiv
2507.10628, Sec. 3; released trainer hkgc-1/GHPO ``src/ghpo/ghpo_trainer.py``, ``_generate_and_score_completions``):
a group whose G verifier scores are all <= 0 is regenerated as a whole, G new responses, with the prompt
``prompt + "\\n The following text is the beginning part of the answer, which you can refer to for solving the
problem:\\n" + solution[:round(len(solution) * ratio)]``, for ratio 0.25, then 0.5, then 0.75: a group whose hinted
responses are still all wrong goes to the next ratio. The hinted rows REPLACE the group's rows (the released trainer
swaps the completions and the prompt in place), including after the last ratio, and are trained in the hinted
context. Chat prompts get the hint at the end of their last user message, as the released trainer does.

Guide (Nath et al., 2025, "Adaptive Guidance Accelerates Reinforcement Learning of Reasoning Models", arXiv
2506.13923, Algorithm 1; no code released): the same trigger, but the policy is optimised for the prompt WITHOUT the
hint: the rows keep the plain prompt as ``prompt_ids`` and carry the hinted one as ``behaviour_prompt_ids``, so the
old policy's log-probs (and the engine's sampling log-probs) are those of the hinted context and the PPO ratio is
pi_theta(o | q) / pi_old(o | q, h).

Config: ``algo.hint_stages`` (the ratios; empty = off), ``algo.hint_field`` (the ``Task.meta`` key of the solution),
``algo.hint_template`` (``{prompt}`` and ``{hint}``; None = GHPO's wording), ``algo.hint_mode`` (replace | guide).
Metrics: ``hint_frac`` (share of the step's groups hinted), ``hint/stage_<k>_groups`` (groups sampled with the k-th
ratio, k from 1), ``hint/solved_groups`` (hinted groups that ended with a score > 0),
``hint/no_solution_groups`` (all-wrong groups whose task has no solution to hint from; left as they are).
The curriculum saw the unhinted scores before this stage ran (rlvr.train.collector).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from rlvr.algos.collection import hint_prefix
from rlvr.errors import UserError
from rlvr.rollout.base import select_rows
from rlvr.rollout.episodes import ScoredSamples
from rlvr.rollout.provenance import HINTED
from rlvr.rollout.stage_rows import into_groups, regroup
from rlvr.rollout.stages import CollectionStage, StageContext, group_rows, register_stage
from rlvr.tasks import Task

GHPO_TEMPLATE = ("{prompt}\n The following text is the beginning part of the answer, which you can refer to for "
                 "solving the problem:\n{hint}")


def check_template(template: str) -> str:
    """``template`` if it formats with exactly the fields ``{prompt}`` and ``{hint}``, else a UserError."""
    if not isinstance(template, str):
        raise UserError(f"algo.hint_template: expected a string with {{prompt}} and {{hint}}, got {template!r}")
    try:
        filled = template.format(prompt="\x00P", hint="\x00H")
    except (KeyError, IndexError, ValueError) as e:
        raise UserError(f"algo.hint_template: {template!r} does not format with only {{prompt}} and {{hint}} "
                        f"({type(e).__name__}: {e}); write literal braces as {{{{ and }}}}") from None
    for field in ("prompt", "hint"):
        if f"\x00{field[0].upper()}" not in filled:
            raise UserError(f"algo.hint_template: {template!r} has no {{{field}}} field")
    return template


def hinted_prompt(prompt: Any, hint: str, template: str = GHPO_TEMPLATE) -> Any:
    """The prompt with the hint: plain text through the template; chat messages (a list of role/content dicts) with
    the template applied to the last user message's content (the other messages unchanged)."""
    if isinstance(prompt, str):
        return template.format(prompt=prompt, hint=hint)
    messages = [dict(m) for m in prompt]
    last_user = next((i for i in range(len(messages) - 1, -1, -1) if messages[i].get("role") == "user"), None)
    if last_user is None or not isinstance(messages[last_user].get("content"), str):
        raise UserError("a chat prompt to be hinted needs a user message whose content is text; got roles "
                        f"{[m.get('role') for m in messages]}")
    messages[last_user]["content"] = template.format(prompt=messages[last_user]["content"], hint=hint)
    return messages


def solution_of(task: Task, field: str) -> str | None:
    value = (task.meta or {}).get(field)
    return None if value is None else str(value)


def all_wrong(samples: ScoredSamples, rows: list[int]) -> bool:
    """GHPO's trigger: every verifier score of the group is <= 0."""
    return all(samples.verdicts[r].score <= 0 for r in rows)


class Hints(CollectionStage):
    def __init__(self, ratios: list[float], field: str = "solution", template: str | None = None,
                 mode: str = "replace"):
        if mode not in ("replace", "guide"):
            raise UserError(f"algo.hint_mode: expected replace or guide, got {mode!r}")
        self.ratios, self.field, self.mode = [float(r) for r in ratios], field, mode
        self.template = check_template(GHPO_TEMPLATE if template is None else template)

    def run(self, samples: ScoredSamples, ctx: StageContext, step: int) -> tuple[ScoredSamples, dict[str, float]]:
        groups = group_rows(samples)
        failed = [g for g, rows in groups.items() if all_wrong(samples, rows)]
        pending = [g for g in failed if solution_of(samples.tasks[groups[g][0]], self.field) is not None]
        metrics: dict[str, float] = {"hint_frac": len(pending) / max(len(groups), 1),
                                     "hint/no_solution_groups": float(len(failed) - len(pending))}
        latest: dict[int, ScoredSamples] = {}  # each hinted group's rows from the last ratio it was sampled with
        for k, ratio in enumerate(self.ratios, start=1):
            metrics[f"hint/stage_{k}_groups"] = float(len(pending))
            if not pending:
                continue
            tasks = [self.hinted_task(samples.tasks[groups[g][0]], ratio) for g in pending]
            again = into_groups(ctx.generate(tasks, step), pending)
            again.batch.row_kind = torch.full_like(again.batch.row_kind, HINTED)
            if self.mode == "guide":
                self.train_without_hint(again, samples, groups)
            by_group = group_rows(again)
            for g in pending:
                latest[g] = again.select(by_group[g])
            pending = [g for g in pending if all_wrong(again, by_group[g])]
        metrics["hint/solved_groups"] = float(sum(not all_wrong(part, list(range(part.batch.size)))
                                                  for part in latest.values()))
        if not latest:
            return samples, metrics
        kept = [r for g, rows in groups.items() if g not in latest for r in rows]
        base = samples.select(kept)
        base.metrics = dict(samples.metrics)
        return regroup(base, list(latest.values()), ctx.pad_id, order=list(groups)), metrics

    def hinted_task(self, task: Task, ratio: float) -> Task:
        hint = hint_prefix(solution_of(task, self.field), ratio)
        return dataclasses.replace(task, prompt=hinted_prompt(task.prompt, hint, self.template))

    @staticmethod
    def train_without_hint(again: ScoredSamples, samples: ScoredSamples, groups: dict[int, list[int]]) -> None:
        """Guide: the rows were sampled with the hinted prompt (their behaviour prompt) and are trained on the
        group's plain prompt, which the group's first sampled row holds; their task is the plain one too (a row's
        task is the one whose prompt it is trained on)."""
        batch = again.batch
        first = [groups[int(g)][0] for g in batch.group_index.tolist()]
        device = samples.batch.prompt_ids.device
        plain = select_rows(samples.batch, torch.tensor(first, dtype=torch.long, device=device))
        batch.behaviour_prompt_ids, batch.behaviour_prompt_mask = batch.prompt_ids, batch.prompt_mask
        batch.prompt_ids, batch.prompt_mask = plain.prompt_ids, plain.prompt_mask
        again.tasks = [samples.tasks[r] for r in first]


@register_stage("hints")
def _hints(cfg) -> Hints | None:
    algo = cfg.algo
    if not algo.hint_stages:
        return None
    return Hints(algo.hint_stages, algo.hint_field, algo.hint_template, algo.hint_mode)
