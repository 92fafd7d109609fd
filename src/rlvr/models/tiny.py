"""Build tiny Llama-family models with a character-level tokenizer, from scratch and offline.

The demo and the tests need a real Hugging Face model that loads with ``AutoModelForCausalLM`` and
``AutoTokenizer`` but costs nothing to download. Every printable ASCII character is one token, so any
prompt a test writes can be encoded.
"""

from __future__ import annotations

import string
from dataclasses import dataclass
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, processors
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

PAD, BOS, EOS, UNK = "<pad>", "<s>", "</s>", "<unk>"
SPECIAL_TOKENS = [PAD, BOS, EOS, UNK]
CHARACTERS = "".join(c for c in string.printable if c not in "\t\r\x0b\x0c")

# A minimal chat template so conversational prompts (docs/api.md, "Data rows") work with the tiny model too.
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}{{ message['role'] }}: {{ message['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant: {% endif %}"
)


def char_tokenizer() -> PreTrainedTokenizerFast:
    """A tokenizer with one token per printable ASCII character and a BOS prepended to every text."""
    vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS + list(CHARACTERS))}
    # BPE without merges splits any text into single characters.
    backend = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token=UNK))
    backend.decoder = decoders.Fuse()
    backend.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A $B", special_tokens=[(BOS, vocab[BOS])]
    )
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token=BOS,
        eos_token=EOS,
        pad_token=PAD,
        unk_token=UNK,
        clean_up_tokenization_spaces=False,
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


@dataclass(frozen=True)
class TinySpec:
    """Shape of a tiny Llama. The defaults give about 0.4M parameters: quick to train on a laptop CPU."""

    hidden_size: int = 128
    num_layers: int = 2
    num_heads: int = 4
    intermediate_size: int = 512
    max_positions: int = 128


def build_tiny_model(
    spec: TinySpec = TinySpec(), *, seed: int = 0
) -> tuple[LlamaForCausalLM, PreTrainedTokenizerFast]:
    """A freshly initialised Llama-family causal LM and its character tokenizer."""
    tokenizer = char_tokenizer()
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.num_layers,
        num_attention_heads=spec.num_heads,
        num_key_value_heads=spec.num_heads,
        max_position_embeddings=spec.max_positions,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model, tokenizer


def save_tiny_model(path: str | Path, spec: TinySpec = TinySpec(), *, seed: int = 0) -> Path:
    """Build a tiny model and save it as a Hugging Face folder; returns the folder."""
    model, tokenizer = build_tiny_model(spec, seed=seed)
    path = Path(path)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path
