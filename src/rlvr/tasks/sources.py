"""One place that turns a data spec into Tasks (docs/api.md, "Data rows" and "Data sources").

A spec is one source, or a mixture of sources with weights joined by ";":

    data/train.jsonl                    a table: .jsonl .json .parquet .arrow .csv, or a saved dataset folder
    data/saved_dict@train               one split of a saved DatasetDict folder
    gsm8k:data/gsm8k.parquet            a preset layout (presets.py) read from a local file
    arithmetic:train:digits=2           the built-in arithmetic generator (arithmetic.py)
    judgement:arithmetic:train:n=2000   judgement tasks for training a judge, built from a base spec (judgement.py)
    steps:arithmetic:chain:n=500        step-labelling tasks for a process reward model (steps.py)
    vision:count:n=2000,seed=0          generated image tasks: count, classify, ground (vision.py)
    reasoning_gym:chain_sum,leg_counting:size=500,seed=1     reasoning-gym generators (reasoning_gym.py)
    gsm8k:gsm8k.parquet@3; reasoning_gym:chain_sum@1          a mixture: each batch slot picks a source
                                                              with probability proportional to its weight

In a mixture every task's ``meta["mixture"]`` names its part, which is how ``make_sampler`` weighs them.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from rlvr.tasks.base import DataError, Task
from rlvr.tasks.files import RowFormat, dress, load_file, source_name

GENERATORS = ("arithmetic",)
_WEIGHT = re.compile(r"^(?P<spec>.*\S)\s*@\s*(?P<weight>[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)$", re.DOTALL)


def parse_mixture(spec: str) -> list[tuple[str, float]]:
    """``"a.jsonl@3; reasoning_gym:chain_sum"`` -> [("a.jsonl", 3.0), ("reasoning_gym:chain_sum", 1.0)]."""
    parts = []
    for piece in spec.split(";"):
        piece = piece.strip()
        if not piece:
            if ";" in spec:
                raise DataError(f"data spec {spec!r}: an empty part between ';' separators")
            raise DataError("data spec is empty")
        match = _WEIGHT.match(piece)
        source, weight = (match["spec"].strip(), float(match["weight"])) if match else (piece, 1.0)
        if weight <= 0:
            raise DataError(f"data spec {spec!r}: part {source!r} has weight {weight:g} (expected > 0)")
        parts.append((source, weight))
    return parts


def part_label(source: str) -> str:
    """A short name for a mixture part: the preset or generator and the file stem or dataset names."""
    head, sep, rest = source.partition(":")
    if head == "reasoning_gym" and sep:
        return "rg:" + rest.split(":", 1)[0]
    if head == "judgement" and sep:
        from rlvr.tasks.judgement import parse_spec

        return "judgement:" + part_label(parse_spec(source)[0])
    if head == "steps" and sep:
        from rlvr.tasks.judgement import split_options

        return "steps:" + part_label(split_options(source, "steps", ())[0])
    if head == "vision" and sep:
        return "vision:" + rest.split(":", 1)[0]
    if head in GENERATORS:
        return head
    from rlvr.tasks.presets import PRESETS

    if head in PRESETS and sep:
        return f"{head}:{source_name(rest)}"
    return source_name(source)


def load_source(source: str, fmt: RowFormat = RowFormat()) -> list[Task]:
    """The tasks of one source (no ';')."""
    head, sep, rest = source.partition(":")
    if head == "judgement" and sep:
        from rlvr.tasks import judgement

        return judgement.from_spec(source)  # a judge's prompt as the judge verifier sends it: no system prompt added
    if head == "steps" and sep:
        from rlvr.tasks import steps

        return [dress(task, fmt, head) for task in steps.from_spec(source)]
    if head == "vision" and sep:
        from rlvr.tasks import vision

        return [dress(task, fmt, part_label(source)) for task in vision.from_spec(source)]
    if head == "reasoning_gym" and sep:
        from rlvr.tasks.reasoning_gym import load_reasoning_gym

        return [dress(task, fmt, task.meta["source"]) for task in load_reasoning_gym(source)]
    from rlvr.tasks.presets import PRESETS, load_preset

    if head in PRESETS and sep:
        return load_preset(head, rest, fmt)
    if head in GENERATORS:
        from rlvr.tasks import arithmetic

        try:
            tasks = arithmetic.from_spec(source)
        except ValueError as exc:
            raise DataError(str(exc)) from None
        return [dress(task, fmt, head) for task in tasks]
    return load_file(source, fmt)


def load_tasks(
    source: str,
    *,
    prompt_field: str = "prompt",
    reference_field: str = "reference",
    template: str | None = None,
    system_prompt: str | None = None,
) -> list[Task]:
    """Tasks from a data spec (module docstring); a mixture's tasks are its parts' tasks, in order."""
    fmt = RowFormat(prompt_field=prompt_field, reference_field=reference_field, template=template,
                    system_prompt=system_prompt)
    parts = parse_mixture(source)
    if len(parts) == 1:
        return load_source(parts[0][0], fmt)
    labels = [part_label(spec) for spec, _ in parts]
    labels = [f"{label}#{i}" if labels.count(label) > 1 else label for i, label in enumerate(labels)]
    tasks: list[Task] = []
    first: dict[str, str] = {}
    for (spec, _), label in zip(parts, labels):
        for task in load_source(spec, fmt):
            if task.id in first:
                raise DataError(f"{spec}: task id {task.id!r} is also in {first[task.id]}; ids must be unique "
                                "across a mixture (give the rows their own 'id' field)")
            first[task.id] = spec
            tasks.append(dataclasses.replace(task, meta={**task.meta, "mixture": label}))
    return tasks


def load_data(data: Any, split: str = "train") -> list[Task]:
    """Tasks of ``data.train`` or ``data.eval`` (a DataConfig), with its field names, template and system prompt;
    tasks that name no environment get ``data.env`` and its ``data.env_options`` (a task's own options win)."""
    spec = getattr(data, split)
    if not spec:
        raise DataError(f"data.{split} is not set")
    tasks = load_tasks(spec, prompt_field=data.prompt_field, reference_field=data.reference_field,
                       template=getattr(data, "prompt_template", None), system_prompt=getattr(data, "system_prompt", None))
    return with_env(tasks, getattr(data, "env", None), getattr(data, "env_options", None) or {})


def with_env(tasks: list[Task], env: str | None, options: dict[str, Any]) -> list[Task]:
    """Tasks that name no environment run in ``env`` with ``options``; a task's own options override them."""
    if not env:
        return tasks
    return [t if t.env else dataclasses.replace(t, env=env, env_options={**options, **t.env_options}) for t in tasks]


def make_sampler(tasks: list[Task], data: Any, *, seed: int):
    """The sampler a run draws from: a plain PromptSampler (the same order and state as always) unless the
    spec is a mixture or ``data.curriculum`` names rules; then a CurriculumSampler."""
    from rlvr.tasks.curriculum import CurriculumRules, CurriculumSampler
    from rlvr.tasks.sampler import PromptSampler

    try:
        rules = CurriculumRules.parse(getattr(data, "curriculum", "none"), getattr(data, "curriculum_options", {}))
    except ValueError as exc:
        raise DataError(str(exc)) from None
    weights = parse_mixture(data.train) if isinstance(getattr(data, "train", None), str) else []
    if len(weights) <= 1 and not rules.rules:
        return PromptSampler(tasks, seed=seed, shuffle=data.shuffle)
    parts = None
    if len(weights) > 1:
        labels = list(dict.fromkeys(task.meta.get("mixture") for task in tasks))
        parts = [(label, weight, [i for i, t in enumerate(tasks) if t.meta.get("mixture") == label])
                 for label, (_, weight) in zip(labels, weights)]
    return CurriculumSampler(tasks, seed=seed, shuffle=data.shuffle, rules=rules, parts=parts)
