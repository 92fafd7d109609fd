"""Environments of OpenEnv (the ``openenv`` package, release 0.10.0; ``pip install 'rlvr[openenv]'``) as rlvr
environments, registered as ``openenv``.

An OpenEnv environment is a gym-style ``reset(**kwargs) -> Observation`` / ``step(Action) -> Observation`` pair over
pydantic models; an observation carries ``done`` and ``reward`` (what the environment's own ``Rubric`` computed).
Two ways to reach one (exactly one of the options):

- ``env: module:Name``: in this process. ``Name`` is an ``openenv.core.env_server.Environment`` subclass or a
  factory returning one, called with ``env_options``; every episode builds its own instance, as OpenEnv's server
  does per session. ``reset`` and ``step`` run on a worker thread with a deadline (``step_timeout_s``).
- ``base_url: http://host:port``: an OpenEnv server (``create_app`` under uvicorn, a Docker image, a Space); every
  episode opens its own session through the package's ``GenericEnvClient`` (a WebSocket), closed with the episode.

What maps: the task's prompt (if any) then the reset observation's text open the conversation (one user message);
the model's turn becomes the action: with ``action_format: text`` (the default) its text is the action's text field
(``action_field``; by default the one field the action declares besides ``metadata``), with ``action_format: json``
it is the action itself, a JSON object (bare or in a fenced block) for an action of several fields; each
observation's text (``observation_field``; by default its one field besides ``done``, ``reward`` and ``metadata``,
else those fields as JSON) is the next ``observation_role`` message (attended to, never trained on); each step's ``reward`` is the reward part ``openenv`` (summed over the episode, logged as
``reward/env/openenv``, added to the task verifier's score); ``done`` ends the episode with the last turn as the
answer. ``reset`` receives the option ``reset`` merged with the task's ``meta["reset"]`` (a seed, a split and index).

Bad output is a verdict: an action the environment's Action model refuses (text for a number, JSON that is not an
object of its fields), in this process or on the server (its ``VALIDATION_ERROR``), ends the episode as a malformed
call; an environment that raises, answers a non-finite reward or outlives ``step_timeout_s`` ends its episode
(``env_errors``). An in-process environment shares the trainer's process: one that may crash it belongs behind a
server (``base_url``).
"""

from __future__ import annotations

import json
import math
import threading
import typing
from typing import Any, Callable

from rlvr.envs.base import Environment, Limits, Message, Step
from rlvr.envs.registry import register_env
from rlvr.plugins import PluginError, import_user_module
from rlvr.tasks.base import Prompt, Task

DEFAULT_MAX_TURNS = 10
ACTION_FORMATS = ("text", "json")
RESERVED_OBSERVATION = ("done", "reward", "metadata")
PART = "openenv"


def _import_openenv():
    try:
        from openenv.core import env_server
    except ImportError as exc:
        raise ImportError(f"environment openenv needs the openenv package ({exc}): pip install 'rlvr[openenv]'") \
            from None
    return env_server


def _resolve(spec: str, what: str) -> Any:
    module, _, attr = spec.partition(":")
    if not module or not attr:
        raise ValueError(f"environment openenv: option {what} must be 'module:Name', got {spec!r}")
    try:
        return getattr(import_user_module(module), attr)
    except (PluginError, AttributeError) as exc:
        raise ValueError(f"environment openenv: option {what}: cannot import {attr} from {module} ({exc})") from None


def _action_class(env_cls: type, env_server) -> type | None:
    """The Action model an Environment subclass declares: ``class E(Environment[MyAction, MyObs, MyState])``."""
    for klass in getattr(env_cls, "__mro__", ()):
        for base in getattr(klass, "__orig_bases__", ()):
            if typing.get_origin(base) is env_server.Environment:
                args = typing.get_args(base)
                if args and isinstance(args[0], type) and issubclass(args[0], env_server.Action):
                    return args[0]
    return None


def _only_field(names: list[str], what: str, option: str) -> str:
    if len(names) != 1:
        raise ValueError(f"environment openenv: the {what} has fields {sorted(names)}; name the one that carries the "
                         f"model's text with the option {option}")
    return names[0]


