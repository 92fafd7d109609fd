"""Rewards from agreement among a group's answers: majority-vote pseudo-labels and semantic-cluster frequency."""

from __future__ import annotations

from collections import Counter

import torch

from rlvr.rewards.registry import PolicyBatch, register_reward_source


def _groups(index: torch.Tensor) -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for i, g in enumerate(index.tolist()):
        out.setdefault(g, []).append(i)
    return out


def majority_labels(answers: list[str | None], index: torch.Tensor) -> dict[int, str | None]:
    """Each group's most common answer (None answers do not vote; a tie goes to the answer seen first)."""
    labels = {}
    for g, rows in _groups(index).items():
        votes = Counter(answers[i] for i in rows if answers[i] is not None)
        if not votes:
            labels[g] = None
            continue
        top = max(votes.values())
        labels[g] = next(answers[i] for i in rows if answers[i] is not None and votes[answers[i]] == top)
    return labels


@register_reward_source("majority_vote", needs=("answers", "index"))
def majority_vote(batch: PolicyBatch, forward=None, *, min_share: float = 0.0) -> torch.Tensor:
    """TTRL's majority-vote pseudo-label reward (Zuo et al., 2025, "TTRL: Test-Time Reinforcement Learning",
    arXiv:2504.16084, Sec. 2, the voting reward): the group's most common answer y_maj is the label and
    r_i = 1{y_i = y_maj}. A group whose majority holds less than ``min_share`` of its rows gets no label (all 0).
    Answers must be canonical strings (e.g. the math verifier's extracted answers); None never matches."""
    answers, index = batch.answers, batch.index
    labels = majority_labels(answers, index)
    out = torch.zeros(len(answers))
    for g, rows in _groups(index).items():
        label = labels[g]
        if label is None or sum(answers[i] == label for i in rows) < min_share * len(rows):
            continue
        for i in rows:
            out[i] = float(answers[i] == label)
    return out


@register_reward_source("semantic_entropy", needs=("answers", "index"))
def semantic_cluster_share(batch: PolicyBatch, forward=None) -> torch.Tensor:
    """EMPO's reward (Zhang et al., 2025, "Right Question is Already Half the Answer: Fully Unsupervised LLM
    Reasoning Incentivization", arXiv:2504.05812, Sec. 3): responses are clustered by meaning (here: equal
    canonical answers) and each response is rewarded with the empirical probability of its cluster,
    r_i = |c(o_i)| / G, so that maximising it minimises the group's semantic entropy. A response without an
    answer gets 0 and does not count in G's clusters (it still counts in G). Returns Tensor[N]."""
    answers, index = batch.answers, batch.index
    out = torch.zeros(len(answers))
    for rows in _groups(index).values():
        sizes = Counter(answers[i] for i in rows if answers[i] is not None)
        for i in rows:
            if answers[i] is not None:
                out[i] = sizes[answers[i]] / len(rows)
    return out
