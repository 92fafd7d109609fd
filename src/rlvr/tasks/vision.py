"""Vision tasks generated locally: coloured shapes on a 4x4 grid, drawn with numpy and encoded as PNG bytes.

    vision:count:n=2000,seed=0          "How many red squares?"             -> "2"            (exact)
    vision:classify:n=500,ask=shape     "What shape is the only object?"     -> "circle"       (exact)
    vision:ground:split=eval,n=200      "Where is the red object? ..."       -> [8, 16, 24, 24] (grounding, IoU)

Every image is a 32x32 black canvas cut into a 4x4 grid of 8-pixel cells (``CANVAS``, ``CELL``); each object fills
cells, so with a vision patch size of 8 every image token sees exactly one cell. The three families are the rule
rewards of the seed papers on perception tasks: counting and classification with an equality reward and no
reasoning (CLS-RL, "No-Thinking-CLS-RL", Li et al., 2025, arXiv 2503.16188), and grounding with the IoU reward
(Visual-RFT, Liu et al., 2025, arXiv 2503.01785), where the box-size constraint of GUI-G1 (Zhou et al., 2025,
arXiv 2505.15810) can be switched on with ``box_constraint=1`` (rlvr.verifiers.grounding).

Each task carries its image in ``Task.images`` (PNG bytes) and a chat prompt whose user message holds an
``{"type": "image"}`` part before the question, the form every processor's chat template expands into its own
image tokens; ``prompt=text`` gives a plain-text prompt starting with ``<image>`` instead (LLaVA-style processors).

Options (``key=value`` joined by ","): ``split`` (train | eval, default train), ``n`` (tasks, default 1000),
``seed`` (0), ``heldout_percent`` (10), ``colours`` (how many of ``COLOURS`` are used, 2..6, default 4),
``prompt`` (chat | text); count: ``max_count`` (largest answer, default 4), ``distractors`` (most objects of other
colours, default 3); classify: ``ask`` (colour | shape), ``max_size`` (1: one cell; 2: the object spans 1x1, 1x2, 2x1
or 2x2 cells); ground: ``distractors`` (default 2), ``box_constraint``
(0 | 1); count and ground: ``target`` (the colour asked about; default: drawn from the colours in use). A layout (every object's cells, colour and shape, and the question) belongs to the held-out split when a
hash of it falls in the held-out bucket, so the splits never share a layout whatever the seed or ``n``; the same
spec always gives the same tasks in the same order.
"""

from __future__ import annotations

import hashlib
import io
import random
from dataclasses import dataclass
from typing import Any

import numpy as np

from rlvr.tasks.base import DataError, Task

CANVAS, CELL = 32, 8
GRID = CANVAS // CELL
COLOURS: dict[str, tuple[int, int, int]] = {
    "red": (255, 0, 0), "green": (0, 255, 0), "blue": (0, 0, 255),
    "yellow": (255, 255, 0), "magenta": (255, 0, 255), "cyan": (0, 255, 255),
}
SHAPES = ("square", "circle", "triangle")
KINDS = ("count", "classify", "ground")
SPLITS = ("train", "eval")
VERIFIER = {"count": "exact", "classify": "exact", "ground": "grounding"}


def _shape_mask(shape: str, height: int, width: int) -> np.ndarray:
    """[height, width] bool mask of a shape filling a box of cells."""
    ys, xs = np.mgrid[0:height, 0:width] + 0.5
    if shape == "square":
        return np.ones((height, width), dtype=bool)
    if shape == "circle":
        return (ys - height / 2) ** 2 / (height / 2) ** 2 + (xs - width / 2) ** 2 / (width / 2) ** 2 <= 1.0
    if shape == "triangle":  # apex at the top centre, base along the bottom edge
        return np.abs(xs - width / 2) <= (ys / height) * (width / 2)
    raise ValueError(f"unknown shape {shape!r}; known: {', '.join(SHAPES)}")


@dataclass(frozen=True)
class Item:
    """One object: its top-left cell, its size in cells, its colour and shape."""

    row: int
    col: int
    colour: str
    shape: str = "square"
    height: int = 1
    width: int = 1

    def cells(self) -> set[tuple[int, int]]:
        return {(self.row + i, self.col + j) for i in range(self.height) for j in range(self.width)}

    def box(self) -> list[int]:
        """``[x1, y1, x2, y2]`` in pixels."""
        return [self.col * CELL, self.row * CELL, (self.col + self.width) * CELL, (self.row + self.height) * CELL]

    def key(self) -> str:
        return f"{self.row}{self.col}{self.height}{self.width}:{self.colour}:{self.shape}"


