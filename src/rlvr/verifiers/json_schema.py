"""JSON Schema validation under a deadline, for the "json" verifier.

The ``jsonschema`` library does the validating; this module bounds what it costs on a hostile instance:

* every keyword call first checks the deadline, so no schema/instance pair runs past it by more than one keyword;
* ``pattern``, ``patternProperties`` and ``additionalProperties`` match with the ``regex`` package, whose matcher
  takes a timeout (the time left), instead of the standard ``re``, which can backtrack for minutes and cannot be
  stopped (``^(a|a)*$`` against a long run of "a" and a "!");
* ``uniqueItems`` hashes a canonical form of each item: linear time, where jsonschema falls back to comparing
  every pair (quadratic) as soon as the items are not sortable;
* ``format`` is checked, not only annotated: with jsonschema's checkers that need no extra package, plus this
  module's own for "date-time", "time", "uri", "uri-reference", "hostname" and "json-pointer". A schema naming any
  other format is refused (:class:`Unsupported`) unless formats are switched off, so an unchecked format can never
  pass silently.
* ``multipleOf``, ``minimum``, ``maximum``, ``exclusiveMinimum`` and ``exclusiveMaximum`` are decided exactly, in
  decimal, on the text each number was written with (:class:`JSONNumber`; a float of the schema by its shortest
  repr), where jsonschema divides binary doubles and rejects 0.3 as a multiple of 0.1;
* ``unevaluatedProperties`` in a schema that also has ``patternProperties`` is refused: jsonschema matches those
  patterns with ``re`` inside that keyword, where no deadline can reach.
"""

from __future__ import annotations

import contextvars
import datetime
import decimal
import functools
import re
import threading
import time
from typing import Any

import jsonschema
from jsonschema.exceptions import ValidationError

try:  # a dependency of transformers; without it, schemas with patterns are refused rather than run unbounded
    import regex as _regex
except ImportError:  # pragma: no cover - depends on the environment
    _regex = None


class DeadlineExceeded(Exception):
    """The validation ran out of its time budget."""


class Unsupported(ValueError):
    """The schema asks for a check this module cannot do within its guarantees. ``reason`` is
    "unsupported_format" (a format with no checker) or "unsupported_schema" (a keyword combination)."""

    def __init__(self, message: str, reason: str = "unsupported_schema"):
        super().__init__(message)
        self.reason = reason


class Deadline:
    """A point in time (time.monotonic) past which work stops."""

    def __init__(self, seconds: float):
        self.at = time.monotonic() + seconds

    def remaining(self) -> float:
        return self.at - time.monotonic()

    def check(self) -> None:
        if time.monotonic() > self.at:
            raise DeadlineExceeded


_DEADLINE: contextvars.ContextVar[Deadline] = contextvars.ContextVar("json_schema_deadline")


# ------------------------------------------------------------------------------------------------ patterns


@functools.lru_cache(maxsize=256)
def _compiled(pattern: str) -> Any:
    return _regex.compile(pattern)


# A match gets this much CPU time in the caller's thread; most take microseconds.
FAST_PATH_S = 0.02


def search(pattern: str, text: str) -> bool:
    """re.search semantics, stopped at the current deadline (raises DeadlineExceeded).

    The ``regex`` matcher's timeout counts the process's CPU time, not wall-clock time, so on a loaded machine it
    fires late. A match that outlives FAST_PATH_S therefore continues on a helper thread (the matcher releases the
    GIL) while the caller waits for it on the wall clock; one still running at the deadline is left behind, and
    stops by itself once it has used the CPU time that was left."""
    deadline = _DEADLINE.get()
    deadline.check()
    compiled = _compiled(pattern)
    try:
        fast = min(FAST_PATH_S, max(deadline.remaining(), 0.001))
        return compiled.search(text, timeout=fast, concurrent=True) is not None
    except TimeoutError:
        pass
    budget = deadline.remaining()
    if budget <= 0:
        raise DeadlineExceeded
    outcome: dict[str, bool] = {}
    done = threading.Event()

    def run() -> None:
        try:
            outcome["found"] = compiled.search(text, timeout=budget, concurrent=True) is not None
        except BaseException:  # TimeoutError, or MemoryError on a huge text: no answer
            pass
        finally:
            done.set()

    threading.Thread(target=run, name="rlvr-json-pattern", daemon=True).start()
    if not done.wait(max(deadline.remaining(), 0.0)) or "found" not in outcome:
        raise DeadlineExceeded
    return outcome["found"]


