"""The "math" verifier (CONTRACTS.md C1a): is the response's final answer equivalent to the reference?

    from rlvr.verifiers import verify
    verify("math", "... so the answer is $\\boxed{\\frac{1}{2}}$.", "0.5")     # correct, reason "equivalent"

Layout
    extract.py      find the final answer (\\boxed{}, <answer>, "final answer is", "Answer:", "####", $...$,
                    the last number)
    parse.py        normalise it and parse it (our own LaTeX subset -> small tuple trees; sets, tuples, intervals,
                    inequalities, equations, matrices, text)
    equivalence.py  strings -> exact rationals -> numeric -> random-point probing -> (symbolic stage)
    symbolic.py     SymPy (and latex2sympy2_extended as a fallback), only ever run in a supervised worker

Policy (keyword options of ``verify("math", response, reference, **policy)``) and their defaults
    tuple_order=True   (1,2) vs (2,1): ordered tuples/points; False compares tuples as unordered
    rel_tol=1e-9       relative tolerance for IRRATIONAL constants compared as floats (sqrt(2) vs 1.41421356237);
    abs_tol=1e-12      rational constants (integers, decimals, fractions) are always compared EXACTLY:
                       0.333 != 1/3, 0.5 == 1/2 == 50%
    percent="auto"     "auto": 50\\% == 0.5 == 50 (either side may carry the sign); "strict": % means /100,
                       so 50\\% == 0.5 but 50\\% != 50
    units=True         strip known unit words (cm, meters, dollars, degrees, units, ... and \\text{unit} after a value)
    strict=False       True turns off the last-number extraction fallback
    timeout_s=5.0      hard wall-clock budget of the whole call

Verdicts
    correct       reasons: "string_equal", "equivalent", "symbolic_equal", "numeric_probe", "choice_equal"
    incorrect     reasons: "not_equivalent", "multiple_answers" (several different final answers for a single-valued
                  reference), "choice_mismatch"
    undecidable   reasons: "no_answer_found", "unparseable_answer", "too_complex" (past a guard: answer length,
                  nesting depth, exponent size, factorial argument, float overflow)
    timeout       the symbolic stage did not finish within the budget
    error         "bad_reference" (empty/unreadable reference), "bad_response" (not a string)
``Verdict.extracted`` is the answer that was taken; ``details["extraction"]`` names how
("answer_tag", "boxed", "marker", "math", "last_number", "none") and ``details["stage"]`` where it was decided
("inline", "symbolic", or "probe" when SymPy ran out of time and random-point probing decided).

Budget: extraction, normalisation, parsing, exact and numeric comparison and probing run inline in the caller
and are bounded by guards; only the SymPy stage (expressions with variables whose equivalence probing did not
refute, or text our parser cannot read) runs through rlvr's supervised runner as a CallableRequest with the
remaining budget, so it can be killed. The call itself never waits longer than ``timeout_s``.

Conventions: ``e`` is Euler's number and ``i`` the imaginary unit; ``\\log`` without a base is the natural log;
a run of three or more letters that is not a known function is text (compared case- and space-insensitively);
an integer directly followed by \\frac{p}{q} is a mixed number (3\\frac{1}{2} = 7/2).
"""

from __future__ import annotations

import functools
import re
import threading
import time
from typing import Any

from rlvr.verifiers.base import Status, Verdict
from rlvr.verifiers.math.equivalence import Ctx, check
from rlvr.verifiers.math.extract import boxed_all, extract
from rlvr.verifiers.math.parse import ParseError, TooComplex, is_multi, normalize, parse_answer
from rlvr.verifiers.registry import register_verifier

