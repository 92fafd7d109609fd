"""The "json" verifier: the response must contain valid JSON, optionally matching a JSON Schema or a value.

    verify("json", '{"a": 1}', None)                                           # correct, "valid_json"
    verify("json", 'Here:\\n```json\\n{"a": 1}\\n```', {"schema": {"type": "object", "required": ["a"]}})
    verify("json", '[1, 2]', {"equals": [1, 2]})                               # correct, "json_equal"

Where the JSON is taken from, in order: the whole stripped response; else, if the response has a ```json fence,
the LAST such block (an unclosed final fence runs to the end) or the outermost {...}/[...] span inside it; else the
outermost {...} or [...] span of the response (from the first opening bracket to the last matching closing one).

reference:
- None or {}: validity only ("valid_json").
- {"schema": {...}}: validated with the ``jsonschema`` library (the validator class the schema's "$schema" names,
  Draft 2020-12 by default; remote $refs are never fetched). "schema_valid" or "schema_violation", whose
  details["errors"] lists the first ``max_errors`` errors as {"path": "$.items[0].name", "message": ...}.
- {"equals": value}: the parsed JSON must equal ``value`` ("json_equal" or "not_equal"). Equality is JSON
  equality: objects ignore key order, arrays keep order, 1 == 1.0, but true != 1 and "1" != 1.
- Both keys: the schema is checked first, then equality.

Invalid JSON is a decided failure of the task, so it is status "incorrect", reason "invalid_json" (details carry the
parser message), not "undecidable". So is JSON that parsers read differently: an object with a duplicate key
(reason "duplicate_key": Python keeps the last value, other parsers the first or an error), a number that is not
finite as a double (NaN, Infinity, 1e999; reason "non_finite_number") and a non-zero number that a double rounds
to zero (1e-400; reason "number_underflow"). Numbers keep the text they were written with, so ``multipleOf`` and
the bounds of a schema are decided exactly in decimal (0.3 is a multiple of 0.1; see json_schema.py). Input longer than ``max_chars`` is
"undecidable" "response_too_long"; nesting deeper than ``max_depth`` (or anything that still hits Python's recursion
limit) is "undecidable" "too_deep". A broken schema or reference is status "error" ("bad_reference").

Schemas are checked by :mod:`rlvr.verifiers.json_schema` under the call's time budget (option ``timeout_s``,
default 5 s): ``pattern`` with a matcher that can be stopped, ``uniqueItems`` in linear time, and every keyword
after a deadline check. Past the budget the verdict is status "timeout", reason "timeout". ``format`` is asserted,
not only annotated; a schema naming a format that cannot be checked is status "error", reason
"unsupported_format" (``check_formats=False`` treats formats as annotations, the JSON Schema default), and a
schema combination that cannot be bounded is status "error", reason "unsupported_schema".
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

import jsonschema

from rlvr.verifiers import json_schema
from rlvr.verifiers.base import Status, Verdict
from rlvr.verifiers.registry import register_verifier

_FENCE = re.compile(
    r"^[ \t]*```[ \t]*json[ \t]*\r?\n(.*?)(?:^[ \t]*```[ \t]*$|\Z)", re.IGNORECASE | re.MULTILINE | re.DOTALL
)
_MAX_EXTRACTED = 2000
_PAIRS = {"{": "}", "[": "]"}


DEFAULT_TIMEOUT_S = 5.0


class _NotJSON(ValueError):
    reason = "invalid_json"


class _DuplicateKey(_NotJSON):
    reason = "duplicate_key"


class _NonFinite(_NotJSON):
    reason = "non_finite_number"


class _Underflow(_NotJSON):
    reason = "number_underflow"


def _reject_constant(name: str) -> Any:
    raise _NonFinite(f"{name} is not valid JSON")


_NONZERO_DIGIT = re.compile(r"[1-9]")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _NonFinite(f"number {text[:40]} is not finite as a double")
    if value == 0.0 and _NONZERO_DIGIT.search(text.partition("e")[0].partition("E")[0]):
        raise _Underflow(f"number {text[:40]} is not zero but rounds to zero as a double")
    return json_schema.JSONNumber(text, value)


def _unique_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _DuplicateKey(f"duplicate key {json.dumps(key)[:80]} in an object")
            seen.add(key)
    return obj


def _max_depth(text: str, limit: int) -> int:
    """Bracket nesting depth of ``text`` outside string literals, stopping once it exceeds ``limit``."""
    depth = best = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "{[":
            depth += 1
            if depth > best:
                best = depth
                if best > limit:
                    return best
        elif ch in "}]":
            depth -= 1
    return best


def _parse(text: str) -> Any:
    return json.loads(
        text, parse_constant=_reject_constant, parse_float=_finite_float, object_pairs_hook=_unique_object
    )


def _outer_spans(text: str) -> list[str]:
    """The outermost {...} and [...] spans, the one that opens first tried first."""
    spans = []
    for opener, closer in _PAIRS.items():
        start, end = text.find(opener), text.rfind(closer)
        if start != -1 and end > start:
            spans.append((start, text[start : end + 1]))
    return [span for _, span in sorted(spans)]


def _candidates(response: str) -> list[tuple[str, str]]:
    """(source, text) pairs to try, in order."""
    text = response.strip()
    out = [("whole", text)]
    fences = _FENCE.findall(response)
    if fences:
        block = fences[-1].strip()
        out.append(("fence", block))
        out += [("fence_span", span) for span in _outer_spans(block) if span != block]
    else:
        out += [("span", span) for span in _outer_spans(text) if span != text]
    return out


def _clip(text: str) -> str:
    return text if len(text) <= _MAX_EXTRACTED else text[:_MAX_EXTRACTED] + "..."


def json_path(path: Any) -> str:
    """A jsonschema error path (a deque of keys and indices) as "$.a[0]['odd key']"."""
    out = "$"
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        elif isinstance(part, str) and part.isidentifier():
            out += f".{part}"
        else:
            out += f"[{json.dumps(part)}]"
    return out


def json_equal(a: Any, b: Any) -> bool:
    """JSON equality: bool is not a number, 1 == 1.0, object key order does not matter, array order does."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b))
    if type(a) is not type(b):
        return False
    return a == b


