"""Locally built chat tokenizers with tool calls (a Qwen-style, a Qwen3-style and a Llama-style template) and a
scripted engine that answers each prompt with text chosen by a function, for tests of multi-turn episodes."""

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

# Qwen3's chat template, written from its published structure (Qwen/Qwen3-8B tokenizer_config.json): a system block
# listing the tools as JSON inside <tools></tools>, <|im_start|>/<|im_end|> turns, tool results as <tool_response>
# blocks inside one user turn per run of tool messages, and reasoning: an assistant turn's "<think>...</think>" is
# split off its content and rendered back only for turns after the last real user query; the LAST message, when it
# is such an assistant turn, always gets a (possibly empty) think block, earlier ones only when they had reasoning.
# So an assistant turn without reasoning renders differently once later messages follow. enable_thinking=false
# adds an empty think block to the generation prompt.
QWEN3_TEMPLATE = """\
{%- if tools %}{{- '<|im_start|>system\\n' }}\
{%- if messages[0].role == 'system' %}{{- messages[0].content + '\\n\\n' }}{%- endif %}\
{{- '# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\nYou are provided with \
function signatures within <tools></tools> XML tags:\\n<tools>' }}\
{%- for tool in tools %}{{- '\\n' }}{{- tool | tojson }}{%- endfor %}\
{{- '\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within \
<tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\"name\\": <function-name>, \\"arguments\\": \
<args-json-object>}\\n</tool_call><|im_end|>\\n' }}\
{%- elif messages[0].role == 'system' %}{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}\
{%- endif %}\
{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}\
{%- for message in messages[::-1] %}{%- set index = (messages|length - 1) - loop.index0 %}\
{%- if ns.multi_step_tool and message.role == 'user' and message.content is string and \
not (message.content.startswith('<tool_response>') and message.content.endswith('</tool_response>')) %}\
{%- set ns.multi_step_tool = false %}{%- set ns.last_query_index = index %}{%- endif %}{%- endfor %}\
{%- for message in messages %}\
{%- set content = message.content if message.content is string else '' %}\
{%- if message.role == 'user' or (message.role == 'system' and not loop.first) %}\
{{- '<|im_start|>' + message.role + '\\n' + content + '<|im_end|>\\n' }}\
{%- elif message.role == 'assistant' %}\
{%- set reasoning = '' %}\
{%- if message.reasoning_content is string %}{%- set reasoning = message.reasoning_content %}\
{%- elif '</think>' in content %}\
{%- set reasoning = content.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') %}\
{%- set content = content.split('</think>')[-1].lstrip('\\n') %}{%- endif %}\
{%- if loop.index0 > ns.last_query_index and (loop.last or reasoning) %}\
{{- '<|im_start|>assistant\\n<think>\\n' + reasoning.strip('\\n') + '\\n</think>\\n\\n' + content.lstrip('\\n') }}\
{%- else %}{{- '<|im_start|>assistant\\n' + content }}{%- endif %}\
{%- if message.tool_calls %}{%- for call in message.tool_calls %}\
{%- if (loop.first and content) or not loop.first %}{{- '\\n' }}{%- endif %}\
{%- set call = call.function if call.function else call %}\
{{- '<tool_call>\\n{\\"name\\": \\"' + call.name + '\\", \\"arguments\\": ' }}\
{{- call.arguments if call.arguments is string else call.arguments | tojson }}{{- '}\\n</tool_call>' }}\
{%- endfor %}{%- endif %}\
{{- '<|im_end|>\\n' }}\
{%- elif message.role == 'tool' %}\
{%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}\
{{- '\\n<tool_response>\\n' + content + '\\n</tool_response>' }}\
{%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}{{- '<|im_end|>\\n' }}{%- endif %}\
{%- endif %}{%- endfor %}\
{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}\
{%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}\
{%- endif %}"""


def qwen_style_tokenizer():
    tok = char_tokenizer()
    tok.add_special_tokens({"additional_special_tokens": ["<|im_start|>", "<|im_end|>"]})
    tok.add_tokens(["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"])
    tok.eos_token = "<|im_end|>"
    tok.chat_template = QWEN_TEMPLATE
    return tok


def qwen3_style_tokenizer():
    """A character-level tokenizer with Qwen3's special tokens and its chat template (QWEN3_TEMPLATE)."""
    tok = char_tokenizer()
    tok.add_special_tokens({"additional_special_tokens": ["<|im_start|>", "<|im_end|>"]})
    tok.add_tokens(["<think>", "</think>", "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"])
    tok.eos_token = "<|im_end|>"
    tok.chat_template = QWEN3_TEMPLATE
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
