"""Moving rows into and out of a step's groups, for the collection stages (rlvr.rollout.stages).

    extra = ctx.generate([samples.tasks[rows[0]] for rows in hard], step, n=3)   # its own groups 0, 1, ...
    moved = into_groups(extra, [g for g in hard_ids])                             # now rows of groups hard_ids
    samples = regroup(samples, [moved], pad_id)                                   # joined, each group contiguous

A stage that adds rows (extra rollouts, expert traces) or replaces a group's rows (hinted re-attempts) keeps the
group ids of the rows it adds equal to their group's, so the advantage estimator sees one enlarged group; and it keeps
each group's rows next to each other, in the order the groups came, so the batch still reads group by group.
"""

from __future__ import annotations

import torch

from rlvr.rollout.episodes import ScoredSamples


def into_groups(part: ScoredSamples, group_ids: list[int]) -> ScoredSamples:
    """``part`` with its rows moved into existing groups: a row of ``part``'s group j joins group ``group_ids[j]``.
    (A generation's group j holds the samples of the j-th task it was given.)"""
    table = torch.tensor(group_ids, dtype=torch.long, device=part.batch.group_index.device)
    part.batch.group_index = table[part.batch.group_index]
    return part


def regroup(base: ScoredSamples, parts: list[ScoredSamples], pad_id: int, *,
            order: list[int] | None = None) -> ScoredSamples:
    """``base``'s rows and ``parts``' rows in one set of samples whose groups are contiguous: groups in ``order``
    (default: the order they first appear, base first), each group's rows in the order given. Group ids are kept as
    they are (parts' rows must already carry their group's id, see ``into_groups``); ``base``'s metrics are kept."""
    parts = [p for p in parts if p.batch.size]
    if not parts:
        return base
    joined = ScoredSamples.concat([base, *parts], pad_id, keep_groups=True)
    groups = joined.batch.group_index.tolist()
    if order is None:
        order = list(dict.fromkeys(groups))
    rank = {g: i for i, g in enumerate(order)}
    missing = set(groups) - set(rank)
    if missing:
        raise ValueError(f"regroup: groups {sorted(missing)} are not in the given order")
    rows = sorted(range(len(groups)), key=lambda r: (rank[groups[r]], r))
    result = joined.select(rows)
    result.metrics = dict(base.metrics)
    return result
