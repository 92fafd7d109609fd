"""The "math" verifier (docs/api.md, "Math verifier"): is the response's final answer equivalent to the reference?

    from rlvr.verifiers import verify
    verify("math", "... so the answer is $\\boxed{\\frac{1}{2}}$.", "0.5")     # correct, reason "equivalent"

Layout
    extract.py      find the final answer (\\boxed{}, <answer>, "final answer is", "Answer:", "####", $...$,
                    the last number), and whether the response commits to it
    normalize.py    one spelling for an answer (delimiters, \\text{}, Unicode, thousands, repeating decimals)
    units.py        units after a value: which words are units, their dimension and size
    words.py        numbers written in English words ("twenty-one", "three quarters")
    expression.py   our own tokenizer and parser of the LaTeX subset of answers -> small tuple trees
    values.py       the kinds of answer value (Expression, Equation, Interval, FiniteSet, OrderedTuple, Matrix,
                    Quantity, Text, ...), one small dataclass each
    parse.py        the answer's structure around the trees (sets, tuples, intervals, inequalities, equations
                    with all their sides, ratios, quantities, matrices, text) as such a value
    exact.py        exact rational values and polynomial normal forms of trees (used by parse and compare)
    equivalence.py  one comparison per pair of kinds: strings -> exact rationals -> numeric -> polynomial
                    normal forms -> probing -> (symbolic stage); imports parse's kinds, never the parser
    numeric.py      values of trees in complex floats and in 60-digit mpmath numbers
    budget.py       the call's deadline, checked between bounded steps
    cache.py        caches bounded in bytes
    symbolic.py     SymPy (and latex2sympy2_extended as a fallback), only ever run in a supervised worker
docs/verifiers.md states the policy of every debatable family (rounding, units, angles, endpoints, lists,
tuples, decimal commas, labels, equations, letters, hedges).

Policy (keyword options of ``verify("math", response, reference, **policy)``) and their defaults
    tuple_order=True   (1,2) vs (2,1): ordered tuples/points; False compares tuples as unordered
    rel_tol=1e-9       tolerance for an answer written with a decimal literal against an irrational value
    abs_tol=1e-12      (sqrt(2) vs 1.41421356237); rational constants are always compared EXACTLY (0.333 != 1/3,
                       0.5 == 1/2 == 50%) and exact closed forms to 60 digits (e^{-30} != 0)
    percent="auto"     "auto": 50\\% == 0.5 == 50 (either side may carry the sign); "strict": % means /100,
                       so 50\\% == 0.5 but 50\\% != 50
    units=True         read units after a value and convert between them (2 minutes == 120 seconds != 2 hours)
    strict=False       True turns off the last-number extraction fallback
    truncated=False    the response was cut off by the length limit (the trainer passes it): the fallbacks that
                       take what the text happens to end with (last math span, last number) give no answer;
                       boxes, answer tags and answer markers still count
    timeout_s=5.0      hard wall-clock budget of the whole call

Verdicts
    correct       reasons: "string_equal", "equivalent", "symbolic_equal", "numeric_probe", "choice_equal"
    incorrect     reasons: "not_equivalent", "multiple_answers" (several different final answers for a single-valued
                  reference, or a value offered as an alternative after the final one), "choice_mismatch",
                  "retracted" (the words right after the answer reject it: "Answer: 9. No wait, that's wrong.")
    undecidable   reasons: "no_answer_found", "unparseable_answer", "too_complex" (past a guard: answer length,
                  nesting depth, exponent size, factorial argument, float overflow)
    timeout       the call's budget ran out (inline, or in the symbolic stage)
    error         "bad_reference" (empty/unreadable reference), "bad_response" (not a string), "internal_error" (a
                  defect of the verifier met on this input; reported, never raised), "worker_start_failed" (the
                  symbolic stage's worker could not be started, after retries within the budget)
``Verdict.extracted`` is the answer that was taken; ``details["extraction"]`` names how
("answer_tag", "boxed", "marker", "math", "last_number", "none", "uncommitted", "retracted", "truncated") and ``details["stage"]`` where it
was decided
("inline", "symbolic", or "probe" when SymPy ran out of time and random-point probing decided).

Budget: extraction, normalisation, parsing, exact and numeric comparison and probing run inline in the caller;
each step is bounded by a guard checked before it runs and the call's deadline is checked between steps
(budget.py), so inline work stops at a soft deadline half the budget (at most 1 s) before the hard
one. Only the SymPy stage (expressions with variables whose equivalence probing did not refute, or text our
parser cannot read) runs through rlvr's supervised runner as a CallableRequest with the remaining budget, so
it can be killed. No call returns later than ``timeout_s`` + 0.5 s, from any thread.

Conventions: ``e`` is Euler's number and ``i`` the imaginary unit; ``\\log`` without a base is the natural log;
a run of three or more letters that is not a known function is text (compared case- and space-insensitively);
an integer directly followed by \\frac{p}{q} is a mixed number (3\\frac{1}{2} = 7/2).
"""

