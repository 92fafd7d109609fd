"""reasoning-gym's procedural generators as a task source, generated locally from a seed.

    load_tasks("reasoning_gym:chain_sum,basic_arithmetic:size=200,seed=1,chain_sum.max_terms=3")

Options, after the second colon, are ``key=value`` pairs separated by commas:
    size=N            tasks per dataset (default 100)
    seed=S            generator seed (default 0)
    split=all|train|eval   keep only questions whose hash falls in the training or the held-out bucket
                      (default all); train and eval never share a question, whatever their seeds
    heldout_percent=P the held-out bucket's share of questions (default 10)
    instruction=0|1   append the line asking for the answer in <answer> tags (default 1)
    binary=0|1        the verifier gives partial credit as 0 (default 0; see docs/data.md)
    timeout_s=T       the verifier's time budget per call (default 30: a reward worker's first call imports
                      reasoning-gym and builds the scorer, which takes seconds on a busy machine)
    levels=A-B        generate ``size`` tasks at each of reasoning-gym's curriculum levels A..B (or one level A),
                      each labelled ``meta["difficulty"] = "level_L"`` for per-level metrics
    NAME.key=value    one option of dataset NAME's reasoning-gym config (e.g. chain_sum.max_terms=3); it wins
                      over a level's setting
A different seed is NOT a held-out set: reasoning-gym draws entry i of seed s from Random(s + i), so seed 2
repeats seed 1's entries shifted by one. Use split=train and split=eval (``rlvr data stats --eval`` shows
the overlap). Each task is checked by the "reasoning_gym" verifier with the dataset's own scorer; ``meta["source"]`` is
the dataset's name, so mixtures and per-source metrics see each generator separately, and
``meta["completion"]`` is the gold answer in its tags, the target of ``rlvr sft``.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from rlvr.tasks.base import DataError, Task

PREFIX = "reasoning_gym"
INSTRUCTION = "Put only your final answer between <answer> and </answer>."
_OWN_KEYS = ("size", "seed", "instruction", "split", "heldout_percent", "binary", "timeout_s", "levels")
SPLITS = ("all", "train", "eval")


def _value(text: str) -> Any:
    """``3`` -> 3, ``0.5`` -> 0.5, ``true`` -> True, ``[1,2]`` stays a string (commas split options), else text."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def parse_spec(spec: str) -> tuple[list[str], dict[str, Any], dict[str, dict[str, Any]]]:
    """(dataset names, own options, per-dataset config options) of a ``reasoning_gym:...`` spec."""
    head, _, rest = spec.partition(":")
    if head != PREFIX or not rest:
        raise DataError(f"{spec!r}: expected reasoning_gym:NAME[,NAME...][:key=value,...]")
    names_text, _, options_text = rest.partition(":")
    names = [n.strip() for n in names_text.split(",") if n.strip()]
    if not names:
        raise DataError(f"{spec!r}: no dataset names (expected reasoning_gym:NAME[,NAME...])")
    if len(set(names)) != len(names):
        raise DataError(f"{spec!r}: a dataset is named twice")
    own: dict[str, Any] = {"size": 100, "seed": 0, "instruction": 1, "split": "all", "heldout_percent": 10,
                           "binary": 0, "timeout_s": 30}
    per: dict[str, dict[str, Any]] = {name: {} for name in names}
    for item in filter(None, (i.strip() for i in options_text.split(","))):
        key, eq, value = item.partition("=")
        if not eq:
            raise DataError(f"{spec!r}: expected key=value, got {item!r}")
        key = key.strip()
        if "." in key:
            name, _, option = key.partition(".")
            if name not in per:
                raise DataError(f"{spec!r}: option {key!r} is for {name!r}, which is not one of {', '.join(names)}")
            per[name][option] = _value(value.strip())
        elif key == "levels":
            own["levels"] = _levels(spec, value.strip())
        elif key == "split":
            if value.strip() not in SPLITS:
                raise DataError(f"{spec!r}: split must be one of {', '.join(SPLITS)}, got {value!r}")
            own["split"] = value.strip()
        elif key in _OWN_KEYS:
            try:
                own[key] = int(value)
            except ValueError:
                raise DataError(f"{spec!r}: {key} must be an integer, got {value!r}") from None
        else:
            raise DataError(f"{spec!r}: unknown option {key!r}; known: {', '.join(_OWN_KEYS)} and NAME.key")
    if own["timeout_s"] < 1:
        raise DataError(f"{spec!r}: timeout_s must be >= 1, got {own['timeout_s']}")
    if own["size"] < 1:
        raise DataError(f"{spec!r}: size must be >= 1, got {own['size']}")
    if not 1 <= own["heldout_percent"] <= 50:
        raise DataError(f"{spec!r}: heldout_percent must be in 1..50, got {own['heldout_percent']}")
    return names, own, per


