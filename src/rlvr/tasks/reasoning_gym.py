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
    NAME.key=value    one option of dataset NAME's reasoning-gym config (e.g. chain_sum.max_terms=3)
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
_OWN_KEYS = ("size", "seed", "instruction", "split", "heldout_percent", "binary", "timeout_s")
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


def load_reasoning_gym(spec: str) -> list[Task]:
    """``size`` tasks from each named generator, in generation order."""
    names, own, per = parse_spec(spec)
    rg = _reasoning_gym(spec)
    known = known_datasets(spec)
    tasks = []
    for name in names:
        if name not in known:
            raise DataError(f"{spec!r}: reasoning-gym has no dataset {name!r}; known: {', '.join(known)}")
        split, percent = own["split"], own["heldout_percent"]
        # enough entries for the wanted split, whose share of questions is about `percent` (or 100 - percent)
        share = 100 if split == "all" else percent if split == "eval" else 100 - percent
        pool = own["size"] * 100 // share * 3 + 100
        try:
            dataset = rg.create_dataset(name, size=pool if split != "all" else own["size"], seed=own["seed"], **per[name])
        except (TypeError, ValueError, AssertionError) as exc:
            raise DataError(f"{spec!r}: dataset {name!r}: bad options {per[name]}: {exc}") from None
        options = {"timeout_s": float(own["timeout_s"]), **({"binary": True} if own["binary"] else {})}
        kept = 0
        for index, entry in enumerate(dataset):
            if kept == own["size"]:
                break
            if split != "all" and split_of(entry["question"], percent) != split:
                continue
            kept += 1
            question = entry["question"]
            prompt = f"{question}\n{INSTRUCTION}" if own["instruction"] else question
            meta: dict[str, Any] = {"source": name}
            if entry.get("answer") is not None:  # a target response for `rlvr sft` (data.completion_field)
                meta["completion"] = f"<answer>{entry['answer']}</answer>"
            tasks.append(Task(prompt=prompt, reference={"dataset": name, "entry": entry},
                              id=f"rg:{name}:{own['seed']}:{index}", verifier="reasoning_gym", meta=meta,
                              verifier_options=options))
        if kept < own["size"]:
            raise DataError(f"{spec!r}: dataset {name!r} gave only {kept} {split} questions of the {own['size']} asked")
    return tasks
