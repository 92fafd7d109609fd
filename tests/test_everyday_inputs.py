"""Inputs that used to pass silently and give wrong numbers, or fail late with a misleading traceback: each is now
one line naming what to fix, before any work."""

from __future__ import annotations

import json
import shutil

import pytest
from transformers import GPT2Config, GPT2LMHeadModel

from rlvr.cli import main
from rlvr.models import TinySpec, save_tiny_model
from rlvr.models.loading import load_model
from rlvr.models.tiny import char_tokenizer
from rlvr.tasks.base import DataError
from rlvr.tasks.jsonl import load_jsonl


# -------------------------------------------------------------------------------------------- chat roles

@pytest.mark.parametrize("role, hint", [("usr", "did you mean 'user'"), ("Assistant", "did you mean 'assistant'"),
                                        ("human", "expected one of"), ("", "is empty"),
                                        ("system ", "did you mean 'system'")])
def test_a_message_with_an_unknown_role_is_refused_with_its_line(tmp_path, role, hint):
    path = tmp_path / "rows.jsonl"
    rows = [{"prompt": [{"role": "user", "content": "1+1="}], "reference": "2"},
            {"prompt": [{"role": "system", "content": "Be brief."}, {"role": role, "content": "2+2="}], "reference": "4"}]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    with pytest.raises(DataError, match=rf"rows.jsonl:2: field 'prompt': message at index 1: .*{hint}"):
        load_jsonl(path)


def test_every_known_role_loads(tmp_path):
    path = tmp_path / "rows.jsonl"
    roles = ["system", "developer", "user", "assistant", "tool", "ipython", "function", "user"]
    path.write_text(json.dumps({"prompt": [{"role": r, "content": "x"} for r in roles], "reference": "2"}) + "\n")
    assert [m["role"] for m in load_jsonl(path)[0].prompt] == roles


# -------------------------------------------------------------------------------------------- model folders

def test_a_model_folder_without_tokenizer_files_is_refused_at_load(tiny_model_dir, tmp_path):
    folder = tmp_path / "weights-only"
    folder.mkdir()
    for f in tiny_model_dir.iterdir():
        if f.name in ("config.json", "model.safetensors", "generation_config.json"):
            shutil.copy(f, folder / f.name)
    with pytest.raises(ValueError, match="has no tokenizer files"):
        load_model(folder)


# -------------------------------------------------------------------------------------------- context length

def _gpt2_folder(path, n_positions):
    tokenizer = char_tokenizer()
    model = GPT2LMHeadModel(GPT2Config(vocab_size=len(tokenizer), n_layer=1, n_embd=32, n_head=2,
                                       n_positions=n_positions, bos_token_id=tokenizer.bos_token_id,
                                       eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id))
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_prompt_plus_response_past_the_models_context_is_one_line(tmp_path, capsys, kind):
    model = _gpt2_folder(tmp_path / "m", 16) if kind == "gpt2" else \
        save_tiny_model(tmp_path / "m", TinySpec(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64,
                                                 max_positions=16))
    capsys.readouterr()
    code = main(["train", "examples/arithmetic.yaml", f"model.path={model}", f"train.out={tmp_path / 'run'}",
                 "train.steps=1", "rollout.max_new_tokens=12", "train.progress=false"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert "exceeds the model's context of 16 tokens" in err and "rollout.max_new_tokens=12" in err
    assert "max_position_embeddings" in err  # GPT-2's n_positions answers to that name too


def test_within_the_context_it_trains(tmp_path, capsys):
    model = _gpt2_folder(tmp_path / "m", 64)
    assert main(["train", "examples/arithmetic.yaml", f"model.path={model}", f"train.out={tmp_path / 'run'}",
                 "train.steps=1", "rollout.max_new_tokens=4", "train.progress=false", "data.prompts_per_step=2",
                 "rollout.group_size=2"]) == 0


# -------------------------------------------------------------------------------------------- retries

def test_a_start_that_failed_before_its_first_step_can_be_retried(tiny_model_dir, tmp_path, capsys):
    args = ["train", "examples/arithmetic.yaml", f"model.path={tiny_model_dir}", f"train.out={tmp_path / 'run'}",
            "train.steps=1", "train.progress=false", "data.prompts_per_step=2", "rollout.group_size=2"]
    assert main(args + ["rollout.max_new_tokens=200"]) == 2  # past the model's context: fails at the first step
    assert (tmp_path / "run" / "config.yaml").exists() and not list((tmp_path / "run").glob("checkpoint-*"))
    capsys.readouterr()
    assert main(args + ["rollout.max_new_tokens=4"]) == 0  # no --resume, no train.overwrite needed
    assert main(args + ["rollout.max_new_tokens=4"]) == 2  # a run that took a step is still never mixed into
    assert "already holds a run" in capsys.readouterr().err
