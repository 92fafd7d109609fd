"""Tool calls as the model writes them, one parser per format. A parser never raises on model output: what it
cannot read becomes a ``CallError`` whose message the environment shows the model as an observation.

    "hermes"   Hermes / Qwen:  <tool_call>{"name": "calculator", "arguments": {"expression": "2+3"}}</tool_call>
    "json"     Llama-3 style:  the whole message is {"name": ..., "parameters": {...}} (or "arguments")
    "fenced"   a fenced block named after the tool, small enough for tiny models to learn:
                   ```calculator
                   2+3
                   ```
               The body is a JSON object of arguments, or, for a tool with one required string parameter, that
               parameter's raw text.

Model text is hostile input: a call body longer than ``MAX_CALL_CHARS``, nested deeper than ``MAX_DEPTH``, holding
an integer of more than ``MAX_INT_DIGITS`` digits (Python refuses to convert those: a ValueError) or a NaN/Infinity
constant is a ``CallError``, decided before or while decoding, never by an exception out of the parser. Calls
after the first ``MAX_CALLS_READ`` of a message are counted (``Parsed.unread``) without being decoded, so a message
of many thousands of calls costs a regex scan, not thousands of JSON decodes.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Callable

from rlvr.algos.registry import Registry


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    raw: str | None = None  # the body as written, for tools that take one text argument


@dataclass(frozen=True)
class CallError:
    """A call the parser could not read: ``message`` says what was wrong (shown to the model)."""

    message: str


@dataclass(frozen=True)
class Parsed:
    calls: list[ToolCall]
    errors: list[CallError]
    content: str  # the message with the calls removed (the final answer when there are none)
    unread: int = 0  # calls after the first MAX_CALLS_READ, counted but not decoded

    @property
    def attempted(self) -> bool:
        return bool(self.calls or self.errors or self.unread)


_PARSERS = Registry("tool-call format")
format_names = _PARSERS.names
Parser = Callable[[str], Parsed]


def register_format(name: str) -> Callable[[Parser], Parser]:
    """Register ``parser(text) -> Parsed`` for ``tool_format=name``."""
    return _PARSERS.register(name)


def parse_calls(fmt: str, text: str) -> Parsed:
    return _PARSERS.get(fmt)(text)


MAX_CALL_CHARS = 100_000
MAX_DEPTH = 32
MAX_INT_DIGITS = 200
MAX_CALLS_READ = 64


class _Refused(ValueError):
    """A JSON value the parser refuses to build (see the module docstring)."""


def _parse_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise _Refused(f"a number in the tool call has more than {MAX_INT_DIGITS} digits")
    return int(text)


def _parse_constant(name: str) -> Any:
    raise _Refused(f"{name} is not a JSON number")


_BRACKETS = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]')


def nesting_depth(body: str) -> int:
    """The deepest nesting of JSON arrays and objects in ``body`` (brackets inside strings do not count)."""
    depth = deepest = 0
    for match in _BRACKETS.finditer(body):
        token = match.group(0)
        if token in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif token in "]}":
            depth -= 1
    return deepest


def load_json(body: str) -> Any:
    """``json.loads`` for model text within the module's bounds; raises ``json.JSONDecodeError`` or ``ValueError``
    with a message for the model."""
    if len(body) > MAX_CALL_CHARS:
        raise _Refused(f"the tool call is longer than {MAX_CALL_CHARS} characters")
    if nesting_depth(body) > MAX_DEPTH:
        raise _Refused(f"the tool call nests arrays or objects deeper than {MAX_DEPTH} levels")
    try:
        return json.loads(body, parse_int=_parse_int, parse_constant=_parse_constant)
    except RecursionError:  # unreachable after the depth check; kept so no input can raise out of a parser
        raise _Refused(f"the tool call nests arrays or objects deeper than {MAX_DEPTH} levels") from None


def call_from_json(body: str) -> ToolCall | CallError:
    """``{"name": ..., "arguments"|"parameters": {...}}`` -> a ToolCall, or what is wrong with it."""
    try:
        obj = load_json(body)
    except json.JSONDecodeError as exc:
        return CallError(f"the tool call is not valid JSON ({exc.msg} at character {exc.pos})")
    except ValueError as exc:
        return CallError(str(exc))
    if not isinstance(obj, dict):
        return CallError(f"the tool call must be a JSON object, got {type(obj).__name__}")
    name = obj.get("name")
    if not isinstance(name, str) or not name:
        return CallError('the tool call has no "name" string')
    args = obj.get("arguments", obj.get("parameters", {}))
    if len(name) > 200:
        return CallError("the tool call's name is longer than 200 characters")
    if isinstance(args, str):  # some models double-encode the arguments
        try:
            args = load_json(args)
        except json.JSONDecodeError:
            return CallError(f'the "arguments" of {name!r} are a string that is not a JSON object')
        except ValueError as exc:
            return CallError(str(exc))
    if not isinstance(args, dict):
        return CallError(f'the "arguments" of {name!r} must be a JSON object, got {type(args).__name__}')
    return ToolCall(name, args)


def _split(found: list[ToolCall | CallError]) -> tuple[list[ToolCall], list[CallError]]:
    return [c for c in found if isinstance(c, ToolCall)], [c for c in found if isinstance(c, CallError)]


_HERMES = re.compile(r"<tool_call>(.*?)(</tool_call>|$)", re.DOTALL)


@register_format("hermes")
def parse_hermes(text: str) -> Parsed:
    found: list[ToolCall | CallError] = []
    unread = 0
    for match in _HERMES.finditer(text):
        if len(found) >= MAX_CALLS_READ:
            unread += 1
        elif not match.group(2):
            found.append(CallError("the tool call is not closed with </tool_call>"))
        else:
            found.append(call_from_json(match.group(1).strip()))
    calls, errors = _split(found)
    return Parsed(calls, errors, _HERMES.sub("", text).strip(), unread)


@register_format("json")
def parse_json(text: str) -> Parsed:
    body = text.strip()
    if body.startswith("<|python_tag|>"):
        body = body[len("<|python_tag|>"):].strip()
    if not body.startswith("{"):
        return Parsed([], [], text.strip())
    found = call_from_json(body)
    calls, errors = _split([found])
    return Parsed(calls, errors, "" if calls or errors else text.strip())


_FENCE = re.compile(r"```([A-Za-z_][\w.-]*)[ \t]*\n(.*?)(\n```|$)", re.DOTALL)


@register_format("fenced")
def parse_fenced(text: str) -> Parsed:
    found: list[ToolCall | CallError] = []
    unread = 0
    for match in _FENCE.finditer(text):
        name, body, closed = match.group(1), match.group(2), match.group(3)
        if len(found) >= MAX_CALLS_READ:
            unread += 1
            continue
        if not closed:
            found.append(CallError(f"the {name} block is not closed with ```"))
            continue
        stripped = body.strip()
        if len(stripped) > MAX_CALL_CHARS:
            found.append(CallError(f"the {name} block is longer than {MAX_CALL_CHARS} characters"))
        elif stripped.startswith("{"):
            parsed = call_from_json(json.dumps({"name": name, "arguments": _json_or_raw(stripped)}))
            found.append(parsed if not isinstance(parsed, ToolCall) else ToolCall(name, parsed.arguments, stripped))
        else:
            found.append(ToolCall(name, {}, stripped))
    calls, errors = _split(found)
    return Parsed(calls, errors, _FENCE.sub("", text).strip(), unread)


def _json_or_raw(body: str) -> Any:
    try:
        return load_json(body)
    except ValueError:  # JSONDecodeError included
        return body  # call_from_json reports a string that is not an object
