"""Environments and tools written for other libraries, through adapters.

``openai_tools(schemas, functions)``: OpenAI-style function tools ({"type": "function", "function": {"name",
"description", "parameters"}}) with their Python implementations become Tools (run supervised like any function
tool; the schema is kept as given).

``VerifiersEnv`` (registered as ``verifiers``; option ``load``: a module with ``load_environment(**load_options)``):
a multi-turn environment of PrimeIntellect's ``verifiers`` package, written to release 0.3.1 (the ``rlvr[verifiers]``
extra pins it). The package's own turn loop runs the episode: ``MultiTurnEnv.rollout`` with its ``setup_state``,
``env_response``, stop conditions (``@vf.stop``: ``max_turns``, ``final_env_response``, errors, the environment's
own), time limit and cleanup handlers; where it asks its client for the model's next message, the adapter's client
hands the conversation to rlvr's engine and returns the text the policy wrote. What maps: the system prompt and
few-shot messages, the turn loop, the per-episode ``state`` (``answer`` is the task's reference, ``info`` its meta),
the environment's messages (attended to, never trained on), and the environment's reward, added to the episode's
reward as the part ``verifiers`` (logged as ``reward/env/verifiers``): the per-turn rewards it writes into
``state["trajectory"][i]["reward"]`` as they come, and where its rubric has weighted reward functions, the rubric's
score of the finished rollout in their place (``Rubric.score_rollout``, their weighted sum, as the package scores a
rollout; its ``answer`` is the task's reference). An episode rlvr cuts short (its token budget) keeps its turns'. The task's rlvr verifier scores the final answer beside it (a task without a
reference is left to the rubric). What does not map: group-level reward functions (a rubric that needs the whole
group is refused; rlvr's group advantages take their place), the package's datasets (tasks come from rlvr's data),
structured ``tool_calls`` (the policy writes text; for tool use take rlvr's ``tools`` environment), and hosted
sandboxes. An environment without a turn limit (``max_turns=-1``) gets the option
``max_turns`` (default 10). Rollouts of all episodes run on one background event loop; an environment that takes
longer than ``turn_timeout_s`` to answer ends its episode (an environment error, counted in ``env_errors``).
"""

from __future__ import annotations

import asyncio
import functools
import json
import math
import queue
import threading
import time
from typing import Any, Callable

from rlvr.envs.base import Environment, Limits, Message, Step
from rlvr.envs.registry import register_env
from rlvr.envs.tools import Tool
from rlvr.tasks.base import Prompt, Task
from rlvr.plugins import PluginError, import_user_module


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


DEFAULT_MAX_TURNS = 10


@functools.lru_cache(maxsize=8)
def _load(module: str, kwargs_json: str) -> Any:
    try:
        loader = import_user_module(module).load_environment
    except (PluginError, AttributeError) as exc:
        raise ValueError(f"env option load: cannot import load_environment from {module!r} ({exc})") from None
    return loader(**json.loads(kwargs_json))


def _import_verifiers():
    try:
        import verifiers as vf
    except ImportError:
        raise ImportError("environment verifiers needs the verifiers package: pip install 'rlvr[verifiers]'") from None
    if not hasattr(vf, "MultiTurnEnv"):  # 0.4.0 removed the classic environments (its v1 stack runs agent programs)
        raise ImportError(f"environment verifiers runs the package's classic environments (MultiTurnEnv), which "
                          f"verifiers {getattr(vf, '__version__', '?')} no longer has: pip install 'rlvr[verifiers]' "
                          "installs the release it is tested with")
    return vf


_LOOP: asyncio.AbstractEventLoop | None = None
_LOOP_LOCK = threading.Lock()


def _event_loop() -> asyncio.AbstractEventLoop:
    """The background event loop every episode's rollout runs on (one daemon thread for the process)."""
    global _LOOP
    with _LOOP_LOCK:
        if _LOOP is None:
            _LOOP = asyncio.new_event_loop()
            threading.Thread(target=_LOOP.run_forever, name="rlvr-verifiers-env", daemon=True).start()
        return _LOOP