def render(items: list[Item]) -> np.ndarray:
    """[CANVAS, CANVAS, 3] uint8 image of the items on black."""
    image = np.zeros((CANVAS, CANVAS, 3), dtype=np.uint8)
    for item in items:
        y, x = item.row * CELL, item.col * CELL
        mask = _shape_mask(item.shape, item.height * CELL, item.width * CELL)
        image[y:y + item.height * CELL, x:x + item.width * CELL][mask] = COLOURS[item.colour]
    return image


def png_bytes(image: np.ndarray) -> bytes:
    """The image encoded as PNG (deterministic: no timestamps, fixed compression)."""
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(image).save(buffer, format="PNG", compress_level=6)
    return buffer.getvalue()


def decode_png(data: bytes) -> np.ndarray:
    """[H, W, 3] uint8 array of PNG bytes (the inverse of ``png_bytes``)."""
    from PIL import Image

    with Image.open(io.BytesIO(data)) as image:
        return np.asarray(image.convert("RGB")).copy()


@dataclass(frozen=True)
class VisionSpec:
    kind: str
    split: str = "train"
    n: int = 1000
    seed: int = 0
    heldout_percent: int = 10
    colours: int = 4
    prompt: str = "chat"
    max_count: int = 4
    distractors: int | None = None
    ask: str = "colour"
    box_constraint: int = 0
    target: str | None = None
    max_size: int = 1

    def __post_init__(self):
        checks = [
            (self.kind in KINDS, f"kind must be one of {', '.join(KINDS)}, got {self.kind!r}"),
            (self.split in SPLITS, f"split must be one of {', '.join(SPLITS)}, got {self.split!r}"),
            (self.n >= 1, f"n must be >= 1, got {self.n}"),
            (1 <= self.heldout_percent <= 50, f"heldout_percent must be in 1..50, got {self.heldout_percent}"),
            (2 <= self.colours <= len(COLOURS), f"colours must be in 2..{len(COLOURS)}, got {self.colours}"),
            (self.prompt in ("chat", "text"), f"prompt must be chat or text, got {self.prompt!r}"),
            (1 <= self.max_count <= 8, f"max_count must be in 1..8, got {self.max_count}"),
            (self.distractors is None or 0 <= self.distractors <= 6,
             f"distractors must be in 0..6, got {self.distractors}"),
            (self.ask in ("colour", "shape"), f"ask must be colour or shape, got {self.ask!r}"),
            (self.box_constraint in (0, 1), f"box_constraint must be 0 or 1, got {self.box_constraint}"),
            (self.max_size in (1, 2), f"max_size must be 1 or 2, got {self.max_size}"),
            (self.target is None or self.target in self.palette,
             f"target must be one of the colours in use ({', '.join(self.palette)}), got {self.target!r}"),
        ]
        for ok, why in checks:
            if not ok:
                raise DataError(f"vision:{self.kind}: {why}")

    @property
    def palette(self) -> list[str]:
        return list(COLOURS)[: self.colours]

    @property
    def n_distractors(self) -> int:
        return self.distractors if self.distractors is not None else (3 if self.kind == "count" else 2)


def _free_cells(used: set[tuple[int, int]]) -> list[tuple[int, int]]:
    return [(r, c) for r in range(GRID) for c in range(GRID) if (r, c) not in used]


def _place(rng: random.Random, used: set[tuple[int, int]], colour: str, shape: str = "square",
           sizes: tuple[tuple[int, int], ...] = ((1, 1),)) -> Item | None:
    """An item on free cells (size drawn from ``sizes``), or None when nothing fits."""
    height, width = rng.choice(sizes)
    spots = [(r, c) for r, c in _free_cells(used) if r + height <= GRID and c + width <= GRID
             and all((r + i, c + j) not in used for i in range(height) for j in range(width))]
    if not spots:
        return None
    r, c = rng.choice(spots)
    item = Item(r, c, colour, shape, height, width)
    used |= item.cells()
    return item


