"""Tools an environment offers the model: a name, a JSON schema of its arguments (the OpenAI function format
that ``apply_chat_template(..., tools=...)`` renders) and a supervised way to run it.

    @function_tool                                   # schema from the signature and the docstring
    def lookup(city: str, year: int = 2024) -> str:
        '''Population of a city.'''
        ...

Every call is supervised; nothing a tool does reaches the episode as an exception or runs past its deadline:
- ``isolation="process"`` (the default for your own functions): the call runs in the reward runner's worker pool
  (rlvr.verifiers.runner) with a hard wall-clock deadline (``timeout_s``) and memory cap; the function must be a
  module-level function of an importable module, as for user rewards.
- ``isolation="inline"``: called in the caller's thread; only for functions that bound their own time and memory on
  any input (the calculator does).
The result is text capped at ``max_chars``; a failure is a ``ToolResult`` with ``error=True`` whose text says what
went wrong, shown to the model as the observation. A tool that raises ``SystemExit`` (``sys.exit``) fails like one
that raises anything else; one that ends its worker (``os._exit``) is an error verdict of the runner.

``run(call, timeout_s=...)`` may shorten a call's deadline below the tool's own (an environment's per-turn time
budget): process tools get the shorter deadline from the runner; an inline tool gets it only when its function
takes a ``timeout_s`` keyword (``takes_timeout=True``); other inline tools bound their own time.

Stateful tools (the python tool) set ``per_episode``: a function that builds the same tool with fresh state.
Environments call it when an episode starts, so one Tool object shared by many environments never carries one
episode's state into another.
"""

from __future__ import annotations

import importlib
import inspect
import json
import os
import sys
import threading
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable

from rlvr.envs.parsers import ToolCall
from rlvr.verifiers.base import Status, Verdict

_JSON_TYPES = {str: "string", int: "integer", float: "number", bool: "boolean", list: "array", dict: "object"}
_PY_TYPES = {"string": (str,), "integer": (int,), "number": (int, float), "boolean": (bool,), "array": (list,),
             "object": (dict,)}


@dataclass(frozen=True)
class ToolResult:
    text: str
    error: bool = False
    timeout: bool = False


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    parameters: dict[str, Any]  # JSON schema of the arguments object
    fn: Callable[..., Any]
    isolation: str = "process"
    timeout_s: float = 5.0
    max_chars: int = 2000
    options: dict[str, Any] = field(default_factory=dict)
    takes_timeout: bool = False  # an inline fn that accepts timeout_s= (the remaining budget of the turn)
    per_episode: Callable[[], Tool] | None = None  # the same tool with fresh state (stateful tools only)

    def __post_init__(self) -> None:
        if self.isolation not in ("process", "inline"):
            raise ValueError(f"tool {self.name!r}: isolation must be 'process' or 'inline', got {self.isolation!r}")
        if self.timeout_s <= 0:
            raise ValueError(f"tool {self.name!r}: timeout_s must be > 0, got {self.timeout_s}")

    def schema(self) -> dict[str, Any]:
        """The OpenAI function-tool form, as chat templates take it."""
        return {"type": "function",
                "function": {"name": self.name, "description": self.description, "parameters": self.parameters}}

    @property
    def text_parameter(self) -> str | None:
        """The one required string parameter a raw (non-JSON) call body fills, if the tool has exactly one."""
        required = self.parameters.get("required", [])
        props = self.parameters.get("properties", {})
        if len(required) == 1 and props.get(required[0], {}).get("type") == "string":
            return required[0]
        return None

    def fresh(self) -> Tool:
        """This tool with the state of a new episode (itself when it keeps none)."""
        return self.per_episode() if self.per_episode is not None else self

    def run(self, call: ToolCall, timeout_s: float | None = None) -> ToolResult:
        """Run one call within ``min(self.timeout_s, timeout_s)`` seconds; never raises on what the call holds."""
        timeout = self.timeout_s if timeout_s is None else max(0.01, min(self.timeout_s, float(timeout_s)))
        args = dict(call.arguments)
        if not args and call.raw is not None:
            if self.text_parameter is None:
                return ToolResult(f"error: {self.name} takes a JSON object of arguments", error=True)
            args = {self.text_parameter: call.raw}
        problem = check_arguments(self.parameters, args)
        if problem:
            return ToolResult(f"error: {self.name}: {problem}", error=True)
        if self.isolation == "inline":
            extra = {"timeout_s": timeout} if self.takes_timeout else {}
            try:
                return self._cap(str(self.fn(**args, **self.options, **extra)))
            except TimeoutError as exc:
                return ToolResult(clean_text(f"error: {exc}"), error=True, timeout=True)
            except (Exception, SystemExit) as exc:  # noqa: BLE001 - a tool's failure is the model's observation
                note_raised(self.name, "".join(traceback.format_exception(exc)))
                return ToolResult(clean_text(f"error: {type(exc).__name__}: {exc}"[: self.max_chars]), error=True)
        return self._run_supervised(args, timeout)

    def _run_supervised(self, args: dict[str, Any], timeout: float) -> ToolResult:
        from rlvr.verifiers.runner import CallableRequest, score_batch

        module = sys.modules.get(self.fn.__module__)
        folder = os.path.dirname(os.path.abspath(module.__file__)) if getattr(module, "__file__", None) else None
        target = {"module": self.fn.__module__, "qualname": self.fn.__qualname__, "options": self.options,
                  "folder": folder}  # where the caller found the module: a worker looks there too
        verdict = score_batch([CallableRequest(call_tool, json.dumps(args), target, {"timeout_s": timeout},
                                               cache=False)])[0]
        if verdict.status is Status.TIMEOUT:
            return ToolResult(f"error: {self.name} timed out after {timeout:.3g} s", error=True, timeout=True)
        if verdict.reason == "tool_ok":
            return self._cap(verdict.extracted or "")
        if verdict.reason == "tool_raised":
            note_raised(self.name, str(verdict.details.get("traceback") or verdict.extracted))
            return ToolResult(clean_text(f"error: {verdict.extracted}"[: self.max_chars]), error=True)
        return ToolResult(f"error: {self.name} failed ({verdict.reason})", error=True)

    def _cap(self, text: str) -> ToolResult:
        if len(text) > self.max_chars:
            text = text[: self.max_chars] + f"... [{len(text) - self.max_chars} more characters]"
        return ToolResult(clean_text(text))


