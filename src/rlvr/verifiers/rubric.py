"""The "rubric" verifier: a response is scored against a list of criteria, each checked by a rule or a judge.

A rubric is data (YAML, JSON, JSONL with one criterion per line, or an inline mapping), shared by a file or given
per task::

    criteria:
      - {name: names_paris, weight: 2, required: true, check: {regex: "\\\\bParis\\\\b", flags: i}}
      - {name: final_answer, weight: 3, check: {verifier: exact, reference: "Paris"}}
      - {name: explains, weight: 1, graded: true, check: {judge: "Explains why the city is the capital."}}
      - {name: hedges, weight: -1, check: {regex: "maybe|not sure", flags: i}}   # a pitfall: costs when met

    verify("rubric", response, {"rubric": "rubrics/capital.yaml", "answer": "Paris"})
    verify("rubric", response, "Paris", rubric="rubrics/capital.yaml", judge={"base_url": ..., "model": ...})

reference: a rubric (a mapping with "criteria", or a list of criteria), or ``{"rubric": RUBRIC, "answer": GOLD}``,
or the gold answer itself with the rubric in the ``rubric`` option (a file path, a mapping or a list). The gold
answer is the default reference of rule criteria and is shown to judge criteria.

A criterion: ``name``; ``weight`` (default 1; negative marks a pitfall); ``required`` (default false); ``graded``
(default false: pass/fail); and ``check``, one of
- ``{regex: PATTERN, flags: "ims", mode: search|fullmatch|match}`` (the "regex" verifier, in search mode by default);
- ``{verifier: NAME, reference: ..., options: {...}}`` (any registered verifier; the reference defaults to the gold;
  the request's prompt and meta are handed on);
- ``{judge: "what the response must do", options: {...}}`` (the "judge" verifier with a criterion prompt; the
  ``judge`` option of the rubric verifier gives the endpoint and its settings to every judge criterion).

Aggregation (explicit; the verdict's details list every criterion's result):
- a criterion's value v_i is its check's score for a graded criterion, else 1 if that score >= ``pass_threshold``
  (option, default 1.0) and 0 otherwise;
- score = clip( sum_i w_i v_i / sum_{i: w_i > 0} w_i , 0, 1 ): the weighted sum over positive weights, with pitfalls
  (negative weights) subtracting when they are met;
- gate: if a required criterion has v_i < 1, the score is 0 (reason "required_failed");
- a criterion whose check timed out, errored or could not decide counts v_i = 0 when it is optional; when it is
  required the verdict takes its status ("timeout", "error", "undecidable") with score 0 and reason
  "required_undecided".
Status: "correct" at score 1, "incorrect" at 0, "partial" between. Registered with isolation="threads": rule
criteria go through the supervised runner, judge criteria bound their own time; ``timeout_s`` (default 60) is the
budget of the whole rubric.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlvr.verifiers.base import Status, Verdict
from rlvr.verifiers.registry import register_verifier, verifier_isolation
from rlvr.errors import UserError

_CHECK_KINDS = ("regex", "verifier", "judge")
_CRITERION_KEYS = {"name", "weight", "required", "graded", "check", "description"}
_UNDECIDED = (Status.TIMEOUT, Status.ERROR, Status.UNDECIDABLE)
_MAX_CRITERIA = 64
_MAX_FILE_BYTES = 4 * 2**20


class RubricError(UserError):
    """A rubric that cannot be used; the message names the criterion and key."""


@dataclass(frozen=True)
class Criterion:
    name: str
    check: dict[str, Any]
    weight: float = 1.0
    required: bool = False
    graded: bool = False
    description: str = ""

    @property
    def kind(self) -> str:
        return next(k for k in _CHECK_KINDS if k in self.check)


@dataclass(frozen=True)
class Rubric:
    criteria: tuple[Criterion, ...]
    name: str = ""
    options: dict[str, Any] = field(default_factory=dict)


def parse_rubric(data: Any, where: str = "rubric") -> Rubric:
    """Validate a rubric given as a mapping ({"criteria": [...], "name": ...}) or a list of criteria."""
    name = ""
    if isinstance(data, dict):
        unknown = set(data) - {"criteria", "name", "pass_threshold"}
        if unknown:
            raise RubricError(f"{where}: unknown key(s) {sorted(unknown)}; expected criteria, name, pass_threshold")
        name, options = str(data.get("name", "")), {k: data[k] for k in ("pass_threshold",) if k in data}
        data = data.get("criteria")
    else:
        options = {}
    if not isinstance(data, (list, tuple)) or not data:
        raise RubricError(f"{where}: expected a non-empty list of criteria")
    if len(data) > _MAX_CRITERIA:
        raise RubricError(f"{where}: {len(data)} criteria; at most {_MAX_CRITERIA}")
    out, names = [], set()
    for i, raw in enumerate(data):
        at = f"{where}.criteria[{i}]"
        if not isinstance(raw, dict):
            raise RubricError(f"{at}: expected a mapping, got {type(raw).__name__}")
        unknown = set(raw) - _CRITERION_KEYS
        if unknown:
            raise RubricError(f"{at}: unknown key(s) {sorted(unknown)}; expected {sorted(_CRITERION_KEYS)}")
        cname = raw.get("name")
        if not isinstance(cname, str) or not cname:
            raise RubricError(f"{at}: 'name' is required")
        at = f"{where}.criteria[{i}] ({cname})"
        if cname in names:
            raise RubricError(f"{at}: the name is used twice")
        names.add(cname)
        check = raw.get("check")
        kinds = [k for k in _CHECK_KINDS if isinstance(check, dict) and k in check]
        if len(kinds) != 1:
            raise RubricError(f"{at}.check: expected a mapping with exactly one of {', '.join(_CHECK_KINDS)}")
        if kinds[0] == "verifier" and check["verifier"] == "rubric":
            raise RubricError(f"{at}.check: a rubric criterion cannot be another rubric")
        if kinds[0] in ("regex", "judge") and not isinstance(check[kinds[0]], str):
            raise RubricError(f"{at}.check.{kinds[0]}: expected a string")
        weight = raw.get("weight", 1.0)
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or weight != weight:
            raise RubricError(f"{at}.weight: expected a number, got {weight!r}")
        for flag in ("required", "graded"):
            if not isinstance(raw.get(flag, False), bool):
                raise RubricError(f"{at}.{flag}: expected true or false")
        if raw.get("required") and weight < 0:
            raise RubricError(f"{at}: a pitfall (negative weight) cannot be required")
        out.append(Criterion(cname, dict(check), float(weight), bool(raw.get("required", False)),
                             bool(raw.get("graded", False)), str(raw.get("description", ""))))
    if not any(c.weight > 0 for c in out):
        raise RubricError(f"{where}: at least one criterion needs a positive weight")
    return Rubric(tuple(out), name, options)


_FILES: dict[tuple[str, float], Rubric] = {}
_FILES_LOCK = threading.Lock()


def load_rubric(source: Any) -> Rubric:
    """A Rubric from a mapping, a list of criteria, or a file (.yaml/.yml, .json, .jsonl: one criterion a line)."""
    if isinstance(source, Rubric):
        return source
    if not isinstance(source, (str, os.PathLike)):
        return parse_rubric(source)
    path = Path(source)
    try:
        stat = path.stat()
    except OSError as exc:
        raise RubricError(f"rubric file {str(path)!r} cannot be read: {exc.strerror}") from None
    if stat.st_size > _MAX_FILE_BYTES:
        raise RubricError(f"rubric file {str(path)!r} is larger than {_MAX_FILE_BYTES} bytes")
    key = (str(path.resolve()), stat.st_mtime)
    with _FILES_LOCK:
        if key in _FILES:
            return _FILES[key]
    text = path.read_text(encoding="utf-8")
    try:
        if path.suffix == ".jsonl":
            data = [json.loads(line) for line in text.splitlines() if line.strip()]
        elif path.suffix == ".json":
            data = json.loads(text)
        else:
            from rlvr.yaml_text import load_yaml

            data = load_yaml(text)
    except ValueError as exc:  # json and yaml errors are ValueErrors or YAMLErrors
        raise RubricError(f"rubric file {str(path)!r}: {exc}") from None
    except Exception as exc:
        raise RubricError(f"rubric file {str(path)!r}: {type(exc).__name__}: {exc}") from None
    rubric = parse_rubric(data, where=str(path))
    with _FILES_LOCK:
        _FILES[key] = rubric
    return rubric


def _split_reference(reference: Any, rubric_option: Any) -> tuple[Any, Any]:
    """(rubric source, gold answer) from the verifier's reference and its ``rubric`` option."""
    if rubric_option is not None:
        return rubric_option, reference
    if isinstance(reference, dict) and "rubric" in reference:
        return reference["rubric"], reference.get("answer")
    return reference, None


