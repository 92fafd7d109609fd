"""The "grounding" verifier: IoU between the boxes in a response and the gold boxes (the IoU reward of Visual-RFT,
Liu et al., 2025, "Visual-RFT: Visual Reinforcement Fine-Tuning").

    verify("grounding", "<answer>[10, 10, 50, 50]</answer>", [10, 10, 50, 50])       # correct, score 1.0
    verify("grounding", "The dog is at (0, 0, 10, 10).", [5, 0, 15, 10])             # partial, score 1/3

Boxes are ``[x1, y1, x2, y2]`` with x1 < x2 and y1 < y2 in any consistent unit (pixels or normalised); areas are
computed on the continuous plane, ``(x2 - x1) * (y2 - y1)`` (no "+1" pixel convention).

reference: one box, or a non-empty list of boxes.

Extraction: boxes are read from the content of the LAST ``<answer>...</answer>`` section when the response has one
that contains a box (an unclosed final ``<answer>`` runs to the end), else from the whole response. A box is four
comma-separated numbers in brackets or parentheses: ``[10, 20, 30, 40]`` (also inside JSON such as
``[[10,20,30,40]]`` or ``{"bbox_2d": [10,20,30,40]}``) or ``(10, 20, 30, 40)``; or two corner points, each
``(x, y)`` or ``[x, y]``, next to each other (with a comma, semicolon, "to", "and", a dash or an arrow between):
``(10,20),(30,40)``, ``[[10,20],[30,40]]``, ``[(10,20),(30,40)]``, ``from (10,20) to (30,40)``, Qwen-VL's
``<|box_start|>(10,20),(30,40)<|box_end|>``. Unlabelled points are the top-left corner, then the bottom-right one.
Points labelled with their corners (``top-left (10,20) bottom-right (30,40)``, ``Top left: (10, 20), bottom
right: (30, 40)``, ``the bottom-right corner is at (30, 40) and the top-left corner is at (10, 20)``, also
``upper``/``lower``, or the other two corners ``top-right`` and ``bottom-left``) make the box they span, in either
order; two labels that do not name opposite corners make no box.
A box with x2 <= x1 or y2 <= y1 (or a non-finite number) is invalid and ignored; if no valid box remains the verdict is
"undecidable", reason "no_valid_box" ("no_box_found" if nothing box-like was there). Exact duplicates of a predicted
box are counted once (a model restating its answer is not guessing twice).

Scoring with several boxes: every (predicted, gold) pair gets its IoU; pairs are matched greedily, highest IoU first,
each box used at most once (pairs with IoU 0 are never matched). Then

    threshold=None (default):  score = sum of matched IoUs / max(#pred, #gold)
    threshold=t:               score = #matched pairs with IoU >= t / max(#pred, #gold)

Dividing by max(#pred, #gold), not #gold, is deliberate: with #gold alone a policy could raise its reward by emitting
many boxes, so every unmatched prediction counts against the score, exactly as every missed gold box does. With one
gold box and one prediction the score is plainly their IoU (or IoU >= t). Greedy matching is the usual detection-eval
choice; it is not always the optimal assignment, but it is deterministic (ties go to the earlier box) and cheap.

Box-size constraint (GUI-G1, Zhou et al., 2025, "GUI-G1: Understanding R1-Zero-Like Training for Visual Grounding
in GUI Agents", arXiv 2505.15810, Sec. 4.2): an IoU reward can be raised by inflating the box, since a box that
covers the gold box scores the area ratio whatever else it covers (the whole-image box always scores
gold area / image area > 0), and a hit reward (centre inside the gold box) by shrinking it. Two options act on it:

    box_constraint=True (or a factor f > 1, True = 2):  a predicted box whose width or height is more than f times,
        or less than 1/f times, its matched gold box's scores 0 for that pair (details["size_violations"]).
        A hard gate on size: the whole-image box earns nothing however much of the gold box it covers.
    box_weight=beta with image_size=[W, H]:  GUI-G1's own size term R_box, the harmonic mean of
        1 - |x1 - x1*| / W, 1 - |y1 - y1*| / H, 1 - |x2 - x2*| / W, 1 - |y2 - y2*| / H (clipped at 0; their released
        ``box_reward``), is blended into each matched pair's score: (IoU + beta * R_box) / (1 + beta), so an exact box
        still scores 1. GUI-G1 adds it to the hit and IoU rewards (R_hit + 0.25 R_IoU + 0.125 R_box in the released
        recipe, i.e. beta = 0.5 relative to IoU); it rewards boxes whose corners sit near the gold ones but does not
        by itself zero an oversized box (the whole 32x32 image against the one-cell box [8, 8, 16, 16] has R_box 0.6).

Status: "correct" (score 1), "partial" (0 < score < 1), "incorrect" (0); reasons "boxes_match", "boxes_partial",
"boxes_miss"; "too_many_boxes" (incorrect) past ``max_boxes`` valid predictions; "bad_reference"/"bad_option"/
"bad_response" are status "error". ``extracted`` is the valid predicted boxes as a JSON list.
"""

