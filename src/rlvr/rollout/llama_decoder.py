"""A lean inference-only forward for Llama-family models (Llama, Qwen2, Qwen3, Mistral, Gemma, Gemma2), used by the hf
engine to sample.

Sampling calls the model once per generated token; for small and medium models on a CPU the Hugging Face
module stack (mask construction, cache objects, dozens of module calls per layer) costs more than the
arithmetic. This forward reads the same weights (q/k/v and gate/up projections fused into one matrix each,
built once per generate call; on a CPU, pre-packed for oneDNN), keeps keys and values in preallocated
tensors, and runs a handful of tensor ops per layer. It computes the same function as ``LlamaForCausalLM`` (RMSNorm, rotary embeddings with the
model's own inverse frequencies and scaling, grouped-query attention, SwiGLU MLP), plus what the other registered
families add (rollout/decoder_families.py: Qwen2's q/k/v biases, Qwen3's per-head q/k norms, sliding windows that
cover the whole call, Gemma's scaled embeddings, (1 + w) norms and GeGLU, Gemma2's extra norms and soft caps); tests
compare its logits with each model's (they agree to float32 rounding, about 1e-6).
Models outside those families, or with features this file does not implement (MLP biases, rope scaling types other
than the default, a sliding window shorter than the call reaches), and models above 500M parameters (the fused
weights are a per-call copy), are sampled through the model's own forward (``LlamaDecoder.supports``).

A model with LoRA adapters (PEFT) is sampled with its CURRENT adapters, read when the decoder is built (each generate
call), so sampling after an update uses the update, in one of two ways (``model.lora.sampling``, rlvr.models.lora):
- ``merged``: each projection's W = W0 + (alpha / r) B A (Hu et al., 2021, Eq. 3) is fused and packed as
  for a model without adapters. The copy costs the adapted weights' size once more while the call runs (it is freed
  with the decoder); each token then runs the fused path's few large products instead of five small ones more per
  projection (measured about twice as fast per token on a CPU, docs/performance.md). Only float32 weights are merged:
  W0 + BA rounded to bfloat16 would lose most of the adapter's delta, so lower precisions sample as ``adapters``.
- ``adapters`` (the default): an adapted projection computes W0 x + (alpha / r) B (A x) from the frozen W0 and the
  adapter's own tensors, as PEFT's forward does, so no weight matrix is copied: the memory a LoRA run saves is not
  spent again.
Projections of a model without adapters are fused and packed as above (a copy that holds only the packed form).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from rlvr.rollout.decoder_families import family_of, refusal


class _Packed:
    """A weight matrix reordered once for oneDNN's matrix multiply (only the reordered copy is kept)."""

    def __init__(self, weight: torch.Tensor, rows: int):
        self.packed = torch.ops.mkldnn._reorder_linear_weight(weight, rows)


class _LowRank:
    """A LoRA-adapted projection: W0 x + sum over active adapters of scale * B (A x), from the layer's own tensors."""

    def __init__(self, module):
        self.base = module.base_layer.weight
        self.adapters = [(module.lora_A[name].weight, module.lora_B[name].weight, module.scaling[name])
                         for name in module.active_adapters if name in module.lora_A]

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        out = _dense_linear(x, self.base)
        for a, b, scale in self.adapters:
            out = out + F.linear(F.linear(x.to(a.dtype), a), b).to(out.dtype) * scale
        return out


class _Split:
    """Projections a fused matrix would concatenate, computed one by one (their outputs concatenated)."""

    def __init__(self, parts: list):
        self.parts = parts

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([_linear(x, p) for p in self.parts], dim=-1)


def _linear(x: torch.Tensor, weight, bias: torch.Tensor | None = None) -> torch.Tensor:
    if bias is not None:
        return _linear(x, weight) + bias
    if isinstance(weight, _Packed):
        return _onednn_product(x, weight.packed)
    if isinstance(weight, (_LowRank, _Split)):
        return weight(x)
    return _dense_linear(x, weight)