MAX_RESPONSE_CHARS = 200_000  # only the tail of a longer response is searched
MAX_ANSWER_RAW = 3000  # a longer extracted answer (or reference) is "too_complex"
_MC = re.compile(r"^\(?([A-J])\)?$")
# "12 cookies": a number followed by words (not function names or constants) that the units list lacks
_NUMBER_THEN_WORDS = re.compile(r"(-?\d+(?:\.\d+)?)\s+((?:[a-zA-Z]{3,}\s*){1,4})")
_NOT_NOUNS = {"sin", "cos", "tan", "log", "exp", "sqrt", "pi", "infty", "and", "or", "times", "cdot"}
_MC_ANSWER = re.compile(r"^\s*(?:option\s+|choice\s+)?\(?([A-Ja-j])\)?(?:[\s.:)]|$)", re.I)


def _v(score: float, status: Status, reason: str, **details: Any) -> Verdict:
    return Verdict(score, status, reason, details=details)


def _distinct_values(texts: list[str], units: bool) -> list[str]:
    if len(texts) <= 1:
        return texts
    texts = texts[:16]
    values: list[tuple | None] = []
    for t in texts:
        try:
            values.append(parse_answer(t, units=units, _normalized=True))
        except (ParseError, TooComplex):
            values.append(None)
    keep: list[int] = []
    for i, v in enumerate(values):
        same = False
        for j in keep:
            w = values[j]
            if v is not None and w is not None:
                try:
                    same = check(v, w, Ctx(symbolic=_no_proof)) is True
                except TooComplex:
                    same = False
            if same:
                break
        if not same:
            keep.append(i)
    return [texts[i] for i in keep]


def _reference_value(reference: Any, units: bool) -> tuple[tuple | None, str, Verdict | None]:
    """(value or None when our parser cannot read it, normalised text, a final verdict or None)."""
    if isinstance(reference, bool) or reference is None:
        return None, "", _v(0.0, Status.ERROR, "bad_reference", error="reference must be a string")
    if isinstance(reference, (int, float)):
        reference = str(reference)
    if isinstance(reference, (list, tuple)):
        if not reference or not all(isinstance(r, (str, int, float)) and not isinstance(r, bool) for r in reference):
            return None, "", _v(0.0, Status.ERROR, "bad_reference", error="expected a non-empty list of strings")
        try:
            vals = [parse_answer(str(r), units=units) for r in reference]
        except TooComplex:
            return None, "", _v(0.0, Status.UNDECIDABLE, "too_complex", side="reference")
        except ParseError:
            return None, "", _v(0.0, Status.ERROR, "bad_reference", error="an element cannot be parsed")
        return ("set", vals), "", None
    if not isinstance(reference, str):
        return None, "", _v(0.0, Status.ERROR, "bad_reference", error=f"got {type(reference).__name__}")
    return _reference_from_text(reference, units)


@functools.lru_cache(maxsize=8192)
def _reference_from_text(reference: str, units: bool) -> tuple[tuple | None, str, Verdict | None]:
    """The parsed reference; cached because every response of a group is checked against the same one."""
    if "\\boxed" in reference or "\\fbox" in reference:
        boxes = boxed_all(reference)
        if boxes:
            reference = boxes[-1]
    if len(reference) > MAX_ANSWER_RAW:
        return None, "", _v(0.0, Status.UNDECIDABLE, "too_complex", side="reference")
    norm = normalize(reference, units=units)
    if not norm:
        return None, "", _v(0.0, Status.ERROR, "bad_reference", error="empty reference")
    try:
        return parse_answer(norm, units=units, _normalized=True), norm, None
    except TooComplex:
        return None, norm, _v(0.0, Status.UNDECIDABLE, "too_complex", side="reference")
    except ParseError:
        return None, norm, None