from __future__ import annotations

import json
import math
import numbers
import re
from typing import Any

from rlvr.verifiers.base import Status, Verdict
from rlvr.verifiers.registry import register_verifier

_NUM = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?"
_BOX = re.compile(rf"[\[(][ \t]*({_NUM})[ \t]*,\s*({_NUM})[ \t]*,\s*({_NUM})[ \t]*,\s*({_NUM})\s*[\])]")
# A corner point "(x, y)" or "[x, y]", with the corner it names when a label comes right before it ("top-left
# (10, 20)", "the bottom right corner is at [30, 40]").
_POINT = re.compile(
    rf"""(?:(?:the[ \t]+)?(?P<v>top|upper|bottom|lower)[ \t_-]*(?P<h>left|right)(?:[ \t_-]*corner)?
         (?:[ \t_-]*(?:point|coordinates?))?[ \t]*(?::|=|is[ \t]+at|is|at)?[ \t]*)?
         [\[(][ \t]*(?P<x>{_NUM})[ \t]*,[ \t]*(?P<y>{_NUM})[ \t]*[\])]""",
    re.VERBOSE | re.IGNORECASE,
)
# What may stand between the two corners of one box: a comma or semicolon, "to", "and", a dash or an arrow.
_BETWEEN = re.compile(r"[\s,;]*(?:(?:and|to|-+|–|—|→|->)[\s,;]*)?", re.IGNORECASE)
_ANSWER_OPEN, _ANSWER_CLOSE = "<answer>", "</answer>"

Box = tuple[float, float, float, float]


def _valid(box: Box) -> bool:
    x1, y1, x2, y2 = box
    return all(math.isfinite(v) for v in box) and x2 > x1 and y2 > y1


def _corners(first: re.Match, second: re.Match) -> Box | None:
    """The box of two corner points: as written (top-left, then bottom-right) when neither is labelled; from the
    labels when both name opposite corners, in either order (top-right and bottom-left too); None when the labels
    do not name opposite corners."""
    x1, y1, x2, y2 = (float(first["x"]), float(first["y"]), float(second["x"]), float(second["y"]))
    labels = [(m["v"], m["h"]) for m in (first, second)]
    if labels == [(None, None)] * 2:
        return x1, y1, x2, y2
    if None in (labels[0][0], labels[1][0]):
        return None
    top = [v.lower() in ("top", "upper") for v, _ in labels]
    left = [h.lower() == "left" for _, h in labels]
    if top[0] == top[1] or left[0] == left[1]:
        return None
    return min(x1, x2), min(y1, y2), max(x1, x2), max(y1, y2)


def find_boxes(text: str) -> list[Box]:
    """Every box-like 4-tuple in ``text``, in order (valid or not): four numbers in brackets or parentheses, or two
    corner points next to each other (``(x1, y1), (x2, y2)``, ``[[x1, y1], [x2, y2]]``, ``top-left (x1, y1)
    bottom-right (x2, y2)``)."""
    found: list[tuple[int, Box]] = []
    taken: list[tuple[int, int]] = []
    for m in _BOX.finditer(text):
        found.append((m.start(), tuple(float(v) for v in m.groups())))
        taken.append(m.span())
    points = [m for m in _POINT.finditer(text) if not any(a <= m.start("x") < b for a, b in taken)]
    i = 0
    while i + 1 < len(points):
        first, second = points[i], points[i + 1]
        if _BETWEEN.fullmatch(text, first.end(), second.start()):
            box = _corners(first, second)
            if box is not None:
                found.append((first.start(), box))
                i += 2
                continue
        i += 1
    return [box for _, box in sorted(found, key=lambda item: item[0])]


