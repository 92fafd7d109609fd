"""Collection stages: after a step's first generation, stages look at the scored groups and add or replace rows
(hinted re-attempts, expert traces, extra rollouts for hard prompts, filters by step scores, verification tasks).

    @register_stage("hints")
    def _hints(cfg) -> CollectionStage | None:          # None when its config keys leave it off
        return Hints(cfg.algo.hint_stages) if cfg.algo.hint_stages else None

    class Hints(CollectionStage):
        def run(self, samples, ctx, step):               # -> (samples, metrics)
            again = ctx.generate(tasks, step)            # the one generate-and-score path
            return ScoredSamples.concat([...], ctx.pad_id), {"hint_frac": ...}

Stages run in registration order on the main learner, each on the previous one's output; the curriculum has already
seen the first generation's scores, so what a stage adds never counts as the policy's own success. Stage state (a
schedule, counters) goes into ``state_dict`` and is saved with every checkpoint, so a resumed run collects the same.
This is the step parts' pattern (rlvr.train.parts) applied to collection: the step never branches on a stage's name.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable

from rlvr.rollout.base import SamplingParams
from rlvr.rollout.episodes import PromptPolicy, Scoring, ScoredSamples, generate_and_score
from rlvr.tasks import Task


@dataclass
class StageContext:
    """What a stage may use: the engine and tokenizer, the step's sampling parameters, the run's scoring and prompt
    policy, and the resolved config."""

    engine: Any
    tokenizer: Any
    params: SamplingParams
    scoring: Scoring
    prompt_policy: PromptPolicy | None
    cfg: Any

    @property
    def pad_id(self) -> int:
        return self.tokenizer.pad_token_id

    def generate(self, tasks: list[Task], step: int, n: int | None = None) -> ScoredSamples:
        """``n`` (default: the group size) samples of each task, scored, through the one generate-and-score path."""
        params = self.params if n is None else dataclasses.replace(self.params, n=n)
        return generate_and_score(self.engine, self.tokenizer, tasks, params, self.scoring, step=step,
                                  prompts=self.prompt_policy)


class CollectionStage:
    def run(self, samples: ScoredSamples, ctx: StageContext, step: int) -> tuple[ScoredSamples, dict[str, float]]:
        return samples, {}

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass


StageBuilder = Callable[[Any], "CollectionStage | None"]
_BUILDERS: dict[str, StageBuilder] = {}


def register_stage(name: str) -> Callable[[StageBuilder], StageBuilder]:
    """Register a builder ``fn(cfg) -> CollectionStage | None``; stages run in the order of ``stage_names``."""
    def decorator(fn: StageBuilder) -> StageBuilder:
        _BUILDERS[name] = fn
        return fn

    return decorator


def stage_names() -> list[str]:
    """Every registered stage in the order they run: the built-in ones in their fixed order, then the others in
    registration order (whichever module happened to be imported first)."""
    from rlvr.rollout.collection_stages import ORDER

    return sorted(_BUILDERS, key=lambda name: ORDER.index(name) if name in ORDER else len(ORDER))


def build_stages(cfg) -> dict[str, CollectionStage]:
    """The stages the config switches on, in the order they run (``stage_names``)."""
    stages = {}
    for name in stage_names():
        build = _BUILDERS[name]
        stage = build(cfg)
        if stage is not None:
            stages[name] = stage
    return stages


def run_stages(stages: dict[str, CollectionStage], samples: ScoredSamples, ctx: StageContext,
               step: int) -> tuple[ScoredSamples, dict[str, float]]:
    metrics: dict[str, float] = {}
    for stage in stages.values():
        samples, stage_metrics = stage.run(samples, ctx, step)
        metrics.update(stage_metrics)
    return samples, metrics


def group_rows(samples: ScoredSamples) -> dict[int, list[int]]:
    """Row indices of each group, in the order groups first appear."""
    rows: dict[int, list[int]] = {}
    for i, g in enumerate(samples.batch.group_index.tolist()):
        rows.setdefault(int(g), []).append(i)
    return rows
