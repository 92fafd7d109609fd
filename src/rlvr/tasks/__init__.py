"""Tasks: data rows from local files, presets and generators, and the samplers that draw them (docs/api.md, "Data rows").

    tasks = load_data(cfg.data, "train")                       # sources.py: files, presets, generators, mixtures
    sampler = make_sampler(tasks, cfg.data, seed=cfg.train.seed)
"""

from __future__ import annotations

from rlvr.tasks.base import DataError, Task
from rlvr.tasks.curriculum import CurriculumRules, CurriculumSampler
from rlvr.tasks.sampler import PromptSampler
from rlvr.tasks.sources import GENERATORS, load_data, load_tasks, make_sampler, parse_mixture

__all__ = [
    "CurriculumRules", "CurriculumSampler", "DataError", "GENERATORS", "PromptSampler", "Task", "load_data",
    "load_tasks", "make_sampler", "parse_mixture",
]
