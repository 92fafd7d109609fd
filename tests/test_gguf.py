"""GGUF models: a tiny llama written here with the gguf package's writer (F32, F16 and Q8_0 tensors, a byte-level
BPE vocabulary of 262 tokens, a chat template) loads through model.path and `rlvr convert gguf` as the plain model
of its dequantized weights, with its tokenizer; a missing gguf package and bad files are one-line errors."""

from __future__ import annotations

import sys
from pathlib import Path

import gguf  # the dev extra installs it (rlvr[gguf])
import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM
from transformers.convert_slow_tokenizer import bytes_to_unicode

from rlvr.cli import main
from rlvr.errors import MissingDependency, UserError
from rlvr.models import load_model
from rlvr.models.loading import load_tokenizer

TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
            "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
MERGES = [("1", "2"), ("Ġ", "a"), ("i", "s")]
Q = gguf.GGMLQuantizationType


def _vocab() -> list[str]:
    return SPECIALS + list(bytes_to_unicode().values()) + ["".join(pair) for pair in MERGES]


def _rotary_interleave(weight: np.ndarray, heads: int, *, undo: bool = False) -> np.ndarray:
    """llama.cpp stores the q/k rows of each head with the two rotary halves interleaved; transformers undoes it."""
    rows = weight.shape[0] // heads
    split = (heads, rows // 2, 2, -1) if undo else (heads, 2, rows // 2, -1)
    return weight.reshape(split).swapaxes(1, 2).reshape(weight.shape)


def _config(vocab_size: int, tie: bool) -> LlamaConfig:
    return LlamaConfig(vocab_size=vocab_size, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256, rms_norm_eps=1e-5,
                       rope_theta=10000.0, tie_word_embeddings=tie, bos_token_id=1, eos_token_id=2, pad_token_id=0)


def _store(kind, array: np.ndarray):
    """(data for the writer, the weight the reader gives back) of a float32 matrix stored as ``kind``."""
    if kind == Q.F32:
        return array, array
    if kind == Q.F16:
        half = array.astype(np.float16)
        return half, half.astype(np.float32)
    packed = gguf.quants.quantize(array, kind)
    return packed, gguf.quants.dequantize(packed, kind).astype(np.float32)


def write_tiny_gguf(path: Path, kind=Q.F32, *, tie: bool = True, seed: int = 0, spoil=None) -> LlamaForCausalLM:
    """A random tiny llama written to ``path`` with its 2-D weights stored as ``kind``; returns the reference model
    holding exactly the weights a reader of the file recovers (its quantization error included). ``spoil`` maps a
    GGUF tensor name to None (left out of the file) or to a function of the array written in its place."""
    spoil = spoil or {}
    vocab = _vocab()
    config = _config(len(vocab), tie)
    torch.manual_seed(seed)
    reference = LlamaForCausalLM(config).eval()
    names = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
             "lm_head.weight": "output.weight"}
    parts = {"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
             "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
             "mlp.down_proj": "ffn_down", "input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm"}
    for layer in range(config.num_hidden_layers):
        for hf, gg in parts.items():
            names[f"model.layers.{layer}.{hf}.weight"] = f"blk.{layer}.{gg}.weight"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name("tiny-llama")
    writer.add_block_count(config.num_hidden_layers)
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_head_count(config.num_attention_heads)
    writer.add_head_count_kv(config.num_key_value_heads)
    writer.add_rope_freq_base(config.rope_theta if hasattr(config, "rope_theta") else 10000.0)
    writer.add_rope_dimension_count(config.hidden_size // config.num_attention_heads)
    writer.add_layer_norm_rms_eps(config.rms_norm_eps)
    writer.add_vocab_size(len(vocab))
    writer.add_file_type(int(kind))
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(vocab)
    writer.add_token_types([3] * len(SPECIALS) + [1] * (len(vocab) - len(SPECIALS)))
    writer.add_token_merges([" ".join(pair) for pair in MERGES])
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_pad_token_id(0)
    writer.add_add_bos_token(False)
    writer.add_chat_template(TEMPLATE)
    state = reference.state_dict()
    recovered = {}
    for hf, gg in names.items():
        if hf not in state or (tie and hf == "lm_head.weight") or (gg in spoil and spoil[gg] is None):
            continue
        weight = state[hf].numpy().astype(np.float32)
        heads = {"q_proj": config.num_attention_heads, "k_proj": config.num_key_value_heads}.get(hf.split(".")[-2])
        if heads:
            weight = _rotary_interleave(weight, heads)
        data, back = _store(kind if weight.ndim == 2 else Q.F32, spoil.get(gg, lambda w: w)(weight))
        writer.add_tensor(gg, data, raw_dtype=kind if data.dtype == np.uint8 else None)
        if heads:
            back = _rotary_interleave(back, heads, undo=True)
        if gg not in spoil:
            recovered[hf] = torch.from_numpy(np.ascontiguousarray(back))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    reference.load_state_dict(recovered, strict=False)
    if tie:
        reference.tie_weights()
    return reference


@pytest.fixture(scope="module")
def tiny_files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("gguf")
    made = {}
    for kind in (Q.F32, Q.F16, Q.Q8_0):
        path = folder / kind.name / f"tiny-{kind.name}.gguf"
        path.parent.mkdir()
        made[kind] = (path, write_tiny_gguf(path, kind))
    untied = folder / "untied" / "tiny-untied.gguf"
    untied.parent.mkdir()
    made["untied"] = (untied, write_tiny_gguf(untied, Q.F32, tie=False, seed=1))
    return made


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("RLVR_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


IDS = torch.tensor([[1, 40, 41, 260, 75, 2, 100, 259, 261, 7]])


def _logits(model) -> torch.Tensor:
    with torch.no_grad():
        return model(IDS).logits


@pytest.mark.parametrize("kind", [Q.F32, Q.F16, Q.Q8_0, "untied"], ids=["F32", "F16", "Q8_0", "F32-untied"])
def test_model_path_gguf_is_the_plain_model_of_its_dequantized_weights(tiny_files, kind):
    path, reference = tiny_files[kind]
    model, tokenizer = load_model(path, device="cpu")
    assert type(model) is LlamaForCausalLM
    assert not getattr(model, "is_quantized", False) and getattr(model, "hf_quantizer", None) is None
    assert getattr(model.config, "quantization_config", None) is None
    assert model.dtype == torch.float32
    torch.testing.assert_close(_logits(model), _logits(reference), rtol=1e-4, atol=1e-4)
    assert tokenizer.chat_template == TEMPLATE
    assert tokenizer.eos_token == "<|im_end|>" and tokenizer.pad_token is not None
    text = tokenizer.apply_chat_template([{"role": "user", "content": "12 is a"}], tokenize=False,
                                         add_generation_prompt=True)
    assert text == "<|im_start|>user\n12 is a<|im_end|>\n<|im_start|>assistant\n"
    assert tokenizer.decode(tokenizer("12 is a")["input_ids"]) == "12 is a"


@pytest.mark.parametrize("given", ["file", "folder"])
def test_folder_holding_one_gguf_and_the_training_dtype(tiny_files, given):
    path, reference = tiny_files[Q.F16]
    model, _ = load_model(path if given == "file" else path.parent, dtype="bfloat16", device="cpu")
    assert model.dtype == torch.bfloat16 and all(p.dtype == torch.bfloat16 for p in model.parameters())
    torch.testing.assert_close(_logits(model).float(), _logits(reference.to(torch.bfloat16)).float(),
                               rtol=0.05, atol=0.05)


def test_loaded_model_trains_saves_and_reloads_as_a_plain_folder(tiny_files, tmp_path):
    path, _ = tiny_files[Q.Q8_0]
    model, tokenizer = load_model(path, device="cpu")
    model.train()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loss = model(IDS, labels=IDS).loss
    loss.backward()
    optimizer.step()
    model.save_pretrained(tmp_path / "ckpt")  # transformers refuses this for a model it marks as GGUF-quantized
    tokenizer.save_pretrained(tmp_path / "ckpt")
    again, again_tokenizer = load_model(tmp_path / "ckpt", device="cpu")
    torch.testing.assert_close(_logits(again), _logits(model.eval()))
    assert again_tokenizer.chat_template == TEMPLATE


def test_conversion_is_cached_and_tokenizer_alone_loads(tiny_files, cache_dir):
    path, _ = tiny_files[Q.F32]
    tokenizer = load_tokenizer(path)
    assert len(tokenizer) == len(_vocab())
    entries = list((cache_dir / "gguf").iterdir())
    assert len(entries) == 1 and (entries[0] / "config.json").is_file()
    stamp = (entries[0] / "config.json").stat().st_mtime_ns
    load_model(path, device="cpu")
    assert list((cache_dir / "gguf").iterdir()) == entries
    assert (entries[0] / "config.json").stat().st_mtime_ns == stamp


@pytest.mark.parametrize("kind", [Q.F32, Q.Q8_0], ids=["F32", "Q8_0"])
def test_convert_gguf_writes_a_folder_transformers_loads(tiny_files, tmp_path, capsys, kind):
    path, reference = tiny_files[kind]
    out = tmp_path / "hf"
    assert main(["convert", "gguf", str(path), str(out)]) == 0
    assert str(out) in capsys.readouterr().out
    for name in ("config.json", "model.safetensors", "generation_config.json", "tokenizer.json"):
        assert (out / name).is_file(), name
    model = AutoModelForCausalLM.from_pretrained(out)
    tokenizer = AutoTokenizer.from_pretrained(out)
    assert getattr(model.config, "quantization_config", None) is None
    torch.testing.assert_close(_logits(model), _logits(reference), rtol=1e-4, atol=1e-4)
    assert tokenizer.chat_template == TEMPLATE and len(tokenizer) == len(_vocab())
    assert main(["convert", "gguf", str(path), str(out)]) == 2  # never writes over an existing folder
    assert "already exists" in capsys.readouterr().err


def test_missing_gguf_package_names_the_extra(tiny_files, monkeypatch, capsys, tmp_path):
    path, _ = tiny_files[Q.F32]
    monkeypatch.setitem(sys.modules, "gguf", None)  # `import gguf` now raises ImportError
    with pytest.raises(MissingDependency, match=r"rlvr\[gguf\]") as err:
        load_model(path, device="cpu")
    assert str(path) in str(err.value)
    assert main(["convert", "gguf", str(path), str(tmp_path / "out")]) == 2
    message = capsys.readouterr().err.strip()
    assert "rlvr[gguf]" in message and len(message.splitlines()) == 1


def _truncated(path: Path, good: Path) -> None:
    path.write_bytes(good.read_bytes()[:200])


def _spoilt(name: str, change=None):
    return lambda path, good: write_tiny_gguf(path, spoil={name: change})


BAD_FILES = {
    "no output_norm": _spoilt("output_norm.weight"),
    "no layer-1 ffn_up": _spoilt("blk.1.ffn_up.weight"),
    "no token_embd": _spoilt("token_embd.weight"),
    "ffn_up of half width": _spoilt("blk.1.ffn_up.weight", lambda w: np.ascontiguousarray(w[:, :32])),
    "attn_v with extra rows": _spoilt("blk.0.attn_v.weight", lambda w: np.concatenate([w, w])),
    "empty": lambda path, good: path.write_bytes(b""),
    "text": lambda path, good: path.write_text("this is not a model\n"),
    "wrong magic": lambda path, good: path.write_bytes(b"GGML" + good.read_bytes()[4:]),
    "truncated header": _truncated,
    "safetensors renamed": lambda path, good: path.write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{}      "),
}


@pytest.mark.parametrize("name", sorted(BAD_FILES))
def test_bad_file_is_one_line_naming_it(tiny_files, tmp_path, capsys, name):
    bad = tmp_path / "bad model.gguf"
    BAD_FILES[name](bad, tiny_files[Q.F32][0])
    with pytest.raises(UserError, match="bad model.gguf"):
        load_model(bad, device="cpu")
    assert main(["convert", "gguf", str(bad), str(tmp_path / "out")]) == 2
    message = capsys.readouterr().err.strip()
    assert len(message.splitlines()) == 1 and str(bad) in message, message
    assert not (tmp_path / "out").exists()


def test_folder_with_several_gguf_files_is_an_error(tiny_files, tmp_path):
    for name in ("a.gguf", "b.gguf"):
        (tmp_path / name).write_bytes(tiny_files[Q.F32][0].read_bytes())
    with pytest.raises(UserError, match="a.gguf, b.gguf"):
        load_model(tmp_path, device="cpu")


def test_convert_refuses_what_is_not_gguf(tmp_path, capsys):
    (tmp_path / "weights.bin").write_bytes(b"\0" * 16)
    assert main(["convert", "gguf", str(tmp_path / "weights.bin"), str(tmp_path / "out")]) == 2
    assert "not a .gguf file" in capsys.readouterr().err


def test_a_model_transformers_marks_as_gguf_quantized_becomes_plain(tiny_files, tmp_path):
    from rlvr.models.gguf import _plain

    path, reference = tiny_files[Q.Q8_0]
    marked = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32)
    plain = _plain(marked, torch.float32)
    assert getattr(plain, "hf_quantizer", None) is None and not getattr(plain, "is_quantized", False)
    plain.save_pretrained(tmp_path / "saved")
    torch.testing.assert_close(_logits(AutoModelForCausalLM.from_pretrained(tmp_path / "saved")), _logits(reference),
                               rtol=1e-4, atol=1e-4)


def test_the_manifest_names_the_lean_sampler_for_a_gguf_llama(tiny_files):
    from rlvr.config import config_from_dict
    from rlvr.rollout.llama_decoder import planned_sampler

    path, _ = tiny_files[Q.F16]
    cfg = config_from_dict({"model": {"path": str(path)}, "data": {"train": "arithmetic:train"}})
    assert planned_sampler(cfg) == "lean"
