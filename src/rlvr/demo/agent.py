"""`rlvr demo --agent`: a tiny model learns by RL to use a calculator tool for multiplication it cannot do in
its head.

1. A character-level Llama is built from scratch with a chat template whose assistant turns end with EOS.
2. Supervised warm start on transcripts of the calculator environment, written by a scripted teacher through the
   same episode runner that RL uses (so the warm start trains exactly the tokens RL trains): in a minority of them
   the teacher calls the calculator and copies its result; in the rest it answers in its head (the true product,
   which a model this size cannot compute for problems it has not seen).
3. Held-out pass@1 (greedy) before RL; GRPO in the ``tools`` environment (a fenced ```calc block, the result
   comes back as a tool message); pass@1 after RL, and the trained model without the calculator.
"""

from __future__ import annotations

import random
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from transformers.utils import logging as hf_logging

from rlvr.demo import MODEL, DemoResult, heldout_pass_at_1, rl_config, rl_phase, write_results
from rlvr.demo import RL_CONFIG as SINGLE_TURN_RL
from rlvr.jsonl import write_jsonl
from rlvr.models import build_tiny_model
from rlvr.rollout.agent import run_episodes
from rlvr.rollout.base import RolloutBatch, SamplingParams
from rlvr.tasks.arithmetic import split_of
from rlvr.tasks.base import Task
from rlvr.train.determinism import pin_numerics
from rlvr.train.loop import seed_everything
from rlvr.train.sft import padded, sft

# Assistant turns end with EOS, so each turn of an episode ends where the model stops.
AGENT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}"
    "{% if m['role'] == 'assistant' %}{{ 'A:' + m['content'] + eos_token }}"
    "{% elif m['role'] == 'tool' %}{{ 'T:' + m['content'] + '\\n' }}"
    "{% else %}{{ 'Q:' + m['content'] + '\\n' }}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{ 'A:' }}{% endif %}"
)
ENV_OPTIONS: dict[str, Any] = {"tools": [{"tool": "calculator", "name": "calc"}], "tool_format": "fenced",
                               "max_turns": 3, "max_turn_tokens": 24}
NO_TOOLS: dict[str, Any] = {**ENV_OPTIONS, "tools": []}
HELDOUT_TASKS = 300
HELDOUT_PERCENT = 10
SFT_TRANSCRIPTS = 3000
SFT_TOOL_SHARE = 0.25  # the teacher calls the calculator this often; otherwise it answers in its head
SFT_STEPS = 300
SFT_BATCH = 64
SFT_LR = 1e-3
THREADS = 1  # a model this small gains nothing from more, and one thread gives the same numbers on any machine

# The RL phase: the single-turn demo's algorithm, in the calculator environment (data.train is set per run).
RL_CONFIG: dict[str, Any] = {
    **SINGLE_TURN_RL,
    "data": {"verifier": "exact", "prompts_per_step": 16, "env": "tools", "env_options": ENV_OPTIONS},
    "rollout": {"group_size": 8, "max_new_tokens": 48, "temperature": 1.0},
    "train": {"steps": 40, "lr": 5e-4, "max_grad_norm": 1.0, "save_every": 0, "threads": THREADS},
}


@dataclass
class AgentDemoResult(DemoResult):
    after_without_tools: float = 0.0  # the trained model's pass@1 when the environment offers no tools


def problems(split: str, seed: int) -> list[Task]:
    """Products of a 3-digit and a 2-digit number, split by a hash of the problem (tasks.arithmetic.split_of)."""
    tasks = []
    for a in range(100, 1000):
        for b in range(10, 100):
            problem = f"{a}*{b}"
            if split_of(problem, HELDOUT_PERCENT) == split:
                tasks.append(Task([{"role": "user", "content": problem}], str(a * b), f"mul:{problem}",
                                  env="tools", env_options=ENV_OPTIONS))
    random.Random(seed).shuffle(tasks)
    return tasks


class Teacher:
    """A scripted engine writing the warm start's transcripts: for a ``tool_share`` of the problems (chosen by a
    seeded hash) a fenced calculator call and then the tool's result; for the others the product at once."""

    def __init__(self, tokenizer, seed: int, tool_share: float):
        self.tokenizer, self.seed, self.tool_share = tokenizer, seed, tool_share

    def sync_weights(self, model) -> None:
        pass

    def reply(self, text: str) -> str:
        problem = text.split("Q:", 1)[1].split("\n", 1)[0]
        if "T:" in text:
            return text.rsplit("T:", 1)[1].split("\n", 1)[0]
        if random.Random(f"{self.seed}:{problem}").random() < self.tool_share:
            return f"```calc\n{problem}\n```"
        a, b = problem.split("*")
        return str(int(a) * int(b))

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> RolloutBatch:
        eos = self.tokenizer.eos_token_id
        rows = [list(self.tokenizer(self.reply(self.tokenizer.decode(p)), add_special_tokens=False)["input_ids"])
                + [eos] for p in prompts]
        width = max(len(r) for r in rows)
        ids = torch.full((len(rows), width), self.tokenizer.pad_token_id)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, r in enumerate(rows):
            ids[i, : len(r)], mask[i, : len(r)] = torch.tensor(r), 1
        empty = torch.zeros((len(rows), 1), dtype=torch.long)
        return RolloutBatch(empty, empty, ids, mask, torch.zeros(ids.shape), torch.zeros(len(rows), dtype=torch.bool),
                            torch.arange(len(rows)))


