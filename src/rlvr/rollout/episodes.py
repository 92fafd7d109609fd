"""The one path from tasks to scored samples, shared by training and evaluation.

    scoring = Scoring(verifier="math", verifier_options={}, spec=None)
    samples = generate_and_score(engine, tokenizer, tasks, SamplingParams(n=8), scoring, step=3)
    samples.rewards, samples.verdicts, samples.components

A task is scored by its own verifier (a data row may name one) or ``Scoring.verifier``, with the options of both;
with a composed reward (``reward.terms``) every verifier term is scored and the terms are combined by
rlvr.verifiers.compose. Every request carries the task's prompt and ``meta`` for rewards that need them, and
whether the response was cut off by the length limit (``truncated``; a response cut at a stop string was not).

Tasks that name an environment (``Task.env``) run as episodes (rlvr.rollout.agent): the verifier scores each
episode's answer and the environment's per-turn reward parts are added to the reward (components ``env/<part>``).
A single-turn task is the trivial environment's one-turn episode, generated here in one call.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from rlvr.envs import SINGLE_TURN
from rlvr.models import encode_multimodal, encode_prompt, processor_of
from rlvr.rollout.agent import AGENT_REWARD, EpisodeRun, run_episodes
from rlvr.rollout.base import RolloutBatch, RolloutEngine, SamplingParams, concat_batches, select_rows
from rlvr.tasks import Task
from rlvr.verifiers import ScoreRequest, Verdict, score_batch
from rlvr.verifiers.base import Status
from rlvr.verifiers.row_options import score_rows, task_problem
from rlvr.verifiers.compose import RewardSpec, Term, compose
from rlvr.verifiers.reasoning import answer_part


@dataclass(frozen=True)
class PromptPolicy:
    """What happens to prompts and responses around the engine: prompts longer than ``max_tokens`` raise an error
    naming the task (``overflow="error"``) or keep their last ``max_tokens`` tokens (``"truncate_left"``); a
    response is cut after the first of the ``stop`` strings it contains (the text given to the verifier ends
    before it; the tokens that spelled it stay in the response). ``chat_template_kwargs``
    (``rollout.chat_template_kwargs``, e.g. ``{"enable_thinking": False}``) reach every chat-template rendering of
    prompts and episodes."""

    max_tokens: int | None = None
    overflow: str = "error"
    stop: tuple[str, ...] = ()
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)
    agent_command: str | None = None  # rollout.agent_command: episodes are run by this program (rlvr.rollout.agent_program)


class PromptTooLong(ValueError):
    """A prompt over rollout.max_prompt_tokens with rollout.prompt_overflow=error."""


@dataclass(frozen=True)
class Scoring:
    """How samples are scored: the default verifier and options for tasks that name none, and an optional
    composed reward."""

    verifier: str = "exact"
    verifier_options: dict[str, Any] = field(default_factory=dict)
    spec: RewardSpec | None = None
    answer_after: str | None = None  # data.answer_after: verifiers see only the text after this marker
    require_answer_after: bool = True  # a response without the marker has no answer (rlvr.verifiers.reasoning)


@dataclass
class ScoredSamples:
    """Samples of one generation call; row i answers tasks[i] (a task repeats once per sample)."""

    batch: RolloutBatch
    tasks: list[Task]
    responses: list[str]
    verdicts: list[Verdict]  # the task verifier's verdicts (with reward.terms: its term's, else the first term's)
    rewards: list[float]  # the composed reward (the task verifier's score without reward.terms)
    components: dict[str, list[float]] = field(default_factory=dict)  # each composed term's (gated) score
    metrics: dict[str, float] = field(default_factory=dict)  # prompt_truncated_frac, stopped_frac
    episodes: list[dict[str, int]] | None = None  # per row of an episode run: turns, tool_calls, tool_errors, ...
    transcripts: list[list[dict[str, Any]]] | None = None  # per row of an episode run: the conversation as it went

    @classmethod
    def concat(cls, parts: list[ScoredSamples], pad_id: int, *, keep_groups: bool = False) -> ScoredSamples:
        """One set of samples from several (rlvr.rollout.base.concat_batches: group ids made distinct, or kept with
        ``keep_groups``); a reward component missing from a part counts 0 there, metrics are the first part's."""
        if len(parts) == 1:
            return parts[0]
        names = list(dict.fromkeys(n for p in parts for n in p.components))
        joined = lambda field_: [x for p in parts for x in getattr(p, field_)]  # noqa: E731
        return cls(
            concat_batches([p.batch for p in parts], pad_id, keep_groups=keep_groups), joined("tasks"),
            joined("responses"), joined("verdicts"), joined("rewards"),
            {n: [x for p in parts for x in p.components.get(n, [0.0] * len(p.rewards))] for n in names},
            dict(parts[0].metrics),
            episodes=joined("episodes") if all(p.episodes is not None for p in parts) else None,
            transcripts=joined("transcripts") if all(p.transcripts is not None for p in parts) else None,
        )

    def select(self, rows: list[int], batch: RolloutBatch | None = None) -> ScoredSamples:
        """The samples of the given rows (``batch``: their sub-batch when the caller already has it)."""
        if batch is None:
            index = torch.tensor(rows, dtype=torch.long, device=self.batch.response_ids.device)
            batch = select_rows(self.batch, index)
        return ScoredSamples(batch, [self.tasks[i] for i in rows], [self.responses[i] for i in rows],
                             [self.verdicts[i] for i in rows], [self.rewards[i] for i in rows],
                             {k: [v[i] for i in rows] for k, v in self.components.items()},
                             episodes=[self.episodes[i] for i in rows] if self.episodes is not None else None,
                             transcripts=[self.transcripts[i] for i in rows] if self.transcripts is not None else None)


