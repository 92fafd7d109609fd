"""Locally built chat tokenizers with tool calls (a Qwen-style and a Llama-style template) and a scripted engine
that answers each prompt with text chosen by a function, for tests of multi-turn episodes."""

from __future__ import annotations

from typing import Callable

import torch

from rlvr.models.tiny import char_tokenizer
from rlvr.rollout.base import RolloutBatch, SamplingParams

QWEN_TEMPLATE = (
    "{% if tools %}{{ '<|im_start|>system\\n# Tools\\n' }}{% for t in tools %}{{ t['function']['name'] + '\\n' }}"
    "{% endfor %}{{ '<|im_end|>\\n' }}{% endif %}"
    "{% for m in messages %}{% if m['role'] == 'tool' %}"
    "{{ '<|im_start|>user\\n<tool_response>\\n' + m['content'] + '\\n</tool_response><|im_end|>\\n' }}"
    "{% else %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
LLAMA_TEMPLATE = (
    "{{ bos_token }}{% if tools %}{{ '<|start_header_id|>system<|end_header_id|>\\n\\nTools:' }}"
    "{% for t in tools %}{{ ' ' + t['function']['name'] }}{% endfor %}{{ '<|eot_id|>' }}{% endif %}"
    "{% for m in messages %}{% set role = 'ipython' if m['role'] == 'tool' else m['role'] %}"
    "{{ '<|start_header_id|>' + role + '<|end_header_id|>\\n\\n' + m['content'] + '<|eot_id|>' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}"
)


def qwen_style_tokenizer():
    tok = char_tokenizer()
    tok.add_special_tokens({"additional_special_tokens": ["<|im_start|>", "<|im_end|>"]})
    tok.add_tokens(["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"])
    tok.eos_token = "<|im_end|>"
    tok.chat_template = QWEN_TEMPLATE
    return tok


def llama_style_tokenizer():
    tok = char_tokenizer()
    tok.add_special_tokens({"additional_special_tokens": ["<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]})
    tok.eos_token = "<|eot_id|>"
    tok.chat_template = LLAMA_TEMPLATE
    return tok


class ScriptedEngine:
    """Answers every prompt with ``script(prompt_text)`` (then EOS), cut at max_new_tokens like a real engine."""

    def __init__(self, tokenizer, script: Callable[[str], str]):
        self.tokenizer, self.script = tokenizer, script
        self.calls: list[int] = []  # prompts per generate call

    def sync_weights(self, model) -> None:
        pass

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> RolloutBatch:
        self.calls.append(len(prompts))
        rows = []
        for p in prompts:
            text = self.script(self.tokenizer.decode(p, skip_special_tokens=False))
            ids = list(self.tokenizer(text, add_special_tokens=False)["input_ids"]) + [self.tokenizer.eos_token_id]
            for _ in range(params.n):
                rows.append((ids[: params.max_new_tokens], len(ids) > params.max_new_tokens))
        width = max(1, max(len(r) for r, _ in rows))
        response_ids = torch.full((len(rows), width), self.tokenizer.pad_token_id)
        response_mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, (ids, _) in enumerate(rows):
            response_ids[i, : len(ids)] = torch.tensor(ids)
            response_mask[i, : len(ids)] = 1
        width_p = max(len(p) for p in prompts)
        prompt_ids = torch.full((len(rows), width_p), self.tokenizer.pad_token_id)
        prompt_mask = torch.zeros((len(rows), width_p), dtype=torch.long)
        return RolloutBatch(prompt_ids, prompt_mask, response_ids, response_mask, -0.5 * response_mask.float(),
                            torch.tensor([t for _, t in rows]),
                            torch.arange(len(prompts)).repeat_interleave(params.n))


def load_environment(**kwargs):
    """A verifiers-package MultiTurnEnv that asks "Are you sure?" once, then the episode is complete
    (tests/verifiers_fixtures.py): the environment tests/test_agent_train.py loads with ``load: agent_fixtures``."""
    from verifiers_fixtures import DoubleCheck

    return DoubleCheck(**kwargs)
