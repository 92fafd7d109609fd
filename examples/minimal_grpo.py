"""GRPO in one file, on rlvr's public pieces: read it top to bottom.

    python examples/minimal_grpo.py                  # warm start, then 30 GRPO steps on 2-digit additions
    python examples/minimal_grpo.py --steps 3        # a smoke run
    python examples/minimal_grpo.py --model DIR      # a model folder of your own (no warm start)

The pieces are the ones `rlvr train` is built from: a generation engine (rlvr.rollout), a verifier (rlvr.verifiers),
an advantage estimator and a policy loss (rlvr.algos). What `rlvr train` adds around this loop (old log-probs reused
across updates, mini-batches, KL, stages, checkpoints, resume, clusters) is left out; the update itself is the same
one: PPO's clipped objective on group-normalised rewards (Shao et al. 2024, DeepSeekMath, eq. 3 without the KL term).
"""

from __future__ import annotations

import argparse
import random

import torch

from rlvr.algos import advantages, losses
from rlvr.models import TinySpec, build_tiny_model, load_model
from rlvr.rollout import RolloutBatch, SamplingParams, build_engine
from rlvr.tasks.arithmetic import ArithmeticSpec, all_problems
from rlvr.train import sft
from rlvr.verifiers import ScoreRequest, score_batch

MODEL = TinySpec(hidden_size=128, num_layers=2, num_heads=4, intermediate_size=512)  # the demo's character Llama
TASKS = ArithmeticSpec(digits=2, ops="+")  # "37+58=" -> "95"


def token_logprobs(model, batch: RolloutBatch) -> torch.Tensor:
    """log pi(o_t | q, o_<t) of every response token, [N, T]: one forward over prompt + response."""
    ids = torch.cat([batch.prompt_ids, batch.response_ids], dim=1)
    mask = torch.cat([batch.prompt_mask, batch.response_mask], dim=1)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)  # prompts are left-padded
    logits = model(input_ids=ids, attention_mask=mask, position_ids=positions).logits.float()
    prompt_len, response_len = batch.prompt_ids.shape[1], batch.response_ids.shape[1]
    logits = logits[:, prompt_len - 1: prompt_len - 1 + response_len]  # the logits that predict each response token
    return torch.log_softmax(logits, dim=-1).gather(-1, batch.response_ids.unsqueeze(-1)).squeeze(-1)


def rewards_of(tokenizer, batch: RolloutBatch, references: list[str], verifier: str) -> torch.Tensor:
    """One verdict per response, from the supervised reward runner (a verifier never hangs or crashes the loop)."""
    texts = [tokenizer.decode(ids[mask.bool()], skip_special_tokens=True)
             for ids, mask in zip(batch.response_ids, batch.response_mask)]
    verdicts = score_batch([ScoreRequest(verifier, text, ref, {}) for text, ref in zip(texts, references)])
    return torch.tensor([v.score for v in verdicts])


def grpo_step(model, optimizer, engine, tokenizer, tasks, args) -> float:
    """Collect -> score -> advantages -> one clipped-PPO update -> sync the engine. Returns the mean reward."""
    prompts = [list(tokenizer(t.prompt)["input_ids"]) for t in tasks]
    batch = engine.generate(prompts, SamplingParams(n=args.group_size, max_new_tokens=8, temperature=1.0))
    references = [t.reference for t in tasks for _ in range(args.group_size)]  # rows of one prompt are contiguous
    rewards = rewards_of(tokenizer, batch, references, verifier="exact")

    adv = advantages.compute("grpo", rewards, batch.group_index, batch.loss_mask)  # (r - mean_g) / (std_g + eps)
    with torch.no_grad():
        old_logp = token_logprobs(model, batch)  # pi_old: the weights that sampled the batch
    logp = token_logprobs(model, batch)
    loss, _ = losses.compute("ppo", logp, old_logp, adv, batch.loss_mask, clip_low=0.2, clip_high=0.2)

    optimizer.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    engine.sync_weights(model)  # the next batch is sampled from the updated policy
    return rewards.mean().item()


def main(argv: list[str] | None = None) -> list[float]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30, help="GRPO steps")
    parser.add_argument("--model", help="a Hugging Face model folder (default: the demo's tiny model, warm-started)")
    parser.add_argument("--sft-steps", type=int, default=500, help="supervised warm-start steps (the demo's)")
    parser.add_argument("--prompts", type=int, default=32, help="prompts per step")
    parser.add_argument("--group-size", type=int, default=16, help="responses per prompt (G)")
    parser.add_argument("--lr", type=float, default=3e-4)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    train_tasks = all_problems(TASKS, "train")
    if args.model:
        model, tokenizer = load_model(args.model)
    else:
        model, tokenizer = build_tiny_model(MODEL, seed=args.seed)
        # a short supervised warm start, so that some answers are right and GRPO has signal (as `rlvr demo` does)
        sft(model, tokenizer, [(t.prompt, t.reference) for t in train_tasks], steps=args.sft_steps, batch_size=64,
            lr=1e-3, seed=args.seed, progress=False)

    engine = build_engine("hf", model, tokenizer)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    history = []
    for step in range(1, args.steps + 1):
        history.append(grpo_step(model, optimizer, engine, tokenizer, rng.sample(train_tasks, args.prompts), args))
        print(f"step {step:3d}  reward {history[-1]:.3f}", flush=True)
    return history


if __name__ == "__main__":
    main()