def _observation_text(data: dict[str, Any], field: str | None) -> str:
    if field is not None:
        value = data.get(field, "")
    else:
        rest = {k: v for k, v in data.items() if k not in RESERVED_OBSERVATION}
        value = next(iter(rest.values())) if len(rest) == 1 else rest
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)


def _reward(value: Any) -> float:
    if value is None:
        return 0.0
    try:
        reward = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"environment openenv: the observation's reward {value!r} is not a number") from None
    if not math.isfinite(reward):
        raise ValueError(f"environment openenv: the observation's reward is {reward}")
    return reward


class _Malformed(Exception):
    """The model's action does not fit the environment's Action model."""


def _json_action(text: str) -> dict[str, Any]:
    body = text.strip()
    if body.startswith("```"):
        body = body.split("\n", 1)[1] if "\n" in body else ""
        body = body.rsplit("```", 1)[0]
    try:
        action = json.loads(body)
    except ValueError:
        raise _Malformed("the action is not JSON") from None
    if not isinstance(action, dict):
        raise _Malformed("the action is not a JSON object")
    return action


def _call(fn: Callable[[], Any], timeout_s: float, what: str) -> Any:
    """``fn()`` on a daemon thread, waited for at most ``timeout_s`` (an environment that hangs ends its episode; its
    thread is left behind, blocked on nothing of ours)."""
    box: dict[str, Any] = {}

    def run():
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            box["error"] = exc

    worker = threading.Thread(target=run, name="rlvr-openenv", daemon=True)
    worker.start()
    worker.join(timeout_s)
    if worker.is_alive():
        raise TimeoutError(f"environment openenv: {what} took longer than {timeout_s:g} s (env option step_timeout_s)")
    if "error" in box:
        raise box["error"]
    return box["value"]