from __future__ import annotations

import enum
import re
import threading
import time
from typing import Any

from rlvr.verifiers.base import Status, Verdict
from rlvr.verifiers.math import budget
from rlvr.verifiers.math.cache import ByteLRU, byte_cached
from rlvr.verifiers.math.equivalence import MIN_GOLD_DIGITS, Comparison, Prover, equivalent
from rlvr.verifiers.math.expression import ParseError, TooComplex, decimal_value
from rlvr.verifiers.math.extract import boxed_all, extract
from rlvr.verifiers.math.normalize import PLAIN_NUMBER, normalize
from rlvr.verifiers.math.parse import parse_answer
from rlvr.verifiers.math.symbolic import fallback_installed
from rlvr.verifiers.math.values import AnswerValue, Equation, FiniteSet, OrderedTuple, is_multi
from rlvr.verifiers.registry import register_verifier

MAX_RESPONSE_CHARS = 200_000  # only the tail of a longer response is searched
MAX_ANSWER_RAW = 3000  # a longer extracted answer (or reference) is "too_complex"
PROBE_RESERVE_S = 0.25  # kept back from the symbolic stage for 60-digit probing, should SymPy run out of time
# every stage stops this long (at most half of the budget) before the deadline, so that the verdict is
# back by it even when 8 threads share the interpreter and the machine is busy
INLINE_MARGIN_S = 1.0
INLINE_MARGIN_SHARE = 0.5
# the runner's verdicts for a worker that never ran the comparison; the symbolic stage asks again while its
# budget leaves MIN_RETRY_S (at most MAX_START_ATTEMPTS tries, each of which the runner itself starts up to three
# workers for), pausing RETRY_PAUSE_S times the attempt count between tries
RETRIED_START_FAILURES = ("worker_start_failed", "runner_failed")
MAX_START_ATTEMPTS = 3
MIN_RETRY_S = 0.3
RETRY_PAUSE_S = 0.05
MAX_DISTINCT_BOXES = 64  # more different final boxes than this is a hedge without comparing them all
_MC = re.compile(r"^\(?([A-J])\)?(?:[.:)]\s+\S.*)?$")  # "C", "(C)", "C. x = 42": a choice letter
# a letter answer: the letter alone, or "(C) text" / "C) text" / "C. text" / "C: text"; never "I don't know"
_MC_ANSWER = re.compile(r"^\s*(?:option\s+|choice\s+)?(?:\(([A-Ja-j])\)|([A-Ja-j])(?:[.:)](?:\s|$)|$))", re.I)
# two numbers joined by a comma without a space, which is no thousands separator ("1,22", "0,111")
_DECIMAL_COMMA = re.compile(r"-?\d+,\d+", re.ASCII)
_OTHER_CHOICE = re.compile(r"\(([A-Ja-j])\)|\b(?:or|and)\s+([A-Ja-j])\b")  # "(A) or (C)", "(B) and D"
_DECIMAL = re.compile(r"(?<![\d.])\d*\.\d")
# verdicts of the symbolic stage, which no caller's cache keeps
_SYMBOLIC_RESULTS = ByteLRU(4 * 2**20, bytes_per_char=8)


def _v(score: float, status: Status, reason: str, **details: Any) -> Verdict:
    return Verdict(score, status, reason, details=details)


def _distinct_values(texts: list[str], units: bool) -> list[str]:
    """The boxed answers that differ in value from the final one (last), preceded by the final one. Each is
    compared with the final answer only, so n boxes cost n comparisons; past MAX_DISTINCT_BOXES different
    spellings the boxes are a hedge without comparing them."""
    if len(texts) <= 1:
        return texts
    if len(texts) > MAX_DISTINCT_BOXES:
        return texts
    final_text = texts[-1]
    try:
        final = parse_answer(final_text, units=units, _normalized=True)
    except (ParseError, TooComplex):
        return texts
    out = [final_text]
    for t in texts[:-1]:
        try:
            box = parse_answer(t, units=units, _normalized=True)
            same = equivalent(box, final, Comparison(prover=_no_proof, refute_first=True)) is True
        except (ParseError, TooComplex):
            same = False
        if not same:
            out.append(t)
    return out


