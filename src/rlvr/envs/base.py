"""The environment protocol: an episode is a conversation between the policy and an environment.

    env = make_env(task.env or "single_turn", **task.env_options)
    messages = env.reset(task)                 # the first chat messages (or a plain-text prompt)
    step = env.step(assistant_text)            # observation messages, reward parts, done
    ...
    env.close()

The policy's messages are its own tokens; everything an environment says (tool results, feedback, the next
generation prompt) is attended to but never trained on. An environment owns its turn loop: it decides when an
episode is done and what the final answer is (the text the task's verifier scores).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rlvr.tasks.base import Prompt, Task

Message = dict[str, Any]


@dataclass(frozen=True)
class Limits:
    """An episode's limits: at most ``max_turns`` assistant turns and ``max_turn_tokens`` tokens per turn (0 = only
    the episode's token budget, which is the rollout's max_new_tokens and covers assistant and environment tokens)."""

    max_turns: int = 1
    max_turn_tokens: int = 0

    def __post_init__(self) -> None:
        if self.max_turns < 1:
            raise ValueError(f"env option max_turns must be >= 1, got {self.max_turns}")
        if self.max_turn_tokens < 0:
            raise ValueError(f"env option max_turn_tokens must be >= 0, got {self.max_turn_tokens}")


@dataclass
class Step:
    """What the environment answers to one assistant message.

    observations: chat messages to append (role "tool" or "user"); empty when done.
    rewards: per-turn reward parts by name (e.g. {"format": -0.1}); the episode's reward adds them to the verifier's.
    done: the episode is over; ``answer`` is then the text the task's verifier scores (None = the last message).
    info: counters for evaluation: "tool_calls", "tool_errors", "malformed_calls".
    """

    observations: list[Message] = field(default_factory=list)
    rewards: dict[str, float] = field(default_factory=dict)
    done: bool = False
    answer: str | None = None
    info: dict[str, int] = field(default_factory=dict)


class Environment:
    """Base class of environments. Subclasses implement ``reset`` and ``step``; ``tools`` (JSON schemas in the
    OpenAI function format) are passed to the chat template as ``tools=``; ``limits`` bound the episode."""

    tools: list[dict[str, Any]] = []
    limits: Limits = Limits()

    def reset(self, task: Task) -> Prompt:
        raise NotImplementedError

    def step(self, assistant: str) -> Step:
        raise NotImplementedError

    def close(self) -> None:
        """Release what the episode holds (a sandbox process, a database connection)."""


class SingleTurnEnv(Environment):
    """The trivial environment: the task's prompt, one answer, done. Every single-turn task runs in it."""

    def reset(self, task: Task) -> Prompt:
        return task.prompt

    def step(self, assistant: str) -> Step:
        return Step(done=True, answer=assistant)
