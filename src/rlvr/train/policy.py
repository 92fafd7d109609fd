"""The trainer's forward pass: per-token log-probs, entropy and (for PPO) values of the sampled responses."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rlvr.algos.entropy import entropy_from_logits, token_logprobs


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
) -> PolicyOutput:
    """log pi(response_t | prompt, response_<t) for every response position [N, T], from temperature-scaled
    logits so they match the sampling log-probs of the rollout engine; the entropy of each position
    (detached unless ``entropy_grad``, since only an entropy bonus needs its gradient); and, with a value
    head, the value of the state before each response token."""
    input_ids = torch.cat([prompt_ids, response_ids], dim=1)
    attention_mask = torch.cat([prompt_mask, response_mask.to(prompt_mask.dtype)], dim=1)
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    width = response_ids.shape[1]
    # Only the positions that predict response tokens are needed: the last prompt position and all but the last response one.
    out = model(
        input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
        logits_to_keep=width + 1, output_hidden_states=value_head is not None,
    )
    logits = out.logits[:, :-1, :].float()
    if temperature not in (0.0, 1.0):
        logits = logits / temperature
    result = PolicyOutput(token_logprobs(logits, response_ids))
    if with_entropy:
        result.entropy = entropy_from_logits(logits if entropy_grad else logits.detach())
    if value_head is not None:
        result.values = value_head(out.hidden_states[-1][:, -width - 1:-1, :])
    return result


def response_logprobs(model, prompt_ids, prompt_mask, response_ids, response_mask, *, temperature=1.0, **kw):
    """(log-probs, entropy) of the responses; see ``policy_forward``."""
    out = policy_forward(model, prompt_ids, prompt_mask, response_ids, response_mask, temperature=temperature, **kw)
    return out.logp, out.entropy
