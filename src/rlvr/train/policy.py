"""The trainer's forward pass: per-token log-probs, entropy and (for PPO) values of the sampled responses."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rlvr.algos.entropy import chunked_logprobs_entropy, entropy_from_logits, token_logprobs
from rlvr.models.multimodal import (PlaceholderFreeHead, check_image_inputs, is_vlm_config, model_positions,
                                    placeholder_ids, suppress_placeholders)


class ValueHead(torch.nn.Module):
    """A scalar value per position from the policy's last hidden state (a critic sharing the policy's trunk)."""

    def __init__(self, hidden_size: int):
        super().__init__()
        self.linear = torch.nn.Linear(hidden_size, 1)
        torch.nn.init.zeros_(self.linear.weight)
        torch.nn.init.zeros_(self.linear.bias)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.linear(hidden.to(self.linear.weight.dtype)).squeeze(-1)


@dataclass
class PolicyOutput:
    logp: torch.Tensor  # [N, T]
    entropy: torch.Tensor | None = None  # [N, T]
    values: torch.Tensor | None = None  # [N, T]


LOGITS_CHUNK = 1024  # response positions per chunk of the LM head when a forward has more (see policy_forward)


def trunk_and_head(model) -> tuple[torch.nn.Module, torch.nn.Module] | None:
    """(decoder, LM head) of a causal LM whose logits are exactly head(decoder(...)) (the decoder's last hidden
    state, final norm applied); None for models that post-process logits (soft-capping, logit scales) or do not
    expose the two parts, which then take the model's own forward. LoRA layers live inside both modules.

    A vision-language model's decoder is its multimodal trunk (``model.model``: vision tower, projector and text
    model), not ``get_decoder()``'s text model, which would read the image placeholders' embeddings without the
    image features."""
    base = model.get_base_model() if hasattr(model, "peft_config") and hasattr(model, "get_base_model") else model
    cfg = getattr(base, "config", None)
    if cfg is None or any(getattr(cfg, k, None) not in (None, 1.0) for k in ("final_logit_softcapping", "logit_scale")):
        return None
    get_decoder, get_head = getattr(base, "get_decoder", None), getattr(base, "get_output_embeddings", None)
    if is_vlm_config(cfg):
        decoder = getattr(base, "model", None)
    else:
        decoder = get_decoder() if callable(get_decoder) else None
    head = get_head() if callable(get_head) else None
    if decoder is None or head is None or decoder is base:
        return None
    return decoder, head


def policy_forward(
    model: torch.nn.Module,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    response_ids: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    temperature: float = 1.0,
    with_entropy: bool = False,
    entropy_grad: bool = False,
    value_head: ValueHead | None = None,
    chunk: int | None = None,
    **image_inputs: torch.Tensor,
) -> PolicyOutput:
    """log pi(response_t | prompt, response_<t) for every response position [N, T], from temperature-scaled
    logits so they match the sampling log-probs of the rollout engine; the entropy of each position
    (detached unless ``entropy_grad``, since only an entropy bonus needs its gradient); and, with a value
    head, the value of the state before each response token.

    Memory: only response positions reach the LM head. When they number more than ``chunk`` (default
    LOGITS_CHUNK; 0 = never), the head, log-softmax and entropy run ``chunk`` positions at a time with the
    chunks' logits recomputed in the backward pass (algos.entropy.chunked_logprobs_entropy), so the float32
    logits never exist for all positions at once; the values equal the full computation's up to rounding.

    ``image_inputs`` (a vision-language model's pixel values etc., rlvr.rollout.base.RolloutBatch.image_inputs)
    reach every forward, chunked or not; positions are the model's own where it defines them (Qwen2-VL's 3-D
    M-RoPE, rlvr.models.multimodal.model_positions), else ``cumsum(mask) - 1``. A VLM's image placeholder tokens
    get probability 0 (rlvr.models.multimodal.placeholder_ids), as the engines sample."""
    input_ids = torch.cat([prompt_ids, response_ids], dim=1)
    attention_mask = torch.cat([prompt_mask, response_mask.to(prompt_mask.dtype)], dim=1)
    check_image_inputs(model, input_ids, image_inputs)
    position_ids = model_positions(model, input_ids, attention_mask, image_inputs)
    suppressed = placeholder_ids(model)  # a VLM's image tokens have probability 0, as in the engines
    width = response_ids.shape[1]
    chunk = LOGITS_CHUNK if chunk is None else chunk
    parts = trunk_and_head(model) if chunk and response_ids.numel() > chunk else None
    if parts is not None:
        decoder, head = parts
        head = PlaceholderFreeHead(head, suppressed) if suppressed else head
        hidden = decoder(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                         use_cache=False, **image_inputs).last_hidden_state[:, -width - 1:-1, :]
        logp, entropy = chunked_logprobs_entropy(hidden, head, response_ids, temperature=temperature, chunk_rows=chunk,
                                                 with_entropy=with_entropy, entropy_grad=entropy_grad)
        return PolicyOutput(logp, entropy, value_head(hidden) if value_head is not None else None)
    # Only the positions that predict response tokens are needed: the last prompt position and all but the last response one.
    out = model(
        input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
        logits_to_keep=width + 1, output_hidden_states=value_head is not None, **image_inputs,
    )
    logits = suppress_placeholders(out.logits[:, :-1, :].float(), suppressed)
    if temperature not in (0.0, 1.0):
        logits = logits / temperature
    result = PolicyOutput(token_logprobs(logits, response_ids))
    if with_entropy:
        result.entropy = entropy_from_logits(logits if entropy_grad else logits.detach())
    if value_head is not None:
        result.values = value_head(out.hidden_states[-1][:, -width - 1:-1, :])
    return result


def logits_forward(model, image_inputs: dict[str, torch.Tensor] | None = None):
    """``forward(ids, mask) -> logits`` over padded sequences of a batch's rows (rlvr.rewards' Forward), with those
    rows' image inputs and the model's positions: what policy-based rewards call the model with."""
    image_inputs = dict(image_inputs or {})

    def forward(ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        check_image_inputs(model, ids, image_inputs)
        logits = model(input_ids=ids, attention_mask=mask, position_ids=model_positions(model, ids, mask, image_inputs),
                       **image_inputs).logits
        return suppress_placeholders(logits, placeholder_ids(model))

    return forward


def response_logprobs(model, prompt_ids, prompt_mask, response_ids, response_mask, *, temperature=1.0, **kw):
    """(log-probs, entropy) of the responses; see ``policy_forward``."""
    out = policy_forward(model, prompt_ids, prompt_mask, response_ids, response_mask, temperature=temperature, **kw)
    return out.logp, out.entropy
