"""The tool-use environment: the model answers or calls tools; each call's result comes back as a ``tool`` message;
the episode ends at the first message without a tool call (the final answer) or after ``max_turns`` turns.

Reward parts per turn: ``format`` (``format_penalty`` per call the parser could not read) and ``tool_error``
(``tool_error_penalty`` per call of an unknown tool, with bad arguments, that raised or timed out).

Per-turn bounds, so one message cannot buy unbounded tool time: at most ``max_calls_per_turn`` calls run (the rest
are answered with one error observation and counted in ``skipped_calls``), and all of a turn's calls share
``turn_time_budget_s`` seconds: each call's deadline is the smaller of its tool's ``timeout_s`` and what is left of
the budget, and calls after the budget is spent are not run. A step therefore returns within about
``turn_time_budget_s`` seconds whatever the message holds.

Tools with per-episode state (the python tool) are built fresh at every ``reset`` (``Tool.fresh``), unless
``keep_tool_state=True`` says the environment means them to carry state from one episode to the next.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, Callable

from rlvr.algos.registry import Registry
from rlvr.envs.base import Environment, Limits, Message, Step
from rlvr.envs.parsers import format_names, parse_calls
from rlvr.envs.registry import register_env
from rlvr.envs.tools import Tool, clean_text, function_tool
from rlvr.tasks.base import Prompt, Task
from rlvr.plugins import PluginError, import_user_module

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
            fn = getattr(import_user_module(module), attr)
        except (PluginError, AttributeError) as exc:
            raise ValueError(f"tool {spec!r}: cannot import {attr} from {module} ({exc})") from None
        return fn if isinstance(fn, Tool) else function_tool(fn)
    return _TOOLS.get(spec)()


# The defaults bound a turn whatever the message holds: 4 calls, at most 10 s for all of them (two calls at the
# default tool deadline of 5 s), so a message of many slow calls holds its episode 10 s, not calls x deadline.
MAX_CALLS_PER_TURN = 4
TURN_TIME_BUDGET_S = 10.0
_MAX_ERROR_CHARS = 500


class ToolEnv(Environment):
    def __init__(self, tools: Sequence[Any] = (), *, tool_format: str = "hermes", max_turns: int = 4,
                 max_turn_tokens: int = 0, system_prompt: str | None = None, format_penalty: float = 0.0,
                 tool_error_penalty: float = 0.0, max_calls_per_turn: int = MAX_CALLS_PER_TURN,
                 turn_time_budget_s: float = TURN_TIME_BUDGET_S, keep_tool_state: bool = False):
        if tool_format not in format_names():
            raise ValueError(f"env option tool_format: unknown {tool_format!r}; known: {', '.join(format_names())}")
        if isinstance(max_calls_per_turn, bool) or not isinstance(max_calls_per_turn, int) or max_calls_per_turn < 1:
            raise ValueError(f"env option max_calls_per_turn must be an integer >= 1, got {max_calls_per_turn!r}")
        if isinstance(turn_time_budget_s, bool) or not isinstance(turn_time_budget_s, (int, float)) \
                or not turn_time_budget_s > 0:
            raise ValueError(f"env option turn_time_budget_s must be a number > 0, got {turn_time_budget_s!r}")
        self.by_name = {t.name: t for t in (resolve_tool(spec) for spec in tools)}
        self.tools = [t.schema() for t in self.by_name.values()]
        self.tool_format = tool_format
        self.limits = Limits(max_turns, max_turn_tokens)
        self.system_prompt = system_prompt
        self.format_penalty, self.tool_error_penalty = format_penalty, tool_error_penalty
        self.max_calls_per_turn, self.turn_time_budget_s = max_calls_per_turn, float(turn_time_budget_s)
        self.keep_tool_state = bool(keep_tool_state)
        self.turn = 0

    def reset(self, task: Task) -> Prompt:
        self.turn = 0
        if not self.keep_tool_state:
            self.by_name = {name: tool.fresh() for name, tool in self.by_name.items()}
        messages: list[Message] = [{"role": "user", "content": task.prompt}] if isinstance(task.prompt, str) \
            else [dict(m) for m in task.prompt]
        if self.system_prompt and messages[0].get("role") != "system":
            messages.insert(0, {"role": "system", "content": self.system_prompt})
        return messages

    def step(self, assistant: str) -> Step:
        deadline = time.monotonic() + self.turn_time_budget_s  # parsing the message counts against the turn too
        self.turn += 1
        parsed = parse_calls(self.tool_format, assistant)
        if not parsed.attempted:
            return Step(done=True, answer=parsed.content)
        info = {"tool_calls": len(parsed.calls), "tool_errors": 0, "malformed_calls": len(parsed.errors)}
        rewards = {"format": self.format_penalty * len(parsed.errors)} if parsed.errors else {}
        if self.turn >= self.limits.max_turns:  # no turn left to read a result: the calls are not run
            return Step(rewards=rewards, done=True, answer=parsed.content, info={**info, "max_turns": 1})
        cap = self.max_calls_per_turn
        observations = [{"role": "tool", "content": clean_text(f"error: {e.message}"[:_MAX_ERROR_CHARS])}
                        for e in parsed.errors[:cap]]
        for call in parsed.calls[:cap]:
            tool = self.by_name.get(call.name)
            left = deadline - time.monotonic()
            if tool is None:
                known = ", ".join(self.by_name) or "none"
                text, failed = f"error: unknown tool {call.name[:100]!r}; tools: {known}", True
            elif left <= 0:
                text, failed = f"error: the turn's time budget of {self.turn_time_budget_s:g} s is spent; not run", True
                info["skipped_calls"] = info.get("skipped_calls", 0) + 1
            else:
                result = tool.run(call, timeout_s=left)
                text, failed = result.text, result.error
            info["tool_errors"] += int(failed)
            observations.append({"role": "tool", "name": clean_text(call.name[:100]), "content": clean_text(text)})
        skipped = len(parsed.calls[cap:]) + len(parsed.errors[cap:]) + parsed.unread
        if skipped:
            info["skipped_calls"] = info.get("skipped_calls", 0) + skipped
            observations.append({"role": "tool", "content": f"error: {skipped} more tool call(s) in this turn were not "
                                                            f"run (at most {cap} per turn)"})
        if info["tool_errors"]:
            rewards["tool_error"] = self.tool_error_penalty * info["tool_errors"]
        return Step(observations, rewards, done=False, info=info)


register_env("tools")(ToolEnv)
