"""A name -> function table, so new estimators and losses plug in without editing the trainer."""

from __future__ import annotations

from typing import Any, Callable


class UnknownNameError(ValueError):
    """A registry lookup for a name nobody registered; the message lists the known names."""


class Registry:
    def __init__(self, kind: str):
        self.kind = kind
        self._entries: dict[str, Callable[..., Any]] = {}
        self._info: dict[str, dict[str, Any]] = {}

    def register(self, name: str, **info: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        def decorator(fn: Callable[..., Any]) -> Callable[..., Any]:
            self._entries[name] = fn
            self._info[name] = info
            return fn

        return decorator

    def unregister(self, name: str) -> None:
        """Remove ``name`` (no error if it is absent)."""
        self._entries.pop(name, None)
        self._info.pop(name, None)

    def get(self, name: str) -> Callable[..., Any]:
        try:
            return self._entries[name]
        except KeyError:
            known = ", ".join(self.names())
            raise UnknownNameError(f"unknown {self.kind} {name!r}; known: {known}") from None

    def info(self, name: str) -> dict[str, Any]:
        self.get(name)
        return self._info[name]

    def names(self) -> list[str]:
        return sorted(self._entries)
