"""A chat-completions client for judges: the official ``openai`` client behind a deadline, retries with
backoff, a concurrency limit, a reply cache and metrics.

    client = JudgeClient.shared(base_url="http://127.0.0.1:8000/v1", model="judge")
    reply = client.complete(messages, timeout_s=20.0)       # JudgeReply(text, latency_s, tokens, attempts, cached)
    client.metrics()                                         # calls, cache_hits, retries, failures, tokens, latency

Every call has one wall-clock deadline that covers waiting for a slot, every attempt and every backoff; nothing
a server does can hold the caller past it. Retried: connection errors, timeouts, 429 and 5xx replies. Not retried:
other 4xx replies (a wrong model name or key does not get better) and redirects, which are never followed (the
request goes to the configured endpoint and nowhere else). A reply body over ``max_reply_bytes`` is an error
(it is read in chunks and dropped at the cap); the reply text is cut to ``max_reply_chars``.
"""

from __future__ import annotations

import collections
import hashlib
import json
import os
import random
import threading
import time
from dataclasses import dataclass
from typing import Any

DEFAULT_KEY_ENV = "OPENAI_API_KEY"


class JudgeUnavailable(Exception):
    """The judge gave no usable reply before the deadline; ``kind`` is "timeout", "busy" or "error"."""

    def __init__(self, kind: str, message: str, attempts: int = 0):
        super().__init__(message)
        self.kind, self.attempts = kind, attempts


@dataclass(frozen=True)
class JudgeReply:
    text: str
    latency_s: float
    prompt_tokens: int = 0
    completion_tokens: int = 0
    attempts: int = 1
    cached: bool = False


def _openai():
    try:
        import openai
    except ImportError as exc:  # the judge's only extra dependency
        raise ImportError("the judge verifier needs the 'openai' package: pip install 'rlvr[judges]'") from exc
    return openai


