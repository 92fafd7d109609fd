"""`rlvr sft`: loss on the response only, the same token-mean whatever the micro-batching, the RL run's
checkpoints, metrics and exact resume, and errors that name the row and field."""

import json
import shutil

import pytest
import torch
from transformers import AutoModelForCausalLM

from rlvr.cli import main
from rlvr.config import load_config
from rlvr.jsonl import read_jsonl
from rlvr.models.tiny import build_tiny_model
from rlvr.tasks import DataError
from rlvr.train.sft import sft_batch
from rlvr.train.sft_run import completion_loss, run_sft


def write_rows(path, n=24):
    rows = [{"prompt": f"{a}+{b}=", "completion": str(a + b), "reference": str(a + b)} for a in range(6) for b in range(4)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows[:n]))
    return path


def sft_config(model_dir, data, out, *overrides):
    return load_config(None, [f"model.path={model_dir}", f"data.train={data}", f"train.out={out}", "train.steps=6",
                              "train.lr=3e-3", "train.save_every=3", "train.progress=false", "data.prompts_per_step=8",
                              "train.micro_batch_size=3", *overrides])


def test_labels_cover_the_completion_and_eos_only():
    model, tokenizer = build_tiny_model()
    batch = sft_batch(tokenizer, [("12+3=", "15"), ("1+1=", "2")], "cpu")
    loss, tokens = completion_loss(model, batch)
    assert tokens == (2 + 1) + (1 + 1)  # completion characters plus EOS, per row
    assert [tokenizer.decode([t]) for t in batch["labels"][0] if t != -100] == ["1", "5", tokenizer.eos_token]
    assert loss.item() > 0


def test_micro_batches_give_the_whole_batch_token_mean_gradient():
    model, tokenizer = build_tiny_model()
    pairs = [("1+1=", "2"), ("12+30=", "42"), ("5+5=", "10"), ("100+1=", "101")]
    whole = sft_batch(tokenizer, pairs, "cpu")
    loss, tokens = completion_loss(model, whole)
    (loss / tokens).backward()
    expected = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    parts = [sft_batch(tokenizer, pairs[i : i + 1], "cpu") for i in range(4)]
    for part in parts:
        part_loss, _ = completion_loss(model, part)
        (part_loss / tokens).backward()
    for got, want in zip((p.grad for p in model.parameters()), expected):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_run_learns_checkpoints_and_resumes_exactly(tiny_model_dir, tmp_path, dtype):
    """float16 trains with a loss scale (logged) that resumes with the run."""
    data = write_rows(tmp_path / "sft.jsonl")
    straight = run_sft(sft_config(tiny_model_dir, data, tmp_path / "a", f"model.dtype={dtype}"))
    rows = read_jsonl(straight / "metrics.jsonl")
    assert all(("loss_scale" in r) == (dtype == "float16") and not r["bad_step"] for r in rows)
    assert [r["step"] for r in rows] == [1, 2, 3, 4, 5, 6]
    assert rows[-1]["loss"] < rows[0]["loss"] and all(r["tokens"] > 0 and "time_s" in r for r in rows)
    for name in ("config.yaml", "manifest.json", "checkpoint-3", "checkpoint-6"):
        assert (straight / name).exists()
    AutoModelForCausalLM.from_pretrained(straight / "checkpoint-6")

    shutil.copytree(straight, tmp_path / "b")
    shutil.rmtree(tmp_path / "b" / "checkpoint-6")  # as if the run had stopped after step 3's checkpoint
    resumed = run_sft(sft_config(tiny_model_dir, data, tmp_path / "b", f"model.dtype={dtype}"), resume=True)
    again = read_jsonl(resumed / "metrics.jsonl")
    scaled = [(r["loss"], r.get("loss_scale"), r.get("overflow_retries")) for r in rows]
    assert [(r["loss"], r.get("loss_scale"), r.get("overflow_retries")) for r in again] == scaled
    a = AutoModelForCausalLM.from_pretrained(straight / "checkpoint-6").state_dict()
    b = AutoModelForCausalLM.from_pretrained(resumed / "checkpoint-6").state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_missing_completion_names_the_row_and_field(tiny_model_dir, tmp_path):
    data = tmp_path / "bad.jsonl"
    data.write_text(json.dumps({"prompt": "1+1=", "reference": "2"}) + "\n")
    with pytest.raises(DataError, match=r"task 'bad\.jsonl:1': field 'completion': missing"):
        run_sft(sft_config(tiny_model_dir, data, tmp_path / "run"))


def test_cli_sft_on_reasoning_gym_targets(tiny_model_dir, tmp_path, capsys):
    pytest.importorskip("reasoning_gym")
    code = main(["sft", "/dev/null", f"model.path={tiny_model_dir}", "data.train=reasoning_gym:chain_sum:size=8,instruction=0",
                 f"train.out={tmp_path / 'rg'}", "train.steps=2", "train.progress=false", "data.prompts_per_step=4"])
    assert code == 0 and "sft: done" in capsys.readouterr().out
    assert len(read_jsonl(tmp_path / "rg" / "metrics.jsonl")) == 2


def test_a_skipped_step_logs_no_nan(tiny_model_dir, tmp_path, monkeypatch):
    """A step whose loss is not finite is skipped; its row carries no loss or gradient norm, never a NaN."""
    import rlvr.train.sft_run as sft_run

    calls = {"n": 0}

    def nan_on_step_two(model, batch):
        calls["n"] += 1
        loss, count = completion_loss(model, batch)
        return (loss * float("nan") if calls["n"] == 2 else loss), count

    monkeypatch.setattr(sft_run, "completion_loss", nan_on_step_two)
    run = run_sft(sft_config(tiny_model_dir, write_rows(tmp_path / "rows.jsonl"), tmp_path / "run", "train.steps=3",
                          "train.micro_batch_size=0"))  # one backward pass per step
    rows = read_jsonl(run / "metrics.jsonl")
    assert [r["bad_step"] for r in rows] == [False, True, False]
    assert "loss" not in rows[1] and "grad_norm" not in rows[1]
    assert all(r["loss"] == r["loss"] for r in (rows[0], rows[2]))