def score_requests(tasks: list[Task], responses: list[str], scoring: Scoring, term: Term | None = None,
                   truncated: list[bool] | None = None) -> list[ScoreRequest]:
    """The request for each (task, response): the verifier and options a task or reward term names, else the
    defaults; the options of the term, then of the task, override the defaults. ``truncated[i]``: response i hit
    the length limit (default: none did)."""
    flags = [False] * len(responses) if truncated is None else [bool(t) for t in truncated]
    if len(flags) != len(responses):
        raise ValueError(f"{len(flags)} truncated flags for {len(responses)} responses")
    requests = []
    for task, response, cut_off in zip(tasks, responses, flags):
        response = answer_part(response, scoring.answer_after, scoring.require_answer_after)
        if term is None or term.uses_task_verifier:
            name, options = task.verifier or scoring.verifier, {**scoring.verifier_options, **task.verifier_options}
        else:
            name, options = term.verifier, {}
        reference = task.reference if term is None or term.reference is None else term.reference
        requests.append(ScoreRequest(name, response, reference, {**options, **(term.options if term else {})},
                                     prompt=task.prompt, meta=task.meta or None, truncated=cut_off))
    return requests


def score(tasks: list[Task], responses: list[str], scoring: Scoring, term: Term | None = None,
          truncated: list[bool] | None = None) -> list[Verdict]:
    """The verdicts of score_requests; a task whose own options name an endpoint or a secret gets an "error"
    verdict instead, its verifier never called (rlvr.verifiers.row_options)."""
    requests = score_requests(tasks, responses, scoring, term, truncated)
    if term is not None and not term.uses_task_verifier:
        return score_batch(requests)
    return score_rows(requests, [task_problem(t.verifier_options, t.reference, scoring.verifier_options)
                                 for t in tasks])


def encode_tasks(tokenizer, tasks: list[Task], template_kwargs: dict[str, Any] | None = None
                 ) -> tuple[list[list[int]], list[dict[str, torch.Tensor]] | None]:
    """Each task's prompt ids and, where any task has images, each task's image inputs ({} for a text task): the
    images are encoded by the model's processor (rlvr.models.prompts.encode_multimodal). A task with images for a
    model without a processor (a text model) is an error naming the task."""
    if not any(t.images for t in tasks):
        return [encode_prompt(tokenizer, t.prompt, template_kwargs) for t in tasks], None
    processor = processor_of(tokenizer)
    ids, images = [], []
    for task in tasks:
        if not task.images:
            ids.append(encode_prompt(tokenizer, task.prompt, template_kwargs))
            images.append({})
            continue
        if processor is None:
            from rlvr.errors import UserError

            raise UserError(f"task {task.id} has images but the model is not a vision-language model (its folder has "
                            "no vision_config and no processor)")
        prompt_ids, inputs = encode_multimodal(processor, task.prompt, task.images, template_kwargs)
        ids.append(prompt_ids)
        images.append(inputs)
    return ids, images


