"""Streaming, partial, bounded-staleness rollouts (``cluster.partial_rollouts=true``, ``cluster.max_staleness=K``).

The rollout workers keep up to ``K x data.prompts_per_step`` groups under way and advance every unfinished response
by one chunk of ``ceil(rollout.max_new_tokens / K)`` tokens per round. A group whose responses have all ended
(end-of-sequence or the length limit) is finished and waits for the learner; each step trains on the
``data.prompts_per_step`` OLDEST finished groups, the others stay under way. The round that follows a step's
collection is submitted before the step's weights are sent, so the workers generate it while the learners update
(the rollout workers run their calls in order: that round samples with the weights from before the update).
Responses therefore span weight updates: a response's tokens keep the log-probs and the policy version they were
sampled with, and the trainer's own old log-probs with ``algo.is_correction`` correct each token.

Versions and staleness. The policy version is the number of updates the weights have had; step s trains the
weights of version s - 1 (its update makes version s). A row's version is the OLDEST version any of its tokens was
sampled with, and its staleness at step s is ``(s - 1) - version``. A response needs at most K chunks, and the
round of each step advances it by one, so a group admitted at step s is finished by step s + K with staleness at
most K; a finished group that would be trained staler than K (more than ``prompts_per_step`` older groups waited
ahead of it) is dropped and counted (``stale_dropped_groups``), never trained. With K = 1 the chunk is the whole
response and the pipeline is one-step-off collection whose groups stream. Each step logs ``staleness_mean`` and
``staleness_max`` over its rows, and ``RUN_DIR/rollout_versions.jsonl`` holds every trained row's versions.

Determinism and resume. Which rows a round advances, how they are split among the workers and each share's seed are
functions of the run's state (the admission order, the round number and ``train.seed``), never of timing, and the
version every round samples with is fixed by the order of the calls. A checkpoint waits for the round under way and
saves the groups under way with it (their tokens, log-probs, entropies and versions): the in-flight state is
CHECKPOINTED, so a run resumed after kill -9 continues with the same groups, the same rounds and the same seeds as
the uninterrupted run. A rollout worker that dies during a round is replaced and redoes its share with the same
seed and the round's weights (the round carries their version; rlvr.cluster.ray_backend.RolloutPool.submit_chunks),
so that round too is the one an undisturbed run samples, except where weights go over NCCL (vLLM on GPUs), which
keeps no earlier weights to redo it with.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import torch

from rlvr.config import ConfigError
from rlvr.envs import SINGLE_TURN
from rlvr.models import encode_prompt
from rlvr.rollout.agent import episode_batch
from rlvr.rollout.base import RolloutBatch, SamplingParams
from rlvr.rollout.episodes import ScoredSamples, cut_at_stop, fit_prompts, score_samples
from rlvr.rollout.partial import Piece
from rlvr.tasks import Task
from rlvr.train.rollouts import observe

VERSIONS_FILE = "rollout_versions.jsonl"


class ChunkPool(Protocol):
    """What the rollout workers offer streaming collection: a round of chunks submitted now (sampled with the
    weights the workers hold when they reach it, i.e. those sent before this call) and its pieces gathered later."""

    def submit_chunks(self, prompts: list[list[int]], prefixes: list[list[int]], budgets: list[int],
                      params: SamplingParams, seed: int) -> Any: ...

    def gather_chunks(self, handle: Any) -> list[Piece]: ...


def check_streaming(cfg) -> None:
    """One-line errors for what streaming collection cannot do, before anything starts."""
    c = cfg.cluster
    if not c.partial_rollouts:
        if c.max_staleness != 1:
            raise ConfigError(f"cluster.max_staleness={c.max_staleness} bounds partial rollouts and needs "
                              "cluster.partial_rollouts=true (without it, cluster.async_rollouts=1 is one step off)")
        return
    if c.backend != "ray":
        raise ConfigError("cluster.partial_rollouts=true needs cluster.backend=ray (rollout workers with their own "
                          "copy of the weights generate while the learners update; the local backend's engine "
                          "shares the learner's model)")
    refused = (
        ("cluster.async_rollouts", c.async_rollouts, 0, "streaming already samples while the learners update"),
        ("algo.dynamic_sampling", cfg.algo.dynamic_sampling, False, "groups stream as they finish, unfiltered"),
        ("rollout.agent_command", cfg.rollout.agent_command, None, "agent episodes are not generated in chunks"),
        ("rollout.temperature_schedule", cfg.rollout.temperature_schedule, None,
         "a per-position temperature cannot be continued across chunks"),
    )
    for key, value, off, why in refused:
        if value != off:
            raise ConfigError(f"{key}={value} with cluster.partial_rollouts=true: {why}; use {key}={off}")
    from rlvr.algos import advantages
    from rlvr.rollout.stages import build_stages

    if "baseline_rewards" in advantages.needs(cfg.algo.advantage):
        raise ConfigError(f"algo.advantage={cfg.algo.advantage} samples greedy baselines per step, which streaming "
                          "rollouts do not: use another estimator or cluster.partial_rollouts=false")
    stages = build_stages(cfg)
    if stages:
        raise ConfigError(f"collection stages ({', '.join(stages)}) rework a step's own groups, which streaming "
                          "rollouts collect across steps: turn them off or cluster.partial_rollouts=false")


def chunk_tokens(max_new_tokens: int, max_staleness: int) -> int:
    """Tokens a response advances per round: K rounds cover the longest response, so none is staler than K."""
    return math.ceil(max_new_tokens / max_staleness)


def round_seed(run_seed: int, round_index: int) -> int:
    """The seed of one round of chunks: a function of the run's seed and the round's number only."""
    return (run_seed * 1_000_003 + 7919 * (round_index + 1)) % (2**62)


@dataclass
class Response:
    """One response under way or done; ``versions[t]`` is the policy version token t was sampled with."""

    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    entropy: list[float] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)
    done: bool = False
    truncated: bool = False  # ended at the length limit without end-of-sequence

    def extend(self, piece: Piece, version: int, max_new_tokens: int) -> None:
        self.tokens += piece.tokens
        self.logprobs += piece.logprobs
        self.entropy += piece.entropy
        self.versions += [version] * len(piece.tokens)
        # a chunk without tokens (an engine that stopped at once) ends the response as an end-of-sequence would
        self.done = piece.finished or not piece.tokens or len(self.tokens) >= max_new_tokens
        self.truncated = not piece.finished and bool(piece.tokens) and self.done


@dataclass
class Group:
    """The responses to one admitted task; ``serial`` is its admission number (older groups train first)."""

    serial: int
    task: Task
    prompt: list[int]
    responses: list[Response]

    @property
    def done(self) -> bool:
        return all(r.done for r in self.responses)

    @property
    def oldest(self) -> int | None:
        versions = [min(r.versions) for r in self.responses if r.versions]
        return min(versions) if versions else None


class StreamingRollouts:
    """The main learner's side of streaming collection: ``take(step)`` gives the step's scored samples and metrics,
    then submits the next round. ``run`` is the training run (its engine is a ChunkPool)."""

    def __init__(self, run):
        cfg = run.cfg
        check_streaming(cfg)
        if not callable(getattr(run.engine, "submit_chunks", None)):
            raise ConfigError("cluster.partial_rollouts=true needs rollout workers that continue responses in chunks "
                              "(cluster.backend=ray)")
        self.run, self.cfg = run, cfg
        self.prompts_per_step = cfg.data.prompts_per_step
        self.max_staleness = cfg.cluster.max_staleness
        self.capacity = self.prompts_per_step * self.max_staleness
        self.chunk = chunk_tokens(cfg.rollout.max_new_tokens, self.max_staleness)
        self.groups: list[Group] = []
        self.serial = 0
        self.rounds = 0
        self.dropped = 0
        self.pending: tuple[Any, list[tuple[Group, Response]], int] | None = None
        self.restored_step: int | None = None  # the checkpoint's step when resumed
        self.last_step = 0  # the last step taken
        self.log_ready = False

    # --- rounds --------------------------------------------------------------------------------------------------
    def _admit(self) -> int:
        """Fill the groups under way up to capacity with the sampler's next tasks; returns how many were admitted."""
        wanted = self.capacity - len(self.groups)
        if wanted <= 0:
            return 0
        run = self.run
        tasks = run.sampler.next(wanted)
        for task in tasks:
            if task.env not in (None, SINGLE_TURN) or task.images:
                what = f"environment {task.env!r}" if task.env not in (None, SINGLE_TURN) else "images"
                raise ConfigError(f"task {task.id} has {what}: cluster.partial_rollouts=true continues single-turn "
                                  "text responses only; use cluster.partial_rollouts=false for these tasks")
        policy = run.prompt_policy
        encoded, _ = fit_prompts([encode_prompt(run.tokenizer, t.prompt, policy.chat_template_kwargs) for t in tasks],
                                 tasks, policy)
        for task, prompt in zip(tasks, encoded):
            self.groups.append(Group(self.serial, task, prompt, [Response() for _ in range(run.params.n)]))
            self.serial += 1
        return len(tasks)

    def _submit_round(self, version: int) -> None:
        """Admit up to capacity and submit one chunk of every unfinished response (sampled with ``version``)."""
        self._admit()
        rows = [(g, r) for g in self.groups for r in g.responses if not r.done]
        if not rows:
            return
        limit = self.cfg.rollout.max_new_tokens
        handle = self.run.engine.submit_chunks(
            [g.prompt for g, _ in rows], [r.tokens for _, r in rows],
            [min(self.chunk, limit - len(r.tokens)) for _, r in rows], self.run.params,
            round_seed(self.cfg.train.seed, self.rounds))
        self.rounds += 1
        self.pending = (handle, rows, version)

    def settle(self) -> None:
        """Wait for the round under way and add its chunks to their responses."""
        if self.pending is None:
            return
        handle, rows, version = self.pending
        self.pending = None
        pieces = self.run.engine.gather_chunks(handle)
        for (_, response), piece in zip(rows, pieces):
            response.extend(piece, version, self.cfg.rollout.max_new_tokens)

    def _drop_stale(self, version: int) -> int:
        """Drop the groups that already hold a token older than ``version - K`` (they could never be trained
        within the bound)."""
        keep = [g for g in self.groups if g.oldest is None or version - g.oldest <= self.max_staleness]
        dropped = len(self.groups) - len(keep)
        self.groups = keep
        self.dropped += dropped
        return dropped

    # --- a step --------------------------------------------------------------------------------------------------
    def take(self, step: int) -> tuple[ScoredSamples, dict[str, Any], None]:
        """The step's samples: the oldest ``prompts_per_step`` finished groups (rounds run now, with the step's
        weights, until that many have finished), their staleness metrics; then the next round is submitted."""
        version = step - 1  # the weights are sent once per step, after its update
        self.last_step = step
        self.settle()
        dropped = self._drop_stale(version)
        waited = 0
        while sum(g.done for g in self.groups) < self.prompts_per_step:
            self._submit_round(version)  # sampled with the weights the step trains: staleness 0 for these tokens
            self.settle()
            waited += 1
            if waited > self.max_staleness + 1:  # every round advances every response; K rounds end them all
                raise RuntimeError(f"step {step}: {waited} rounds without {self.prompts_per_step} finished groups")
        chosen = [g for g in self.groups if g.done][: self.prompts_per_step]
        taken = {g.serial for g in chosen}
        self.groups = [g for g in self.groups if g.serial not in taken]
        samples, metrics = self._scored(chosen, step, version)
        metrics.update({"stale_dropped_groups": dropped, "rounds_waited": waited, "groups_in_flight": len(self.groups)})
        self._log_versions(step, version, chosen)
        if step < self.cfg.train.steps:
            self._submit_round(version)  # generated while the learners update: trained at step + 1 or later
        return samples, metrics, None

    def _scored(self, groups: list[Group], step: int, version: int) -> tuple[ScoredSamples, dict[str, Any]]:
        run = self.run
        batch = assemble(groups, run.tokenizer.pad_token_id, device=getattr(run.engine, "device", torch.device("cpu")))
        responses = run.tokenizer.batch_decode(batch.response_ids, skip_special_tokens=True)
        stopped = cut_at_stop(batch, run.tokenizer, responses, run.prompt_policy.stop)
        tasks = [g.task for g in groups for _ in g.responses]
        samples = score_samples(batch, tasks, responses, run.params, run.scoring, step,
                                {"stopped_frac": stopped / max(len(responses), 1)})
        observe(run.sampler, samples)
        run.reward_errors.observe(step, samples.tasks, samples.verdicts)
        metrics = {"sampling_rounds": 1, **samples.metrics, **run.reward_errors.metrics(),
                   **staleness_metrics(groups, version)}
        return samples, metrics

    # --- the rows' versions --------------------------------------------------------------------------------------
    def _log_versions(self, step: int, version: int, groups: list[Group]) -> None:
        path = Path(self.run.dir) / VERSIONS_FILE
        if not self.log_ready:  # a fresh run starts the file; a resumed one drops the steps after its checkpoint
            keep = self.restored_step or 0
            rows = [line for line in _lines(path) if json.loads(line)["step"] <= keep] if keep else []
            path.write_text("".join(rows))
            self.log_ready = True
        with path.open("a") as f:
            for group_index, group in enumerate(groups):
                for response in group.responses:
                    oldest = min(response.versions, default=version)
                    f.write(json.dumps({"step": step, "learner_version": version, "group": group_index,
                                        "task_id": group.task.id, "policy_version": oldest,
                                        "newest_version": max(response.versions, default=version),
                                        "staleness": version - oldest, "tokens": len(response.tokens)}) + "\n")

    # --- checkpoint ----------------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        self.settle()
        return {"groups": self.groups, "serial": self.serial, "rounds": self.rounds, "dropped": self.dropped,
                "step": self.last_step}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.groups = list(state.get("groups", []))
        self.serial, self.rounds, self.dropped = state.get("serial", 0), state.get("rounds", 0), state.get("dropped", 0)
        self.restored_step = self.last_step = state.get("step", 0)


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines(keepends=True) if path.is_file() else []