def split_of(question: str, heldout_percent: int) -> str:
    """"eval" when the question's hash falls in the held-out bucket, else "train" (as arithmetic.py splits)."""
    bucket = int.from_bytes(hashlib.sha256(question.encode()).digest()[:4], "big") % 100
    return "eval" if bucket < heldout_percent else "train"


def _levels(spec: str, text: str) -> list[int]:
    low, dash, high = text.partition("-")
    try:
        first, last = int(low), int(high if dash else low)
    except ValueError:
        raise DataError(f"{spec!r}: levels must be A-B or A (whole numbers), got {text!r}") from None
    if not 0 <= first <= last:
        raise DataError(f"{spec!r}: levels must satisfy 0 <= A <= B, got {text!r}")
    return list(range(first, last + 1))


def _reasoning_gym(spec: str):
    try:
        import reasoning_gym
    except ImportError:
        raise DataError(f"{spec!r}: needs the 'reasoning-gym' library: pip install 'rlvr[data]'") from None
    return reasoning_gym


def known_datasets(spec: str = PREFIX) -> list[str]:
    from reasoning_gym.factory import DATASETS

    _reasoning_gym(spec)
    return sorted(DATASETS)


def _level_config(spec: str, name: str, level: int) -> dict[str, Any]:
    """The config reasoning-gym's curriculum for ``name`` sets at ``level`` (levels past the last stay there)."""
    import dataclasses

    from reasoning_gym.factory import create_curriculum, has_curriculum

    if not has_curriculum(name):
        raise DataError(f"{spec!r}: dataset {name!r} has no reasoning-gym curriculum, so levels= cannot apply")
    curriculum = create_curriculum(name)
    curriculum.set_global_level(level)
    config = dataclasses.asdict(curriculum.generate_configuration({}))
    return {key: value for key, value in config.items() if key not in ("seed", "size")}


def _generate(rg, spec: str, name: str, level: int | None, own: dict[str, Any], options: dict[str, Any]) -> list[Task]:
    split, percent, size = own["split"], own["heldout_percent"], own["size"]
    # enough entries for the wanted split, whose share of questions is about `percent` (or 100 - percent)
    share = 100 if split == "all" else percent if split == "eval" else 100 - percent
    pool = size if split == "all" else size * 100 // share * 3 + 100
    try:
        # entry i of seed s is drawn from Random(s + i): levels get seeds far apart, so they do not share draws
        seed = own["seed"] + (0 if level is None else 1_000_003 * level)
        dataset = rg.create_dataset(name, size=pool, seed=seed, **options)
    except (TypeError, ValueError, AssertionError) as exc:
        raise DataError(f"{spec!r}: dataset {name!r}: bad options {options}: {exc}") from None
    verifier_options = {"timeout_s": float(own["timeout_s"]), **({"binary": True} if own["binary"] else {})}
    prefix = f"rg:{name}" if level is None else f"rg:{name}:level_{level}"
    tasks = []
    for index, entry in enumerate(dataset):
        if len(tasks) == size:
            break
        if split != "all" and split_of(entry["question"], percent) != split:
            continue
        question = entry["question"]
        meta: dict[str, Any] = {"source": name}
        if level is not None:
            meta["difficulty"] = f"level_{level}"
        if entry.get("answer") is not None:  # a target response for `rlvr sft` (data.completion_field)
            meta["completion"] = f"<answer>{entry['answer']}</answer>"
        tasks.append(Task(prompt=f"{question}\n{INSTRUCTION}" if own["instruction"] else question,
                          reference={"dataset": name, "entry": entry}, id=f"{prefix}:{own['seed']}:{index}",
                          verifier="reasoning_gym", verifier_options=verifier_options, meta=meta))
    if len(tasks) < size:
        raise DataError(f"{spec!r}: dataset {name!r} gave only {len(tasks)} {split} questions of the {size} asked")
    return tasks


def load_reasoning_gym(spec: str) -> list[Task]:
    """``size`` tasks from each named generator (at each level, with ``levels``), in generation order."""
    names, own, per = parse_spec(spec)
    rg = _reasoning_gym(spec)
    known = known_datasets(spec)
    tasks = []
    for name in names:
        if name not in known:
            raise DataError(f"{spec!r}: reasoning-gym has no dataset {name!r}; known: {', '.join(known)}")
        for level in own.get("levels") or [None]:
            options = per[name] if level is None else {**_level_config(spec, name, level), **per[name]}
            tasks += _generate(rg, spec, name, level, own, options)
    return tasks