def decide(
    answer: str,
    reference: Any,
    *,
    symbolic: bool | str = False,
    boxes: list[str] | tuple[str, ...] = (),
    tuple_order: bool = True,
    rel_tol: float = 1e-9,
    abs_tol: float = 1e-12,
    percent: str = "auto",
    units: bool = True,
) -> Verdict | None:
    """Compare an extracted answer with the reference. Returns None when only the symbolic stage can tell
    (never when ``symbolic`` is True, or "probe": random-point probing without SymPy)."""
    if percent not in ("auto", "strict"):
        raise ValueError(f"percent must be 'auto' or 'strict', got {percent!r}")
    ref, ref_norm, final = _reference_value(reference, units)
    if final is not None:
        return final
    if len(answer) > MAX_ANSWER_RAW:
        return _v(0.0, Status.UNDECIDABLE, "too_complex", side="response")
    norm = normalize(answer, units=units)

    # multiple choice
    m = _MC.match(ref_norm) if ref_norm else None
    if m:
        got = _MC_ANSWER.match(norm)
        if got and got.group(1).upper() == m.group(1):
            return _v(1.0, Status.CORRECT, "choice_equal")
        return _v(0.0, Status.INCORRECT, "choice_mismatch")

    # hedging across several boxes (boxes with equivalent values count once)
    distinct = _distinct_values(list(dict.fromkeys(normalize(b, units=units) for b in boxes)), units)
    multi_box = len(distinct) > 1
    if multi_box and not (ref is not None and is_multi(ref)):
        return _v(0.0, Status.INCORRECT, "multiple_answers", answers=distinct[:10])

    if not multi_box and ref_norm and norm == ref_norm:
        return _v(1.0, Status.CORRECT, "string_equal")
    if not norm:
        return _v(0.0, Status.UNDECIDABLE, "no_answer_found")

    try:
        if multi_box:
            got_v: tuple | None = ("set", [parse_answer(d, units=units, _normalized=True) for d in distinct])
        else:
            got_v = parse_answer(norm, units=units, _normalized=True)
    except TooComplex:
        return _v(0.0, Status.UNDECIDABLE, "too_complex", side="response")
    except ParseError:
        got_v = None
    if got_v is not None and got_v[0] == "text" and ref is not None and ref[0] == "expr":
        quantity = _NUMBER_THEN_WORDS.fullmatch(norm)
        if quantity and not _NOT_NOUNS.intersection(quantity.group(2).lower().split()):
            got_v = parse_answer(quantity.group(1), units=units, _normalized=True)

    if got_v is None or ref is None:
        if symbolic is not True:  # only the worker may run latex2sympy (unbounded)
            return None
        from rlvr.verifiers.math.symbolic import latex2sympy_equal

        ref_text = ref_norm if isinstance(reference, str) else None
        if ref is None and (ref_text is None or latex2sympy_equal(ref_text, ref_text) is None):
            return _v(0.0, Status.ERROR, "bad_reference", error="the reference cannot be parsed")
        if got_v is None and latex2sympy_equal(norm, norm) is None:
            return _v(0.0, Status.UNDECIDABLE, "unparseable_answer")
        if ref_text is None:  # a list reference our parser reads, an answer only latex2sympy reads
            return _v(0.0, Status.UNDECIDABLE, "unparseable_answer")
        same = latex2sympy_equal(norm, ref_text)
        if same:
            return _v(1.0, Status.CORRECT, "symbolic_equal", parser="latex2sympy2_extended")
        return _v(0.0, Status.INCORRECT, "not_equivalent", parser="latex2sympy2_extended")

    if is_multi(got_v) and not is_multi(ref) and len(got_v[1]) > 1:
        return _v(0.0, Status.INCORRECT, "multiple_answers")

    ctx = Ctx(rel_tol=float(rel_tol), abs_tol=float(abs_tol), percent=percent, tuple_order=bool(tuple_order))
    if symbolic == "probe":  # no SymPy: random-point probing alone decides (agreement at every point accepts)
        ctx.symbolic = _no_proof
    elif symbolic:
        from rlvr.verifiers.math.symbolic import sympy_equal

        ctx.symbolic = sympy_equal
    try:
        result = check(got_v, ref, ctx)
    except TooComplex as exc:
        return _v(0.0, Status.UNDECIDABLE, "too_complex", guard=str(exc.args[0]) if exc.args else "")
    if result is None:
        return None
    if result:
        return _v(1.0, Status.CORRECT, ctx.notes[-1] if ctx.notes else "equivalent")
    return _v(0.0, Status.INCORRECT, "not_equivalent")