def clean_text(text: str) -> str:
    """``text`` as valid UTF-8: lone surrogates (which a JSON escape can put in a string) become U+FFFD, so an
    observation can always be tokenized."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")


def call_tool(response: str, reference: dict[str, Any], **_: Any) -> Verdict:
    """Runs in a supervised worker: import the tool's function, call it with the JSON arguments, and return its
    text (or the exception it raised) in a Verdict, the runner's result type."""
    folder = reference.get("folder")
    if folder and folder not in sys.path:
        sys.path.append(folder)
    try:
        fn: Any = importlib.import_module(reference["module"])
    except ImportError as exc:
        return Verdict(0.0, Status.ERROR, "tool_raised", extracted=f"cannot import {reference['module']!r}: {exc}")
    for part in reference["qualname"].split("."):
        fn = getattr(fn, part)
    try:
        result = str(fn(**json.loads(response), **reference.get("options", {})))
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - sys.exit in a tool fails the call, not the worker
        return Verdict(0.0, Status.ERROR, "tool_raised", extracted=f"{type(exc).__name__}: {exc}"[:10_000],
                       details={"traceback": "".join(traceback.format_exception(exc))[-10_000:]})
    return Verdict(1.0, Status.CORRECT, "tool_ok", extracted=result)


# Tools that raised, for the trainer to report (rlvr.train.reward_errors): the model sees one error line as its
# observation; the user should see the traceback. Kept per process, taken by whoever reports them.
_RAISED: list[tuple[str, str]] = []
_RAISED_LOCK = threading.Lock()


def note_raised(tool: str, trace: str) -> None:
    with _RAISED_LOCK:
        if len(_RAISED) < 10_000:
            _RAISED.append((tool, trace))


def take_raised() -> list[tuple[str, str]]:
    """(tool name, traceback) of every call that raised since the last take, and forget them."""
    with _RAISED_LOCK:
        taken = list(_RAISED)
        _RAISED.clear()
    return taken


def check_arguments(schema: dict[str, Any], args: dict[str, Any]) -> str | None:
    """What is wrong with ``args`` for a JSON schema of type object (required, unknown and top-level types), or None."""
    props = schema.get("properties", {})
    missing = [name for name in schema.get("required", []) if name not in args]
    if missing:
        return f"missing argument(s) {', '.join(missing)}"
    if schema.get("additionalProperties", True) is False or props:
        unknown = [name for name in args if name not in props]
        if unknown:
            return f"unknown argument(s) {', '.join(unknown)}; expected {', '.join(props) or 'none'}"
    for name, value in args.items():
        kind = props.get(name, {}).get("type")
        if kind in _PY_TYPES and (not isinstance(value, _PY_TYPES[kind]) or (kind != "boolean" and isinstance(value, bool))):
            return f"argument {name} must be a {kind}, got {type(value).__name__}"
    return None


def function_tool(fn: Callable[..., Any] | None = None, *, name: str | None = None, isolation: str = "process",
                  timeout_s: float = 5.0, max_chars: int = 2000) -> Any:
    """Make a Tool of a Python function: the schema comes from its signature (str, int, float, bool, list, dict
    annotations) and the first paragraph of its docstring. Usable bare (``@function_tool``) or with options."""

    def build(f: Callable[..., Any]) -> Tool:
        props, required = {}, []
        for pname, param in inspect.signature(f).parameters.items():
            if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
                continue
            annotation = param.annotation if not isinstance(param.annotation, str) else _from_name(param.annotation)
            props[pname] = {"type": _JSON_TYPES.get(annotation, "string")}
            if param.default is param.empty:
                required.append(pname)
        doc = inspect.getdoc(f) or ""
        return Tool(name or f.__name__, doc.split("\n\n")[0].replace("\n", " "),
                    {"type": "object", "properties": props, "required": required}, f, isolation, timeout_s, max_chars)

    return build(fn) if fn is not None else build


def _from_name(annotation: str) -> type | None:
    return {t.__name__: t for t in _JSON_TYPES}.get(annotation)