def _spellings(boxes: list[str] | tuple[str, ...], units: bool) -> list[str]:
    """The normalised text of every box (a box too long to be an answer is kept as it is)."""
    out = []
    for b in boxes:
        budget.check()
        out.append(normalize(b, units=units) if len(b) <= MAX_ANSWER_RAW else b)
    return out


def _reference_value(reference: Any, units: bool) -> tuple[AnswerValue | None, str, Verdict | None]:
    """(value or None when our parser cannot read it, normalised text, a final verdict or None)."""
    value, norm, final = _reference_head(reference, units)
    if final is None and value is None and norm:
        value, final = _reference_parsed(norm, units)
    return value, norm, final


def _reference_head(reference: Any, units: bool) -> tuple[AnswerValue | None, str, Verdict | None]:
    """``_reference_value`` without parsing a string reference (value None): enough to see that an answer
    is spelled like it."""
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
        return FiniteSet(tuple(vals)), "", None
    if not isinstance(reference, str):
        return None, "", _v(0.0, Status.ERROR, "bad_reference", error=f"got {type(reference).__name__}")
    norm, final = _reference_text(reference, units)
    return None, norm, final


@byte_cached(8 * 2**20, bytes_per_char=12)  # the reference and its normalised text
def _reference_text(reference: str, units: bool) -> tuple[str, Verdict | None]:
    """The normalised reference (or a final verdict); cached because every response of a group is checked
    against the same one."""
    if "\\boxed" in reference or "\\fbox" in reference:
        boxes = boxed_all(reference)
        if boxes:
            reference = boxes[-1]
        elif reference.lstrip().startswith(("\\boxed{", "\\fbox{")):  # a box left unclosed: its content
            reference = reference.lstrip()[len("\\boxed{") :]
    if len(reference) > MAX_ANSWER_RAW:
        return "", _v(0.0, Status.UNDECIDABLE, "too_complex", side="reference")
    norm = normalize(reference, units=units)
    if not norm:
        return "", _v(0.0, Status.ERROR, "bad_reference", error="empty reference")
    return norm, None


@byte_cached(16 * 2**20, bytes_per_char=300)  # a parse tree: at most a node (tuple, Fraction) per character
def _reference_parsed(norm: str, units: bool) -> tuple[AnswerValue | None, Verdict | None]:
    """The parsed normalised reference (None when our parser cannot read it) or a final verdict."""
    try:
        return parse_answer(norm, units=units, _normalized=True), None
    except TooComplex:
        return None, _v(0.0, Status.UNDECIDABLE, "too_complex", side="reference")
    except ParseError:
        return None, None


class Stage(enum.Enum):
    """Where ``decide`` runs, which says what it may do when our own stages cannot tell."""

    INLINE = "inline"  # in the caller: answer None, so that the symbolic stage decides
    SYMBOLIC = "symbolic"  # in a supervised worker: SymPy (and latex2sympy2_extended for text we cannot parse)
    PROBE = "probe"  # SymPy ran out of time: only 60-digit probes at every scale may accept


