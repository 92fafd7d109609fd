"""Multi-turn episodes: many environments at once, one batched generation call per turn across the live ones.

    run = run_episodes(engine, tokenizer, tasks, SamplingParams(n=8, max_new_tokens=96), policy)
    run.batch        # one RolloutBatch row per episode; the response is every turn, in order
    run.answers      # the text each task's verifier scores
    run.parts        # per-turn reward parts summed over the episode, e.g. {"format": -0.2}
    run.stats        # per episode: turns, tool_calls, tool_errors, malformed_calls, truncated

The masking rule: a row's response is the concatenation of the model's turns and what the environment said between
them (tool results, and the chat template's turn markers up to the next generation prompt). All of it is attended
to (``response_mask`` = 1); only the tokens the model sampled, each turn's closing EOS included, carry the loss
(``loss_mask`` = 1). The model's tokens are kept exactly as sampled (never re-tokenized); the environment's are
the chat template's rendering of the new messages, cut where the rendering of the conversation so far ends.

Limits: ``params.max_new_tokens`` is the episode's budget of response tokens (model and environment); an
environment's ``limits`` bound its turns and each turn's tokens. A turn that runs out of tokens (mid-call included)
ends the episode as truncated, without running what it started. A turn ends at the model's EOS (``rollout.stop``
strings apply to single-turn tasks only); ``rollout.max_prompt_tokens`` applies to the first prompt.

Model output never ends a run: an environment's ``step`` is meant to turn any text into an observation (the
``tools`` environment does), and where one raises anyway the episode ends there with the turn's text as its answer,
counted in ``env_errors`` (logged once per exception type with the task's id), and the other episodes go on.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import torch

from rlvr.envs import Environment, Message, make_env
from rlvr.models import encode_prompt
from rlvr.rollout.base import RolloutBatch, RolloutEngine, SamplingParams
from rlvr.tasks import Task
from rlvr.errors import UserError
from rlvr.models.loading import context_length

SENTINEL = "\x00rlvr-end-of-content\x00"
log = logging.getLogger(__name__)
_LOGGED: set[str] = set()


class TemplateError(UserError):
    """The chat template cannot be extended turn by turn (a later rendering does not start with an earlier one)."""


def render(tokenizer, messages: list[Message], tools: list[dict] | None, generation: bool) -> str:
    if getattr(tokenizer, "chat_template", None) is None:
        raise TemplateError("multi-turn episodes need a tokenizer with a chat_template")
    return tokenizer.apply_chat_template(messages, tools=tools or None, tokenize=False,
                                         add_generation_prompt=generation)


def encode_messages(tokenizer, prompt, tools: list[dict] | None) -> list[int]:
    """The first prompt of an episode: plain text as is; chat messages rendered with the tools."""
    if isinstance(prompt, str) or not tools:
        return encode_prompt(tokenizer, prompt)
    return list(tokenizer(render(tokenizer, prompt, tools, True), add_special_tokens=False)["input_ids"])


def observation_ids(tokenizer, history: list[Message], observations: list[Message], tools: list[dict] | None,
                    stop_text: str) -> list[int]:
    """The environment's tokens after an assistant turn: what the template puts after the assistant's content
    (less the stop token the model already sampled), the observation messages, and the next generation prompt.
    ``history`` ends with the assistant message."""
    before = render(tokenizer, history, tools, False)
    after = render(tokenizer, history + observations, tools, True)
    if not after.startswith(before):
        raise TemplateError("the chat template renders earlier turns differently once later messages follow, so "
                            "the model's tokens cannot be kept as sampled; use a template that only appends")
    marked = render(tokenizer, history[:-1] + [{**history[-1], "content": SENTINEL}], tools, False)
    tail = marked[marked.rindex(SENTINEL) + len(SENTINEL):] if SENTINEL in marked else ""
    if stop_text and tail.startswith(stop_text):
        tail = tail[len(stop_text):]
    return list(tokenizer(tail + after[len(before):], add_special_tokens=False)["input_ids"])


@dataclass
class Episode:
    task: Task
    env: Environment
    prompt: Any
    prompt_ids: list[int]
    tools: list[dict] | None
    messages: list[Message] = field(default_factory=list)
    ids: list[int] = field(default_factory=list)
    loss: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    entropy: list[float] = field(default_factory=list)
    parts: dict[str, float] = field(default_factory=dict)
    stats: dict[str, int] = field(default_factory=lambda: {"turns": 0, "tool_calls": 0, "tool_errors": 0,
                                                           "malformed_calls": 0, "skipped_calls": 0, "truncated": 0,
                                                           "env_errors": 0})
    answer: str = ""
    done: bool = False

    def add(self, ids: list[int], trained: bool, logprobs: list[float] | None = None,
            entropy: list[float] | None = None) -> None:
        self.ids += ids
        self.loss += [int(trained)] * len(ids)
        self.logprobs += logprobs if logprobs is not None else [0.0] * len(ids)
        self.entropy += entropy if entropy is not None else [0.0] * len(ids)

    def finish(self, answer: str, truncated: bool = False) -> None:
        self.answer, self.done = answer, True
        self.stats["truncated"] = int(truncated)
        try:
            self.env.close()
        except Exception as exc:  # noqa: BLE001 - a failing close must not end the other episodes
            _log_once(self.task, "close", exc)


def _log_once(task: Task, where: str, exc: BaseException) -> None:
    key = f"{where}:{type(exc).__name__}"
    if key not in _LOGGED:
        _LOGGED.add(key)
        log.warning("task %s: environment %r raised in %s (%s: %s); the episode ends there", task.id, task.env,
                    where, type(exc).__name__, str(exc)[:300])


def safe_step(ep: Episode, text: str):
    """``ep.env.step(text)``, or None when the environment raised (module docstring)."""
    try:
        return ep.env.step(text)
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - model output must not end the run
        _log_once(ep.task, "step", exc)
        ep.stats["env_errors"] += 1
        return None


@dataclass
class EpisodeRun:
    batch: RolloutBatch
    answers: list[str]
    parts: list[dict[str, float]]
    stats: list[dict[str, int]]
    metrics: dict[str, float] = field(default_factory=dict)


def start_episode(task: Task, tokenizer) -> Episode:
    env = make_env(task.env, **task.env_options)
    prompt = env.reset(task)
    tools = list(env.tools) or None
    messages = [] if isinstance(prompt, str) else [dict(m) for m in prompt]
    return Episode(task, env, prompt, encode_messages(tokenizer, prompt, tools), tools, messages)


def run_episodes(engine: RolloutEngine, tokenizer, tasks: list[Task], params: SamplingParams, policy=None) -> EpisodeRun:
    """``params.n`` episodes per task (rows i*n .. i*n+n-1 answer tasks[i]), run turn by turn (module docstring)."""
    from rlvr.rollout.episodes import PromptPolicy, fit_prompts

    episodes = [start_episode(task, tokenizer) for task in tasks for _ in range(params.n)]
    fitted, cut = fit_prompts([e.prompt_ids for e in episodes], [e.task for e in episodes], policy or PromptPolicy())
    for e, ids in zip(episodes, fitted):
        e.prompt_ids = ids
    budget = params.max_new_tokens
    context = context_length(getattr(engine, "model", None))  # None: the engine's model does not say
    device = None
    has_entropy = True
    while True:
        for e in episodes:  # an episode whose context is full ends, truncated, rather than sampling past it
            if not e.done and context is not None and len(e.prompt_ids) + len(e.ids) >= context[0]:
                last = [m["content"] for m in e.messages if m.get("role") == "assistant"]
                e.finish(last[-1] if last else "", truncated=True)
        live = [e for e in episodes if not e.done]
        if not live:
            break
        allowed = [min(budget - len(e.ids), e.env.limits.max_turn_tokens or budget) for e in live]
        most = max(allowed)
        if context is not None:  # one call samples up to `most` tokens for every row: keep the longest within context
            most = min(most, context[0] - max(len(e.prompt_ids) + len(e.ids) for e in live))
        turn = SamplingParams(n=1, max_new_tokens=most, temperature=params.temperature, top_p=params.top_p,
                              top_k=params.top_k)
        with torch.no_grad():
            out = engine.generate([e.prompt_ids + e.ids for e in live], turn)
        device = out.response_ids.device
        has_entropy = has_entropy and out.entropy is not None
        for row, (ep, limit) in enumerate(zip(live, allowed)):
            length = int(out.response_mask[row].sum())
            ids = out.response_ids[row, :length].tolist()
            over = length > limit
            ids = ids[:limit]
            ep.add(ids, True, out.logprobs[row, :len(ids)].tolist(),
                   out.entropy[row, :len(ids)].tolist() if out.entropy is not None else None)
            ep.stats["turns"] += 1
            text = tokenizer.decode(ids, skip_special_tokens=True)
            if over or bool(out.truncated[row]):
                ep.finish(text, truncated=True)
                continue
            step = safe_step(ep, text)
            if step is None:
                ep.finish(text)
                continue
            for name, value in step.rewards.items():
                ep.parts[name] = ep.parts.get(name, 0.0) + float(value)
            for name in ("tool_calls", "tool_errors", "malformed_calls", "skipped_calls"):
                ep.stats[name] += int(step.info.get(name, 0))
            if step.done or ep.stats["turns"] >= ep.env.limits.max_turns:
                ep.finish(step.answer if step.answer is not None else text)
                continue
            if isinstance(ep.prompt, str):
                raise TemplateError(f"task {ep.task.id}: environment {ep.task.env!r} continued an episode whose "
                                    "prompt is plain text; multi-turn environments must start with chat messages")
            ep.messages.append({"role": "assistant", "content": text})
            env_ids = observation_ids(tokenizer, ep.messages, step.observations, ep.tools,
                                      tokenizer.decode(ids[-1:], skip_special_tokens=False) if ids else "")
            ep.messages += step.observations
            if len(ep.ids) + len(env_ids) >= budget:  # no room for the observation and a next turn
                ep.finish(text, truncated=True)
                continue
            ep.add(env_ids, False)
    return EpisodeRun(to_batch(episodes, tokenizer.pad_token_id, params.n, device, has_entropy),
                      [e.answer for e in episodes], [e.parts for e in episodes], [e.stats for e in episodes],
                      {"prompt_truncated_frac": cut / max(len(episodes), 1)})


def to_batch(episodes: list[Episode], pad_id: int, n: int, device, has_entropy: bool) -> RolloutBatch:
    """One row per episode: the first prompt left-padded, the turns right-padded (module docstring's masks)."""
    rows = len(episodes)
    width_p = max(len(e.prompt_ids) for e in episodes)
    width = max(1, max(len(e.ids) for e in episodes))
    prompt_ids = torch.full((rows, width_p), pad_id, dtype=torch.long)
    prompt_mask = torch.zeros((rows, width_p), dtype=torch.long)
    response_ids = torch.full((rows, width), pad_id, dtype=torch.long)
    response_mask = torch.zeros((rows, width), dtype=torch.long)
    loss_mask = torch.zeros((rows, width), dtype=torch.long)
    logprobs = torch.zeros((rows, width), dtype=torch.float32)
    entropy = torch.zeros((rows, width), dtype=torch.float32)
    for i, e in enumerate(episodes):
        p, t = len(e.prompt_ids), len(e.ids)
        prompt_ids[i, width_p - p:] = torch.tensor(e.prompt_ids, dtype=torch.long)
        prompt_mask[i, width_p - p:] = 1
        if t:
            response_ids[i, :t] = torch.tensor(e.ids, dtype=torch.long)
            response_mask[i, :t] = 1
            loss_mask[i, :t] = torch.tensor(e.loss, dtype=torch.long)
            logprobs[i, :t] = torch.tensor(e.logprobs, dtype=torch.float32)
            entropy[i, :t] = torch.tensor(e.entropy, dtype=torch.float32)
    truncated = torch.tensor([bool(e.stats["truncated"]) for e in episodes])
    group_index = torch.arange(rows // n).repeat_interleave(n)
    return RolloutBatch(prompt_ids.to(device), prompt_mask.to(device), response_ids.to(device), response_mask.to(device),
                        logprobs.to(device), truncated.to(device), group_index.to(device),
                        entropy.to(device) if has_entropy else None, loss_mask.to(device))
