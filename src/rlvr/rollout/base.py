"""The interface every generation engine implements: prompts in, sampled responses with masks and log-probs out."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch


@dataclass(frozen=True)
class SamplingParams:
    n: int = 1  # responses per prompt (GRPO's group size)
    max_new_tokens: int = 32
    temperature: float = 1.0  # 0 means greedy
    top_p: float = 1.0
    top_k: int = 0  # 0 = off


@dataclass
class RolloutBatch:
    """N = prompts x n responses; responses of one prompt are contiguous (rows i*n .. i*n+n-1).

    prompt_ids/prompt_mask are left-padded [N, P]; response_ids/response_mask right-padded [N, T], the mask
    covering every generated token up to and including EOS. logprobs [N, T] are the sampling log-probs of
    the temperature-scaled distribution (0 on padding). truncated[N] marks responses that hit max_new_tokens
    without EOS.
    """

    prompt_ids: torch.Tensor
    prompt_mask: torch.Tensor
    response_ids: torch.Tensor
    response_mask: torch.Tensor
    logprobs: torch.Tensor
    truncated: torch.Tensor
    group_index: torch.Tensor

    @property
    def size(self) -> int:
        return self.response_ids.shape[0]


class RolloutEngine(Protocol):
    def generate(self, prompts: list[list[int]], params: SamplingParams) -> RolloutBatch:
        """Sample ``params.n`` responses for each tokenized prompt."""
        ...

    def sync_weights(self, model: torch.nn.Module) -> None:
        """Make the engine sample from the trainer's current weights."""
        ...