def _answer_section(text: str) -> str | None:
    start = text.rfind(_ANSWER_OPEN)
    if start == -1:
        return None
    start += len(_ANSWER_OPEN)
    end = text.find(_ANSWER_CLOSE, start)
    return text[start:] if end == -1 else text[start:end]


def iou(a: Box, b: Box) -> float:
    """Intersection over union of two valid boxes."""
    iw = min(a[2], b[2]) - max(a[0], b[0])
    ih = min(a[3], b[3]) - max(a[1], b[1])
    if iw <= 0 or ih <= 0:
        return 0.0
    inter = iw * ih
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return min(1.0, inter / union) if union > 0 else 0.0


def greedy_match(pred: list[Box], gold: list[Box]) -> list[tuple[int, int, float]]:
    """(pred index, gold index, IoU) pairs matched greedily by IoU, highest first; IoU-0 pairs are never matched."""
    pairs = sorted(
        ((iou(p, g), i, j) for i, p in enumerate(pred) for j, g in enumerate(gold)), key=lambda t: (-t[0], t[1], t[2])
    )
    used_p: set[int] = set()
    used_g: set[int] = set()
    matches = []
    for value, i, j in pairs:
        if value <= 0:
            break
        if i in used_p or j in used_g:
            continue
        used_p.add(i)
        used_g.add(j)
        matches.append((i, j, value))
    return matches


def _reference_boxes(reference: Any) -> list[Box] | str:
    def as_box(value: Any) -> Box | None:
        if not isinstance(value, (list, tuple)) or len(value) != 4:
            return None
        if not all(isinstance(v, numbers.Real) and not isinstance(v, bool) for v in value):
            return None
        return tuple(float(v) for v in value)

    single = as_box(reference)
    if single is not None:
        boxes = [single]
    elif isinstance(reference, (list, tuple)) and reference:
        boxes = [as_box(v) for v in reference]
        if None in boxes:
            return "expected a box [x1, y1, x2, y2] or a non-empty list of boxes"
    else:
        return "expected a box [x1, y1, x2, y2] or a non-empty list of boxes"
    bad = [list(b) for b in boxes if not _valid(b)]
    if bad:
        return f"degenerate gold box(es) (need x1 < x2 and y1 < y2, finite): {bad[:3]!r}"
    return boxes


def within_size(pred: Box, gold: Box, factor: float) -> bool:
    """True when the predicted box's width and height are each within ``factor`` times the gold box's (and at
    least 1/factor times): the size gate of ``box_constraint``."""
    for p, g in ((pred[2] - pred[0], gold[2] - gold[0]), (pred[3] - pred[1], gold[3] - gold[1])):
        if p > factor * g or p * factor < g:
            return False
    return True


def box_size_reward(pred: Box, gold: Box, size: tuple[float, float]) -> float:
    """GUI-G1's R_box (arXiv 2505.15810, Sec. 4.2): the harmonic mean of each corner coordinate's closeness
    1 - |pred - gold| / image side, clipped to [0, 1]; 0 when any coordinate is a whole image side away."""
    width, height = size
    sides = (width, height, width, height)
    closeness = [max(0.0, 1.0 - abs(p - g) / side) for p, g, side in zip(pred, gold, sides)]
    if min(closeness) <= 0:
        return 0.0
    return len(closeness) / sum(1.0 / c for c in closeness)


def _size_factor(option: Any) -> float | None:
    """The size-gate factor of ``box_constraint`` (0 = off), None when the option is unusable."""
    if option is False or option is None:
        return 0.0
    if option is True:
        return 2.0
    if isinstance(option, numbers.Real) and math.isfinite(option) and option > 1:
        return float(option)
    return None


def _image_size(value: Any) -> tuple[float, float] | None:
    if isinstance(value, (list, tuple)) and len(value) == 2 and all(
            isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(v) and v > 0 for v in value):
        return float(value[0]), float(value[1])
    return None