def _layout(spec: VisionSpec, rng: random.Random) -> tuple[list[Item], str, Any]:
    """(items, question, reference) of one random layout."""
    palette = spec.palette
    used: set[tuple[int, int]] = set()
    if spec.kind == "count":
        target = spec.target or rng.choice(palette)
        k = rng.randint(0, spec.max_count)
        items = [_place(rng, used, target) for _ in range(k)]
        others = [c for c in palette if c != target]
        items += [_place(rng, used, rng.choice(others)) for _ in range(rng.randint(0, spec.n_distractors))]
        return [i for i in items if i], f"How many {target} squares?", str(k)
    if spec.kind == "classify":
        sizes = ((1, 1), (1, 2), (2, 1), (2, 2)) if spec.max_size == 2 else ((1, 1),)
        item = _place(rng, used, rng.choice(palette), rng.choice(SHAPES), sizes=sizes)
        if spec.ask == "colour":
            return [item], "What colour is the only object?", item.colour
        return [item], "What shape is the only object?", item.shape
    target = spec.target or rng.choice(palette)
    item = _place(rng, used, target, sizes=((1, 1), (1, 2), (2, 1)))
    others = [c for c in palette if c != target]
    items = [item] + [_place(rng, used, rng.choice(others)) for _ in range(rng.randint(0, spec.n_distractors))]
    return [i for i in items if i], f"Where is the {target} object? Answer [x1,y1,x2,y2].", item.box()


def split_of(key: str, heldout_percent: int) -> str:
    bucket = int.from_bytes(hashlib.sha256(key.encode()).digest()[:4], "big") % 100
    return "eval" if bucket < heldout_percent else "train"


def vision_prompt(question: str, style: str = "chat"):
    """The prompt of one image and a question: a chat message with an image part, or ``<image>`` + text."""
    if style == "text":
        return f"<image>{question}\n"
    return [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": question}]}]


# Draws in a row that find no new layout of the split before the split counts as exhausted: a split's last unseen
# layout among the smallest family's 192 is missed this often in a row with probability below 1e-11.
MAX_MISSES = 5000


def generate(spec: VisionSpec) -> list[Task]:
    """``spec.n`` distinct layouts of ``spec.split``, drawn with ``spec.seed``; an error when the split has
    too few distinct layouts to draw them."""
    rng = random.Random(f"vision:{spec.kind}:{spec.seed}")
    tasks: list[Task] = []
    seen: set[str] = set()
    misses = 0
    while len(tasks) < spec.n:
        if misses > MAX_MISSES:
            raise DataError(f"vision:{spec.kind}: found only {len(tasks)} distinct {spec.split} layouts of the "
                            f"{spec.n} asked for; lower n or widen the layouts (colours, distractors)")
        items, question, reference = _layout(spec, rng)
        key = f"{spec.kind}|{question}|" + ",".join(sorted(i.key() for i in items))
        if key in seen or split_of(key, spec.heldout_percent) != spec.split:
            misses += 1
            continue
        misses = 0
        seen.add(key)
        digest = hashlib.sha256(key.encode()).hexdigest()[:12]
        options = {"box_constraint": True} if spec.kind == "ground" and spec.box_constraint else {}
        tasks.append(Task(prompt=vision_prompt(question, spec.prompt), reference=reference,
                          id=f"vision:{spec.kind}:{digest}", verifier=VERIFIER[spec.kind], verifier_options=options,
                          meta={"layout": key, "split": spec.split}, images=(png_bytes(render(items)),)))
    return tasks


_INT_OPTIONS = ("n", "seed", "heldout_percent", "colours", "max_count", "distractors", "box_constraint", "max_size")


def parse_spec(text: str) -> VisionSpec:
    """``vision:KIND[:key=value,...]`` (module docstring)."""
    parts = text.split(":", 2)
    if parts[0] != "vision" or len(parts) < 2 or parts[1] not in KINDS:
        raise DataError(f"{text!r}: expected vision:KIND[:key=value,...] with KIND one of {', '.join(KINDS)}")
    options: dict[str, Any] = {}
    if len(parts) == 3 and parts[2].strip():
        for item in parts[2].split(","):
            key, sep, value = item.partition("=")
            key, value = key.strip(), value.strip()
            if not sep:
                raise DataError(f"{text!r}: expected key=value, got {item!r}")
            if key in _INT_OPTIONS:
                try:
                    options[key] = int(value)
                except ValueError:
                    raise DataError(f"{text!r}: {key} must be an integer, got {value!r}") from None
            elif key in ("split", "prompt", "ask", "target"):
                options[key] = value
            else:
                known = sorted((*_INT_OPTIONS, "split", "prompt", "ask", "target"))
                raise DataError(f"{text!r}: unknown option {key!r}; known: {', '.join(known)}")
    return VisionSpec(kind=parts[1], **options)


def from_spec(text: str) -> list[Task]:
    """The tasks of a ``vision:`` spec."""
    return generate(parse_spec(text))
