"""Stand-ins for the collection-stage tests: a scripted rollout engine (no model) and a stage context around it."""

from __future__ import annotations

from typing import Callable

import torch

from rlvr.models import char_tokenizer
from rlvr.rollout.base import RolloutBatch, SamplingParams
from rlvr.rollout.episodes import Scoring
from rlvr.rollout.stages import StageContext

SAMPLED_LOGPROB = -0.5  # the log-prob the stand-in reports for every token it "samples"


class ScriptedEngineStandIn:
    """A stand-in for a rollout engine: ``answer(prompt_text, call, j)`` gives the j-th response to a prompt on the
    call-th call (from 0). Records each call as (decoded prompts, n); behaves like an engine otherwise (left-padded
    prompts, right-padded responses ending in EOS, group j = the j-th prompt, its rows contiguous)."""

    def __init__(self, tokenizer, answer: Callable[[str, int, int], str]):
        self.tokenizer, self.answer = tokenizer, answer
        self.calls: list[tuple[list[str], int]] = []

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> RolloutBatch:
        texts = [self.tokenizer.decode(p, skip_special_tokens=True) for p in prompts]
        call = len(self.calls)
        self.calls.append((texts, params.n))
        pad, eos = self.tokenizer.pad_token_id, self.tokenizer.eos_token_id
        rows = [(p, self.tokenizer(self.answer(t, call, j), add_special_tokens=False)["input_ids"] + [eos])
                for p, t in zip(prompts, texts) for j in range(params.n)]
        rows = [(p, r[: params.max_new_tokens]) for p, r in rows]
        n, width_p, width_r = len(rows), max(len(p) for p, _ in rows), max(len(r) for _, r in rows)
        prompt_ids = torch.full((n, width_p), pad)
        prompt_mask = torch.zeros((n, width_p), dtype=torch.long)
        response_ids = torch.full((n, width_r), pad)
        response_mask = torch.zeros((n, width_r), dtype=torch.long)
        for i, (p, r) in enumerate(rows):
            prompt_ids[i, width_p - len(p):], prompt_mask[i, width_p - len(p):] = torch.tensor(p), 1
            response_ids[i, : len(r)], response_mask[i, : len(r)] = torch.tensor(r), 1
        return RolloutBatch(prompt_ids, prompt_mask, response_ids, response_mask,
                            SAMPLED_LOGPROB * response_mask.float(),
                            torch.tensor([eos not in r for _, r in rows]),
                            torch.arange(len(prompts)).repeat_interleave(params.n))

    def sync_weights(self, model) -> None:
        pass


def scripted_context(answer: Callable[[str, int, int], str], *, n: int = 2, max_new_tokens: int = 32,
                     verifier: str = "exact") -> StageContext:
    tokenizer = char_tokenizer()
    return StageContext(ScriptedEngineStandIn(tokenizer, answer), tokenizer,
                        SamplingParams(n=n, max_new_tokens=max_new_tokens), Scoring(verifier=verifier), None, cfg=None)


def decoded(tokenizer, ids: torch.Tensor) -> list[str]:
    return tokenizer.batch_decode(ids, skip_special_tokens=True)