def _text(content: Any) -> str:
    if isinstance(content, list):  # content parts: the text ones, in order
        return "".join(part.get("text", "") if isinstance(part, dict) else str(getattr(part, "text", ""))
                       for part in content)
    return "" if content is None else str(content)


def _as_dict(message: Any) -> Message:
    """A message of the package (a pydantic model or a dict) as rlvr's chat message: role and text content."""
    data = message if isinstance(message, dict) else message.model_dump(exclude_none=True)
    out = {"role": data.get("role", "user"), "content": _text(data.get("content"))}
    if data.get("tool_call_id"):
        out["tool_call_id"] = data["tool_call_id"]
    return out


@functools.cache
def _policy_client_class():
    """vf.Client whose "model" is rlvr's policy: ``get_native_response`` hands the conversation to the episode
    (``_Turns``) and waits for the text the policy wrote."""
    vf = _import_verifiers()
    from verifiers.types import Response, ResponseMessage

    class PolicyClient(vf.Client):
        def setup_client(self, config):
            return None

        async def to_native_tool(self, tool):
            return tool

        async def to_native_prompt(self, messages):
            return list(messages), {}

        async def get_native_response(self, prompt, model, sampling_args, tools=None, **kwargs):
            return await self.client.ask(prompt, kwargs.get("state"))

        async def raise_from_native_response(self, response):
            return None

        async def from_native_response(self, response):
            return Response(id=f"rlvr-{time.time_ns()}", created=int(time.time()), model="rlvr-policy",
                            message=ResponseMessage(content=response, finish_reason="stop", is_truncated=False))

        async def close(self):
            return None

    return PolicyClient


