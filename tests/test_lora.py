"""model.lora: PEFT LoRA in the RL loop. The reference is the policy with its adapter disabled and equals the base
model; the engine samples from the current adapter; checkpoints hold the adapter and load with PEFT's
AutoPeftModelForCausalLM; resume after kill -9 is exact; the merged export equals the adapter model."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

peft = pytest.importorskip("peft")

from peft import AutoPeftModelForCausalLM  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402

from rlvr.cli import main  # noqa: E402
from rlvr.config import ConfigError, config_from_dict, load_config  # noqa: E402
from rlvr.models import load_model  # noqa: E402
from rlvr.models.lora import AdapterDisabled, LoraUnavailable, apply_lora, require_peft  # noqa: E402
from rlvr.rollout import SamplingParams, build_engine  # noqa: E402
from rlvr.train import train  # noqa: E402
from rlvr.train.checkpoint import save_checkpoint  # noqa: E402
from rlvr.train.metrics import read_metrics  # noqa: E402
from rlvr.train.policy import policy_forward  # noqa: E402

from conftest import one_digit_rl_config  # noqa: E402

LORA = {"r": 4, "alpha": 8, "dropout": 0.0, "target_modules": ["q_proj", "v_proj", "gate_proj", "down_proj"]}


def _adapted(model_dir, seed=1):
    """The model at model_dir with a seeded random LoRA adapter (B too: a fresh adapter is the identity)."""
    model, tokenizer = load_model(model_dir, device="cpu")
    model = apply_lora(model, LORA, model_dir)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.3)
    return model.eval(), tokenizer


def _logits(model, ids):
    with torch.no_grad():
        return model(input_ids=ids).logits


def _ids(tokenizer):
    return torch.tensor([tokenizer.encode("12+34=46")])


# --------------------------------------------------------------------------------------------- config


def test_config_accepts_lora_and_dotted_overrides(tmp_path):
    cfg = load_config(None, ["model.lora.r=16", "model.lora.target_modules=[q_proj, v_proj]"])
    assert cfg.model.lora == {"r": 16, "target_modules": ["q_proj", "v_proj"]}
    assert load_config(None).model.lora is None


@pytest.mark.parametrize("lora, words", [
    ({"r": 0}, "model.lora: r: expected >= 1"),
    ({"rank": 8}, "model.lora: unknown key(s) rank"),
    ({"dropout": 1.5}, "model.lora: dropout"),
    ({"target_modules": []}, "model.lora: target_modules"),
    ("yes", "model.lora: expected dict or null"),
])
def test_config_errors_name_the_key(lora, words):
    with pytest.raises(ConfigError, match=words.replace("(", r"\(").replace(")", r"\)")):
        config_from_dict({"model": {"lora": lora}})


def test_reference_reset_is_refused_with_lora():
    with pytest.raises(ConfigError, match="algo.ref_update_every: not available with model.lora"):
        config_from_dict({"model": {"lora": {}}, "algo": {"kl_coef": 0.1, "ref_update_every": 2}})


def test_missing_peft_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "peft", None)
    with pytest.raises(LoraUnavailable, match=r"pip install 'rlvr\[lora\]'"):
        require_peft()


# ------------------------------------------------------------------------------------------ the model


def test_reference_with_the_adapter_disabled_equals_the_base_model(tiny_model_dir, tiny):
    model, tokenizer = _adapted(tiny_model_dir)
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    ids = _ids(tokenizer)
    model.train()
    reference = AdapterDisabled(model)
    assert torch.equal(_logits(reference, ids), _logits(base, ids))
    assert model.training, "the reference forward leaves the policy's mode as it was"
    assert (_logits(model.eval(), ids) - _logits(base, ids)).abs().max() > 1e-3, "the adapter changes the model"


def test_engine_samples_from_the_current_adapter(tiny_model_dir):
    model, tokenizer = _adapted(tiny_model_dir)
    plain = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    plain.load_state_dict(_adapted(tiny_model_dir)[0].merge_and_unload().state_dict())  # the adapter folded in
    prompts = [tokenizer.encode("3+4="), tokenizer.encode("12+9=")]
    params = SamplingParams(n=3, max_new_tokens=6, temperature=1.0)
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    for fast in (True, False):  # the lean Llama decoder and the model's own forward
        torch.manual_seed(0)
        batch = build_engine("hf", model, tokenizer, fast=fast).generate(prompts, params)
        args = (batch.prompt_ids, batch.prompt_mask, batch.response_ids, batch.response_mask)
        m = batch.response_mask.bool()
        with torch.no_grad():
            adapted = policy_forward(plain, *args).logp
            original = policy_forward(base, *args).logp
        torch.testing.assert_close(batch.logprobs[m], adapted[m], atol=1e-5, rtol=0)
        assert (batch.logprobs[m] - original[m]).abs().max() > 1e-2, "sampled from the base weights"


def test_lean_decoder_reads_the_adapted_weights(tiny_model_dir):
    from rlvr.rollout.llama_decoder import LlamaDecoder

    model, tokenizer = _adapted(tiny_model_dir)
    assert LlamaDecoder.supports(model)
    ids = _ids(tokenizer)
    with torch.inference_mode():
        decoder = LlamaDecoder(model, 1, ids.shape[1] + 1)
        lean = decoder.forward(ids, torch.arange(ids.shape[1])[None], torch.ones_like(ids, dtype=torch.bool))
    torch.testing.assert_close(lean, _logits(model, ids)[:, -1], atol=1e-5, rtol=0)


def test_lean_decoder_copies_no_weight_matrix_of_a_lora_model(tiny_model_dir):
    """Sampling a LoRA policy reads the frozen weights and the adapters in place: every matrix the decoder holds
    is one of the model's own tensors (a merged or fused copy would cost a model's worth of memory per call)."""
    from rlvr.rollout.llama_decoder import LlamaDecoder, _LowRank, _Split

    model, _ = _adapted(tiny_model_dir)
    own = {p.data_ptr() for p in model.parameters()}
    decoder = LlamaDecoder(model, 2, 8)
    held = []
    for entry in (w for layer in decoder.layers for w in layer):
        for part in entry.parts if isinstance(entry, _Split) else [entry]:
            held += [part.base, *(t for a, b, _ in part.adapters for t in (a, b))] if isinstance(part, _LowRank) else [part]
    assert any(isinstance(w, _Split) for layer in decoder.layers for w in layer)
    assert held and all(isinstance(t, torch.Tensor) and t.data_ptr() in own for t in held)


def test_bfloat16_base_with_float32_adapter_samples_what_it_trains(tiny_model_dir):
    """model.dtype=bfloat16 with LoRA: the frozen base weights are bfloat16, the trained adapter (its master
    weights and gradients) float32; the engine's sampling log-probs equal the trainer's forward."""
    model, tokenizer = load_model(tiny_model_dir, dtype="bfloat16", device="cpu")
    model = apply_lora(model, LORA, tiny_model_dir)
    assert {(p.dtype, p.requires_grad) for p in model.parameters()} == {(torch.bfloat16, False), (torch.float32, True)}
    torch.manual_seed(0)
    batch = build_engine("hf", model, tokenizer).generate([tokenizer.encode("3+4=")], SamplingParams(n=2, max_new_tokens=5))
    model.train()
    out = policy_forward(model, batch.prompt_ids, batch.prompt_mask, batch.response_ids, batch.response_mask)
    out.logp.sum().backward()
    m = batch.response_mask.bool()
    torch.testing.assert_close(batch.logprobs[m], out.logp.detach()[m], atol=1e-4, rtol=0)
    grads = [p.grad for p in model.parameters() if p.requires_grad]
    assert grads and all(g is not None and g.dtype == torch.float32 for g in grads)


# ------------------------------------------------------------------------------------------ the run


def _config(model_dir, out, steps=4, **train_keys) -> dict:
    cfg = one_digit_rl_config(model_dir, out, steps=steps, threads=1, lr=3e-3, **train_keys)
    cfg["data"]["prompts_per_step"] = 4
    cfg["rollout"]["group_size"] = 4
    cfg["model"]["lora"] = dict(LORA)
    cfg["algo"] = {"kl_coef": 0.05}
    return cfg


def _adapter(checkpoint: Path) -> dict[str, torch.Tensor]:
    model = AutoPeftModelForCausalLM.from_pretrained(checkpoint)
    return {k: v for k, v in model.state_dict().items() if "lora_" in k}


def test_a_lora_run_trains_only_the_adapter_and_saves_it(tmp_path, warm_model_dir):
    out = tmp_path / "run"
    run_dir = train(config_from_dict(_config(warm_model_dir, out, steps=3)))
    checkpoint = run_dir / "checkpoint-3"
    names = {p.name for p in checkpoint.iterdir()}
    assert {"adapter_config.json", "adapter_model.safetensors", "trainer_state.pt", "tokenizer_config.json"} <= names
    assert "model.safetensors" not in names, "the checkpoint holds the adapter, not a copy of the base weights"
    loaded = AutoPeftModelForCausalLM.from_pretrained(checkpoint)
    base = AutoModelForCausalLM.from_pretrained(warm_model_dir)
    adapter = {k: v for k, v in loaded.state_dict().items() if "lora_B" in k}
    assert adapter and max(v.abs().max().item() for v in adapter.values()) > 0, "the adapter was trained"
    base_state = base.state_dict()
    for key, value in loaded.get_base_model().state_dict().items():
        if "lora_" not in key:
            plain = key.replace(".base_layer", "")
            assert torch.equal(value, base_state[plain]), f"{plain} changed: only the adapter may train"
    state = torch.load(checkpoint / "trainer_state.pt", weights_only=False)
    trainable = sum(v.numel() for k, v in loaded.state_dict().items() if "lora_" in k)
    in_optimizer = sum(s["exp_avg"].numel() for s in state["optimizer"]["state"].values())
    assert in_optimizer == trainable, "optimizer state only for the adapter"
    rows = read_metrics(run_dir)
    assert all(r["kl"] >= 0 for r in rows) and any(r["kl"] > 0 for r in rows[1:]), "the KL to the base model is measured"
    model, _ = load_model(checkpoint, device="cpu")  # rlvr's loader (eval, demo) reads an adapter folder too
    ids = torch.tensor([[1, 2, 3, 4]])
    assert torch.equal(_logits(model.eval(), ids), _logits(loaded.eval(), ids))


def test_sigkill_then_resume_gives_the_same_adapter(tmp_path, warm_model_dir):
    steps = 6
    whole = tmp_path / "whole"
    config = tmp_path / "whole.yaml"
    config.write_text(yaml.safe_dump(_config(warm_model_dir, whole, steps=steps, save_every=2)))
    done = subprocess.run([sys.executable, "-m", "rlvr.cli", "train", str(config)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr

    from test_reliability import _kill_when, _start

    out = tmp_path / "killed"
    config = tmp_path / "killed.yaml"
    config.write_text(yaml.safe_dump(_config(warm_model_dir, out, steps=steps, save_every=2)))
    proc = _start(config)
    _kill_when(proc, lambda: (out / "checkpoint-2").is_dir())
    assert proc.returncode == -9
    assert not (out / f"checkpoint-{steps}").exists()
    resumed = subprocess.run([sys.executable, "-m", "rlvr.cli", "train", str(config), "--resume"],
                             capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr
    a, b = _adapter(out / f"checkpoint-{steps}"), _adapter(whole / f"checkpoint-{steps}")
    assert a.keys() == b.keys() and a
    assert max((a[k] - b[k]).abs().max().item() for k in a) == 0.0
    assert any((a[k] != 0).any() for k in a if "lora_B" in k), "the adapter moved away from its start"
    drop = lambda row: {k: v for k, v in row.items() if k not in {"time_s", "tokens_per_s"} and "latency" not in k}  # noqa: E731
    assert [drop(r) for r in read_metrics(out)] == [drop(r) for r in read_metrics(whole)]


def test_export_merged_equals_the_adapter_model(tmp_path, tiny_model_dir, capsys):
    model, tokenizer = _adapted(tiny_model_dir)
    checkpoint = save_checkpoint(tmp_path, 7, model, tokenizer, {})
    out = tmp_path / "merged"
    assert main(["export", str(checkpoint), "--merged", str(out)]) == 0
    assert "merged" in capsys.readouterr().out
    assert (out / "config.json").is_file() and not (out / "adapter_config.json").exists()
    merged = AutoModelForCausalLM.from_pretrained(out).eval()
    assert not any("lora" in k for k in merged.state_dict())
    adapter_model = AutoPeftModelForCausalLM.from_pretrained(checkpoint).eval()
    ids = _ids(tokenizer)
    torch.testing.assert_close(_logits(merged, ids), _logits(adapter_model, ids), atol=1e-5, rtol=0)
    assert load_model(out, device="cpu")[1].encode("1+2=3") == tokenizer.encode("1+2=3")


def test_export_of_a_plain_checkpoint_is_a_clear_error(tmp_path, tiny_model_dir, capsys):
    assert main(["export", str(tiny_model_dir), "--merged", str(tmp_path / "out")]) == 2
    assert "adapter_config.json" in capsys.readouterr().err