def _pattern(validator: Any, pattern: str, instance: Any, schema: Any) -> Any:
    if validator.is_type(instance, "string") and not search(pattern, instance):
        yield ValidationError(f"{_short(instance)} does not match {pattern!r}")


def _pattern_properties(validator: Any, patterns: dict, instance: Any, schema: Any) -> Any:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        for key, value in instance.items():
            if search(pattern, key):
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _additional_properties(validator: Any, additional: Any, instance: Any, schema: Any) -> Any:
    if not validator.is_type(instance, "object"):
        return
    properties = schema.get("properties", {})
    patterns = list(schema.get("patternProperties", {}))
    extras = [k for k in instance if k not in properties and not any(search(p, k) for p in patterns)]
    if validator.is_type(additional, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], additional, path=extra)
    elif not additional and extras:
        names = ", ".join(repr(e) for e in sorted(extras)[:20])
        verb = "was" if len(extras) == 1 else "were"
        yield ValidationError(f"Additional properties are not allowed ({names} {verb} unexpected)")


# ------------------------------------------------------------------------------------------------ numbers


class JSONNumber(float):
    """A JSON number with a fraction or exponent: the double a parser reads, plus the ``literal`` it was written
    as, so that checks which need the exact value (``multipleOf``) do not inherit binary rounding."""

    __slots__ = ("literal",)

    def __new__(cls, literal: str, value: float | None = None) -> JSONNumber:
        obj = super().__new__(cls, float(literal) if value is None else value)
        obj.literal = literal
        return obj

    def __reduce__(self) -> Any:
        return (JSONNumber, (self.literal, float(self)))


def exact(value: Any) -> decimal.Decimal:
    """The exact decimal a JSON number stands for: its literal text when it has one, the shortest repr of a float
    (what a schema written as JSON or YAML said), an int as it is."""
    if isinstance(value, JSONNumber):
        return decimal.Decimal(value.literal)
    if isinstance(value, float):
        return decimal.Decimal(repr(value))
    return decimal.Decimal(value)


def is_multiple(value: Any, divisor: Any) -> bool:
    """``value`` is an integer multiple of ``divisor`` (> 0), decided exactly in decimal."""
    a, b = exact(value), exact(divisor)
    if not a:
        return True
    # enough digits that the integer quotient and the remainder are exact, never rounded
    digits = max(len(a.as_tuple().digits), len(b.as_tuple().digits)) + max(0, a.adjusted() - b.adjusted()) + 2
    context = decimal.Context(prec=digits, Emax=decimal.MAX_EMAX, Emin=decimal.MIN_EMIN, traps=[decimal.InvalidOperation])
    return context.remainder(a, b).is_zero()


def _number_text(value: Any) -> str:
    return _short(value.literal, 60) if isinstance(value, JSONNumber) else _short(value, 60)


def _multiple_of(validator: Any, divisor: Any, instance: Any, schema: Any) -> Any:
    if not validator.is_type(instance, "number"):
        return
    if not is_multiple(instance, divisor):
        yield ValidationError(f"{_number_text(instance)} is not a multiple of {divisor}")


def _bound(name: str, holds: Any, words: str) -> Any:
    def keyword(validator: Any, bound: Any, instance: Any, schema: Any) -> Any:
        if not validator.is_type(instance, "number") or isinstance(bound, bool):
            return
        if not holds(exact(instance), exact(bound)):
            yield ValidationError(f"{_number_text(instance)} is {words} {bound}")

    keyword.__name__ = name
    return keyword


_NUMERIC_BOUNDS = {
    "minimum": _bound("minimum", lambda x, b: x >= b, "less than the minimum of"),
    "maximum": _bound("maximum", lambda x, b: x <= b, "greater than the maximum of"),
    "exclusiveMinimum": _bound("exclusiveMinimum", lambda x, b: x > b, "less than or equal to the minimum of"),
    "exclusiveMaximum": _bound("exclusiveMaximum", lambda x, b: x < b, "greater than or equal to the maximum of"),
}


# ------------------------------------------------------------------------------------------------ uniqueness


