"""The model families the lean decoder (rollout/llama_decoder.py) samples, and what each adds to Llama's layer.

A family is registered by its config's ``model_type``. Every family here has Llama's layer (RMSNorm, rotary
embeddings, grouped-query attention, SwiGLU MLP); the differences the decoder must know are:

- Qwen2: biases on the q/k/v projections (read from the layers themselves, so any bias a layer holds is added).
- Qwen3: an RMSNorm over each head's query and key (``q_norm``/``k_norm``) before the rotary embedding.
- Mistral and Qwen2/Qwen3 with ``use_sliding_window``: a sliding attention window. Keys further than the window
  behind a query are hidden from it; when the window covers the longest sequence a call can reach (the padded
  prompt plus ``max_new_tokens``) that hides nothing, so the decoder computes the same function. Shorter windows
  are refused, and such calls sample through the model's own forward.

- Gemma: embeddings scaled by sqrt(hidden) (read from the embedding module's ``embed_scale``), norms that scale by
  (1 + w), and a GeGLU MLP (tanh-approximated GELU).
- Gemma2: Gemma's, plus norms after attention and after the MLP (four per layer), attention scores scaled by
  ``query_pre_attn_scalar ** -0.5`` and soft-capped (cap * tanh(score / cap)), soft-capped final logits, and
  alternating sliding-window layers (judged as above).

Other families (Gemma3 among them: its local layers use another rotary base) sample through the model's own forward.

``refusal(config, reach)`` says, in words, why a config is not sampled by the lean decoder (None when it is).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable


def _no_window(config) -> int | None:
    return None


def _mistral_window(config) -> int | None:
    return getattr(config, "sliding_window", None)


def _layer_type_window(config) -> int | None:
    """Qwen2/Qwen3: the window of the layers marked ``sliding_attention`` (only when ``use_sliding_window``)."""
    if "sliding_attention" in (getattr(config, "layer_types", None) or ()):
        return getattr(config, "sliding_window", None)
    return None


def _hidden_act(config) -> str:
    return getattr(config, "hidden_act", "silu")


def _hidden_activation(config) -> str:
    """Gemma2's key (``hidden_act`` is an older alias it ignores)."""
    return getattr(config, "hidden_activation", None) or "gelu_pytorch_tanh"


ACTIVATIONS = ("silu", "gelu_pytorch_tanh")  # the MLP gate activations the decoder computes


@dataclass(frozen=True)
class Family:
    qk_norm: bool = False  # an RMSNorm over each head's query and key, before the rotary embedding (Qwen3)
    window: Callable = _no_window  # the sliding attention window a config sets (None: every layer sees all keys)
    activation: Callable = _hidden_act  # the config's MLP gate activation
    norm_offset: float = 0.0  # norms scale by (norm_offset + w): 1 for Gemma's
    sandwich_norms: bool = False  # Gemma2: norms after attention and after the MLP, before each residual add
    softcaps: bool = False  # Gemma2: soft-capped attention scores and logits, query_pre_attn_scalar


FAMILIES: dict[str, Family] = {
    "llama": Family(qk_norm=False),
    "qwen2": Family(qk_norm=False, window=_layer_type_window),
    "qwen3": Family(qk_norm=True, window=_layer_type_window),
    "mistral": Family(qk_norm=False, window=_mistral_window),
    "gemma": Family(norm_offset=1.0),
    "gemma2": Family(window=_layer_type_window, activation=_hidden_activation, norm_offset=1.0, sandwich_norms=True,
                     softcaps=True),
}


def register_family(model_type: str, family: Family) -> None:
    FAMILIES[model_type] = family


def family_of(config) -> Family | None:
    return FAMILIES.get(getattr(config, "model_type", None))


def refusal(config, reach: int | None) -> str | None:
    """Why the lean decoder cannot sample a model with this config over sequences of ``reach`` positions (None
    when it can). ``reach`` None: not known (then any sliding window is refused)."""
    model_type = getattr(config, "model_type", None)
    family = FAMILIES.get(model_type)
    if family is None:
        return f"model_type {model_type!r} is not one of {sorted(FAMILIES)}"
    rope = getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None) or {}
    if rope.get("rope_type", rope.get("type", "default")) != "default":
        return f"rope type {rope.get('rope_type', rope.get('type'))!r} (only the default rotary embedding)"
    if getattr(config, "mlp_bias", False):
        return "mlp_bias"
    if family.activation(config) not in ACTIVATIONS:
        return f"MLP activation {family.activation(config)!r} (only {', '.join(ACTIVATIONS)})"
    if getattr(config, "pretraining_tp", 1) != 1:
        return "pretraining_tp > 1"
    window = family.window(config)
    if window is not None and (reach is None or window < reach):
        return (f"sliding window of {window} positions is shorter than the {reach} a call reaches"
                if reach is not None else f"sliding window of {window} positions, reach unknown")
    return None


__all__ = ["FAMILIES", "Family", "family_of", "refusal", "register_family"]