class JudgeClient:
    """Thread-safe; one per (base_url, model, key) through ``shared``."""

    _SHARED: dict[tuple, JudgeClient] = {}
    _SHARED_LOCK = threading.Lock()

    def __init__(self, base_url: str, model: str, *, api_key: str | None = None, max_concurrency: int = 8,
                 max_retries: int = 3, backoff_s: float = 0.5, max_tokens: int = 512, temperature: float = 0.0,
                 cache_size: int = 4096, max_reply_chars: int = 64_000, max_reply_bytes: int = 4 * 2**20):
        openai = _openai()
        if not base_url or not model:
            raise ValueError("a judge needs base_url and model (options, or RLVR_JUDGE_BASE_URL / RLVR_JUDGE_MODEL)")
        self.base_url, self.model = base_url, model
        self.max_retries, self.backoff_s = max(0, int(max_retries)), max(0.0, float(backoff_s))
        self.max_tokens, self.temperature = int(max_tokens), float(temperature)
        self.max_reply_chars, self.max_reply_bytes = int(max_reply_chars), int(max_reply_bytes)
        # Redirects are not followed: the prompt and the response (and, to the same origin, the key) go to the
        # configured endpoint only, and only its verdict counts.
        self._client = openai.OpenAI(base_url=base_url, api_key=api_key or "EMPTY", max_retries=0, timeout=60.0,
                                     http_client=openai.DefaultHttpxClient(follow_redirects=False))
        self._retryable = (openai.APIConnectionError, openai.APITimeoutError, openai.RateLimitError,
                           openai.InternalServerError)
        self._status_error = openai.APIStatusError
        self._slots = threading.BoundedSemaphore(max(1, int(max_concurrency)))
        self._lock = threading.Lock()
        self._cache: collections.OrderedDict[str, JudgeReply] = collections.OrderedDict()
        self._cache_size = int(cache_size)
        self._latencies: collections.deque[float] = collections.deque(maxlen=4096)
        self._counts = dict.fromkeys(("calls", "cache_hits", "requests", "retries", "failures", "timeouts",
                                      "prompt_tokens", "completion_tokens"), 0)

    @classmethod
    def shared(cls, base_url: str, model: str, *, api_key_env: str = DEFAULT_KEY_ENV, **settings: Any) -> JudgeClient:
        """The process-wide client for these settings (the key is read from the environment variable named
        ``api_key_env``; a server that needs none, like a local vLLM, gets a placeholder)."""
        key = (base_url, model, api_key_env, tuple(sorted(settings.items())))
        with cls._SHARED_LOCK:
            client = cls._SHARED.get(key)
            if client is None:
                client = cls._SHARED[key] = cls(base_url, model, api_key=os.environ.get(api_key_env), **settings)
            return client

    def cache_key(self, messages: list[dict[str, str]]) -> str:
        blob = json.dumps([self.base_url, self.model, self.max_tokens, self.temperature, messages], sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()

    def complete(self, messages: list[dict[str, str]], *, timeout_s: float = 30.0, cache: bool = True) -> JudgeReply:
        """The judge's reply to ``messages`` within ``timeout_s`` seconds; raises JudgeUnavailable otherwise."""
        deadline = time.monotonic() + float(timeout_s)
        self._count("calls")
        key = self.cache_key(messages) if cache and self._cache_size else None
        if key is not None:
            with self._lock:
                hit = self._cache.get(key)
                if hit is not None:
                    self._cache.move_to_end(key)
                    self._counts["cache_hits"] += 1
                    return JudgeReply(hit.text, 0.0, 0, 0, 0, True)
        if not self._slots.acquire(timeout=max(0.0, deadline - time.monotonic())):
            self._count("timeouts")
            raise JudgeUnavailable("busy", f"no free judge slot within {timeout_s:.1f}s")
        try:
            reply = self._attempts(messages, deadline)
        finally:
            self._slots.release()
        if key is not None:
            with self._lock:
                self._cache[key] = reply
                while len(self._cache) > self._cache_size:
                    self._cache.popitem(last=False)
        return reply

    def _attempts(self, messages: list[dict[str, str]], deadline: float) -> JudgeReply:
        attempt, last_error = 0, "no attempt"
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0.05:
                self._count("timeouts")
                raise JudgeUnavailable("timeout", f"judge deadline passed ({last_error})", attempt)
            attempt += 1
            self._count("requests")
            t0 = time.monotonic()
            try:
                out = self._request(messages, deadline, remaining)
            except self._retryable as exc:
                last_error = f"{type(exc).__name__}: {str(exc)[:200]}"
            except JudgeUnavailable:
                self._count("failures")
                raise
            except self._status_error as exc:  # other 4xx: asking again will not help
                self._count("failures")
                raise JudgeUnavailable("error", f"{type(exc).__name__}: {str(exc)[:300]}", attempt) from None
            except Exception as exc:  # a reply the client could not read
                self._count("failures")
                raise JudgeUnavailable("error", f"{type(exc).__name__}: {str(exc)[:300]}", attempt) from None
            else:
                latency = time.monotonic() - t0
                text = _reply_text(out)
                if text is None:
                    last_error = "reply without message content"
                else:
                    pt, ct = _usage(out, "prompt_tokens"), _usage(out, "completion_tokens")
                    with self._lock:
                        self._latencies.append(latency)
                        self._counts["prompt_tokens"] += pt
                        self._counts["completion_tokens"] += ct
                    return JudgeReply(text[: self.max_reply_chars], latency, pt, ct, attempt)
            if attempt > self.max_retries:
                self._count("failures")
                raise JudgeUnavailable("error", f"gave up after {attempt} attempts ({last_error})", attempt)
            self._count("retries")
            pause = self.backoff_s * (2 ** (attempt - 1)) * (0.5 + random.random() / 2)
            time.sleep(max(0.0, min(pause, deadline - time.monotonic() - 0.05)))

    def _request(self, messages: list[dict[str, str]], deadline: float, remaining: float) -> dict[str, Any]:
        """One chat-completions call, its body read in chunks so that neither its size (``max_reply_bytes``) nor
        a server that drips it slowly can hold the caller past the deadline."""
        with self._client.chat.completions.with_streaming_response.create(
                model=self.model, messages=messages, max_tokens=self.max_tokens, temperature=self.temperature,
                timeout=remaining) as response:
            chunks, size = [], 0
            for chunk in response.iter_bytes():
                size += len(chunk)
                if size > self.max_reply_bytes:
                    raise JudgeUnavailable("error", f"judge reply larger than {self.max_reply_bytes} bytes")
                if time.monotonic() > deadline:
                    raise JudgeUnavailable("timeout", "judge reply still arriving at the deadline")
                chunks.append(chunk)
        try:
            out = json.loads(b"".join(chunks))
        except ValueError:
            raise JudgeUnavailable("error", "judge reply is not JSON") from None
        if not isinstance(out, dict):
            raise JudgeUnavailable("error", "judge reply is not a JSON object")
        return out

    def _count(self, name: str, n: int = 1) -> None:
        with self._lock:
            self._counts[name] += n

    def metrics(self) -> dict[str, float]:
        """Counters since creation plus latency_p50_ms / latency_p99_ms of successful requests."""
        with self._lock:
            out: dict[str, float] = dict(self._counts)
            lat = sorted(self._latencies)
        for name, q in (("latency_p50_ms", 0.5), ("latency_p99_ms", 0.99)):
            out[name] = lat[min(len(lat) - 1, int(q * len(lat)))] * 1000.0 if lat else 0.0
        return out

    def clear_cache(self) -> None:
        with self._lock:
            self._cache.clear()


def _reply_text(out: dict[str, Any]) -> str | None:
    try:
        content = out["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError):
        return None
    return content if isinstance(content, str) else None


def _usage(out: dict[str, Any], key: str) -> int:
    usage = out.get("usage")
    value = usage.get(key) if isinstance(usage, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0