def _no_proof(x: tuple, y: tuple) -> bool:
    return False


def _symbolic_stage(answer: str, reference: Any, options: dict[str, Any], deadline: float) -> Verdict:
    from rlvr.verifiers.math.symbolic import compare_in_worker
    from rlvr.verifiers.runner import CallableRequest, default_runner

    remaining = deadline - time.monotonic()
    if remaining < 0.2:
        return _v(0.0, Status.TIMEOUT, "timeout", stage="symbolic")
    req = CallableRequest(compare_in_worker, answer, reference, {**options, "timeout_s": max(0.1, remaining - 0.1)})
    box: list[Verdict] = []

    def run() -> None:
        try:
            box.append(default_runner().score([req])[0])
        except Exception as exc:  # a closed runner, ...
            box.append(_v(0.0, Status.ERROR, "runner_failed", error=repr(exc)))

    thread = threading.Thread(target=run, name="rlvr-math-symbolic", daemon=True)
    thread.start()
    thread.join(max(0.0, deadline - time.monotonic()))
    if not box:
        return _v(0.0, Status.TIMEOUT, "timeout", stage="symbolic")
    return box[0]


@register_verifier("math")
def math_verifier(
    response: str,
    reference: Any,
    *,
    tuple_order: bool = True,
    rel_tol: float = 1e-9,
    abs_tol: float = 1e-12,
    percent: str = "auto",
    units: bool = True,
    strict: bool = False,
    timeout_s: float = 5.0,
) -> Verdict:
    """See the module docstring."""
    deadline = time.monotonic() + (5.0 if timeout_s is None else float(timeout_s))
    if not isinstance(response, str):
        return _v(0.0, Status.ERROR, "bad_response", error=f"response is {type(response).__name__}")
    if len(response) > MAX_RESPONSE_CHARS:
        response = response[-MAX_RESPONSE_CHARS:]
    ex = extract(response, strict=bool(strict))
    if ex.answer is None or not ex.answer.strip():
        # still report a bad reference as such
        _, _, final = _reference_value(reference, bool(units))
        if final is not None and final.status == Status.ERROR:
            return final
        return Verdict(0.0, Status.UNDECIDABLE, "no_answer_found", None, {"extraction": ex.method})
    answer = ex.answer
    shown = answer if len(answer) <= 500 else answer[:500] + "..."
    options = {
        "boxes": list(ex.candidates) if len(ex.candidates) > 1 else [],
        "tuple_order": bool(tuple_order),
        "rel_tol": float(rel_tol),
        "abs_tol": float(abs_tol),
        "percent": percent,
        "units": bool(units),
    }
    t0 = time.perf_counter()
    verdict = decide(answer, reference, symbolic=False, **options)
    stage = "inline"
    if verdict is None:
        stage = "symbolic"
        verdict = _symbolic_stage(answer, reference, options, deadline)
        if verdict.status in (Status.TIMEOUT, Status.ERROR):
            # SymPy was too slow (or its worker failed): fall back on random-point probing when it is conclusive
            probed = decide(answer, reference, symbolic="probe", **options)
            if probed is not None and probed.status == Status.CORRECT and probed.reason == "numeric_probe":
                verdict = Verdict(probed.score, probed.status, probed.reason, None,
                                  {**probed.details, "symbolic": verdict.reason})
                stage = "probe"
    details = {**verdict.details, "extraction": ex.method, "stage": stage,
               "elapsed_s": round(time.perf_counter() - t0, 6)}
    return Verdict(verdict.score, verdict.status, verdict.reason, shown, details)


__all__ = ["decide", "math_verifier"]
