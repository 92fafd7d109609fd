"""The trainer's forward pass: per-token log-probs (and entropy) of the sampled responses under the policy."""

from __future__ import annotations

import torch

from rlvr.algos.entropy import entropy_from_logits, token_logprobs


def response_logprobs(
    model: torch.nn.Module,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    response_ids: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    temperature: float = 1.0,
    with_entropy: bool = False,
    entropy_grad: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """log pi(response_t | prompt, response_<t) for every response position [N, T], from temperature-scaled
    logits so they match the sampling log-probs of the rollout engine; and the entropy of each position
    (detached unless ``entropy_grad``, since only an entropy bonus needs its gradient)."""
    input_ids = torch.cat([prompt_ids, response_ids], dim=1)
    attention_mask = torch.cat([prompt_mask, response_mask.to(prompt_mask.dtype)], dim=1)
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    width = response_ids.shape[1]
    # Only the logits that predict response tokens are needed: the last prompt position and all but the last response one.
    logits = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, logits_to_keep=width + 1).logits
    logits = logits[:, :-1, :].float()
    if temperature not in (0.0, 1.0):
        logits = logits / temperature
    logp = token_logprobs(logits, response_ids)
    entropy = None
    if with_entropy:
        entropy = entropy_from_logits(logits if entropy_grad else logits.detach())
    return logp, entropy