class _Turns:
    """The meeting point of one episode: the rollout (on the background loop) asks for the policy's message with
    ``ask``; the trainer's thread answers with ``reply`` and reads what came next with ``next``."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.loop = loop
        self.events: queue.Queue = queue.Queue()
        self.pending: asyncio.Future | None = None
        self.state: dict[str, Any] | None = None

    async def ask(self, prompt, state) -> str:
        self.state = state
        self.pending = self.loop.create_future()
        self.events.put(("turn", [_as_dict(m) for m in prompt]))
        return await self.pending

    def reply(self, text: str) -> None:
        pending, self.pending = self.pending, None
        self.loop.call_soon_threadsafe(lambda: pending.done() or pending.set_result(text))

    def next(self, timeout_s: float) -> tuple[str, Any]:
        try:
            return self.events.get(timeout=timeout_s)
        except queue.Empty:
            raise TimeoutError(f"environment verifiers: no answer from the environment within {timeout_s:g} s "
                               "(env option turn_timeout_s)") from None


def _scores_rollouts(env: Any) -> bool:
    """Whether the environment's rubric scores a rollout: scoring is on and a reward function has a weight (the
    package's own monitor functions, such as a MultiTurnEnv's turn count, weigh 0). A rubric with group-level
    functions is refused, since rlvr scores each episode as it ends."""
    rubric = getattr(env, "rubric", None)
    if rubric is None or not getattr(env, "score_rollouts", True):
        return False
    funcs = rubric._get_reward_funcs()
    group = [getattr(f, "__name__", repr(f)) for f in funcs if rubric._is_group_func(f)]
    if group:
        raise ValueError(f"environment verifiers: the rubric of {type(env).__name__} has group-level reward "
                         f"functions ({', '.join(group)}), which score a whole group at once; rlvr scores each episode "
                         "as it ends (its group advantages compare them): give the rubric per-rollout functions")
    return any(weight for weight in rubric._get_reward_weights())


def _finite(value: Any, what: str) -> float:
    try:
        reward = float(value or 0.0)
    except (TypeError, ValueError):
        raise ValueError(f"environment verifiers: {what} is {value!r}, not a number") from None
    if not math.isfinite(reward):
        raise ValueError(f"environment verifiers: {what} is {reward}")
    return reward


class VerifiersEnv(Environment):
    def __init__(self, env: Any = None, *, load: str | None = None, load_options: dict[str, Any] | None = None,
                 max_turns: int | None = None, max_turn_tokens: int = 0, turn_timeout_s: float = 60.0):
        vf = _import_verifiers()
        if env is None:
            if not load:
                raise ValueError("environment verifiers: give the option load (a module with load_environment)")
            env = _load(load, json.dumps(load_options or {}, sort_keys=True))
        if not isinstance(env, vf.MultiTurnEnv):
            raise TypeError(f"environment verifiers: load_environment returned a {type(env).__name__}, not a "
                            f"verifiers.MultiTurnEnv (verifiers {vf.__version__})")
        own_limit = int(getattr(env, "max_turns", -1) or -1)
        self.scored = _scores_rollouts(env)
        self.inner = env
        self.limits = Limits(max_turns or (own_limit if own_limit > 0 else DEFAULT_MAX_TURNS), max_turn_tokens)
        self.turn_timeout_s = turn_timeout_s
        self.turns: _Turns | None = None
        self.rollout = None
        self.prompt: list[Message] = []
        self.reported = 0.0

    def reset(self, task: Task) -> Prompt:
        messages = [{"role": "user", "content": task.prompt}] if isinstance(task.prompt, str) \
            else [dict(m) for m in task.prompt]
        if messages[0].get("role") != "system":
            messages[:0] = [*([{"role": "system", "content": self.inner.system_prompt}]
                              if self.inner.system_prompt else []), *(self.inner.few_shot or [])]
        answer = task.reference if isinstance(task.reference, str) else json.dumps(task.reference)
        rollout_input = {"prompt": messages, "answer": answer, "info": dict(task.meta), "example_id": task.id}
        loop = _event_loop()
        self.turns = _Turns(loop)
        client = _policy_client_class()(self.turns)
        self.rollout = asyncio.run_coroutine_threadsafe(self._run(rollout_input, client), loop)
        kind, value = self.turns.next(self.turn_timeout_s)
        if kind != "turn":
            self.close()
            raise RuntimeError(f"environment verifiers: {type(self.inner).__name__} ended the episode of task "
                               f"{task.id} before the model's first turn ({value})")
        self.prompt = value
        return list(value)

    async def _run(self, rollout_input, client) -> None:
        try:
            state = await self.inner.rollout(rollout_input, client, "rlvr-policy", {})
            if self.scored:
                await self.inner.rubric.score_rollout(state)
                await self.inner.rubric.cleanup(state)
            self.turns.state = state
            self.turns.events.put(("done", state.get("stop_condition")))
        except BaseException as exc:  # noqa: BLE001 - handed to the trainer's thread, which ends the episode
            self.turns.events.put(("error", exc))
            if isinstance(exc, asyncio.CancelledError):
                raise

    def _new_rewards(self, done: bool) -> dict[str, float]:
        """The part ``verifiers`` of this turn: what the per-turn rewards added, and at the end of a rollout its
        rubric scored, what makes the episode's sum the rubric's score (an episode rlvr cuts short keeps its turns')."""
        state = self.turns.state or {}
        if done and self.scored:
            total = _finite(state.get("reward"), "its rubric's reward")
        else:
            total = sum(_finite(step.get("reward"), "a turn's reward") for step in state.get("trajectory") or [])
        delta, self.reported = total - self.reported, total
        return {"verifiers": delta}

    def step(self, assistant: str) -> Step:
        self.turns.reply(assistant)
        kind, value = self.turns.next(self.turn_timeout_s)
        if kind == "error":
            raise value
        rewards = self._new_rewards(kind == "done")
        if kind == "done":
            return Step(rewards=rewards, done=True, answer=assistant)
        seen = len(self.prompt) + 1  # what the policy saw, and its own message
        self.prompt = value
        return Step(observations=[dict(m) for m in value[seen:]], rewards=rewards)

    def close(self) -> None:
        """Cancel a rollout still under way (the package's cleanup handlers run on the way out)."""
        if self.rollout is not None and not self.rollout.done():
            self.rollout.cancel()
        self.rollout = None


register_env("verifiers")(VerifiersEnv)

from rlvr.envs import openenv_adapter  # noqa: E402,F401 - registers the environment "openenv"
