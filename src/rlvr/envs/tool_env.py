"""The tool-use environment: the model answers or calls tools; each call's result comes back as a ``tool`` message;
the episode ends at the first message without a tool call (the final answer) or after ``max_turns`` turns.

Reward parts per turn: ``format`` (``format_penalty`` per call the parser could not read) and ``tool_error``
(``tool_error_penalty`` per call of an unknown tool, with bad arguments, that raised or timed out).
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from typing import Any, Callable

from rlvr.algos.registry import Registry
from rlvr.envs.base import Environment, Limits, Message, Step
from rlvr.envs.parsers import format_names, parse_calls
from rlvr.envs.registry import register_env
from rlvr.envs.tools import Tool, function_tool
from rlvr.tasks.base import Prompt, Task

_TOOLS = Registry("tool")
tool_names = _TOOLS.names


def register_tool(name: str) -> Callable[[Callable[..., Tool]], Callable[..., Tool]]:
    """Register ``factory(**options) -> Tool`` so environments can name it in their ``tools`` option."""
    return _TOOLS.register(name)


def unregister_tool(name: str) -> None:
    _TOOLS.unregister(name)


def resolve_tool(spec: str | dict[str, Any] | Tool) -> Tool:
    """A Tool from a registered name, ``{"tool": NAME, **options}`` (the factory's options, e.g. ``name`` to rename
    it), or ``"module:function"`` (a function tool)."""
    if isinstance(spec, Tool):
        return spec
    if isinstance(spec, dict):
        options = dict(spec)
        if "tool" not in options:
            raise ValueError(f"env option tools: {spec!r} has no 'tool' key (expected {{tool: NAME, ...options}})")
        return _TOOLS.get(options.pop("tool"))(**options)
    if ":" in spec:
        module, _, attr = spec.partition(":")
        try:
            fn = getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError) as exc:
            raise ValueError(f"tool {spec!r}: cannot import {attr} from {module} ({exc})") from None
        return fn if isinstance(fn, Tool) else function_tool(fn)
    return _TOOLS.get(spec)()


class ToolEnv(Environment):
    def __init__(self, tools: Sequence[Any] = (), *, tool_format: str = "hermes", max_turns: int = 4,
                 max_turn_tokens: int = 0, system_prompt: str | None = None, format_penalty: float = 0.0,
                 tool_error_penalty: float = 0.0):
        if tool_format not in format_names():
            raise ValueError(f"env option tool_format: unknown {tool_format!r}; known: {', '.join(format_names())}")
        self.by_name = {t.name: t for t in (resolve_tool(spec) for spec in tools)}
        self.tools = [t.schema() for t in self.by_name.values()]
        self.tool_format = tool_format
        self.limits = Limits(max_turns, max_turn_tokens)
        self.system_prompt = system_prompt
        self.format_penalty, self.tool_error_penalty = format_penalty, tool_error_penalty
        self.turn = 0

    def reset(self, task: Task) -> Prompt:
        self.turn = 0
        messages: list[Message] = [{"role": "user", "content": task.prompt}] if isinstance(task.prompt, str) \
            else [dict(m) for m in task.prompt]
        if self.system_prompt and messages[0].get("role") != "system":
            messages.insert(0, {"role": "system", "content": self.system_prompt})
        return messages

    def step(self, assistant: str) -> Step:
        self.turn += 1
        parsed = parse_calls(self.tool_format, assistant)
        if not parsed.attempted:
            return Step(done=True, answer=parsed.content)
        info = {"tool_calls": len(parsed.calls), "tool_errors": 0, "malformed_calls": len(parsed.errors)}
        rewards = {"format": self.format_penalty * len(parsed.errors)} if parsed.errors else {}
        if self.turn >= self.limits.max_turns:  # no turn left to read a result: the calls are not run
            return Step(rewards=rewards, done=True, answer=parsed.content, info={**info, "max_turns": 1})
        observations = [{"role": "tool", "content": f"error: {e.message}"} for e in parsed.errors]
        for call in parsed.calls:
            tool = self.by_name.get(call.name)
            if tool is None:
                text, failed = f"error: unknown tool {call.name!r}; tools: {', '.join(self.by_name) or 'none'}", True
            else:
                result = tool.run(call)
                text, failed = result.text, result.error
            info["tool_errors"] += int(failed)
            observations.append({"role": "tool", "name": call.name, "content": text})
        if info["tool_errors"]:
            rewards["tool_error"] = self.tool_error_penalty * info["tool_errors"]
        return Step(observations, rewards, done=False, info=info)


register_env("tools")(ToolEnv)