def fit_prompts(prompts: list[list[int]], tasks: list[Task], policy: PromptPolicy) -> tuple[list[list[int]], int]:
    """Prompts within ``policy.max_tokens`` (see PromptPolicy) and how many were truncated. A prompt with images is
    never truncated (cutting image tokens off would part them from their image): over the limit it is an error."""
    limit = policy.max_tokens
    if limit is None:
        return prompts, 0
    fitted, truncated = [], 0
    for ids, task in zip(prompts, tasks):
        if len(ids) > limit:
            if policy.overflow == "error" or task.images:
                fix = "raise it; a prompt with images is never truncated" if task.images \
                    else "raise it, or set rollout.prompt_overflow=truncate_left"
                raise PromptTooLong(f"task {task.id}: the prompt has {len(ids)} tokens, over rollout.max_prompt_tokens="
                                    f"{limit} ({fix})")
            ids, truncated = ids[-limit:], truncated + 1
        fitted.append(ids)
    return fitted, truncated


def cut_at_stop(batch: RolloutBatch, tokenizer, responses: list[str], stop: tuple[str, ...]) -> int:
    """Cut each response after the first stop string it contains: the text ends before the stop string, the
    masks end with the token that completed it, and the row no longer counts as truncated. Returns how many rows
    were cut. Engine-agnostic: works on any engine's batch after generation."""
    if not stop:
        return 0
    cut = 0
    for i, text in enumerate(responses):
        found = [(text.find(s), s) for s in stop if s and s in text]
        if not found:
            continue
        at, word = min(found)
        ids = batch.response_ids[i, : int(batch.response_mask[i].sum())].tolist()
        low, high = 1, len(ids)  # the fewest tokens whose text holds the stop string (containment only grows)
        while low < high:
            mid = (low + high) // 2
            if word in tokenizer.decode(ids[:mid], skip_special_tokens=True):
                high = mid
            else:
                low = mid + 1
        for name in ("response_mask", "loss_mask", "logprobs", "entropy"):
            tensor = getattr(batch, name)
            if tensor is not None:
                tensor[i, low:] = 0
        batch.truncated[i] = False
        responses[i] = text[:at]
        cut += 1
    return cut


def generate_and_score(engine: RolloutEngine, tokenizer, tasks: list[Task], params: SamplingParams, scoring: Scoring,
                       *, step: int = 0, prompts: PromptPolicy | None = None) -> ScoredSamples:
    """``params.n`` samples per task from the engine, decoded and scored; tasks with an environment run as
    episodes (module docstring)."""
    policy = prompts or PromptPolicy()
    if any(t.images for t in tasks) and (policy.agent_command or any(t.env not in (None, SINGLE_TURN) for t in tasks)):
        from rlvr.errors import UserError

        raise UserError("tasks with images run as single-turn tasks only: episodes (environments, agent programs) "
                        "do not carry images yet")
    if policy.agent_command:
        from rlvr.rollout.agent_program import run_agent_program

        return score_episodes(run_agent_program(engine, tokenizer, tasks, params, policy), tasks, params, scoring, step)
    if any(t.env not in (None, SINGLE_TURN) for t in tasks):
        return score_episodes(run_episodes(engine, tokenizer, tasks, params, policy), tasks, params, scoring, step)
    ids, images = encode_tasks(tokenizer, tasks, policy.chat_template_kwargs)
    encoded, truncated = fit_prompts(ids, tasks, policy)
    with torch.no_grad():  # not inference_mode: the batch's tensors are trained on and edited afterwards
        # engines that predate images keep their two-argument generate: images are passed only when there are some
        batch = engine.generate(encoded, params) if images is None else engine.generate(encoded, params, images=images)
    responses = tokenizer.batch_decode(batch.response_ids, skip_special_tokens=True)
    stopped = cut_at_stop(batch, tokenizer, responses, policy.stop)
    metrics = {"prompt_truncated_frac": truncated / max(len(tasks), 1), "stopped_frac": stopped / max(len(responses), 1)}
    return score_samples(batch, [t for t in tasks for _ in range(params.n)], responses, params, scoring, step, metrics)


