"""The "remote" verifier: a reward server scores the response, over OpenRLHF's remote reward protocol, the one
`rlvr serve` speaks (so one rlvr process, or any server of that protocol, can score for many trainers).

    data.verifier: remote
    data.verifier_options: {url: "http://127.0.0.1:8000/get_reward", timeout_s: 30}

Each response is sent as ``{"query": [prompt + response], "prompts": [prompt], "labels": [reference]}`` (a chat
prompt as its messages' contents, one per line) and the reply's ``rewards[0]`` is the score. A reward in [0, 1] is
"correct" at 1, "incorrect" at 0 and "partial" between; one outside [0, 1] keeps its value with status "partial".

``timeout_s`` is the whole call: connecting, sending, waiting and reading the reply together. A server that sends
its reply a byte at a time is cut off at that deadline ("timeout", reason "remote_timeout"), not given a fresh
``timeout_s`` per byte. A redirect is never followed ("error", reason "remote_redirect", naming where it pointed):
the operator's ``headers`` (an Authorization header, say) go to the configured URL and nowhere else, and no other
host's reward is taken. A server that cannot be reached, answers an error or a malformed body gives an "error"
verdict naming what happened; it never raises into the trainer. The URL and headers come from the run's config (the
trainer's operator), never from a data row's options (rlvr.verifiers.row_options).
"""

from __future__ import annotations

import http.client
import json
import math
import socket
import threading
import time
import urllib.parse
from typing import Any

from rlvr.verifiers.base import Status, Verdict
from rlvr.verifiers.registry import register_verifier

MAX_REPLY_BYTES = 1 << 20
_CHUNK = 1 << 16


class _Deadline(Exception):
    """The call's deadline passed."""


def prompt_text(prompt: Any) -> str:
    if isinstance(prompt, list):
        return "\n".join(str(m.get("content", "")) for m in prompt if isinstance(m, dict))
    return prompt if isinstance(prompt, str) else ""


def _error(reason: str, message: str) -> Verdict:
    return Verdict(0.0, Status.ERROR, reason, details={"error": message})


def _post(url: str, body: bytes, headers: dict[str, str], timeout_s: float) -> tuple[int, dict[str, str], bytes]:
    """POST ``body`` to ``url`` once (no redirects) and read the reply, all of it within ``timeout_s`` seconds:
    every socket operation waits at most the time left, and a watchdog shuts the socket at the deadline so that no
    read, however slowly the server feeds it, outlives the call. Raises _Deadline, OSError or HTTPException."""
    deadline = time.monotonic() + timeout_s
    parts = urllib.parse.urlsplit(url)
    kind = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    conn = kind(parts.hostname, parts.port, timeout=timeout_s)
    expired, opened = threading.Event(), []

    def cut() -> None:
        expired.set()
        for sock in opened:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def left() -> float:
        remaining = deadline - time.monotonic()
        if remaining <= 0 or expired.is_set():
            raise _Deadline
        return remaining

    watchdog = threading.Timer(timeout_s, cut)
    watchdog.daemon = True
    watchdog.start()
    try:
        conn.connect()
        sock = conn.sock  # kept: the connection lets go of it once the reply says the connection will close
        opened.append(sock)
        if expired.is_set():
            raise _Deadline
        sock.settimeout(left())
        path = parts.path or "/"
        conn.request("POST", f"{path}?{parts.query}" if parts.query else path, body, headers)
        sock.settimeout(left())
        reply = conn.getresponse()
        chunks, size = [], 0
        while size <= MAX_REPLY_BYTES:
            sock.settimeout(left())
            chunk = reply.read1(_CHUNK)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        left()
        return reply.status, {k.lower(): v for k, v in reply.getheaders()}, b"".join(chunks)
    except (OSError, http.client.HTTPException):
        if expired.is_set() or time.monotonic() >= deadline:
            raise _Deadline from None
        raise
    finally:
        watchdog.cancel()
        conn.close()


@register_verifier("remote", isolation="threads")
def remote(response: str, reference: Any = None, *, url: str | None = None, timeout_s: float = 30.0,
           prompt: Any = None, headers: dict[str, str] | None = None) -> Verdict:
    if not url or not isinstance(url, str) or not url.startswith(("http://", "https://")) \
            or not urllib.parse.urlsplit(url).hostname:
        return _error("bad_url", f"the remote verifier needs verifier_options.url (http:// or https://), got {url!r}")
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) or not math.isfinite(timeout_s) \
            or timeout_s <= 0:
        return _error("bad_option", f"timeout_s must be a number of seconds > 0, got {timeout_s!r}")
    if headers is not None and (not isinstance(headers, dict)
                                or not all(isinstance(k, str) and isinstance(v, str) for k, v in headers.items())):
        return _error("bad_option", "headers must map header names to strings")
    text = prompt_text(prompt)
    label = reference if isinstance(reference, str) else json.dumps(reference)
    body = json.dumps({"query": [text + response], "prompts": [text], "labels": [label]}).encode()
    try:
        status, reply_headers, raw = _post(url, body, {"Content-Type": "application/json", **(headers or {})},
                                           float(timeout_s))
    except _Deadline:
        return Verdict(0.0, Status.TIMEOUT, "remote_timeout",
                       details={"error": f"{url}: no whole answer in {timeout_s} s"})
    except (OSError, http.client.HTTPException, ValueError) as exc:
        return _error("remote_unreachable", f"{url}: {type(exc).__name__}: {exc}")
    if 300 <= status < 400:
        return _error("remote_redirect", f"{url} answered HTTP {status} pointing to "
                      f"{reply_headers.get('location', '(nowhere)')!r}; redirects are not followed (set "
                      "verifier_options.url to the server that scores)")
    if status != 200:
        return _error("remote_http_error", f"{url} answered HTTP {status}: {raw[:300].decode(errors='replace')}")
    if len(raw) > MAX_REPLY_BYTES:
        return _error("remote_bad_reply", f"{url}: the reply is larger than {MAX_REPLY_BYTES} bytes")
    try:
        reward = json.loads(raw)["rewards"][0]
        reward = float(reward)
    except (ValueError, KeyError, IndexError, TypeError):
        return _error("remote_bad_reply", f"{url}: expected {{\"rewards\": [number]}}, got {raw[:200]!r}")
    if not math.isfinite(reward):
        return _error("remote_bad_reply", f"{url}: a non-finite reward {reward!r}")
    status = Status.CORRECT if reward == 1.0 else Status.INCORRECT if reward == 0.0 else Status.PARTIAL
    return Verdict(reward, status, "remote_reward", details={"url": url})