def canonical(value: Any) -> Any:
    """A hashable form of a JSON value under JSON equality: 1 and 1.0 are the same, true and 1 are not, object
    key order does not matter, array order does."""
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, (int, float)):
        return ("number", value)  # hash(1) == hash(1.0) and 1 == 1.0
    if isinstance(value, str):
        return ("string", value)
    if value is None:
        return ("null",)
    if isinstance(value, dict):
        return ("object", frozenset((k, canonical(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return ("array", tuple(canonical(v) for v in value))
    return ("other", repr(value))


def _unique_items(validator: Any, unique: Any, instance: Any, schema: Any) -> Any:
    if not unique or not validator.is_type(instance, "array"):
        return
    deadline = _DEADLINE.get()
    seen: dict[Any, int] = {}
    for i, item in enumerate(instance):
        if not i % 1024:
            deadline.check()
        key = canonical(item)
        if key in seen:
            yield ValidationError(f"array has non-unique elements (item {i} repeats item {seen[key]})")
            return
        seen[key] = i


# ------------------------------------------------------------------------------------------------ formats

_DATE = r"(\d{4})-(\d{2})-(\d{2})"
_TIME = r"(\d{2}):(\d{2}):(\d{2})(?:\.\d+)?(?:[Zz]|[+-](\d{2}):(\d{2}))"
_DATE_TIME_RE = re.compile(_DATE + r"[Tt]" + _TIME + r"\Z")
_TIME_RE = re.compile(_TIME + r"\Z")
_URI_RE = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:[^\s\x00-\x1f\x7f<>\"{}|\\^`]*\Z")
_URI_REF_RE = re.compile(r"[^\s\x00-\x1f\x7f<>\"{}|\\^`]*\Z")
_BAD_PERCENT = re.compile(r"%(?![0-9A-Fa-f]{2})")
_HOST_LABEL = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\Z")
_POINTER_RE = re.compile(r"(?:/(?:[^~/]|~[01])*)*\Z")


def _valid_time(hour: str, minute: str, second: str, off_h: str | None, off_m: str | None) -> bool:
    ok = int(hour) < 24 and int(minute) < 60 and int(second) <= 60  # 60: a leap second
    return ok and (off_h is None or (int(off_h) < 24 and int(off_m or 0) < 60))


def _date_time(value: Any) -> bool:
    if not isinstance(value, str):
        return True
    m = _DATE_TIME_RE.match(value)
    if m is None:
        return False
    try:
        datetime.date(int(m[1]), int(m[2]), int(m[3]))
    except ValueError:
        return False
    return _valid_time(*m.groups()[3:])


def _time(value: Any) -> bool:
    if not isinstance(value, str):
        return True
    m = _TIME_RE.match(value)
    return m is not None and _valid_time(*m.groups())


def _uri(value: Any) -> bool:
    return not isinstance(value, str) or (_URI_RE.match(value) is not None and not _BAD_PERCENT.search(value))


def _uri_reference(value: Any) -> bool:
    return not isinstance(value, str) or (_URI_REF_RE.match(value) is not None and not _BAD_PERCENT.search(value))


def _hostname(value: Any) -> bool:
    if not isinstance(value, str):
        return True
    name = value[:-1] if value.endswith(".") else value
    return 0 < len(name) <= 253 and all(_HOST_LABEL.match(label) for label in name.split("."))


def _json_pointer(value: Any) -> bool:
    return not isinstance(value, str) or _POINTER_RE.match(value) is not None


MAX_REGEX_FORMAT_CHARS = 10_000


def _regex_format(value: Any) -> bool:
    """A pattern that compiles (with the standard ``re``, as jsonschema does); longer ones are not accepted."""
    if not isinstance(value, str):
        return True
    if len(value) > MAX_REGEX_FORMAT_CHARS:
        return False
    try:
        re.compile(value)
    except (re.error, RecursionError, OverflowError):
        return False
    return True


_OWN_FORMATS = {
    "date-time": _date_time,
    "time": _time,
    "uri": _uri,
    "uri-reference": _uri_reference,
    "hostname": _hostname,
    "json-pointer": _json_pointer,
    "regex": _regex_format,
}


def _format_checker(base: Any) -> jsonschema.FormatChecker:
    checker = jsonschema.FormatChecker(formats=())
    for name, func in getattr(base, "FORMAT_CHECKER", jsonschema.FormatChecker()).checkers.items():
        checker.checkers[name] = func
    for name, func in _OWN_FORMATS.items():
        checker.checks(name)(func)
    return checker


# ------------------------------------------------------------------------------------------------ schema walk

_DATA_KEYWORDS = frozenset({"const", "enum", "default", "examples"})


def _walk(schema: Any, found: dict[str, set], depth: int = 0) -> None:
    """Collect the format names and the pattern keywords a schema uses (data-holding keywords are skipped)."""
    if depth > 200:
        raise Unsupported("schema nested deeper than 200 levels")
    if isinstance(schema, dict):
        for key, value in schema.items():
            if key in _DATA_KEYWORDS:
                continue
            if key == "format" and isinstance(value, str):
                found["formats"].add(value)
            elif key in ("pattern", "patternProperties", "unevaluatedProperties"):
                found["keywords"].add(key)
            _walk(value, found, depth + 1)
    elif isinstance(schema, list):
        for item in schema:
            _walk(item, found, depth + 1)


def supported_formats(base: Any) -> set[str]:
    return set(_format_checker(base).checkers)


# ------------------------------------------------------------------------------------------------ validators


def _timed(fn: Any) -> Any:
    def keyword(validator: Any, value: Any, instance: Any, schema: Any) -> Any:
        _DEADLINE.get().check()
        return fn(validator, value, instance, schema)

    keyword.__name__ = getattr(fn, "__name__", "keyword")
    return keyword


_OVERRIDES = {
    "multipleOf": _multiple_of,
    "pattern": _pattern,
    "patternProperties": _pattern_properties,
    "additionalProperties": _additional_properties,
    "uniqueItems": _unique_items,
}


@functools.lru_cache(maxsize=16)
def _bounded(base: Any) -> tuple[Any, jsonschema.FormatChecker]:
    """``base`` (a jsonschema validator class) with every keyword deadline-checked and the overrides above."""
    overrides = dict(_OVERRIDES)
    if base.META_SCHEMA.get("properties", {}).get("exclusiveMinimum", {}).get("type") != "boolean":
        overrides.update(_NUMERIC_BOUNDS)  # drafts 3 and 4 spell the exclusive bounds as booleans: left to jsonschema
    keywords = {name: overrides.get(name, fn) for name, fn in base.VALIDATORS.items()}
    return jsonschema.validators.extend(base, {k: _timed(fn) for k, fn in keywords.items()}), _format_checker(base)


def validator_class(schema: Any) -> Any:
    """The jsonschema class the schema's "$schema" names (Draft 2020-12 by default); raises SchemaError."""
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    cls.check_schema(schema)
    return cls


def check_supported(schema: Any, cls: Any, check_formats: bool) -> None:
    """Raise Unsupported if validating ``schema`` would need a check this module cannot bound or perform."""
    found: dict[str, set] = {"formats": set(), "keywords": set()}
    _walk(schema, found)
    if {"pattern", "patternProperties"} & found["keywords"] and _regex is None:
        raise Unsupported("patterns need the 'regex' package (pip install regex)")
    if {"patternProperties", "unevaluatedProperties"} <= found["keywords"]:
        raise Unsupported("unevaluatedProperties together with patternProperties cannot be checked under a deadline")
    if check_formats:
        unknown = sorted(found["formats"] - supported_formats(cls))
        if unknown:
            known = ", ".join(sorted(supported_formats(cls)))
            raise Unsupported(
                f"format(s) {', '.join(map(repr, unknown))} cannot be checked here (supported: {known}); "
                "pass check_formats=False to treat formats as annotations",
                reason="unsupported_format",
            )


def iter_errors(value: Any, schema: Any, cls: Any, deadline: Deadline, check_formats: bool, limit: int) -> list:
    """Up to ``limit`` validation errors of ``value``; raises DeadlineExceeded when the deadline passes."""
    bounded, formats = _bounded(cls)
    validator = bounded(schema, format_checker=formats if check_formats else None)
    token = _DEADLINE.set(deadline)
    try:
        errors = []
        for err in validator.iter_errors(value):
            errors.append(err)
            if len(errors) >= limit:
                break
            deadline.check()
        return errors
    finally:
        _DEADLINE.reset(token)


def _short(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