def transcripts(tokenizer, tasks: list[Task], seed: int, tool_share: float) -> list[tuple[list[int], list[int]]]:
    """(input ids, labels) of each task's teacher episode: labels are the ids where the episode's loss mask is 1
    (the model's own turns), -100 elsewhere."""
    run = run_episodes(Teacher(tokenizer, seed, tool_share), tokenizer, tasks, SamplingParams(n=1, max_new_tokens=64))
    b = run.batch
    out = []
    for i in range(b.size):
        prompt = b.prompt_ids[i][b.prompt_mask[i].bool()].tolist()
        n = int(b.response_mask[i].sum())
        response, loss = b.response_ids[i, :n].tolist(), b.loss_mask[i, :n].tolist()
        out.append((prompt + response, [-100] * len(prompt) + [t if m else -100 for t, m in zip(response, loss)]))
    return out


def transcript_batch(pad_id: int):
    """A ``make_batch`` for rlvr.train.sft: right-padded (input ids, labels) transcripts with their attention mask."""
    return lambda picks, device: padded(picks, pad_id, device)


def sft_transcripts(model, tokenizer, rows: list[tuple[list[int], list[int]]], *, steps: int, batch_size: int,
                    lr: float, seed: int, progress: bool) -> list[float]:
    """AdamW on random batches of transcripts, cross-entropy on the labelled (model-written) tokens only."""
    return sft(model, tokenizer, rows, steps=steps, batch_size=batch_size, lr=lr, seed=seed, progress=progress,
               make_batch=transcript_batch(tokenizer.pad_token_id))


def run_agent_demo(out: Path, *, seed: int = 0, progress: bool = True, sft_steps: int = SFT_STEPS,
                   rl_steps: int | None = None, heldout_tasks: int = HELDOUT_TASKS,
                   sft_transcripts_n: int = SFT_TRANSCRIPTS, overrides: Sequence[str] = ()) -> AgentDemoResult:
    """The whole agent demo; the keyword arguments shrink it for smoke tests (the defaults are the real demo)."""
    pin_numerics()  # first, before any tensor operation: one thread and AVX2 kernels on any x86-64 CPU
    started = time.perf_counter()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    hf_logging.disable_progress_bar()
    seed_everything(seed)

    model, tokenizer = build_tiny_model(MODEL, seed=seed)
    tokenizer.chat_template = AGENT_TEMPLATE
    train_tasks = problems("train", seed)
    heldout = problems("eval", seed)[:heldout_tasks]
    train_file = out / "train.jsonl"
    write_jsonl(train_file, [{"id": t.id, "prompt": t.prompt, "reference": t.reference} for t in train_tasks])
    print(f"demo: tiny Llama with {sum(p.numel() for p in model.parameters()) / 1e6:.2f}M parameters; "
          f"{len(train_tasks)} training problems (3-digit x 2-digit products), {len(heldout)} held-out problems")

    rows = transcripts(tokenizer, train_tasks[:sft_transcripts_n], seed, SFT_TOOL_SHARE)
    sft_transcripts(model, tokenizer, rows, steps=sft_steps, batch_size=SFT_BATCH, lr=SFT_LR, seed=seed,
                    progress=progress)
    base = {**RL_CONFIG, "data": {**RL_CONFIG["data"], "train": str(train_file)}}
    phase = rl_phase(model, tokenizer, heldout, out,
                     lambda warm: rl_config(warm, out, seed=seed, progress=progress, rl_steps=rl_steps,
                                            overrides=overrides, base=base))
    bare = [Task(t.prompt, t.reference, t.id, env="tools", env_options=NO_TOOLS) for t in heldout]
    without = heldout_pass_at_1(phase.model, phase.tokenizer, bare, phase.cfg,
                                phase.heldout_dir / "heldout-after-rl-no-tools.json")
    result = AgentDemoResult(phase.before, phase.after, len(heldout), time.perf_counter() - started, str(phase.final),
                             without)
    write_results(out, phase, result)
    print(f"demo: the trained model without the calculator: pass@1 = {100 * without:.1f}%")
    print(f"demo: pass@1 before={100 * result.before:.1f}% after={100 * result.after:.1f}% on {len(heldout)} "
          "held-out tasks (agent)")
    return result
