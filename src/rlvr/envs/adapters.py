"""Environments and tools written for other libraries, through adapters.

``openai_tools(schemas, functions)``: OpenAI-style function tools ({"type": "function", "function": {"name",
"description", "parameters"}}) with their Python implementations become Tools (run supervised like any function
tool; the schema is kept as given).

``VerifiersEnv`` (registered as ``verifiers``, option ``load``: a module with ``load_environment(**kwargs)``):
a multi-turn environment of PrimeIntellect's ``verifiers`` package, driven through its ``env_response`` and
``is_completed`` (sync or async, returning messages or (messages, state)). What maps: the system prompt, the
turn loop, ``max_turns``, ``setup_state``, the per-episode ``state`` dict (with "prompt", "answer", "info",
"responses", "turn"), the tools' OpenAI schemas (``oai_tools``). What does not: rubrics (the task's rlvr verifier
scores the final answer; write the rubric's checks as an rlvr verifier), the package's dataset (tasks come from
rlvr's data), structured ``tool_calls`` from an API (calls are parsed from the model's text by the task's
``tool_format`` in rlvr's own ``tools`` environment instead), and sandboxes of a hosted service.
"""

from __future__ import annotations

import asyncio
import functools
import importlib
import inspect
import json
from typing import Any, Callable

from rlvr.envs.base import Environment, Limits, Message, Step
from rlvr.envs.registry import register_env
from rlvr.envs.tools import Tool
from rlvr.tasks.base import Prompt, Task


def openai_tools(schemas: list[dict[str, Any]], functions: dict[str, Callable[..., Any]], *,
                 isolation: str = "process", timeout_s: float = 5.0) -> list[Tool]:
    tools = []
    for schema in schemas:
        spec = schema.get("function", schema)
        name = spec.get("name")
        if name not in functions:
            raise ValueError(f"OpenAI tool {name!r} has no implementation in functions (known: {', '.join(functions)})")
        tools.append(Tool(name, spec.get("description", ""), spec.get("parameters") or {"type": "object",
                                                                                        "properties": {}},
                          functions[name], isolation=isolation, timeout_s=timeout_s))
    return tools


def _resolve(value: Any) -> Any:
    return asyncio.run(value) if inspect.isawaitable(value) else value


@functools.lru_cache(maxsize=8)
def _load(module: str, kwargs_json: str) -> Any:
    try:
        loader = importlib.import_module(module).load_environment
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"env option load: cannot import load_environment from {module!r} ({exc})") from None
    return loader(**json.loads(kwargs_json))


class VerifiersEnv(Environment):
    def __init__(self, env: Any = None, *, load: str | None = None, load_options: dict[str, Any] | None = None,
                 max_turns: int | None = None, max_turn_tokens: int = 0):
        if env is None:
            if not load:
                raise ValueError("environment verifiers: give the option load (a module with load_environment)")
            env = _load(load, json.dumps(load_options or {}, sort_keys=True))
        for method in ("env_response", "is_completed"):
            if not callable(getattr(env, method, None)):
                raise TypeError(f"environment verifiers: {type(env).__name__} has no {method}() (a MultiTurnEnv)")
        self.inner = env
        self.tools = list(getattr(env, "oai_tools", None) or [])
        self.limits = Limits(max_turns or int(getattr(env, "max_turns", 10) or 10), max_turn_tokens)
        self.messages: list[Message] = []
        self.state: dict[str, Any] = {}

    def reset(self, task: Task) -> Prompt:
        messages = [{"role": "user", "content": task.prompt}] if isinstance(task.prompt, str) \
            else [dict(m) for m in task.prompt]
        system = getattr(self.inner, "system_prompt", None)
        if system and messages[0].get("role") != "system":
            messages.insert(0, {"role": "system", "content": system})
        self.messages = messages
        self.state = {"prompt": list(messages), "answer": task.reference, "info": dict(task.meta), "task": task.id,
                      "responses": [], "turn": 0}
        if callable(getattr(self.inner, "setup_state", None)):
            self.state = _resolve(self.inner.setup_state(self.state)) or self.state
        return list(messages)

    def step(self, assistant: str) -> Step:
        self.messages.append({"role": "assistant", "content": assistant})
        self.state["responses"].append(assistant)
        self.state["turn"] += 1
        if _resolve(self.inner.is_completed(self.messages, self.state)) or self.state["turn"] >= self.limits.max_turns:
            return Step(done=True, answer=assistant)
        reply = _resolve(self.inner.env_response(self.messages, self.state))
        if isinstance(reply, tuple):
            reply, self.state = reply[0], reply[1] if reply[1] is not None else self.state
        observations = [reply] if isinstance(reply, dict) else list(reply or [])
        self.messages += observations
        return Step(observations=[dict(m) for m in observations])


register_env("verifiers")(VerifiersEnv)