_CRITERION_TEMPLATE = (
    "Task:\n{{question}}\n\nReference answer (may be empty):\n{{reference}}\n\nCriterion:\n{criterion}\n\n"
    "<<<RESPONSE>>>\n{{response}}\n<<<END RESPONSE>>>\n\n"
    "Does the response meet the criterion? Reply with a brief justification, then a last line that is exactly "
    "'VERDICT: CORRECT' (it meets it) or 'VERDICT: INCORRECT' (it does not)."
)


def _judge_call(criterion: Criterion, response: str, gold: Any, prompt: Any, meta: Any,
                judge_options: dict[str, Any], deadline: float) -> Verdict:
    from rlvr.verifiers.judge import judge

    text = criterion.check["judge"].replace("{", "{{").replace("}", "}}")
    options = {**judge_options, **(criterion.check.get("options") or {})}
    options["timeout_s"] = max(0.1, min(float(options.get("timeout_s", 30.0)), deadline - time.monotonic()))
    return judge(response, gold if gold is not None else "", prompt=prompt, meta=meta,
                 template=_CRITERION_TEMPLATE.format(criterion=text), graded=criterion.graded, **options)


def _rule_request(criterion: Criterion, response: str, gold: Any, deadline: float, prompt: Any = None,
                  meta: Any = None):
    from rlvr.verifiers.runner import ScoreRequest

    check = criterion.check
    if criterion.kind == "regex":
        ref = {"pattern": check["regex"], "flags": check.get("flags", ""), "mode": check.get("mode", "search")}
        return ScoreRequest("regex", response, ref, {"timeout_s": max(0.1, min(5.0, deadline - time.monotonic()))})
    options = dict(check.get("options") or {})
    return ScoreRequest(check["verifier"], response, check.get("reference", gold), options, prompt=prompt,
                        meta=meta or None)