def _show(box: Box) -> list[float | int]:
    return [int(v) if v.is_integer() and abs(v) < 2**53 else v for v in box]


def _error(reason: str, why: str) -> Verdict:
    return Verdict(0.0, Status.ERROR, reason, details={"error": why})


@register_verifier("grounding")
def grounding(
    response: str,
    reference: Any,
    *,
    threshold: float | None = None,
    max_boxes: int = 100,
    box_constraint: bool | float = False,
    box_weight: float = 0.0,
    image_size: Any = None,
    timeout_s: float | None = None,  # the runner's budget; the work here is bounded by max_boxes
) -> Verdict:
    """IoU reward between the predicted boxes and the gold boxes (see the module docstring)."""
    gold = _reference_boxes(reference)
    if isinstance(gold, str):
        return _error("bad_reference", gold)
    if threshold is not None and (
        isinstance(threshold, bool) or not isinstance(threshold, numbers.Real) or not 0 < threshold <= 1
    ):
        return _error("bad_option", f"threshold must be None or a number in (0, 1], got {threshold!r}")
    if isinstance(max_boxes, bool) or not isinstance(max_boxes, int) or max_boxes < 1:
        return _error("bad_option", f"max_boxes must be an int >= 1, got {max_boxes!r}")
    size_factor = _size_factor(box_constraint)
    if size_factor is None:
        return _error("bad_option", f"box_constraint must be true/false or a factor > 1, got {box_constraint!r}")
    if isinstance(box_weight, bool) or not isinstance(box_weight, numbers.Real) or not 0 <= box_weight < math.inf:
        return _error("bad_option", f"box_weight must be a number >= 0, got {box_weight!r}")
    size = _image_size(image_size)
    if box_weight and size is None:
        return _error("bad_option", f"box_weight needs image_size=[width, height] (positive), got {image_size!r}")
    if not isinstance(response, str):
        return _error("bad_response", f"response is {type(response).__name__}, expected str")

    source, found = "response", None
    section = _answer_section(response)
    if section is not None:
        found = find_boxes(section)
        source = "answer"
    if not found:
        source, found = "response", find_boxes(response)
    if not found:
        return Verdict(0.0, Status.UNDECIDABLE, "no_box_found")
    valid = list(dict.fromkeys(b for b in found if _valid(b)))
    n_invalid = sum(1 for b in found if not _valid(b))
    if not valid:
        return Verdict(0.0, Status.UNDECIDABLE, "no_valid_box", details={"invalid_boxes": n_invalid, "source": source})
    extracted = json.dumps([_show(b) for b in valid[:max_boxes]])
    details: dict[str, Any] = {
        "source": source,
        "n_pred": len(valid),
        "n_gold": len(gold),
        "invalid_boxes": n_invalid,
        "mode": "continuous" if threshold is None else f"threshold={threshold}",
    }
    if len(valid) > max_boxes:
        return Verdict(0.0, Status.INCORRECT, "too_many_boxes", extracted=extracted + " ...", details=details)

    matches = greedy_match(valid, gold)
    details["matches"] = [{"pred": i, "gold": j, "iou": round(v, 6)} for i, j, v in matches]
    if size_factor > 0:
        kept = [(i, j, v) for i, j, v in matches if within_size(valid[i], gold[j], size_factor)]
        details["size_violations"] = len(matches) - len(kept)
        matches = kept
    if box_weight:
        matches = [(i, j, (v + box_weight * box_size_reward(valid[i], gold[j], size)) / (1 + box_weight))
                   for i, j, v in matches]
        details["box_weight"] = box_weight
    denominator = max(len(valid), len(gold))
    if threshold is None:
        score = sum(v for _, _, v in matches) / denominator
    else:
        score = sum(1 for _, _, v in matches if v >= threshold) / denominator
    score = max(0.0, min(1.0, score))
    if score >= 1.0 - 1e-12:
        return Verdict(1.0, Status.CORRECT, "boxes_match", extracted=extracted, details=details)
    if score > 0:
        return Verdict(score, Status.PARTIAL, "boxes_partial", extracted=extracted, details=details)
    return Verdict(0.0, Status.INCORRECT, "boxes_miss", extracted=extracted, details=details)
