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
the chat template's rendering of the new messages, from the end of the assistant's text to the next generation
prompt.

Limits: ``params.max_new_tokens`` is the episode's budget of response tokens (model and environment); an
environment's ``limits`` bound its turns and each turn's tokens. A turn that runs out of tokens (mid-call included)
ends the episode as truncated, without running what it started. A turn ends at the model's EOS (``rollout.stop``
strings apply to single-turn tasks only); ``rollout.max_prompt_tokens`` applies to the first prompt.

Templates that re-render earlier turns once later messages follow (Qwen3's drops the empty ``<think>`` block of an
earlier assistant turn) are fine: the row is what was sent and sampled, never a re-rendering of the conversation
(observation_text). ``rollout.chat_template_kwargs`` (``PromptPolicy.chat_template_kwargs``) reach every rendering.

Model output never ends a run: an environment's ``step`` is meant to turn any text into an observation (the
``tools`` environment does), and where one raises anyway the episode ends there with the turn's text as its answer,
counted in ``env_errors`` (logged once per exception type with the task's id), and the other episodes go on.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Mapping

import torch

from rlvr.envs import SINGLE_TURN, Environment, Message, make_env
from rlvr.models import DataText, encode_prompt
from rlvr.rollout.base import RolloutBatch, RolloutEngine, SamplingParams
from rlvr.tasks import Task
from rlvr.errors import UserError
from rlvr.models.loading import context_length

SENTINEL = "\x00rlvr-end-of-content\x00"
AGENT_REWARD = "agent_reward"  # the part an agent program's own reward goes in (rlvr.rollout.agent_program)
log = logging.getLogger(__name__)
_LOGGED: set[str] = set()


class TemplateError(UserError):
    """The chat template cannot carry an episode: it has none, it raises, or it does not render the assistant's
    text or the environment's messages as given."""


def render(tokenizer, messages: list[Message], tools: list[dict] | None, generation: bool,
           template_kwargs: Mapping[str, Any] | None = None) -> str:
    """``apply_chat_template`` to text, with ``rollout.chat_template_kwargs`` (e.g. ``enable_thinking``)."""
    if getattr(tokenizer, "chat_template", None) is None:
        raise TemplateError("multi-turn episodes need a tokenizer with a chat_template")
    try:
        return tokenizer.apply_chat_template(messages, tools=tools or None, tokenize=False,
                                             add_generation_prompt=generation, **dict(template_kwargs or {}))
    except TemplateError:
        raise
    except Exception as exc:  # jinja2's raise_exception and undefined names: say which conversation it refused
        roles = ", ".join(str(m.get("role")) for m in messages)
        raise TemplateError(f"the chat template raised on a conversation with roles [{roles}]: "
                            f"{type(exc).__name__}: {exc}; {_FIX}") from exc


_FIX = ("use a model whose chat template renders every role the environment sends (set the tokenizer's "
        "chat_template, e.g. chat_template.jinja in the model folder)")


def encode_messages(tokenizer, prompt, tools: list[dict] | None,
                    template_kwargs: Mapping[str, Any] | None = None) -> list[int]:
    """The first prompt of an episode: plain text as is; chat messages rendered with the tools."""
    if isinstance(prompt, str) or not tools:
        return encode_prompt(tokenizer, prompt, template_kwargs)
    plain = DataText(tokenizer)
    return plain.encode(render(tokenizer, plain.messages(prompt), tools, True, template_kwargs))


def observation_text(tokenizer, history: list[Message], observations: list[Message], tools: list[dict] | None,
                     template_kwargs: Mapping[str, Any] | None = None, plain: DataText | None = None) -> str:
    """What the template puts after the last assistant message's content: its end of turn, the observation
    messages and the next generation prompt. ``history`` ends with the assistant message.

    The conversation is rendered with the assistant's content replaced by a marker and the text after the marker is
    kept, so nothing before it has to render the same way twice: templates that re-render earlier turns once later
    messages follow (Qwen3 drops or adds ``<think>`` blocks of earlier assistant turns) give the same observation
    text as templates that only append. The episode's tokens are what was actually sent and sampled. With
    ``plain`` (rlvr.models.DataText), the messages' text reaches the template through it (``plain.encode`` then
    tokenizes the result)."""
    if plain is not None:
        history, observations = plain.messages(history), plain.messages(observations)
    marked = history[:-1] + [{**history[-1], "content": SENTINEL}]
    text = render(tokenizer, marked + list(observations), tools, True, template_kwargs)
    earlier = sum(str(m.get("content", "")).count(SENTINEL) for m in history[:-1])  # text a model wrote, in theory
    if text.count(SENTINEL) <= earlier:
        probe = render(tokenizer, history[:-1] + [{**history[-1], "content": "PROBE-TEXT"}], tools, False,
                       template_kwargs)
        raise TemplateError("the chat template does not render the assistant's text as given, so the model's tokens "
                            "cannot be followed by the environment's: an assistant message with content "
                            f"'PROBE-TEXT' renders as ...{probe[-300:]!r}; {_FIX}")
    at = -1
    for _ in range(earlier + 1):
        at = text.index(SENTINEL, at + 1)
    return text[at + len(SENTINEL):]


def observation_ids(tokenizer, history: list[Message], observations: list[Message], tools: list[dict] | None,
                    stop_text: str, template_kwargs: Mapping[str, Any] | None = None) -> list[int]:
    """The environment's tokens after an assistant turn (observation_text), less the stop token the model already
    sampled. ``history`` ends with the assistant message."""
    plain = DataText(tokenizer)
    tail = observation_text(tokenizer, history, observations, tools, template_kwargs, plain)
    if stop_text and tail.startswith(stop_text):
        tail = tail[len(stop_text):]
    return plain.encode(tail)


def renders_without_their_text(tokenizer, history: list[Message], observations: list[Message],
                               tools: list[dict] | None, template_kwargs: Mapping[str, Any] | None = None) -> bool:
    """Whether the template carries this conversation once the model's turns and the observations say something
    neutral: then a TemplateError on the real conversation was caused by what they said."""
    neutral = [{**m, "content": "probe answer"} if m.get("role") == "assistant" else m for m in history]
    try:
        observation_text(tokenizer, neutral, [{**m, "content": "probe result"} for m in observations], tools,
                         template_kwargs)
    except TemplateError:
        return False
    return True


def check_template(tokenizer, tasks: list[Task], template_kwargs: Mapping[str, Any] | None = None) -> None:
    """Fail before any model loads when the tokenizer's chat template cannot carry these tasks: the first chat
    prompt renders with ``template_kwargs``, and for the first task with a multi-turn environment a probe turn
    (an assistant message, then a tool or user message) renders the way episodes need (observation_text)."""
    chat = next((t for t in tasks if not isinstance(t.prompt, str) and t.env in (None, SINGLE_TURN)), None)
    if chat is not None:
        try:
            encode_prompt(tokenizer, chat.prompt, template_kwargs)
        except UserError:
            raise
        except Exception as exc:  # noqa: BLE001 - a template that raises: say so before work
            raise TemplateError(f"task {chat.id}: the chat template raised on its prompt: {type(exc).__name__}: "
                                f"{exc}") from exc
    task = next((t for t in tasks if t.env not in (None, SINGLE_TURN)), None)
    if task is None:
        return
    env = make_env(task.env, **task.env_options)
    try:
        prompt = env.reset(task)
        tools = list(env.tools) or None
        if isinstance(prompt, str):
            return
        history = [dict(m) for m in prompt] + [{"role": "assistant", "content": "probe answer"}]
        role = "tool" if tools else "user"
        try:
            encode_messages(tokenizer, prompt, tools, template_kwargs)
            tail = observation_text(tokenizer, history, [{"role": role, "content": "probe result"}], tools,
                                    template_kwargs)
            if "probe result" not in tail:  # probed here only: a real tool's text may be escaped by a template
                raise TemplateError(f"the chat template drops the environment's {role!r} message 'probe result': "
                                    f"after the assistant's text it renders only {tail[:300]!r}; {_FIX}")
        except TemplateError as exc:
            raise TemplateError(f"task {task.id} (env {task.env!r}): {exc}") from None
    finally:
        try:
            env.close()
        except Exception:  # noqa: BLE001 - a probe's close must not hide the check's verdict
            pass


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
    last_text: str | None = None  # the model's latest turn as text

    def transcript(self) -> list[Message]:
        """The conversation as it went: the prompt, each model turn and each observation, the final turn last."""
        final = self.last_text is not None and not (self.messages and self.messages[-1].get("role") == "assistant"
                                                     and self.messages[-1].get("content") == self.last_text)
        return [dict(m) for m in self.messages] + ([{"role": "assistant", "content": self.last_text}] if final else [])

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
    transcripts: list[list[Message]] = field(default_factory=list)  # per episode: its messages, tool calls and results


def start_episode(task: Task, tokenizer, template_kwargs: Mapping[str, Any] | None = None) -> Episode:
    env = make_env(task.env, **task.env_options)
    prompt = env.reset(task)
    tools = list(env.tools) or None
    messages = [] if isinstance(prompt, str) else [dict(m) for m in prompt]
    return Episode(task, env, prompt, encode_messages(tokenizer, prompt, tools, template_kwargs), tools, messages)


def run_episodes(engine: RolloutEngine, tokenizer, tasks: list[Task], params: SamplingParams, policy=None) -> EpisodeRun:
    """``params.n`` episodes per task (rows i*n .. i*n+n-1 answer tasks[i]), run turn by turn (module docstring)."""
    from rlvr.rollout.episodes import PromptPolicy, fit_prompts

    policy = policy or PromptPolicy()
    kwargs = policy.chat_template_kwargs
    episodes = [start_episode(task, tokenizer, kwargs) for task in tasks for _ in range(params.n)]
    fitted, cut = fit_prompts([e.prompt_ids for e in episodes], [e.task for e in episodes], policy)
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
            ep.last_text = text
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
            try:
                env_ids = observation_ids(tokenizer, ep.messages, step.observations, ep.tools,
                                          tokenizer.decode(ids[-1:], skip_special_tokens=False) if ids else "", kwargs)
            except TemplateError as exc:
                if not renders_without_their_text(tokenizer, ep.messages, step.observations, ep.tools, kwargs):
                    raise  # the template, not this episode's text: an error of the run (check_template's kind)
                if "template" not in _LOGGED:
                    _LOGGED.add("template")
                    log.warning("task %s: the chat template refused the model's text (%s); the episode ends with "
                                "the empty answer", ep.task.id, str(exc)[:300])
                ep.stats["env_errors"] += 1
                ep.finish("")  # the text the template refused is no answer: the sample's verdict, not the batch's
                continue
            ep.messages += step.observations
            if len(ep.ids) + len(env_ids) >= budget:  # no room for the observation and a next turn
                ep.finish(text, truncated=True)
                continue
            ep.add(env_ids, False)
    return EpisodeRun(to_batch(episodes, tokenizer.pad_token_id, params.n, device, has_entropy),
                      [e.answer for e in episodes], [e.parts for e in episodes], [e.stats for e in episodes],
                      {"prompt_truncated_frac": cut / max(len(episodes), 1)}, [e.transcript() for e in episodes])


def to_batch(episodes: list[Episode], pad_id: int, n: int, device, has_entropy: bool) -> RolloutBatch:
    """One row per episode: the first prompt left-padded, the turns right-padded (module docstring's masks)."""
    return episode_batch([(e.prompt_ids, e.ids, e.loss, e.logprobs, e.entropy) for e in episodes],
                         [bool(e.stats["truncated"]) for e in episodes], pad_id, n, device, has_entropy)


def episode_batch(rows: list[tuple[list[int], list[int], list[int], list[float], list[float]]], truncated: list[bool],
                  pad_id: int, n: int, device, has_entropy: bool) -> RolloutBatch:
    """The batch of episode rows (prompt ids, response ids, loss mask, log-probs, entropy), ``n`` rows per group:
    prompts left-padded, responses right-padded; tokens the model did not sample carry no loss."""
    count = len(rows)
    width_p = max(1, max(len(r[0]) for r in rows))
    width = max(1, max(len(r[1]) for r in rows))
    prompt_ids = torch.full((count, width_p), pad_id, dtype=torch.long)
    prompt_mask = torch.zeros((count, width_p), dtype=torch.long)
    response_ids = torch.full((count, width), pad_id, dtype=torch.long)
    response_mask = torch.zeros((count, width), dtype=torch.long)
    loss_mask = torch.zeros((count, width), dtype=torch.long)
    logprobs = torch.zeros((count, width), dtype=torch.float32)
    entropy = torch.zeros((count, width), dtype=torch.float32)
    for i, (prompt, ids, loss, lps, ents) in enumerate(rows):
        prompt_ids[i, width_p - len(prompt):] = torch.tensor(prompt, dtype=torch.long)
        prompt_mask[i, width_p - len(prompt):] = 1
        if ids:
            t = len(ids)
            response_ids[i, :t] = torch.tensor(ids, dtype=torch.long)
            response_mask[i, :t] = 1
            loss_mask[i, :t] = torch.tensor(loss, dtype=torch.long)
            logprobs[i, :t] = torch.tensor(lps, dtype=torch.float32)
            entropy[i, :t] = torch.tensor(ents, dtype=torch.float32)
    group_index = torch.arange(count // n).repeat_interleave(n)
    to = lambda t: t.to(device)  # noqa: E731
    return RolloutBatch(to(prompt_ids), to(prompt_mask), to(response_ids), to(response_mask), to(logprobs),
                        to(torch.tensor(truncated, dtype=torch.bool)), to(group_index),
                        to(entropy) if has_entropy else None, to(loss_mask))