def _error(reason: str, why: str) -> Verdict:
    return Verdict(0.0, Status.ERROR, reason, details={"error": why})


def _check_reference(reference: Any) -> Verdict | None:
    if reference is None:
        return None
    if not isinstance(reference, dict):
        why = f"expected None or a dict with 'schema' and/or 'equals', got {type(reference).__name__}"
        return _error("bad_reference", why)
    unknown = sorted(set(reference) - {"schema", "equals"})
    if unknown:
        why = f"unknown reference keys: {', '.join(map(str, unknown))} (expected 'schema' and/or 'equals')"
        return _error("bad_reference", why)
    if "schema" in reference and not isinstance(reference["schema"], (dict, bool)):
        return _error("bad_reference", "reference['schema'] must be a JSON Schema object")
    if "equals" in reference:
        try:
            json.dumps(reference["equals"], allow_nan=False)
        except (TypeError, ValueError, RecursionError) as exc:
            return _error("bad_reference", f"reference['equals'] is not a JSON value: {exc}")
    return None


def _schema_errors(
    value: Any, schema: Any, max_errors: int, deadline: json_schema.Deadline, check_formats: bool
) -> list[dict[str, str]] | Verdict:
    """The first ``max_errors`` errors of ``value`` against ``schema``, or the Verdict that ends the call."""
    try:
        cls = json_schema.validator_class(schema)
        json_schema.check_supported(schema, cls, check_formats)
        errors = json_schema.iter_errors(value, schema, cls, deadline, check_formats, limit=1000)
    except jsonschema.SchemaError as exc:
        return _error("bad_reference", f"invalid JSON Schema: {exc.message}")
    except json_schema.Unsupported as exc:
        return _error(exc.reason, str(exc))
    except (json_schema.DeadlineExceeded, RecursionError):
        raise
    except Exception as exc:  # an unresolvable $ref or another problem of the schema, not of the response
        return _error("bad_reference", f"schema could not be applied: {type(exc).__name__}: {exc}"[:2000])
    errors.sort(key=lambda e: (len(e.absolute_path), [str(p) for p in e.absolute_path]))
    return [{"path": json_path(e.absolute_path), "message": e.message[:500]} for e in errors[:max_errors]]


