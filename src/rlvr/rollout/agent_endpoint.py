"""An OpenAI-compatible endpoint on loopback that samples from the CURRENT rollout engine, token in, token out.

    endpoint = AgentEndpoint(engine, tokenizer, EndpointSettings(temperature=1.0, episode_tokens=256))
    key = endpoint.open_episode()        # OPENAI_API_KEY of one episode; OPENAI_BASE_URL is endpoint.base_url
    ...                                  # the agent program calls /v1/chat/completions or /v1/completions
    endpoint.pump(wait_s=0.05)           # on the caller's thread: one batched engine.generate for the calls waiting
    endpoint.calls[key]                  # every call of that episode: prompt ids, sampled ids and log-probs

Served: ``POST /v1/chat/completions`` (messages rendered with the tokenizer's chat template, with the request's
``tools`` and ``rollout.chat_template_kwargs``; a reply to a request with ``tools`` whose text holds Hermes-format
``<tool_call>{...}</tool_call>`` blocks comes back as ``tool_calls``; the messages' text, the model's earlier replies
and tool results included, is tokenized as plain text, so text spelling ``<|im_end|>`` is never the special token,
rlvr.models.DataText), ``POST /v1/completions`` (a text prompt is the program's own rendering: tokenized with the
tokenizer's special tokens, which the program may write as markers; or a list of token ids used as they are) and
``GET /v1/models``. A call
records the exact prompt ids the engine saw and the ids it sampled with their log-probs; the reply's text is the
decoding of those ids, and nothing is ever re-tokenized from text. Each episode has its own random key
(``Authorization: Bearer KEY``): a request without a known key is refused (401) and the key says which episode a call
belongs to.

Sampling: the run's ``rollout.temperature`` / ``top_p`` / ``top_k`` always (the trainer scores tokens at that
temperature; a request asking for another is served at the run's and counted in ``temperature_overridden``), ``n`` = 1,
no streaming. ``max_tokens`` (or ``max_completion_tokens``) is capped by what is left of the episode's budget of
sampled tokens (``rollout.max_new_tokens``) and by the model's context; a call made with the budget spent gets an
empty reply with ``finish_reason="length"`` and samples nothing.

Threads: HTTP requests are parsed and tokenized on the server's threads and parked; only ``pump`` (called by the
thread that owns the engine) runs the model, so calls of concurrent programs are generated as one batch.
"""

from __future__ import annotations

import json
import math
import queue
import secrets
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import torch

from rlvr.envs.parsers import parse_calls
from rlvr.errors import UserError
from rlvr.models import DataText, encode_prompt
from rlvr.models.loading import context_length
from rlvr.rollout.agent import render
from rlvr.rollout.base import RolloutEngine, SamplingParams


@dataclass(frozen=True)
class EndpointSettings:
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    episode_tokens: int = 256  # sampled tokens per episode over all its calls (rollout.max_new_tokens)
    max_prompt_tokens: int | None = None  # rollout.max_prompt_tokens, per call
    template_kwargs: dict[str, Any] = field(default_factory=dict)
    max_body_bytes: int = 8 * 2**20
    call_timeout_s: float = 600.0  # a request waits at most this long for its turn at the engine
    batch_window_s: float = 0.02  # after the first waiting call, how long pump waits for others to batch with


@dataclass
class Call:
    """One request of one episode, as the engine saw it."""

    episode: str
    kind: str  # "chat" or "completion"
    prompt_ids: list[int]
    max_tokens: int
    messages: list[dict[str, Any]] | None = None
    prompt_text: str | None = None  # a completion's prompt as decoded text (for transcripts)
    tools_offered: bool = False  # the request listed tools: a reply's hermes-format calls become tool_calls
    requested_temperature: float | None = None
    sampled_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    entropy: list[float] | None = None
    text: str = ""
    finish_reason: str = "stop"
    done: threading.Event = field(default_factory=threading.Event, repr=False)
    error: str | None = None


class RequestError(ValueError):
    def __init__(self, message: str, code: int = 400):
        super().__init__(message)
        self.code = code


def _text_content(content: Any, where: str) -> Any:
    """A message's content: a string, or the text parts of a list of content parts joined."""
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(p, dict) for p in content):
        if any(p.get("type") != "text" for p in content):
            raise RequestError(f"{where}: only text content parts are served")
        return "".join(str(p.get("text", "")) for p in content)
    raise RequestError(f"{where}: content must be a string or a list of text parts")


