"""Rewards computed from the policy itself, for tasks without a rule verifier.

The trainer calls them once per batch, after sampling, with the batch's tensors and a function that runs the
model (no gradients are taken):

    from rlvr.rewards import PolicyBatch, compute

    batch = PolicyBatch(prompt_ids=..., prompt_mask=...,        # [N, P] left-padded prompts
                        response_ids=..., response_mask=...,    # [N, T] right-padded responses
                        index=...,                              # [N] group id per row
                        reasoning_mask=...,                     # [N, T] optional: response prefix before the answer
                        reference_ids=..., reference_mask=...,  # [N, R] right-padded reference answer tokens
                        answers=[...],                          # optional: canonical extracted answers (or None)
                        logits=...)                             # optional: [N, T, V] response-position logits
    forward = lambda ids, mask: model(input_ids=ids, attention_mask=mask).logits   # [B, L] -> [B, L, V]
    rewards = compute("rlpr", batch, forward)                   # Tensor[N], float32, on the model's device

Sources (``reward_source_names()``), each declaring what it needs (``get_reward_source(name).needs``):
- "rlpr": mean probability of the reference tokens after the reasoning, debiased (RLPR); with ``std_filter`` /
  ``StdThreshold`` for the paper's standard-deviation filtering of prompts.
- "verifree": probability of the whole reference after the reasoning (VeriFree).
- "self_certainty": mean KL(uniform || p_t) over response tokens (Intuitor).
- "negative_entropy": minus the mean token entropy (RENT, EM-RL).
- "majority_vote": 1 if the answer equals the group's majority answer (TTRL).
- "semantic_entropy": the share of the group in the response's answer cluster (EMPO).
``forward`` must handle left padding the way the trainer's own log-prob pass does (e.g. position ids from the
attention mask); "rlpr" and "verifree" only pass right-padded sequences. Rewards are float32 on the model's device.
A source is registered with ``register_reward_source(name, needs=(...))``; ``compute`` checks the needs first.

Process rewards (one reward per reasoning step, on the step's last token) have their own registry in
``rlvr.rewards.process``: ``compute_process(name, batch, responses, tasks, tokenizer, **options)`` ->
``ProcessRewards(values, step_end)``, sources "arith_steps" and "prm" (``process_source_names()``).
"""

from rlvr.rewards import confidence as _confidence  # noqa: F401  (registers self_certainty, negative_entropy)
from rlvr.rewards import probability as _probability  # noqa: F401  (registers rlpr, verifree)
from rlvr.rewards import voting as _voting  # noqa: F401  (registers majority_vote, semantic_entropy)
from rlvr.rewards.probability import StdThreshold, reference_logprobs, std_filter
from rlvr.rewards.process import (
    ProcessRewards,
    compute_process,
    process_source_names,
    register_process_source,
    step_metrics,
    step_spans,
)
from rlvr.rewards.registry import (
    Forward,
    PolicyBatch,
    RewardSource,
    compute,
    get_reward_source,
    register_reward_source,
    reward_source_names,
)
from rlvr.rewards.voting import majority_labels

__all__ = ["Forward", "PolicyBatch", "ProcessRewards", "RewardSource", "StdThreshold", "compute", "compute_process",
           "get_reward_source", "majority_labels", "process_source_names", "reference_logprobs",
           "register_process_source", "register_reward_source", "reward_source_names", "std_filter", "step_metrics",
           "step_spans"]