@register_verifier("json")
def json_verifier(
    response: str,
    reference: Any = None,
    *,
    max_chars: int = 1_000_000,
    max_depth: int = 500,
    max_errors: int = 5,
    check_formats: bool = True,
    timeout_s: float | None = None,
) -> Verdict:
    """Valid JSON, optionally matching ``reference["schema"]`` and/or equal to ``reference["equals"]``."""
    budget = DEFAULT_TIMEOUT_S if timeout_s is None else timeout_s
    if isinstance(budget, bool) or not isinstance(budget, (int, float)) or not math.isfinite(budget) or budget <= 0:
        return _error("bad_option", f"timeout_s must be a finite number > 0, got {timeout_s!r}")
    deadline = json_schema.Deadline(float(budget))
    bad = _check_reference(reference)
    if bad is not None:
        return bad
    for name, value in (("max_chars", max_chars), ("max_depth", max_depth), ("max_errors", max_errors)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            return _error("bad_option", f"{name} must be an int >= 1, got {value!r}")
    if not isinstance(check_formats, bool):
        return _error("bad_option", f"check_formats must be true or false, got {check_formats!r}")
    if not isinstance(response, str):
        return _error("bad_response", f"response is {type(response).__name__}, expected str")
    if len(response) > max_chars:
        details = {"chars": len(response), "max_chars": max_chars}
        return Verdict(0.0, Status.UNDECIDABLE, "response_too_long", details=details)

    reference = reference or {}
    value: Any = None
    found: tuple[str, str] | None = None
    first_error, first_reason = "no JSON found", "invalid_json"
    for source, text in _candidates(response):
        if not text:
            continue
        if _max_depth(text, max_depth) > max_depth:
            return Verdict(0.0, Status.UNDECIDABLE, "too_deep", extracted=_clip(text), details={"max_depth": max_depth})
        try:
            value = _parse(text)
        except RecursionError:
            return Verdict(0.0, Status.UNDECIDABLE, "too_deep", extracted=_clip(text), details={"max_depth": max_depth})
        except ValueError as exc:  # JSONDecodeError, _NotJSON, huge integers
            if source in ("whole", "fence"):
                first_error = f"{source}: {exc}"
                first_reason = getattr(exc, "reason", "invalid_json")
            continue
        found = (source, text)
        break
    if found is None:
        return Verdict(0.0, Status.INCORRECT, first_reason, details={"error": first_error[:500]})
    source, text = found
    extracted = _clip(text)
    details: dict[str, Any] = {"source": source}

    try:
        if "schema" in reference:
            errors = _schema_errors(value, reference["schema"], max_errors, deadline, check_formats)
            if isinstance(errors, Verdict):
                return errors
            if errors:
                details["errors"] = errors
                return Verdict(0.0, Status.INCORRECT, "schema_violation", extracted=extracted, details=details)
        if "equals" in reference:
            if not json_equal(value, reference["equals"]):
                return Verdict(0.0, Status.INCORRECT, "not_equal", extracted=extracted, details=details)
            return Verdict(1.0, Status.CORRECT, "json_equal", extracted=extracted, details=details)
    except RecursionError:
        return Verdict(0.0, Status.UNDECIDABLE, "too_deep", extracted=extracted, details={"max_depth": max_depth})
    except json_schema.DeadlineExceeded:
        details["timeout_s"] = budget
        return Verdict(0.0, Status.TIMEOUT, "timeout", extracted=extracted, details=details)
    if "schema" in reference:
        return Verdict(1.0, Status.CORRECT, "schema_valid", extracted=extracted, details=details)
    return Verdict(1.0, Status.CORRECT, "valid_json", extracted=extracted, details=details)