def score_episodes(run: EpisodeRun, tasks: list[Task], params: SamplingParams, scoring: Scoring, step: int) -> ScoredSamples:
    """Scored samples of an episode run: the verifier's reward of each answer plus the environment's reward parts."""
    samples = score_samples(run.batch, [t for t in tasks for _ in range(params.n)], run.answers, params, scoring, step,
                            dict(run.metrics))
    names = sorted({name for parts in run.parts for name in parts})
    for name in names:
        values = [parts.get(name, 0.0) for parts in run.parts]
        if name == AGENT_REWARD:  # a program's own reward, only where the verifier had nothing to check
            values = [v if unjudged(task, verdict) else 0.0
                      for v, task, verdict in zip(values, samples.tasks, samples.verdicts)]
        samples.components[f"env/{name}"] = values
        samples.rewards = [r + v for r, v in zip(samples.rewards, values)]
    samples.episodes = run.stats
    samples.transcripts = run.transcripts
    samples.metrics.update(episode_metrics(run.stats))
    return samples


def unjudged(task: Task, verdict: Verdict) -> bool:
    """The verifier had nothing to check: no reference, and the verdict is its "bad_reference" error (a verifier
    that judged from meta, tests or a model gives a verdict of its own)."""
    return task.reference is None and verdict.status == Status.ERROR and verdict.reason == "bad_reference"


def episode_metrics(stats: list[dict[str, int]]) -> dict[str, float]:
    """Means over episodes: turns, tool calls (made, malformed, skipped past the turn's cap or time budget),
    truncation, environments that raised; the tool error rate is per call."""
    if not stats:
        return {}
    n = len(stats)
    calls = sum(s["tool_calls"] for s in stats)
    return {"turns_mean": sum(s["turns"] for s in stats) / n, "tool_calls_mean": calls / n,
            "tool_error_rate": sum(s["tool_errors"] for s in stats) / max(calls, 1),
            "malformed_calls_mean": sum(s["malformed_calls"] for s in stats) / n,
            "skipped_calls_mean": sum(s.get("skipped_calls", 0) for s in stats) / n,
            "episode_truncated_frac": sum(s["truncated"] for s in stats) / n,
            "env_error_frac": sum(s.get("env_errors", 0) > 0 for s in stats) / n}


def score_samples(batch: RolloutBatch, row_tasks: list[Task], responses: list[str], params: SamplingParams,
                  scoring: Scoring, step: int, metrics: dict[str, float]) -> ScoredSamples:
    spec = scoring.spec
    truncated = [bool(t) for t in batch.truncated.tolist()]
    if spec is None:
        verdicts = score(row_tasks, responses, scoring, truncated=truncated)
        return ScoredSamples(batch, row_tasks, responses, verdicts, [v.score for v in verdicts], metrics=metrics)
    by_term = {term.name: score(row_tasks, responses, scoring, term, truncated) for term in spec.verifier_terms()}
    task_term = next((t.name for t in spec.verifier_terms() if t.uses_task_verifier), next(iter(by_term), None))
    verdicts = by_term[task_term] if task_term else score(row_tasks, responses, scoring, truncated=truncated)
    composed = compose(
        spec, {name: [v.score for v in vs] for name, vs in by_term.items()},
        lengths=batch.response_mask.sum(-1).tolist(), max_len=params.max_new_tokens,
        groups=batch.group_index.tolist(), step=step,
    )
    return ScoredSamples(batch, row_tasks, responses, verdicts, composed.total, composed.components, metrics)