def decide(
    answer: str,
    reference: Any,
    *,
    stage: Stage = Stage.INLINE,
    boxes: list[str] | tuple[str, ...] = (),
    tuple_order: bool = True,
    rel_tol: float = 1e-9,
    abs_tol: float = 1e-12,
    percent: str = "auto",
    units: bool = True,
) -> Verdict | None:
    """Compare an extracted answer with the reference. Returns None when only the symbolic stage can tell
    (never at Stage.SYMBOLIC or Stage.PROBE)."""
    if percent not in ("auto", "strict"):
        raise ValueError(f"percent must be 'auto' or 'strict', got {percent!r}")
    if len(answer) > MAX_ANSWER_RAW and isinstance(reference, str) and len(boxes) <= 1 \
            and answer.strip() == reference.strip():  # past the size cap, but one comparison of strings says it
        return _v(1.0, Status.CORRECT, "string_equal")
    ref, ref_norm, final = _reference_head(reference, units)
    if final is not None:
        return final
    if len(answer) > MAX_ANSWER_RAW:
        return _v(0.0, Status.UNDECIDABLE, "too_complex", side="response")
    norm = normalize(answer, units=units)
    spelled = _spellings(boxes, units)
    choice = _MC.match(ref_norm) if ref_norm else None
    if choice:
        return _choice_verdict(norm, choice.group(1), spelled)

    # hedging across several boxes (boxes with equivalent values count once)
    distinct = _distinct_values([t for t in dict.fromkeys(spelled) if t != norm] + [norm] if spelled else [], units)
    multi_box = len(distinct) > 1
    if not multi_box:
        quick = _string_verdict(norm, ref_norm)
        if quick is not None:
            return quick
        if _DECIMAL_COMMA.fullmatch(norm) and PLAIN_NUMBER.fullmatch(ref_norm):
            norm = norm.replace(",", ".")  # "1,22" against the single number 1.22: a decimal comma
        elif _DECIMAL_COMMA.fullmatch(ref_norm) and PLAIN_NUMBER.fullmatch(norm):
            ref_norm, ref = ref_norm.replace(",", "."), None
        quick = _plain_numbers_verdict(norm, ref_norm)
        if quick is not None:
            return quick
    if ref is None and isinstance(reference, str):
        ref, final = _reference_parsed(ref_norm, units)
        if final is not None:
            return final
    if multi_box and not (ref is not None and is_multi(ref)):
        return _v(0.0, Status.INCORRECT, "multiple_answers", answers=distinct[:10])
    if not norm:
        return _v(0.0, Status.UNDECIDABLE, "no_answer_found")

    try:
        got: AnswerValue | None
        if multi_box:
            got = FiniteSet(tuple(parse_answer(d, units=units, _normalized=True) for d in distinct))
        else:
            got = parse_answer(norm, units=units, _normalized=True)
    except TooComplex:
        return _v(0.0, Status.UNDECIDABLE, "too_complex", side="response")
    except ParseError:
        got = None
    if got is None or ref is None:
        if stage is not Stage.SYMBOLIC:  # only the worker may run latex2sympy (unbounded)
            return None
        return _latex2sympy_verdict(norm, ref_norm if isinstance(reference, str) else None, got, ref)
    if is_multi(got) and not is_multi(ref):
        got = _one_value(got)
    if _several_for_one(got, ref):
        return _v(0.0, Status.INCORRECT, "multiple_answers")

    comparison = Comparison(rel_tol=float(rel_tol), abs_tol=float(abs_tol), percent=percent,
                            tuple_order=bool(tuple_order),
                            inexact=bool(_DECIMAL.search(norm) or _DECIMAL.search(ref_norm)),
                            prover=_prover(stage))
    try:
        result = equivalent(got, ref, comparison)
    except TooComplex as exc:
        return _v(0.0, Status.UNDECIDABLE, "too_complex", guard=str(exc.args[0]) if exc.args else "")
    if result is None:
        return None
    if result:
        return _v(1.0, Status.CORRECT, comparison.notes[-1] if comparison.notes else "equivalent")
    return _v(0.0, Status.INCORRECT, "not_equivalent")


def _choice_verdict(norm: str, letter: str, spelled: list[str]) -> Verdict:
    """A letter reference: the answer's letter, and no other letter offered beside it."""
    got = _MC_ANSWER.match(norm)
    letters = {b.strip("() .").upper() for b in spelled} - {""}
    others = {x.upper() for pair in _OTHER_CHOICE.findall(norm[got.end():]) for x in pair if x} if got else set()
    if got and (got.group(1) or got.group(2)).upper() == letter and len(letters) <= 1 and others <= {letter}:
        return _v(1.0, Status.CORRECT, "choice_equal")
    return _v(0.0, Status.INCORRECT, "choice_mismatch")


def _string_verdict(norm: str, ref_norm: str) -> Verdict | None:
    if ref_norm and norm == ref_norm:
        return _v(1.0, Status.CORRECT, "string_equal")
    return None


