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


# ----------------------------------------------------------------------------------------------- vision-language
# A chat template whose messages may hold content parts ({"type": "image"} / {"type": "text", "text": ...}); an
# image part renders as the model family's placeholder, which the processor expands into the image's tokens. The
# newline is an expression: chat templates render with trim_blocks, which drops a newline after a block tag.
def vlm_chat_template(image_placeholder: str) -> str:
    return (
        "{{ bos_token }}{% for message in messages %}{{ message['role'] }}: "
        "{% if message['content'] is string %}{{ message['content'] }}{% else %}{% for part in message['content'] %}"
        "{% if part['type'] == 'image' %}" + image_placeholder + "{% elif part['type'] == 'text' %}{{ part['text'] }}"
        "{% endif %}{% endfor %}{% endif %}{{ '\\n' }}{% endfor %}{% if add_generation_prompt %}assistant: {% endif %}"
    )


@dataclass(frozen=True)
class TinyVLMSpec:
    """Shape of a tiny vision-language model: a Llama-style (or Qwen2) text model of ``hidden_size`` and a vision
    tower that cuts an ``image_size`` square into ``patch_size`` patches (LLaVA: one image token per patch, 16 for
    32/8; Qwen2-VL: 14-px patches merged 2x2, so a 56-px image is 4 tokens)."""

    hidden_size: int = 64
    num_layers: int = 2
    num_heads: int = 4
    intermediate_size: int = 256
    max_positions: int = 256
    vision_hidden_size: int = 32
    vision_layers: int = 2
    vision_heads: int = 2
    image_size: int = 32
    patch_size: int = 8


def _text_config_kwargs(tokenizer, spec: TinyVLMSpec) -> dict:
    return dict(vocab_size=len(tokenizer), hidden_size=spec.hidden_size, intermediate_size=spec.intermediate_size,
                num_hidden_layers=spec.num_layers, num_attention_heads=spec.num_heads,
                num_key_value_heads=spec.num_heads, max_position_embeddings=spec.max_positions,
                bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                pad_token_id=tokenizer.pad_token_id)


def _tiny_llava(spec: TinyVLMSpec):
    from transformers import CLIPVisionConfig, LlavaConfig, LlavaForConditionalGeneration, LlavaProcessor
    from transformers.models.clip.image_processing_pil_clip import CLIPImageProcessorPil

    tokenizer = char_tokenizer()
    tokenizer.add_special_tokens({"additional_special_tokens": ["<image>"]})
    image_token_id = tokenizer.convert_tokens_to_ids("<image>")
    vision = CLIPVisionConfig(hidden_size=spec.vision_hidden_size, intermediate_size=2 * spec.vision_hidden_size,
                              num_hidden_layers=spec.vision_layers, num_attention_heads=spec.vision_heads,
                              image_size=spec.image_size, patch_size=spec.patch_size)
    config = LlavaConfig(vision_config=vision, text_config=LlamaConfig(**_text_config_kwargs(tokenizer, spec)),
                         image_token_id=image_token_id, vision_feature_select_strategy="default",
                         vision_feature_layer=-1, tie_word_embeddings=True)
    model = LlavaForConditionalGeneration(config)
    image_processor = CLIPImageProcessorPil(size={"shortest_edge": spec.image_size},
                                            crop_size={"height": spec.image_size, "width": spec.image_size})
    # CLIP's class token is dropped by the "default" feature strategy: one image token per patch
    processor = LlavaProcessor(image_processor=image_processor, tokenizer=tokenizer, patch_size=spec.patch_size,
                               vision_feature_select_strategy="default", num_additional_image_tokens=1,
                               chat_template=vlm_chat_template("<image>"))
    return model, processor


def _tiny_qwen2_vl(spec: TinyVLMSpec):
    from transformers import Qwen2VLConfig, Qwen2VLForConditionalGeneration
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    from rlvr.models.qwen2_vl_processor import Qwen2VLImageTextProcessor

    tokenizer = char_tokenizer()
    tokenizer.add_special_tokens({"additional_special_tokens": ["<|vision_start|>", "<|image_pad|>", "<|vision_end|>",
                                                                "<|video_pad|>"]})
    token = tokenizer.convert_tokens_to_ids
    head_dim = spec.hidden_size // spec.num_heads
    sections = [head_dim // 8, (head_dim // 2 - head_dim // 8) // 2]  # temporal, height, width (sum = head_dim/2)
    sections.append(head_dim // 2 - sum(sections))
    config = Qwen2VLConfig(
        text_config=dict(**_text_config_kwargs(tokenizer, spec),
                         rope_parameters={"rope_type": "default", "mrope_section": sections, "rope_theta": 10000.0}),
        vision_config=dict(depth=spec.vision_layers, embed_dim=spec.vision_hidden_size, hidden_size=spec.hidden_size,
                           num_heads=spec.vision_heads, patch_size=14, spatial_merge_size=2, temporal_patch_size=2,
                           mlp_ratio=2),
        image_token_id=token("<|image_pad|>"), video_token_id=token("<|video_pad|>"),
        vision_start_token_id=token("<|vision_start|>"), vision_end_token_id=token("<|vision_end|>"),
        tie_word_embeddings=True)
    model = Qwen2VLForConditionalGeneration(config)
    pixels = 56 * 56  # every image is resized to 56x56: 4x4 patches of 14 px, merged 2x2 into 4 image tokens
    image_processor = Qwen2VLImageProcessorPil(min_pixels=pixels, max_pixels=pixels, patch_size=14, merge_size=2,
                                               temporal_patch_size=2)
    template = vlm_chat_template("<|vision_start|><|image_pad|><|vision_end|>")
    processor = Qwen2VLImageTextProcessor(image_processor=image_processor, tokenizer=tokenizer, chat_template=template)
    return model, processor


TINY_VLM_KINDS = {"llava": _tiny_llava, "qwen2_vl": _tiny_qwen2_vl}


def tiny_vlm(kind: str = "llava", spec: TinyVLMSpec = TinyVLMSpec(), *, seed: int = 0):
    """(model, processor) of a freshly initialised tiny vision-language model of the given family
    (``TINY_VLM_KINDS``); the processor's tokenizer is the character tokenizer plus the family's image tokens."""
    if kind not in TINY_VLM_KINDS:
        raise ValueError(f"tiny VLM kind {kind!r}: expected one of {', '.join(TINY_VLM_KINDS)}")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model, processor = TINY_VLM_KINDS[kind](spec)
    model.generation_config.pad_token_id = processor.tokenizer.pad_token_id
    model.generation_config.eos_token_id = processor.tokenizer.eos_token_id
    return model, processor


def build_tiny_vlm(path: str | Path, kind: str = "llava", spec: TinyVLMSpec = TinyVLMSpec(), *, seed: int = 0) -> Path:
    """Build a tiny vision-language model and save it with its processor as a Hugging Face folder that
    ``AutoModelForImageTextToText`` loads (and ``AutoProcessor`` for ``llava``; Qwen2-VL's needs torchvision for
    its video part, so rlvr.models.loading builds its image-only processor); returns the folder."""
    model, processor = tiny_vlm(kind, spec, seed=seed)
    path = Path(path)
    model.save_pretrained(path)
    processor.save_pretrained(path)
    return path
