"""The "remote" verifier: a reward server scores the response, over OpenRLHF's remote reward protocol, the one
`rlvr serve` speaks (so one rlvr process, or any server of that protocol, can score for many trainers).

    data.verifier: remote
    data.verifier_options: {url: "http://127.0.0.1:8000/get_reward", timeout_s: 30}

Each response is sent as ``{"query": [prompt + response], "prompts": [prompt], "labels": [reference]}`` (a chat
prompt as its messages' contents, one per line) and the reply's ``rewards[0]`` is the score. A reward in [0, 1] is
"correct" at 1, "incorrect" at 0 and "partial" between; one outside [0, 1] keeps its value with status "partial".
A server that cannot be reached, answers an error or a malformed body, or takes longer than ``timeout_s`` gives an
"error" or "timeout" verdict naming what happened; it never raises into the trainer. The URL comes from the run's
config (the trainer's operator), never from a data row's options.
"""

from __future__ import annotations

import json
import math
import socket
import urllib.error
import urllib.request
from typing import Any

from rlvr.verifiers.base import Status, Verdict
from rlvr.verifiers.registry import register_verifier

MAX_REPLY_BYTES = 1 << 20


def prompt_text(prompt: Any) -> str:
    if isinstance(prompt, list):
        return "\n".join(str(m.get("content", "")) for m in prompt if isinstance(m, dict))
    return prompt if isinstance(prompt, str) else ""


def _error(reason: str, message: str) -> Verdict:
    return Verdict(0.0, Status.ERROR, reason, details={"error": message})


@register_verifier("remote", isolation="threads")
def remote(response: str, reference: Any = None, *, url: str | None = None, timeout_s: float = 30.0,
           prompt: Any = None, headers: dict[str, str] | None = None) -> Verdict:
    if not url or not isinstance(url, str) or not url.startswith(("http://", "https://")):
        return _error("bad_url", f"the remote verifier needs verifier_options.url (http:// or https://), got {url!r}")
    text = prompt_text(prompt)
    label = reference if isinstance(reference, str) else json.dumps(reference)
    body = json.dumps({"query": [text + response], "prompts": [text], "labels": [label]}).encode()
    request = urllib.request.Request(url, body, {"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(request, timeout=float(timeout_s)) as reply:
            raw = reply.read(MAX_REPLY_BYTES + 1)
    except urllib.error.HTTPError as exc:
        return _error("remote_http_error", f"{url} answered HTTP {exc.code}: {exc.read(300).decode(errors='replace')}")
    except (socket.timeout, TimeoutError):
        return Verdict(0.0, Status.TIMEOUT, "remote_timeout", details={"error": f"{url}: no answer in {timeout_s} s"})
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        if isinstance(reason, (socket.timeout, TimeoutError)):
            return Verdict(0.0, Status.TIMEOUT, "remote_timeout", details={"error": f"{url}: no answer in {timeout_s} s"})
        return _error("remote_unreachable", f"{url}: {reason}")
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