def _dense_linear(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """x W^T for a weight kept as it is (no packed copy). A float32 product on a CPU goes through oneDNN, which
    computes it about twice as fast as the BLAS call behind F.linear on some CPUs (docs/performance.md), the same
    product up to float32 rounding."""
    if x.dtype == weight.dtype == torch.float32 and x.device.type == "cpu" and _ONEDNN_FLOAT32:
        return _onednn_product(x, weight)
    return F.linear(x, weight)


def _onednn_product(x: torch.Tensor, weight) -> torch.Tensor:
    """x W^T by oneDNN, for W dense or reordered by _Packed."""
    return torch.ops.mkldnn._linear_pointwise(x, weight, None, "none", [], "")


def _unwrap(model):
    """The transformers model inside a PEFT wrapper (its layers carry the adapters); the model itself otherwise."""
    get_base = getattr(model, "get_base_model", None)
    return get_base() if callable(get_base) and hasattr(model, "peft_config") else model


def _is_adapted(module) -> bool:
    return hasattr(module, "base_layer") and hasattr(module, "lora_A")


def _plain_lora(module) -> bool:
    """An adapter layer whose effect is W0 + delta (no DoRA magnitude, no other adapter kinds)."""
    if not _is_adapted(module):
        return not hasattr(module, "base_layer")
    return not any(getattr(module, "use_dora", {}).values()) and not getattr(module, "lora_variant", None)


def _live_adapter(module) -> bool:
    """The layer adds an adapter's delta to its output now (adapters present, enabled, not merged into W0)."""
    return (_is_adapted(module) and not getattr(module, "merged", False)
            and not getattr(module, "disable_adapters", False)
            and any(name in module.lora_A for name in module.active_adapters))


def _projection(module, copies: bool):
    """What a linear layer computes with: its weight (with ``copies``, merged with its adapters), or for a layer
    with a live adapter a _LowRank (no copy)."""
    return _LowRank(module) if _live_adapter(module) and not copies else _weight(module)


def _fused(modules: list, copies: bool):
    """One matrix for projections that read the same input (a copy, packed later), or, without ``copies``, the
    projections kept apart so that no weight is copied."""
    if not copies:
        return _Split([_projection(m, copies) for m in modules])
    return torch.cat([_weight(m) for m in modules])


def _fused_bias(modules: list) -> torch.Tensor | None:
    """The biases of projections fused into one matrix, concatenated (zeros for one without), or None if none has one."""
    biases = [getattr(getattr(m, "base_layer", m), "bias", None) for m in modules]
    if all(b is None for b in biases):
        return None
    return torch.cat([b if b is not None else _weight(m).new_zeros(_weight(m).shape[0])
                      for b, m in zip(biases, modules)])


def _weight(module) -> torch.Tensor:
    """The weight a (possibly LoRA-adapted) linear or embedding layer computes with: its base weight plus the
    delta of each active adapter, unless the adapters are disabled or already merged into the base weight."""
    if not _is_adapted(module):
        return module.weight
    weight = module.base_layer.weight
    if getattr(module, "merged", False) or getattr(module, "disable_adapters", False):
        return weight
    for name in module.active_adapters:
        if name in module.lora_A or name in getattr(module, "lora_embedding_A", {}):
            weight = weight + module.get_delta_weight(name).to(weight.dtype)
    return weight


_ONEDNN_FLOAT32 = torch.backends.mkldnn.is_available()
_ACTIVATIONS = {"silu": F.silu, "gelu_pytorch_tanh": lambda x: F.gelu(x, approximate="tanh")}


def _merges_adapters(model, inner, lora: str | None) -> bool:
    """Whether the live adapters are sampled from a merged copy (``lora`` None: the model's own choice)."""
    from rlvr.models.lora import lora_sampling

    return (lora or lora_sampling(model)) == "merged" and all(
        m.base_layer.weight.dtype == torch.float32 for m in inner.modules() if _live_adapter(m))


class LlamaDecoder:
    def __init__(self, model, rows: int, max_len: int, *, lora: str | None = None):
        """A decoder for ``rows`` sequences of at most ``max_len`` positions; ``lora`` ("merged" or "adapters", None:
        the model's ``model.lora.sampling``) says how live LoRA adapters are sampled (module docstring)."""
        wrapper, model = model, _unwrap(model)
        cfg = model.config
        inner = model.model
        family = family_of(cfg)
        self.qk_norm = family.qk_norm
        self.norm_offset = family.norm_offset
        self.act = _ACTIVATIONS[family.activation(cfg)]
        self.attn_softcap = getattr(cfg, "attn_logit_softcapping", None) if family.softcaps else None
        self.logit_softcap = getattr(cfg, "final_logit_softcapping", None) if family.softcaps else None
        self.attn_scale = cfg.query_pre_attn_scalar ** -0.5 if family.softcaps else None  # None: head_dim ** -0.5
        self.eps = cfg.rms_norm_eps
        self.heads = cfg.num_attention_heads
        self.kv_heads = getattr(cfg, "num_key_value_heads", None) or self.heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // self.heads
        self.embed = _weight(inner.embed_tokens)
        scale = getattr(getattr(inner.embed_tokens, "base_layer", inner.embed_tokens), "embed_scale", None)
        self.embed_scale = scale.to(self.embed.dtype) if isinstance(scale, torch.Tensor) else None  # Gemma: sqrt(hidden)
        norm = self._norm_weight
        self.final_norm = norm(inner.norm.weight)
        self.lm_head = _weight(model.lm_head)
        self.inv_freq = inner.rotary_emb.inv_freq.float()
        self.rope_scale = float(getattr(inner.rotary_emb, "attention_scaling", 1.0))
        # fused, packed copies (of W0 + BA where adapters are live and merged), or a LoRA model's own tensors
        copies = not any(_live_adapter(m) for m in inner.modules()) or _merges_adapters(wrapper, inner, lora)
        dtype, device = self.embed.dtype, self.embed.device
        # oneDNN's pre-packed weights: the same product, about 1.3-1.8x faster for a few dozen rows. Each layer is
        # packed as it is built, so its unpacked copies are freed before the next layer's are made.
        pack = copies and device.type == "cpu" and dtype == torch.float32 and torch.backends.mkldnn.is_available()
        self.layers, self.attention_extras = [], []
        for layer in inner.layers:
            attn, mlp = layer.self_attn, layer.mlp
            qkv = [attn.q_proj, attn.k_proj, attn.v_proj]
            sandwich = family.sandwich_norms  # Gemma2: the norm before the MLP is pre_feedforward_layernorm
            built = (
                norm(layer.input_layernorm.weight),
                _fused(qkv, copies),
                _projection(attn.o_proj, copies),
                norm((layer.pre_feedforward_layernorm if sandwich else layer.post_attention_layernorm).weight),
                _fused([mlp.gate_proj, mlp.up_proj], copies),
                _projection(mlp.down_proj, copies),
            )
            if pack:
                try:
                    built = tuple(_Packed(w, rows) if w.dim() == 2 else w for w in built)
                except RuntimeError:
                    pack = False
            self.layers.append(built)
            # what a family adds to Llama's layer (None where it adds nothing): attention biases, per-head q/k norms,
            # norms of the attention's and the MLP's outputs
            self.attention_extras.append((
                _fused_bias(qkv),
                _fused_bias([attn.o_proj]),
                norm(attn.q_norm.weight) if self.qk_norm else None,
                norm(attn.k_norm.weight) if self.qk_norm else None,
                norm(layer.post_attention_layernorm.weight) if sandwich else None,
                norm(layer.post_feedforward_layernorm.weight) if sandwich else None,
            ))
        shape = (rows, self.kv_heads, max_len, self.head_dim)
        self.keys = [torch.zeros(shape, dtype=dtype, device=device) for _ in self.layers]
        self.values = [torch.zeros(shape, dtype=dtype, device=device) for _ in self.layers]
        self.length = 0  # positions filled in the cache
        self.key_mask = torch.zeros((rows, max_len), dtype=torch.bool, device=device)  # real (non-pad) keys

    MAX_PARAMS = 500_000_000  # the fused (and packed) weights are a copy made per generate call

    @staticmethod
    def supports(model, reach: int | None = None) -> bool:
        """Whether this decoder computes ``model``'s function for calls of at most ``reach`` positions (padded
        prompt + new tokens; None: unknown, which refuses models with a sliding window)."""
        return LlamaDecoder.refusal(model, reach) is None

    @staticmethod
    def refusal(model, reach: int | None = None) -> str | None:
        """Why ``model`` samples through its own forward rather than this decoder (None when it need not)."""
        if not isinstance(model, torch.nn.Module) or not hasattr(_unwrap(model), "config"):
            return "not a transformers model"
        if sum(p.numel() for p in model.parameters()) > LlamaDecoder.MAX_PARAMS:
            return f"more than {LlamaDecoder.MAX_PARAMS} parameters"
        model = _unwrap(model)
        if not all(_plain_lora(m) for m in model.modules() if hasattr(m, "base_layer")):
            return "adapters other than plain LoRA"
        reason = refusal(model.config, reach)
        if reason is None and not (hasattr(model, "model") and hasattr(model.model, "rotary_emb")):
            reason = "no model.rotary_emb"
        return reason

    def _norm_weight(self, weight: torch.Tensor) -> torch.Tensor:
        """What a norm multiplies by: its weight, or for Gemma's norms (1 + w) in float32 (as GemmaRMSNorm computes)."""
        return weight.float() + self.norm_offset if self.norm_offset else weight

    def _norm(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        if x.dtype == torch.float32:  # one fused op; the same formula as LlamaRMSNorm (and GemmaRMSNorm)
            return F.rms_norm(x, (x.shape[-1],), weight, self.eps)
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        if self.norm_offset:  # Gemma scales in float32, then rounds
            return (h * weight).to(x.dtype)
        return weight * h.to(x.dtype)

    def _attend(self, q, keys, values, mask) -> torch.Tensor:
        if self.attn_softcap is None:
            return F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, scale=self.attn_scale,
                                                  enable_gqa=self.kv_heads != self.heads)
        # Gemma2: scores soft-capped before the softmax, which scaled_dot_product_attention cannot do
        groups = self.heads // self.kv_heads
        keys, values = keys.repeat_interleave(groups, dim=1), values.repeat_interleave(groups, dim=1)
        scores = torch.matmul(q, keys.transpose(2, 3)) * self.attn_scale
        scores = torch.tanh(scores / self.attn_softcap) * self.attn_softcap
        scores = scores.masked_fill(~mask, float("-inf"))
        return torch.matmul(torch.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype), values)

    def _rotary(self, positions: torch.Tensor, dtype) -> tuple[torch.Tensor, torch.Tensor]:
        freqs = positions.float().unsqueeze(-1) * self.inv_freq  # [B, S, d/2]
        emb = torch.cat([freqs, freqs], dim=-1)
        return (emb.cos() * self.rope_scale).to(dtype).unsqueeze(1), (emb.sin() * self.rope_scale).to(dtype).unsqueeze(1)

    @staticmethod
    def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        half = x.shape[-1] // 2
        rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
        return x * cos + rotated * sin

    def select(self, rows: torch.Tensor) -> None:
        """Keep only these batch rows (finished ones leave the batch); only the filled positions are copied."""
        def keep(cache: torch.Tensor) -> torch.Tensor:
            kept = cache.new_empty((len(rows), *cache.shape[1:]))
            kept[:, :, : self.length] = cache[rows, :, : self.length]
            return kept

        self.keys = [keep(k) for k in self.keys]
        self.values = [keep(v) for v in self.values]
        self.key_mask = self.key_mask[rows]

    def forward(self, tokens: torch.Tensor, positions: torch.Tensor, attend: torch.Tensor) -> torch.Tensor:
        """Logits of the last position, appending ``tokens`` [B, S] (at ``positions``) to the cache. ``attend``
        [B, S] marks real tokens (False: left padding, never attended to)."""
        b, s = tokens.shape
        start, end = self.length, self.length + s
        self.key_mask[:, start:end] = attend
        keys_visible = self.key_mask[:, :end]  # [B, L]
        if s == 1:
            mask = keys_visible[:, None, None, :]
        else:  # causal within the new tokens
            causal = torch.ones((s, end), dtype=torch.bool, device=tokens.device).tril(diagonal=start)
            mask = keys_visible[:, None, None, :] & causal[None, None]
            mask = mask | ~attend[:, None, :, None]  # rows of pad queries: attend anywhere (their output is unused)
        x = F.embedding(tokens, self.embed)
        if self.embed_scale is not None:
            x = x * self.embed_scale
        cos, sin = self._rotary(positions, x.dtype)
        q_size, kv_size = self.heads * self.head_dim, self.kv_heads * self.head_dim
        for i, ((ln1, w_qkv, w_o, ln2, w_gate_up, w_down), (b_qkv, b_o, q_norm, k_norm, attn_norm, mlp_norm)) in enumerate(
                zip(self.layers, self.attention_extras)):
            h = self._norm(x, ln1)
            q, k, v = _linear(h, w_qkv, b_qkv).split([q_size, kv_size, kv_size], dim=-1)
            q = q.view(b, s, self.heads, self.head_dim)
            k = k.view(b, s, self.kv_heads, self.head_dim)
            if q_norm is not None:  # Qwen3: each head's query and key normalised before the rotary embedding
                q, k = self._norm(q, q_norm), self._norm(k, k_norm)
            q, k = q.transpose(1, 2), k.transpose(1, 2)
            v = v.view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
            q, k = self._rotate(q, cos, sin), self._rotate(k, cos, sin)
            self.keys[i][:, :, start:end] = k
            self.values[i][:, :, start:end] = v
            attn = self._attend(q, self.keys[i][:, :, :end], self.values[i][:, :, :end], mask)
            out = _linear(attn.transpose(1, 2).reshape(b, s, q_size), w_o, b_o)
            x = x + (self._norm(out, attn_norm) if attn_norm is not None else out)
            gate, up = _linear(self._norm(x, ln2), w_gate_up).chunk(2, dim=-1)
            out = _linear(self.act(gate) * up, w_down)
            x = x + (self._norm(out, mlp_norm) if mlp_norm is not None else out)
        self.length = end
        logits = F.linear(self._norm(x[:, -1, :], self.final_norm), self.lm_head)
        if self.logit_softcap is not None:  # Gemma2
            logits = torch.tanh(logits / self.logit_softcap) * self.logit_softcap
        return logits


