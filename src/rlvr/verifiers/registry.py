"""The verifier registry: a name -> ``fn(response: str, reference, **options) -> Verdict | float``.

Register a verifier with the decorator; stack it to give one function several names (aliases)::

    @register_verifier("code")
    @register_verifier("code.python")
    def python_tests(response, reference, **options): ...
"""

from __future__ import annotations

import difflib
import importlib
import threading
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from rlvr.errors import UserError

VerifierFn = Callable[..., Any]  # returns a Verdict, or a float that the runner turns into one
F = TypeVar("F", bound=VerifierFn)

_VERIFIERS: dict[str, VerifierFn] = {}
_ISOLATION: dict[str, str] = {}
_LOCK = threading.Lock()
ISOLATION_LEVELS = ("inline", "threads", "process")


class UnknownVerifierError(KeyError, UserError):
    """No verifier has this name; the message lists the names that exist."""

    def __init__(self, name: str, known: Iterable[str] = ()):
        self.name = name
        self.known = sorted(known)
        message = f"unknown verifier {name!r}"
        close = difflib.get_close_matches(str(name), self.known, n=1)
        if close:
            message += f" (did you mean {close[0]!r}?)"
        message += "; known verifiers: " + (", ".join(self.known) or "none")
        message += " (a verifier of your own: import its module with --plugin FILE_OR_MODULE or `plugins:` in the config)"
        super().__init__(message)

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0])

    def __reduce__(self):
        return (type(self), (self.name, self.known))


def register_verifier(name: str, *, replace: bool = False, isolation: str = "inline") -> Callable[[F], F]:
    """Decorator registering ``fn`` under ``name``; returns ``fn`` unchanged.

    ``isolation`` says how the runner calls it: "inline" (in the caller's process: only for verifiers whose
    own code bounds their time and memory on any input), "threads" (in the caller's process on a thread pool:
    verifiers that bound their own time and spend it waiting on sandboxed subprocesses) or "process" (in a
    supervised worker process with a hard timeout and memory cap: anything that parses, evaluates or
    executes untrusted text in-process).
    Registering a different function under a taken name raises ValueError unless ``replace=True``.
    Re-registering the same function (or a module reload of it) is a no-op.
    """
    if isolation not in ISOLATION_LEVELS:
        raise UserError(f"isolation must be one of {', '.join(ISOLATION_LEVELS)}, got {isolation!r}")
    if not isinstance(name, str) or not name or name != name.strip() or any(c.isspace() for c in name):
        raise UserError(f"verifier name must be a non-empty string without whitespace, got {name!r}")

    def decorator(fn: F) -> F:
        if not callable(fn):
            raise TypeError(f"verifier {name!r} must be callable, got {type(fn).__name__}")
        with _LOCK:
            old = _VERIFIERS.get(name)
            if old is not None and not replace and _qualname(old) != _qualname(fn):
                raise UserError(
                    f"verifier {name!r} is already registered ({_qualname(old)}); pass replace=True to override it"
                )
            _VERIFIERS[name] = fn
            _ISOLATION[name] = isolation
        return fn

    return decorator


# Built-in verifiers whose code lives on a higher floor (they run a model, so they need torch, which this package
# never imports): the module that registers each is imported the first time its name is asked for.
PROVIDED_ELSEWHERE: dict[str, str] = {"reward_model": "rlvr.rewards.reward_model"}


def get_verifier(name: str) -> VerifierFn:
    """The function registered under ``name``; raises UnknownVerifierError listing the known names."""
    try:
        return _VERIFIERS[name]
    except (KeyError, TypeError):  # TypeError: an unhashable "name"
        if isinstance(name, str) and name in PROVIDED_ELSEWHERE:
            importlib.import_module(PROVIDED_ELSEWHERE[name])
            return _VERIFIERS[name]
        raise UnknownVerifierError(name, [*_VERIFIERS, *PROVIDED_ELSEWHERE]) from None


def verifier_isolation(name: str) -> str:
    """How the verifier registered under ``name`` must be called: "inline", "threads" or "process"."""
    get_verifier(name)
    return _ISOLATION[name]


def verifier_names() -> list[str]:
    """All registered names (aliases included), sorted."""
    return sorted({*_VERIFIERS, *PROVIDED_ELSEWHERE})


def _qualname(fn: Any) -> str:
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"