def staleness_metrics(groups: list[Group], version: int) -> dict[str, float]:
    """Per step: the rows' staleness (learner version minus the row's oldest token version), mean and max, the
    tokens' mean, and the share of rows whose tokens came from more than one version (continued across an update)."""
    rows = [r for g in groups for r in g.responses]
    row_staleness = [version - min(r.versions, default=version) for r in rows]
    token_staleness = [version - v for r in rows for v in r.versions]
    return {"staleness_mean": sum(row_staleness) / len(rows), "staleness_max": max(row_staleness),
            "staleness_token_mean": sum(token_staleness) / max(len(token_staleness), 1),
            "partial_rows_frac": sum(len(set(r.versions)) > 1 for r in rows) / len(rows)}


def assemble(groups: list[Group], pad_id: int, device: torch.device | str = "cpu") -> RolloutBatch:
    """The finished groups as one batch: group i's responses are rows i*n .. i*n+n-1, prompts left-padded, responses
    right-padded, each token with the log-prob and entropy it was sampled with (every token trained on)."""
    rows = [(g.prompt, r.tokens, [1] * len(r.tokens), r.logprobs, r.entropy) for g in groups for r in g.responses]
    truncated = [r.truncated for g in groups for r in g.responses]
    return episode_batch(rows, truncated, pad_id, len(groups[0].responses), device, has_entropy=True)
