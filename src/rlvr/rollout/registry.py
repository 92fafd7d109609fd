"""Generation engines by name: ``rollout.engine`` picks one, ``rollout.engine_options`` configure it.

    from rlvr.rollout import register_engine

    @register_engine("my_engine")
    def build(model, tokenizer, **options) -> RolloutEngine:
        return MyEngine(model, tokenizer, **options)

Training, evaluation and the demo build their engine through ``build_engine``, so an engine registered this way
(from any module) is used by all three without editing them. The factory receives the trainer's model (the
weights the engine must sample from), its tokenizer and the options as keywords.
"""

from __future__ import annotations

from typing import Any, Callable

from rlvr.algos.registry import Registry
from rlvr.rollout.base import RolloutEngine

_REGISTRY = Registry("rollout engine")
engine_names = _REGISTRY.names
EngineFactory = Callable[..., RolloutEngine]


_REQUIRES: dict[str, tuple[tuple[str, ...], str]] = {}  # engine -> (modules it imports, how to install them)


def register_engine(name: str, *, requires: tuple[str, ...] = (), install: str = "") -> Callable[[EngineFactory], EngineFactory]:
    """Register ``factory(model, tokenizer, **options) -> RolloutEngine`` under ``name``; ``requires`` names the
    modules the engine imports and ``install`` says how to get them, so a missing one is one line before any work."""
    if requires:
        _REQUIRES[name] = (tuple(requires), install)
    return _REGISTRY.register(name)


def check_engine_available(name: str) -> None:
    """A MissingDependency naming what to install when the engine's modules are absent (nothing is imported)."""
    import importlib.util

    from rlvr.errors import MissingDependency

    modules, install = _REQUIRES.get(name, ((), ""))
    absent = [m for m in modules if importlib.util.find_spec(m) is None]
    if absent:
        raise MissingDependency(f"rollout.engine={name} needs {', '.join(absent)}, which is not installed in this "
                                f"environment{': ' + install if install else ''}")


def unregister_engine(name: str) -> None:
    """Remove a registered engine (e.g. one a test registered)."""
    _REGISTRY.unregister(name)


def build_engine(name: str, model, tokenizer, **options: Any) -> RolloutEngine:
    """The engine registered under ``name``; an unknown name raises an error listing the known ones."""
    engine = _REGISTRY.get(name)(model, tokenizer, **options)
    for method in ("generate", "sync_weights"):
        if not callable(getattr(engine, method, None)):
            raise TypeError(f"rollout engine {name!r} has no {method}() method (see rlvr.rollout.base.RolloutEngine)")
    return engine


def logprobs_serve_as_old_policy(engine: RolloutEngine) -> bool:
    """Whether the engine's sampling log-probs are the trainer's own (same weights, same forward), so that a single
    update per batch may use them as the old policy's. Engines declare it with a class attribute of that name;
    an engine that does not say so is assumed to differ from the trainer (as vLLM does)."""
    return bool(getattr(engine, "logprobs_serve_as_old_policy", False))