def _undecided(status: Status, reason: str, error: str) -> Verdict:
    return Verdict(0.0, status, reason, details={"error": error})


def score_criteria(rubric: Rubric, response: str, gold: Any, *, prompt: Any = None, meta: Any = None,
                   judge_options: dict[str, Any] | None = None, timeout_s: float = 60.0) -> list[Verdict]:
    """One verdict per criterion, in order: rule criteria as one batch through the runner, "threads" verifiers
    and judge criteria on a small local pool, all within ``timeout_s``."""
    from rlvr.verifiers.registry import get_verifier
    from rlvr.verifiers.runner import call_verifier, score_batch
    from rlvr.verifiers.runner.calls import keyword_args

    deadline = time.monotonic() + timeout_s
    verdicts: list[Verdict | None] = [None] * len(rubric.criteria)
    pooled: list[int] = []
    batch: list[tuple[int, Any]] = []
    for i, c in enumerate(rubric.criteria):
        if c.kind == "judge":
            pooled.append(i)
            continue
        try:
            request = _rule_request(c, response, gold, deadline, prompt, meta)
            threaded = verifier_isolation(request.verifier) == "threads"
        except (KeyError, ValueError, TypeError) as exc:
            verdicts[i] = _undecided(Status.ERROR, "bad_criterion", str(exc))
            continue
        if threaded:
            pooled.append(i)
        else:
            batch.append((i, request))
    if batch:
        for (i, _), v in zip(batch, score_batch([r for _, r in batch])):
            verdicts[i] = v
    if pooled:
        def run(i: int) -> Verdict:
            c = rubric.criteria[i]
            if c.kind == "judge":
                return _judge_call(c, response, gold, prompt, meta, judge_options or {}, deadline)
            request = _rule_request(c, response, gold, deadline)
            fn = get_verifier(request.verifier)
            opts = {**request.options, "timeout_s": max(0.1, deadline - time.monotonic())}
            return call_verifier(fn, response, request.reference, keyword_args(fn, opts, prompt, meta or None))

        pool = concurrent.futures.ThreadPoolExecutor(max_workers=min(8, len(pooled)), thread_name_prefix="rlvr-rubric")
        futures = {pool.submit(run, i): i for i in pooled}
        try:
            done, _ = concurrent.futures.wait(futures, timeout=max(0.0, deadline - time.monotonic()) + 1.0)
            for f, i in futures.items():
                if f in done:
                    exc = f.exception()
                    verdicts[i] = f.result() if exc is None else _undecided(Status.ERROR, "criterion_raised", repr(exc)[:500])
                else:
                    verdicts[i] = _undecided(Status.TIMEOUT, "timeout", "criterion past the rubric's budget")
        finally:
            pool.shutdown(wait=False, cancel_futures=True)
    return [v if v is not None else _undecided(Status.ERROR, "not_scored", "") for v in verdicts]