def _template_tool_calls(calls: Any, where: str) -> list[dict[str, Any]]:
    """An assistant message's tool_calls as chat templates take them: OpenAI sends ``function.arguments`` as a JSON
    string, Hugging Face templates expect the object."""
    if not isinstance(calls, list) or not all(isinstance(c, dict) for c in calls):
        raise RequestError(f"{where}.tool_calls must be a list of tool call objects")
    out = []
    for call in calls:
        function = dict(call.get("function") or {})
        if isinstance(function.get("arguments"), str):
            try:
                function["arguments"] = json.loads(function["arguments"])
            except ValueError:
                pass  # the template renders the string as it is
        out.append({**call, "function": function})
    return out


class AgentEndpoint:
    def __init__(self, engine: RolloutEngine, tokenizer, settings: EndpointSettings = EndpointSettings(), *,
                 host: str = "127.0.0.1"):
        self.engine, self.tokenizer, self.settings = engine, tokenizer, settings
        context = context_length(getattr(engine, "model", None))
        self.context = context[0] if context else None
        self.calls: dict[str, list[Call]] = {}
        self.spent: dict[str, int] = {}
        self.counts = {"calls": 0, "refused": 0, "budget_spent": 0, "temperature_overridden": 0}
        self._pending: queue.Queue[Call] = queue.Queue()
        self._lock = threading.Lock()
        self._eos = self._eos_ids()
        self.server = _Server((host, 0), self)
        self._thread = threading.Thread(target=self.server.serve_forever, name="rlvr-agent-endpoint", daemon=True)
        self._thread.start()

    def _eos_ids(self) -> set[int]:
        ids = getattr(self.engine, "eos_ids", None)
        if ids is None:
            ids = self.tokenizer.eos_token_id
        if isinstance(ids, torch.Tensor):
            ids = ids.tolist()
        return set(ids if isinstance(ids, (list, tuple, set)) else [ids]) - {None}

    @property
    def base_url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}/v1"

    def open_episode(self) -> str:
        """A new episode's key (its OPENAI_API_KEY)."""
        key = "rlvr-" + secrets.token_urlsafe(24)
        with self._lock:
            self.calls[key] = []
            self.spent[key] = 0
        return key

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        while True:  # nobody will generate for calls still parked: release their handlers
            try:
                call = self._pending.get_nowait()
            except queue.Empty:
                break
            call.error = "the episode's run ended"
            call.done.set()

    # ------------------------------------------------------------------------------------------ requests

    def admit(self, key: str | None, path: str, body: Any) -> Call | dict[str, Any]:
        """A parked Call for the engine, or a finished reply (a call made with the budget spent)."""
        with self._lock:
            known = key in self.calls
            self.counts["refused"] += not known
        if not known:
            raise RequestError("invalid API key: use the OPENAI_API_KEY this episode was started with", 401)
        if not isinstance(body, dict):
            raise RequestError("the request body must be a JSON object")
        if body.get("stream"):
            raise RequestError("stream=true is not served: ask for the whole completion")
        if body.get("n", 1) != 1:
            raise RequestError("n must be 1: each call samples one completion")
        tools = body.get("tools") or None
        if tools is not None and not (isinstance(tools, list) and all(isinstance(t, dict) for t in tools)):
            raise RequestError("tools must be a list of tool objects")
        if path.endswith("/chat/completions"):
            kind, messages, ids = "chat", *self._chat_prompt(body, tools)
        else:
            kind, messages, ids = "completion", None, self._completion_prompt(body)
        limit = self.settings.max_prompt_tokens
        if limit is not None and len(ids) > limit:
            raise RequestError(f"the prompt has {len(ids)} tokens, over rollout.max_prompt_tokens={limit}")
        if self.context is not None and len(ids) >= self.context:
            raise RequestError(f"the prompt has {len(ids)} tokens and fills the model's context of {self.context}")
        requested = body.get("max_completion_tokens", body.get("max_tokens"))
        if requested is not None and (not isinstance(requested, int) or isinstance(requested, bool) or requested < 1):
            raise RequestError("max_tokens must be a positive integer")
        temperature = body.get("temperature")
        if temperature is not None and not isinstance(temperature, (int, float)):
            raise RequestError("temperature must be a number")
        with self._lock:
            left = self.settings.episode_tokens - self.spent[key]
            room = [left] + ([requested] if requested else []) + ([self.context - len(ids)] if self.context else [])
            allowed = min(room)
            if allowed > 0:
                self.spent[key] += allowed  # reserved now: concurrent calls of one episode share one budget
            self.counts["calls"] += 1
            if temperature is not None and not math.isclose(float(temperature), self.settings.temperature):
                self.counts["temperature_overridden"] += 1
        text = None if messages is not None else self.tokenizer.decode(ids, skip_special_tokens=True)
        call = Call(key, kind, ids, allowed, messages, text, bool(tools), temperature)
        if allowed <= 0:
            with self._lock:
                self.counts["budget_spent"] += 1
            call.finish_reason = "length"
            call.done.set()
            return self.reply(call)
        self._pending.put(call)
        return call

    def _chat_prompt(self, body: dict, tools: list[dict] | None) -> tuple[list[dict[str, Any]], list[int]]:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
            raise RequestError("messages must be a non-empty list of message objects")
        clean = []
        for i, m in enumerate(messages):
            if not isinstance(m.get("role"), str):
                raise RequestError(f"messages[{i}].role must be a string")
            clean.append({**m, "content": _text_content(m.get("content"), f"messages[{i}]")})
            if m.get("tool_calls"):
                clean[-1]["tool_calls"] = _template_tool_calls(m["tool_calls"], f"messages[{i}]")
        try:
            if tools:
                plain = DataText(self.tokenizer)
                ids = plain.encode(render(self.tokenizer, plain.messages(clean), tools, True,
                                          self.settings.template_kwargs))
            else:
                ids = encode_prompt(self.tokenizer, clean, self.settings.template_kwargs)
        except UserError as exc:
            raise RequestError(str(exc)) from None
        except Exception as exc:  # noqa: BLE001 - a template that raises on these messages: the caller's 400
            raise RequestError(f"the chat template raised on these messages: {type(exc).__name__}: {exc}") from None
        return clean, ids

    def _completion_prompt(self, body: dict) -> list[int]:
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
            prompt = prompt[0]
        if isinstance(prompt, str):  # the program's own rendering: the markers it wrote are meant as markers
            return list(self.tokenizer(prompt)["input_ids"])
        vocab = len(self.tokenizer)
        if isinstance(prompt, list) and prompt and all(isinstance(t, int) and not isinstance(t, bool) and 0 <= t < vocab
                                                       for t in prompt):
            return list(prompt)  # token in: the ids as given
        raise RequestError(f"prompt must be a string or a non-empty list of token ids in [0, {vocab})")

    def wait(self, call: Call) -> dict[str, Any]:
        if not call.done.wait(self.settings.call_timeout_s):
            raise RequestError("the engine did not reach this call in time", 503)
        if call.error:
            raise RequestError(call.error, 503)
        return self.reply(call)

    def reply(self, call: Call) -> dict[str, Any]:
        usage = {"prompt_tokens": len(call.prompt_ids), "completion_tokens": len(call.sampled_ids),
                 "total_tokens": len(call.prompt_ids) + len(call.sampled_ids)}
        created, ident = int(time.time()), "rlvr-" + secrets.token_hex(8)
        if call.kind == "chat":
            message, finish = {"role": "assistant", "content": call.text}, call.finish_reason
            parsed = parse_calls("hermes", call.text) if call.tools_offered and finish == "stop" else None
            if parsed is not None and parsed.calls and not parsed.errors:
                message = {"role": "assistant", "content": parsed.content or None, "tool_calls": [
                    {"id": f"call_{secrets.token_hex(6)}", "type": "function",
                     "function": {"name": c.name, "arguments": json.dumps(c.arguments)}} for c in parsed.calls]}
                finish = "tool_calls"
            choice = {"index": 0, "message": message, "finish_reason": finish, "logprobs": None}
            return {"id": ident, "object": "chat.completion", "created": created, "model": "rlvr-policy",
                    "choices": [choice], "usage": usage}
        choice = {"index": 0, "text": call.text, "finish_reason": call.finish_reason, "logprobs": None}
        return {"id": ident, "object": "text_completion", "created": created, "model": "rlvr-policy",
                "choices": [choice], "usage": usage}

    # ------------------------------------------------------------------------------------------ the engine

    def pump(self, wait_s: float = 0.05, expected: int | None = None) -> int:
        """Generate for the calls waiting (waiting up to ``wait_s`` for a first one, then ``batch_window_s`` or
        until ``expected`` calls wait): one engine call for all of them. Returns how many calls were served."""
        try:
            first = self._pending.get(timeout=wait_s)
        except queue.Empty:
            return 0
        batch = [first]
        until = time.monotonic() + self.settings.batch_window_s
        while expected is None or len(batch) < expected:
            left = until - time.monotonic()
            if left <= 0:
                break
            try:
                batch.append(self._pending.get(timeout=left))
            except queue.Empty:
                break
        try:
            self._generate(batch)
        except Exception as exc:  # noqa: BLE001 - the handlers get the error; the caller decides on the run
            for call in batch:
                call.error = f"generation failed: {type(exc).__name__}: {exc}"
                call.done.set()
            raise
        return len(batch)

    def _generate(self, batch: list[Call]) -> None:
        s = self.settings
        params = SamplingParams(n=1, max_new_tokens=max(c.max_tokens for c in batch), temperature=s.temperature,
                                top_p=s.top_p, top_k=s.top_k)
        with torch.no_grad():
            out = self.engine.generate([c.prompt_ids for c in batch], params)
        for row, call in enumerate(batch):
            length = int(out.response_mask[row].sum())
            ids = out.response_ids[row, :length].tolist()
            over = length > call.max_tokens
            ids = ids[:call.max_tokens]
            call.sampled_ids = ids
            call.logprobs = out.logprobs[row, :len(ids)].tolist()
            call.entropy = out.entropy[row, :len(ids)].tolist() if out.entropy is not None else None
            call.text = self.tokenizer.decode(ids, skip_special_tokens=True)
            ended = bool(ids) and ids[-1] in self._eos and not over
            call.finish_reason = "stop" if ended else "length"
            with self._lock:  # the reservation made at admission, less what was not sampled
                self.spent[call.episode] -= call.max_tokens - len(ids)
                self.calls[call.episode].append(call)
            call.done.set()


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], endpoint: AgentEndpoint):
        self.endpoint = endpoint
        super().__init__(address, _Handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A connection that broke (a killed program) is the program's verdict, not a traceback."""


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        pass

    def _send(self, code: int, payload: dict[str, Any]) -> None:
        body = json.dumps(payload).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _error(self, code: int, message: str) -> None:
        kinds = {401: "authentication_error", 404: "not_found_error", 503: "server_error"}
        kind = kinds.get(code, "invalid_request_error")
        self._send(code, {"error": {"message": message, "type": kind, "code": code}})

    def _key(self) -> str | None:
        auth = self.headers.get("Authorization", "")
        return auth[7:].strip() if auth.startswith("Bearer ") else None

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        if self.path.rstrip("/") != "/v1/models":
            return self._error(404, f"no such path {self.path}: served are /v1/chat/completions, /v1/completions")
        if self._key() not in self.server.endpoint.calls:
            return self._error(401, "invalid API key")
        self._send(200, {"object": "list", "data": [{"id": "rlvr-policy", "object": "model", "created": 0,
                                                      "owned_by": "rlvr"}]})

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        endpoint = self.server.endpoint
        path = self.path.split("?", 1)[0].rstrip("/")
        if path not in ("/v1/chat/completions", "/v1/completions"):
            return self._error(404, f"no such path {self.path}: served are /v1/chat/completions, /v1/completions")
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            return self._error(400, "Content-Length must be an integer")
        if length > endpoint.settings.max_body_bytes:
            self.close_connection = True
            return self._error(413, f"the body is over {endpoint.settings.max_body_bytes} bytes")
        try:
            body = json.loads(self.rfile.read(length) or b"null")
        except (ValueError, UnicodeDecodeError):
            return self._error(400, "the body is not JSON")
        try:
            call = endpoint.admit(self._key(), path, body)
            self._send(200, call if isinstance(call, dict) else endpoint.wait(call))
        except RequestError as exc:
            self._error(exc.code, str(exc))
