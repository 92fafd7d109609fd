"""Environments by name: a task names its environment (``env`` field, or ``data.env`` for rows that name none)
and its options (``env_options``), like verifiers' ``load_environment``.

    from rlvr.envs import register_env

    @register_env("my_env")
    def build(**options) -> Environment:
        return MyEnv(**options)
"""

from __future__ import annotations

import inspect
from typing import Any, Callable

from rlvr.algos.registry import Registry
from rlvr.envs.base import Environment

_REGISTRY = Registry("environment")
env_names = _REGISTRY.names
EnvFactory = Callable[..., Environment]
SINGLE_TURN = "single_turn"


def register_env(name: str) -> Callable[[EnvFactory], EnvFactory]:
    """Register ``factory(**options) -> Environment`` under ``name``."""
    return _REGISTRY.register(name)


def unregister_env(name: str) -> None:
    _REGISTRY.unregister(name)


def make_env(name: str | None, **options: Any) -> Environment:
    """A fresh environment (one per episode); an unknown name raises an error listing the known ones, and an
    option the factory does not take raises one naming it."""
    factory = _REGISTRY.get(name or SINGLE_TURN)
    try:
        inspect.signature(factory).bind(**options)
    except TypeError as exc:
        raise ValueError(f"environment {name!r}: bad env_options {sorted(options)}: {exc}") from None
    except ValueError:  # a factory without a signature (some builtins): let the call itself complain
        pass
    env = factory(**options)
    for method in ("reset", "step"):
        if not callable(getattr(env, method, None)):
            raise TypeError(f"environment {name!r} has no {method}() method (see rlvr.envs.Environment)")
    return env