def aggregate(rubric: Rubric, verdicts: list[Verdict], pass_threshold: float = 1.0) -> Verdict:
    """The rubric's verdict from its criteria's verdicts (rules in the module docstring)."""
    rows, total, positive = [], 0.0, 0.0
    required_failed, undecided_required = [], None
    for c, v in zip(rubric.criteria, verdicts):
        decided = v.status not in _UNDECIDED
        value = (min(max(v.score, 0.0), 1.0) if c.graded else float(v.score >= pass_threshold)) if decided else 0.0
        total += c.weight * value
        positive += max(c.weight, 0.0)
        if c.required and not decided and undecided_required is None:
            undecided_required = v.status
        elif c.required and value < 1.0:
            required_failed.append(c.name)
        rows.append({"name": c.name, "weight": c.weight, "required": c.required, "graded": c.graded,
                     "value": value, "status": v.status.value, "reason": v.reason})
    details = {"criteria": rows, "aggregation": "weighted_sum_required_gate", "required_failed": required_failed}
    if undecided_required is not None:
        return Verdict(0.0, undecided_required, "required_undecided", details=details)
    if required_failed:
        return Verdict(0.0, Status.INCORRECT, "required_failed", details=details)
    score = min(max(total / positive, 0.0), 1.0)
    status = Status.CORRECT if score >= 1.0 else Status.INCORRECT if score <= 0.0 else Status.PARTIAL
    return Verdict(score, status, "rubric_score", details=details)


@register_verifier("rubric", isolation="threads")
def rubric_verifier(response: str, reference: Any = None, *, prompt: Any = None, meta: dict[str, Any] | None = None,
                    rubric: Any = None, judge: dict[str, Any] | None = None, pass_threshold: float | None = None,
                    timeout_s: float = 60.0) -> Verdict:
    if not isinstance(response, str):
        return Verdict(0.0, Status.ERROR, "bad_response", details={"error": "response is not a string"})
    source, gold = _split_reference(reference, rubric)
    try:
        parsed = load_rubric(source)
    except RubricError as exc:
        return Verdict(0.0, Status.ERROR, "bad_rubric", details={"error": str(exc)})
    threshold = pass_threshold if pass_threshold is not None else parsed.options.get("pass_threshold", 1.0)
    verdicts = score_criteria(parsed, response, gold, prompt=prompt, meta=meta, judge_options=judge or {},
                              timeout_s=float(timeout_s))
    return aggregate(parsed, verdicts, float(threshold))