def _plain_numbers_verdict(norm: str, ref_norm: str) -> Verdict | None:
    """Two decimal numbers, the commonest comparison: exact, without building any tree (None: a long decimal
    reference, which may have been rounded, is left to the comparison)."""
    if PLAIN_NUMBER.fullmatch(norm) and PLAIN_NUMBER.fullmatch(ref_norm):
        if decimal_value(norm) == decimal_value(ref_norm):
            return _v(1.0, Status.CORRECT, "equivalent")
        if "." in ref_norm and len(ref_norm.replace("-", "").replace(".", "").lstrip("0")) >= MIN_GOLD_DIGITS:
            return None
        return _v(0.0, Status.INCORRECT, "not_equivalent")
    return None


def _one_value(got: AnswerValue) -> AnswerValue:
    """A list whose values are all the same value in different spellings (``\\pm 0``, ``\\frac{1}{2} or 0.5``)
    as that one value; any other answer unchanged."""
    items = got.items  # type: ignore[union-attr]
    if len(items) < 2 or len(items) > MAX_DISTINCT_BOXES:
        return got
    try:
        same = all(equivalent(x, items[0], Comparison(prover=_no_proof, refute_first=True)) is True
                   for x in items[1:])
    except TooComplex:
        return got
    return items[0] if same else got


def _several_for_one(got: AnswerValue, ref: AnswerValue) -> bool:
    """Several values offered for a single-valued reference (``x = 1, y = 2`` for a point is one value)."""
    if not is_multi(got) or is_multi(ref):
        return False
    items = got.items  # type: ignore[union-attr]
    coordinates = isinstance(got, FiniteSet) and isinstance(ref, OrderedTuple) and \
        all(isinstance(v, Equation) for v in items)
    return len(items) > 1 and not coordinates


def _prover(stage: Stage) -> Prover | None:
    if stage is Stage.PROBE:
        return _undecided
    if stage is Stage.SYMBOLIC:
        from rlvr.verifiers.math.symbolic import sympy_equal

        return sympy_equal
    return None


def _latex2sympy_verdict(norm: str, ref_text: str | None, got: AnswerValue | None,
                         ref: AnswerValue | None) -> Verdict:
    """latex2sympy2_extended for a side our parser cannot read (in the supervised worker only)."""
    from rlvr.verifiers.math.symbolic import MISSING_FALLBACK, latex2sympy_equal

    if not fallback_installed():
        side = "reference" if ref is None else "response"
        return _v(0.0, Status.UNDECIDABLE, "unparseable_answer", side=side, error=MISSING_FALLBACK)
    if ref is None and (ref_text is None or latex2sympy_equal(ref_text, ref_text) is None):
        return _v(0.0, Status.ERROR, "bad_reference", error="the reference cannot be parsed")
    if got is None and latex2sympy_equal(norm, norm) is None:
        return _v(0.0, Status.UNDECIDABLE, "unparseable_answer")
    if ref_text is None:  # a list reference our parser reads, an answer only latex2sympy reads
        return _v(0.0, Status.UNDECIDABLE, "unparseable_answer")
    if latex2sympy_equal(norm, ref_text):
        return _v(1.0, Status.CORRECT, "symbolic_equal", parser="latex2sympy2_extended")
    return _v(0.0, Status.INCORRECT, "not_equivalent", parser="latex2sympy2_extended")


def clear_caches() -> None:
    """Empty every cache of the math verifier (references, their parses, symbolic verdicts)."""
    _reference_text.cache_clear()
    _reference_parsed.cache_clear()
    _SYMBOLIC_RESULTS.clear()


def caches() -> list[ByteLRU]:
    """The math verifier's caches, each bounded in bytes."""
    return [_reference_text.cache, _reference_parsed.cache, _SYMBOLIC_RESULTS]


def _undecided(x: tuple, y: tuple) -> None:
    return None


def _no_proof(x: tuple, y: tuple) -> bool:
    return False


def _symbolic_stage(answer: str, reference: Any, options: dict[str, Any], deadline: float) -> Verdict:
    remaining = deadline - time.monotonic()
    if remaining < 0.2:
        return _v(0.0, Status.TIMEOUT, "timeout", stage="symbolic")
    key = (answer, reference, repr(sorted(options.items()))) if isinstance(reference, str) else None
    cached = _SYMBOLIC_RESULTS.get(key) if key is not None else None
    if cached is not None:
        return cached
    attempts = 0
    while True:
        attempts += 1
        verdict = _symbolic_attempt(answer, reference, options, deadline)
        # a worker that could not start (a machine short of processes or memory for a moment) says nothing about
        # the answer: started again while the budget lasts, and named in the verdict when it never starts
        if verdict.reason not in RETRIED_START_FAILURES or attempts >= MAX_START_ATTEMPTS \
                or deadline - time.monotonic() < MIN_RETRY_S:
            break
        time.sleep(min(RETRY_PAUSE_S * attempts, max(0.0, deadline - time.monotonic() - MIN_RETRY_S)))
    if key is not None and verdict.status in (Status.CORRECT, Status.INCORRECT, Status.UNDECIDABLE):
        _SYMBOLIC_RESULTS.put(key, verdict)
    if attempts > 1:
        verdict = Verdict(verdict.score, verdict.status, verdict.reason, verdict.extracted,
                          {**verdict.details, "worker_attempts": attempts})
    return verdict