class _Local:
    """An in-process OpenEnv environment: typed actions, observations as dicts."""

    def __init__(self, factory: Callable[..., Any], action_cls: type, options: dict[str, Any], timeout_s: float):
        self.env = factory(**options)
        self.action_cls = action_cls
        self.timeout_s = timeout_s

    def reset(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        return _call(lambda: self.env.reset(**kwargs), self.timeout_s, "reset").model_dump()

    def step(self, action: dict[str, Any]) -> dict[str, Any]:
        from pydantic import ValidationError

        try:
            typed = self.action_cls.model_validate(action)
        except ValidationError as exc:
            raise _Malformed(str(exc)) from None
        return _call(lambda: self.env.step(typed), self.timeout_s, "step").model_dump()

    def close(self) -> None:
        close = getattr(self.env, "close", None)
        if callable(close):
            close()


class _Remote:
    """A session on an OpenEnv server through the package's GenericEnvClient (observations as dicts)."""

    def __init__(self, base_url: str, timeout_s: float, connect_timeout_s: float):
        from openenv.core.generic_client import GenericEnvClient

        self.client = GenericEnvClient(base_url=base_url, connect_timeout_s=connect_timeout_s,
                                       message_timeout_s=timeout_s).sync()

    @staticmethod
    def _as_dict(result) -> dict[str, Any]:
        return {**(result.observation or {}), "reward": result.reward, "done": bool(result.done)}

    def reset(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        return self._as_dict(self.client.reset(**kwargs))

    def step(self, action: dict[str, Any]) -> dict[str, Any]:
        from openenv.core.env_server import WSErrorCode

        try:
            return self._as_dict(self.client.step(action))
        except RuntimeError as exc:  # the client's one exception for the server's error codes
            if f"(code: {WSErrorCode.VALIDATION_ERROR.value})" in str(exc):
                raise _Malformed(str(exc)) from None
            raise

    def close(self) -> None:
        self.client.close()


def _schema_action_field(base_url: str, timeout_s: float) -> str:
    import httpx

    try:
        schema = httpx.get(base_url.rstrip("/") + "/schema", timeout=timeout_s).raise_for_status().json()["action"]
    except Exception as exc:  # noqa: BLE001 - any failure here is one message naming the server
        raise ValueError(f"environment openenv: cannot read the action schema from {base_url}/schema "
                         f"({type(exc).__name__}: {exc}); is the server up? (or give the option action_field)") \
            from None
    return _only_field([k for k in schema.get("properties", {}) if k != "metadata"], "server's action",
                       "action_field")


class OpenEnvEnv(Environment):
    def __init__(self, env: str | Callable[..., Any] | None = None, *, base_url: str | None = None,
                 env_options: dict[str, Any] | None = None, action: str | type | None = None,
                 action_field: str | None = None, action_format: str = "text", observation_field: str | None = None,
                 observation_role: str = "user", reset: dict[str, Any] | None = None,
                 max_turns: int = DEFAULT_MAX_TURNS, max_turn_tokens: int = 0, step_timeout_s: float = 30.0,
                 connect_timeout_s: float = 10.0):
        env_server = _import_openenv()
        if (env is None) == (base_url is None):
            raise ValueError("environment openenv: give exactly one of the options env (module:Name, run in this "
                             "process) and base_url (an OpenEnv server)")
        if observation_role not in ("user", "tool"):
            raise ValueError(f"environment openenv: option observation_role must be 'user' or 'tool', "
                             f"got {observation_role!r}")
        if action_format not in ACTION_FORMATS:
            raise ValueError(f"environment openenv: option action_format must be one of {', '.join(ACTION_FORMATS)}, "
                             f"got {action_format!r}")
        self.action_format = action_format
        self.limits = Limits(max_turns, max_turn_tokens)
        self.observation_field = observation_field
        self.observation_role = observation_role
        self.reset_options = dict(reset or {})
        if env is not None:
            factory = _resolve(env, "env") if isinstance(env, str) else env
            action_cls = _resolve(action, "action") if isinstance(action, str) else action
            action_cls = action_cls or _action_class(factory, env_server)
            if action_cls is None:
                raise ValueError(f"environment openenv: {env!r} does not declare its Action class "
                                 "(Environment[MyAction, ...]); give the option action: module:MyAction")
            if action_format == "text" and action_field is None:
                action_field = _only_field([k for k in action_cls.model_fields if k != "metadata"],
                                           f"action {action_cls.__name__}", "action_field")
            self.session = _Local(factory, action_cls, dict(env_options or {}), step_timeout_s)
        else:
            if env_options:
                raise ValueError("environment openenv: env_options build an in-process env; a server (base_url) "
                                 "is configured where it runs")
            if action_format == "text" and action_field is None:
                action_field = _schema_action_field(base_url, connect_timeout_s)
            self.session = _Remote(base_url, step_timeout_s, connect_timeout_s)
        self.action_field = action_field

    def reset(self, task: Task) -> Prompt:
        kwargs = {**self.reset_options, **dict(task.meta.get("reset") or {})}
        observation = self.session.reset(kwargs)
        if observation.get("done"):
            raise RuntimeError(f"environment openenv: the environment ended the episode of task {task.id} at reset")
        text = _observation_text(observation, self.observation_field)
        messages = [{"role": "user", "content": task.prompt}] if isinstance(task.prompt, str) \
            else [dict(m) for m in task.prompt]
        messages = [m for m in messages if m.get("content") not in (None, "")]
        if text and messages and messages[-1].get("role") == "user":
            messages[-1] = {**messages[-1], "content": f"{messages[-1]['content']}\n\n{text}"}
        elif text or not messages:
            messages.append({"role": "user", "content": text})
        return messages

    def step(self, assistant: str) -> Step:
        try:
            action = _json_action(assistant) if self.action_format == "json" else {self.action_field: assistant}
            observation = self.session.step(action)
        except _Malformed:
            return Step(rewards={PART: 0.0}, done=True, answer=assistant, info={"malformed_calls": 1})
        rewards = {PART: _reward(observation.get("reward"))}
        if observation.get("done"):
            return Step(rewards=rewards, done=True, answer=assistant)
        message: Message = {"role": self.observation_role,
                            "content": _observation_text(observation, self.observation_field)}
        return Step(observations=[message], rewards=rewards)

    def close(self) -> None:
        session, self.session = getattr(self, "session", None), None
        if session is not None:
            session.close()


register_env("openenv")(OpenEnvEnv)