def planned_sampler(cfg) -> str:
    """``lean`` when a training run with this config samples every call through this decoder, ``model`` when any
    call goes through the model's own forward (another engine, ``rollout.engine_options.fast: false``, an
    unsupported family or feature, a sliding window shorter than the model's context, over MAX_PARAMS). Read from
    the model folder's config alone (the weights are not loaded; the parameters are counted on the meta device)."""
    rollout = cfg.rollout
    if rollout.engine != "hf" or not dict(rollout.engine_options).get("fast", True) or not cfg.model.path:
        return "model"
    if (cfg.model.lora or {}).get("use_dora"):
        return "model"
    from pathlib import Path

    from transformers import AutoConfig, AutoModelForCausalLM

    from rlvr.models.loading import model_folder
    from rlvr.models.lora import adapter_base_path, is_adapter_folder

    try:
        folder = model_folder(cfg.model.path)  # a GGUF file's converted folder
        if is_adapter_folder(folder) and not (folder / "config.json").is_file():
            folder = Path(adapter_base_path(folder))
        config = AutoConfig.from_pretrained(folder)
        # every call stays within the model's context (the engine checks it), so that is the longest reach
        if refusal(config, getattr(config, "max_position_embeddings", None)) is not None:
            return "model"
        with torch.device("meta"):
            params = sum(p.numel() for p in AutoModelForCausalLM.from_config(config).parameters())
    except (OSError, ValueError, KeyError, TypeError):
        return "model"
    return "lean" if params <= LlamaDecoder.MAX_PARAMS else "model"