def _symbolic_attempt(answer: str, reference: Any, options: dict[str, Any], deadline: float) -> Verdict:
    """One run of ``compare_in_worker`` through the default runner, back by ``deadline``."""
    from rlvr.verifiers.math.symbolic import compare_in_worker
    from rlvr.verifiers.runner import CallableRequest, default_runner

    remaining = deadline - time.monotonic()
    req = CallableRequest(compare_in_worker, answer, reference, {**options, "timeout_s": max(0.1, remaining - 0.1)},
                          cache=False)
    box: list[Verdict] = []

    def run() -> None:
        try:
            box.append(default_runner().score([req])[0])
        except Exception as exc:  # a closed runner, ...
            box.append(_v(0.0, Status.ERROR, "runner_failed", error=repr(exc)))

    # the runner kills the worker at its deadline; the join makes sure this call returns by then even if
    # the runner itself is slow to answer
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
    truncated: bool = False,
    timeout_s: float = 5.0,
) -> Verdict:
    """See the module docstring."""
    budget_s = 5.0 if timeout_s is None else max(0.0, float(timeout_s))
    deadline = time.monotonic() + budget_s
    soft = deadline - min(INLINE_MARGIN_S, INLINE_MARGIN_SHARE * budget_s)  # where every stage aims to stop
    if percent not in ("auto", "strict"):  # a caller's mistake: raised, unlike anything about the response
        raise ValueError(f"percent must be 'auto' or 'strict', got {percent!r}")
    if not isinstance(response, str):
        return _v(0.0, Status.ERROR, "bad_response", error=f"response is {type(response).__name__}")
    if len(response) > MAX_RESPONSE_CHARS:
        response = response[-MAX_RESPONSE_CHARS:]
    ex = extract(response, strict=bool(strict), truncated=bool(truncated))
    if ex.method == "retracted":  # the words after the answer reject it: no credit, whatever it was
        return Verdict(0.0, Status.INCORRECT, "retracted", None, {"extraction": ex.method})
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
    stage = "inline"
    previous = budget.set_deadline(soft)
    try:
        verdict = decide(answer, reference, **options)
    except budget.OutOfTime:
        verdict = _v(0.0, Status.TIMEOUT, "timeout")
    except Exception as exc:  # noqa: BLE001 - whatever the response is, the caller gets a verdict
        # a defect of ours on some input: still a verdict for the caller, named so that it is found and fixed
        verdict = _v(0.0, Status.ERROR, "internal_error", error=repr(exc)[:300])
    finally:
        budget.set_deadline(previous)
    if verdict is None:
        stage = "symbolic"
        fallback_installed()  # the worker may need latex2sympy2_extended: a missing one is said here, once
        verdict = _symbolic_stage(answer, reference, options, soft - min(PROBE_RESERVE_S, 0.1 * budget_s))
        if verdict.status in (Status.TIMEOUT, Status.ERROR):
            previous = budget.set_deadline(soft)
            try:
                probed = decide(answer, reference, stage=Stage.PROBE, **options)
            except (budget.OutOfTime, TooComplex):
                probed = None
            finally:
                budget.set_deadline(previous)
            if probed is not None and probed.status == Status.CORRECT and probed.reason == "numeric_probe":
                verdict = Verdict(probed.score, probed.status, probed.reason, None,
                                  {**probed.details, "symbolic": verdict.reason})
                stage = "probe"
    details = {**verdict.details, "extraction": ex.method, "stage": stage,
               "elapsed_s": round(time.perf_counter() - t0, 6)}
    return Verdict(verdict.score, verdict.status, verdict.reason, shown, details)


__all__ = ["Stage", "caches", "clear_caches", "decide", "math_verifier"]
