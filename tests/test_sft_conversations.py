"""rlvr sft on TRL's conversational rows ({"messages": [...]}): the loss on the assistant turns only."""

import json

import pytest

from rlvr.cli import main
from rlvr.jsonl import read_jsonl
from rlvr.models.tiny import char_tokenizer
from rlvr.tasks.base import DataError
from rlvr.tasks.conversations import is_conversational, load_conversations
from rlvr.train.sft import conversation_tokens

CHAT = [{"role": "system", "content": "Add."}, {"role": "user", "content": "1+2="},
        {"role": "assistant", "content": "3"}, {"role": "user", "content": "and 2+2="},
        {"role": "assistant", "content": "4"}]


def test_only_the_assistant_turns_carry_labels():
    tok = char_tokenizer()
    ids, labels = conversation_tokens(tok, CHAT)
    trained = tok.decode([i for i, l in zip(ids, labels) if l != -100])
    assert trained == "3\n4\n"  # each turn as the template renders it, its end-of-turn newline included
    assert tok.decode(ids) == tok.apply_chat_template(CHAT, tokenize=False)
    prompt = tok.apply_chat_template(CHAT[:2], tokenize=False, add_generation_prompt=True)
    first = next(k for k, l in enumerate(labels) if l != -100)
    assert tok.decode(ids[:first]) == prompt  # what precedes the first answer is its sampling-time prompt


def test_a_template_that_rewrites_earlier_turns_is_refused_showing_where():
    tok = char_tokenizer()
    # drops every assistant turn but the last, as reasoning templates drop earlier thoughts
    tok.chat_template = ("{% for m in messages %}{% if m['role'] != 'assistant' or loop.last %}{{ m['role'] }}: "
                         "{{ m['content'] }}\n{% endif %}{% endfor %}{% if add_generation_prompt %}assistant: {% endif %}")
    with pytest.raises(ValueError, match="renders assistant turn 2 differently"):
        conversation_tokens(tok, CHAT)


def test_rows_are_checked_with_file_and_line(tmp_path):
    path = tmp_path / "chat.jsonl"
    path.write_text(json.dumps({"messages": CHAT}) + "\n" + json.dumps({"messages": CHAT[:2]}) + "\n")
    assert is_conversational(path)
    with pytest.raises(DataError, match=r"chat.jsonl:2: field 'messages': no assistant turn"):
        load_conversations(path)
    assert not is_conversational("arithmetic:train")


def test_rlvr_sft_trains_on_messages_rows(tiny_model_dir, tmp_path):
    path = tmp_path / "chat.jsonl"
    rows = [{"messages": [{"role": "user", "content": f"{a}+{b}="}, {"role": "assistant", "content": str(a + b)}]}
            for a in range(5) for b in range(5)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert main(["sft", "examples/arithmetic.yaml", f"model.path={tiny_model_dir}", f"data.train={path}",
                 f"train.out={tmp_path / 'run'}", "train.steps=30", "train.lr=3e-3", "data.prompts_per_step=8",
                 "train.progress=false"]) == 0
    metrics = read_jsonl(tmp_path / "run" / "metrics.jsonl")
    assert metrics[-1]["loss"] < metrics[0]["loss"] * 0.7
    assert all(r["tokens"] <= 8 * 3 for r in metrics)  # answer tokens and their newline only, no prompt tokens


def test_an_agent_transcript_trains_the_model_turns_only():
    tok = char_tokenizer()
    transcript = [{"role": "user", "content": "37*58?"}, {"role": "assistant", "content": "calc(37*58)"},
                  {"role": "tool", "content": "2146"}, {"role": "assistant", "content": "2146"}]
    ids, labels = conversation_tokens(tok, transcript)
    assert tok.decode([i for i, l in zip(ids, labels) if l != -100]) == "calc(37*58)\n2146\n"
    assert "tool: 2146" in tok.decode(ids)  # the tool's result is context, not a target
