"""``rlvr serve``: every verifier and composed reward behind an HTTP server on the standard library.

    rlvr serve --verifier math --port 8000                 # one verifier for every row
    rlvr serve --config reward.yaml --port 8000            # a composed reward (reward.terms) and data.verifier

Endpoints
- ``GET /health``  -> {"status": "ok", "reward": ...}
- ``GET /metrics`` -> request counts by endpoint and status code, rows scored, latency percentiles, the runner's stats
- ``POST /get_reward`` (OpenRLHF's remote reward protocol): ``{"query": [prompt + response, ...], "prompts":
  [...], "labels": [reference, ...]}`` -> ``{"rewards": [...], "scores": [...], "extra_logs": {name: [...]}}``.
  The response is the query with its prompt taken off the front (the whole query when it does not start with
  it). rewards are the composed rewards (the verifier's scores without a config), scores the task verifier's
  scores; extra_logs hold per-row lists: "correct" (1.0 / 0.0), "undecided" (timeout, error or undecidable)
  and, with a config, each term's score as "reward/<term>".
- ``POST /score`` (the batch endpoint): ``{"rows": [{"response": ..., "reference": ..., "prompt": ...,
  "verifier": ..., "verifier_options": {...}, "meta": {...}}, ...]}`` -> ``{"results": [{"reward", "score",
  "status", "reason", "extracted"}, ...]}``; a row may name its own verifier, as in data files.

Every reward goes through the supervised runner (rlvr.verifiers.runner), so a reward that hangs or explodes
costs that row a "timeout" or "error" verdict, not the server. The server itself bounds what a client can do:
request bodies over ``max_body_bytes`` (413), more rows than ``max_rows`` (413), a body that is not the
protocol's JSON (400; a /get_reward body without ``labels`` names the field), a client that stalls or sends too
slowly (each request must arrive whole within ``request_deadline_s``, and no single read may wait longer than
``io_timeout_s``; past either the connection is dropped), and more than ``max_connections`` open connections:
a new connection then takes the slot of the connection that has waited longest for its request to arrive (a
slow-dripping or idle client), so slow clients cannot hold every slot; only when every slot is busy scoring does a
new connection get 503 at once. It listens on 127.0.0.1 unless told otherwise.

What a row may ask for (``/score``): a verifier by name, and ``verifier_options`` only of the names the operator
allowed (``allow_options``, ``rlvr serve --allow-option NAME``); even an allowed option never names something on
the server (an option whose name says file, folder, path, URL, host, database, environment variable, key or
token, or any string value shaped like a URL or a filesystem path: the server's own API key must never be sent to
a host a client chose, nor a client read a server file), and a time budget (``timeout_s`` and any option named
for seconds, a timeout or a deadline) is clamped to the server's cap (``max_timeout_s``, ``--max-timeout-s``). A reference whose top-level keys name a server resource (the sql
verifier's ``db`` file) is refused the same way. A refused row, and a row whose scoring fails, gets its own
verdict (status "error", reasons "option_not_allowed", "server_resource", "bad_option", "row_failed", with the
message under "error") while the other rows of the request are scored.
"""

from __future__ import annotations

import argparse
import collections
import io
import json
import math
import re
import socket
import sys
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

# Heavy imports (the verifiers, sympy below them) happen inside the functions that need them, so that the
# command line can register this command's arguments without loading them.

_UNDECIDED = frozenset({"timeout", "error", "undecidable"})  # statuses logged as "undecided"
DEFAULT_MAX_TIMEOUT_S = 30.0


class ProtocolError(ValueError):
    """A request body the server cannot use; ``code`` is the HTTP status to answer with."""

    def __init__(self, message: str, code: int = 400):
        super().__init__(message)
        self.code = code


# An option or reference key whose name says it points at something on the server. Never taken from a request.
_RESOURCE_NAME = re.compile(
    r"(?:^|_)(?:url|uri|urls|host|hostname|endpoint|base|path|paths|file|files|filename|dir|dirs|directory|folder"
    r"|db|database|env|environ|key|api_key|secret|secrets|token|password|credentials|command|cmd|exe|executable"
    r"|rubric|judge|client|socket|cwd)$",
    re.IGNORECASE,
)
# A string value shaped like a URL ("http://...", "//host/...", "file:...") or a filesystem path ("/etc/...",
# "~/...", "./x", "../x", "C:\\x").
_RESOURCE_VALUE = re.compile(
    r"^\s*(?:[A-Za-z][A-Za-z0-9+.\-]*://|//|\\\\|file:|~|/|\.{1,2}(?:[/\\]|$)|[A-Za-z]:[/\\])"
)
# A time budget (seconds): clamped to the server's max_timeout_s.
_TIME_BUDGET = re.compile(r"(?:timeout|deadline|seconds|(?:^|_)s$)", re.IGNORECASE)
_MAX_OPTION_DEPTH = 8


class RowRefused(ValueError):
    """A row asks for something this server does not give a client; ``reason`` is its verdict's reason."""

    def __init__(self, message: str, reason: str):
        super().__init__(message)
        self.reason = reason


def _resource_in(value: Any, where: str, depth: int = 0) -> str | None:
    """Where in an option value a server resource is named (a key or a string shaped like a URL or a path)."""
    if depth > _MAX_OPTION_DEPTH:
        return f"{where} is nested too deep"
    if isinstance(value, str):
        return f"{where} looks like a URL or a server path ({value[:80]!r})" if _RESOURCE_VALUE.match(value) else None
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str) or _RESOURCE_NAME.search(key):
                return f"{where}.{key} names a server resource"
            found = _resource_in(item, f"{where}.{key}", depth + 1)
            if found:
                return found
    elif isinstance(value, list):
        for i, item in enumerate(value):
            found = _resource_in(item, f"{where}[{i}]", depth + 1)
            if found:
                return found
    return None


@dataclass
class RewardService:
    """What the server scores with: a verifier (and its options) for rows that name none, and optionally a
    composed reward. ``score(rows)`` is the whole server minus HTTP.

    allow_options: the names of ``verifier_options`` a request row may set (none by default); even allowed ones
        never name a server resource (see the module docstring).
    max_timeout_s: the largest ``timeout_s`` a row may ask for; a larger one is clamped to it."""

    verifier: str = "exact"
    verifier_options: dict[str, Any] = field(default_factory=dict)
    spec: Any = None  # a RewardSpec (rlvr.verifiers.compose), or None
    allow_options: frozenset[str] = frozenset()
    max_timeout_s: float = DEFAULT_MAX_TIMEOUT_S

    def __post_init__(self) -> None:
        self.allow_options = frozenset(self.allow_options)
        from rlvr.verifiers.row_options import endpoint_name

        bad = sorted(n for n in self.allow_options if not isinstance(n, str) or _RESOURCE_NAME.search(n)
                     or endpoint_name(n))
        if bad:
            raise ValueError(f"--allow-option {', '.join(map(str, bad))}: an option that names a server resource (a "
                             "file, folder, URL, host, database, environment variable or credential) cannot be "
                             "given to clients")
        if isinstance(self.max_timeout_s, bool) or not isinstance(self.max_timeout_s, (int, float)) \
                or not math.isfinite(self.max_timeout_s) or self.max_timeout_s <= 0:
            raise ValueError(f"max_timeout_s must be a finite number > 0, got {self.max_timeout_s!r}")

    @classmethod
    def from_config(cls, path: str | Path, **settings: Any) -> RewardService:
        """``data.verifier`` / ``data.verifier_options`` and ``reward.terms`` of a YAML config; ``settings`` are
        the other fields (allow_options, max_timeout_s)."""
        from rlvr.config import read_yaml
        from rlvr.errors import UserError
        from rlvr.verifiers.compose import parse_spec

        raw = read_yaml(Path(path).read_text(), str(path)) or {}
        if not isinstance(raw, dict):
            raise UserError(f"{path}: expected a mapping at the top level")
        data, reward = raw.get("data") or {}, raw.get("reward") or {}
        spec = parse_spec(reward["terms"], where=f"{path}: reward.terms") if reward.get("terms") else None
        if spec is not None:
            lengthy = [t.name for t in spec.terms if t.kind != "verifier"]
            if lengthy:
                raise UserError(f"{path}: reward.terms {lengthy} need token lengths from the trainer; "
                                 f"the server scores verifier terms only")
        service = cls(data.get("verifier", "exact"), dict(data.get("verifier_options") or {}), spec, **settings)
        service.check()
        return service

    def check(self) -> None:
        """Raise UnknownVerifierError now, at start-up, for a verifier that does not exist."""
        from rlvr.verifiers.registry import get_verifier

        get_verifier(self.verifier)
        for term in (self.spec.verifier_terms() if self.spec else []):
            if not term.uses_task_verifier:
                get_verifier(term.verifier)

    def describe(self) -> dict[str, Any]:
        return {"verifier": self.verifier, "terms": self.spec.names if self.spec else []}

    def admit(self, row: dict[str, Any]) -> dict[str, Any]:
        """The row as it will be scored (a time budget clamped to the server's cap), or RowRefused."""
        options = row.get("verifier_options") or {}
        refused = sorted(k for k in options if k not in self.allow_options)
        if refused:
            allowed = ", ".join(sorted(self.allow_options)) or "none"
            raise RowRefused(f"verifier_options {', '.join(map(repr, refused))} are not allowed by this server "
                             f"(allowed: {allowed}; the operator allows one with --allow-option NAME)",
                             "option_not_allowed")
        from rlvr.verifiers.row_options import row_option_problem

        found = _resource_in(options, "verifier_options") or row_option_problem(options, self.verifier_options)
        reference = row.get("reference")
        if found is None and isinstance(reference, dict):
            named = sorted(k for k in reference if not isinstance(k, str) or _RESOURCE_NAME.search(k))
            if named:
                found = f"reference key(s) {', '.join(map(repr, named))} name a server resource"
        if found:
            raise RowRefused(f"{found}: a request cannot name files, URLs or credentials on the server",
                             "server_resource")
        clamped = {}
        for name in filter(_TIME_BUDGET.search, options):
            budget = options[name]
            if isinstance(budget, bool) or not isinstance(budget, (int, float)) or not math.isfinite(budget) \
                    or budget <= 0:
                raise RowRefused(f"verifier_options.{name} must be a finite number > 0, got {budget!r}", "bad_option")
            if budget > self.max_timeout_s:
                clamped[name] = float(self.max_timeout_s)
        return {**row, "verifier_options": {**options, **clamped}} if clamped else row

    def score(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """One result per row: reward (composed), score/status/reason/extracted (the task verifier's verdict),
        and components (each term's score) with a composed reward. A row the server refuses, or whose scoring
        fails, gets an "error" result of its own; the others are scored."""
        results: list[dict[str, Any] | None] = [None] * len(rows)
        admitted: list[tuple[int, dict[str, Any]]] = []
        for i, row in enumerate(rows):
            try:
                admitted.append((i, self.admit(row)))
            except RowRefused as exc:
                results[i] = self._refused(str(exc), exc.reason)
        try:
            scored = self._score([row for _, row in admitted])
        except Exception:  # one row broke the batch: score each alone, so only that row pays for it
            scored = []
            for _, row in admitted:
                try:
                    scored += self._score([row])
                except Exception as exc:
                    scored.append(self._refused(f"{type(exc).__name__}: {str(exc)[:500]}", "row_failed"))
        for (i, _), result in zip(admitted, scored):
            results[i] = result
        return results  # type: ignore[return-value]

    def _refused(self, message: str, reason: str) -> dict[str, Any]:
        out = {"reward": 0.0, "score": 0.0, "status": "error", "reason": reason, "extracted": None, "error": message}
        if self.spec is not None:
            out["components"] = {name: 0.0 for name in self.spec.names}
        return out

    def _score(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        if not rows:
            return []
        from rlvr.rollout.episodes import Scoring, score_requests
        from rlvr.tasks import Task
        from rlvr.verifiers import score_batch
        from rlvr.verifiers.compose import compose

        tasks = [Task(r.get("prompt") or None, r.get("reference"), str(i), r.get("verifier"),
                      dict(r.get("verifier_options") or {}), dict(r.get("meta") or {})) for i, r in enumerate(rows)]
        responses = [r["response"] for r in rows]
        scoring = Scoring(self.verifier, self.verifier_options, self.spec)
        if self.spec is None:
            verdicts = score_batch(score_requests(tasks, responses, scoring))
            return [_result(v, v.score) for v in verdicts]
        by_term = {t.name: score_batch(score_requests(tasks, responses, scoring, t)) for t in self.spec.verifier_terms()}
        main = next((t.name for t in self.spec.verifier_terms() if t.uses_task_verifier), next(iter(by_term)))
        composed = compose(self.spec, {k: [v.score for v in vs] for k, vs in by_term.items()},
                           lengths=[len(r) for r in responses], max_len=1, groups=list(range(len(rows))))
        out = []
        for i, v in enumerate(by_term[main]):
            res = _result(v, composed.total[i])
            res["components"] = {name: values[i] for name, values in composed.components.items()}
            out.append(res)
        return out


def _result(v: Any, reward: float) -> dict[str, Any]:
    extracted = v.extracted if v.extracted is None or len(v.extracted) <= 1000 else v.extracted[:1000] + "..."
    return {"reward": float(reward), "score": float(v.score), "status": v.status.value, "reason": v.reason,
            "extracted": extracted}


def _strings(body: dict, key: str, n: int | None = None, *, required: bool = True, what: str = "") -> list[Any] | None:
    value = body.get(key)
    if value is None and not required:
        return None
    if value is None:
        raise ProtocolError(f"missing '{key}'{what}")
    if not isinstance(value, list):
        raise ProtocolError(f"'{key}' must be a list")
    if n is not None and len(value) != n:
        raise ProtocolError(f"'{key}' has {len(value)} items; 'query' has {n}")
    return value


def openrlhf_rows(body: Any, max_rows: int) -> list[dict[str, Any]]:
    """Rows from OpenRLHF's body {"query": [...], "prompts": [...], "labels": [...]}."""
    if not isinstance(body, dict):
        raise ProtocolError("expected a JSON object with 'query', 'prompts' and 'labels'")
    queries = _strings(body, "query", what=": a list of prompt + response strings")
    if len(queries) > max_rows:
        raise ProtocolError(f"{len(queries)} rows; this server takes at most {max_rows} a request", 413)
    prompts = _strings(body, "prompts", len(queries), required=False) or [None] * len(queries)
    labels = _strings(body, "labels", len(queries), what=": one reference answer per query (a response is scored "
                      "against its label)")
    rows = []
    for i, (query, prompt) in enumerate(zip(queries, prompts)):
        if not isinstance(query, str) or not (prompt is None or isinstance(prompt, str)):
            raise ProtocolError(f"query[{i}] and prompts[{i}] must be strings")
        response = query[len(prompt):] if prompt and query.startswith(prompt) else query
        rows.append({"response": response, "reference": labels[i], "prompt": prompt})
    return rows


def batch_rows(body: Any, max_rows: int) -> list[dict[str, Any]]:
    """Rows from the batch endpoint's body {"rows": [{"response", "reference", ...}, ...]}."""
    from rlvr.verifiers.registry import get_verifier

    if not isinstance(body, dict) or not isinstance(body.get("rows"), list):
        raise ProtocolError("expected a JSON object with a list 'rows'")
    rows = body["rows"]
    if len(rows) > max_rows:
        raise ProtocolError(f"{len(rows)} rows; this server takes at most {max_rows} a request", 413)
    for i, row in enumerate(rows):
        if not isinstance(row, dict) or not isinstance(row.get("response"), str):
            raise ProtocolError(f"rows[{i}] must be an object with a string 'response'")
        if row.get("verifier") is not None:
            if not isinstance(row["verifier"], str):
                raise ProtocolError(f"rows[{i}].verifier must be a string")
            try:
                get_verifier(row["verifier"])
            except KeyError as exc:
                raise ProtocolError(f"rows[{i}]: {exc}") from None
        for key in ("verifier_options", "meta"):
            if row.get(key) is not None and not isinstance(row[key], dict):
                raise ProtocolError(f"rows[{i}].{key} must be an object")
    return rows


class _Dropped(Exception):
    """The client's connection is dropped without a reply."""


class _Metrics:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.requests: collections.Counter[str] = collections.Counter()
        self.rows = 0
        self.latencies: collections.deque[float] = collections.deque(maxlen=4096)
        self.rejected_connections = self.dropped_connections = self.evicted_connections = 0
        self.started = time.time()

    def record(self, path: str, code: int, rows: int, seconds: float) -> None:
        with self.lock:
            self.requests[f"{path} {code}"] += 1
            self.rows += rows
            if code == 200:
                self.latencies.append(seconds)

    def snapshot(self) -> dict[str, Any]:
        with self.lock:
            lat = sorted(self.latencies)
            out = {"requests": dict(self.requests), "rows": self.rows, "uptime_s": time.time() - self.started,
                   "rejected_connections": self.rejected_connections, "dropped_connections": self.dropped_connections,
                   "evicted_connections": self.evicted_connections}
        for name, q in (("latency_p50_ms", 0.5), ("latency_p99_ms", 0.99)):
            out[name] = lat[min(len(lat) - 1, int(q * len(lat)))] * 1000.0 if lat else 0.0
        return out


class _Connections:
    """The open connections and what each is doing: "reading" (waiting for its request: a slow client, or an idle
    keep-alive one) or "working" (its request is being scored or answered). When every slot is taken, the
    connection that has been reading the longest gives its slot up to a new one."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.phase: dict[socket.socket, tuple[str, float]] = {}

    def set(self, conn: socket.socket, phase: str) -> bool:
        """Record ``phase``; False if the connection was evicted meanwhile."""
        with self.lock:
            if self.phase.get(conn, ("",))[0] == "evicted":
                return False
            self.phase[conn] = (phase, time.monotonic())
            return True

    def forget(self, conn: socket.socket) -> None:
        with self.lock:
            self.phase.pop(conn, None)

    def evict_longest_reading(self) -> bool:
        with self.lock:
            reading = [(since, conn) for conn, (phase, since) in self.phase.items() if phase == "reading"]
            if not reading:
                return False
            _, conn = min(reading, key=lambda item: item[0])
            self.phase[conn] = ("evicted", time.monotonic())
        try:
            conn.shutdown(socket.SHUT_RDWR)  # its handler's read returns at once and the thread ends
        except OSError:
            pass
        return True


class RewardServer(ThreadingHTTPServer):
    """A threading HTTP server with a cap on open connections; each request is handled by RewardHandler."""

    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], service: RewardService, *, max_body_bytes: int = 32 * 2**20,
                 max_rows: int = 4096, max_connections: int = 64, io_timeout_s: float = 15.0,
                 request_deadline_s: float = 30.0):
        self.service, self.max_body_bytes, self.max_rows = service, max_body_bytes, max_rows
        self.io_timeout_s, self.request_deadline_s = io_timeout_s, request_deadline_s
        self.metrics = _Metrics()
        self.connections = _Connections()
        self._slots = threading.BoundedSemaphore(max_connections)
        super().__init__(address, RewardHandler)

    def _take_slot(self) -> bool:
        if self._slots.acquire(blocking=False):
            return True
        # every slot is taken: the connection that has waited longest for its request gives its slot up
        while self.connections.evict_longest_reading():
            with self.metrics.lock:
                self.metrics.evicted_connections += 1
            if self._slots.acquire(timeout=1.0):
                return True
        return False

    def process_request(self, request: socket.socket, client_address: Any) -> None:
        if not self._take_slot():
            with self.metrics.lock:
                self.metrics.rejected_connections += 1
            try:
                request.settimeout(1.0)
                body = b'{"error": "server busy: every connection is being scored"}'
                request.sendall(b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
                                b"Connection: close\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
            except OSError:
                pass
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request: socket.socket, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.connections.forget(request)
            self._slots.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A connection that failed outside a handler's own checks is counted and closed, not printed."""
        with self.metrics.lock:
            self.metrics.dropped_connections += 1

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}"


class _DeadlineReader(io.RawIOBase):
    """The connection's reads, each bounded by the handler's io_timeout_s AND by the deadline of the request
    being read: a client that sends a byte at a time cannot stretch one request past the deadline."""

    def __init__(self, handler: RewardHandler):
        self.handler = handler

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        left = self.handler.read_deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("the request did not arrive within the server's request deadline")
        sock = self.handler.connection
        sock.settimeout(min(self.handler.server.io_timeout_s, left))
        return sock.recv_into(buffer)


class RewardHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: RewardServer
    server_version = "rlvr-serve"
    read_deadline = float("inf")

    def setup(self) -> None:
        self.timeout = self.server.io_timeout_s  # a client that stalls mid-request is dropped
        super().setup()
        self.rfile = io.BufferedReader(_DeadlineReader(self), 65536)
        # Headers and body go out as two writes; without TCP_NODELAY, Nagle's algorithm holds the body until the
        # client's delayed ACK of the headers, about 40 ms on every keep-alive request.
        try:
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            pass

    def handle_one_request(self) -> None:
        self.read_deadline = time.monotonic() + self.server.request_deadline_s
        if not self.server.connections.set(self.connection, "reading"):
            self.close_connection = True
            return
        try:
            super().handle_one_request()
        except OSError:  # the client went away, stalled past a deadline, or was evicted: no reply
            self.close_connection = True

    def _working(self) -> bool:
        """The request has arrived: from now on this connection's slot is not taken away. False if it was."""
        if self.server.connections.set(self.connection, "working"):
            self.connection.settimeout(self.server.io_timeout_s)  # for the reply: the read deadline is over
            return True
        self.close_connection = True
        return False

    def log_message(self, format: str, *args: Any) -> None:  # quiet: /metrics counts requests
        pass

    def do_GET(self) -> None:
        t0 = time.perf_counter()
        path = self.path.split("?", 1)[0]
        if not self._working():
            return
        if path == "/health":
            self._reply(200, {"status": "ok", "reward": self.server.service.describe()}, path, 0, t0)
        elif path == "/metrics":
            from rlvr.verifiers import default_runner

            self._reply(200, {**self.server.metrics.snapshot(), "runner": default_runner().stats()}, path, 0, t0)
        else:
            self._reply(404, {"error": f"no such endpoint: GET {path}"}, path, 0, t0)

    def do_POST(self) -> None:
        t0 = time.perf_counter()
        path = self.path.split("?", 1)[0]
        parse = {"/get_reward": openrlhf_rows, "/score": batch_rows}.get(path)
        try:
            body = self._body()
            if parse is None:
                raise ProtocolError(f"no such endpoint: POST {path}", 404)
            rows = parse(body, self.server.max_rows)
        except ProtocolError as exc:
            return self._reply(exc.code, {"error": str(exc)}, path, 0, t0)
        except _Dropped:
            with self.server.metrics.lock:
                self.server.metrics.dropped_connections += 1
            return
        try:
            results = self.server.service.score(rows)
        except Exception as exc:  # a failure outside every row (score gives a failing row its own verdict)
            return self._reply(500, {"error": f"{type(exc).__name__}: {str(exc)[:500]}"}, path, len(rows), t0)
        if path == "/score":
            return self._reply(200, {"results": results}, path, len(rows), t0)
        logs: dict[str, list[float]] = {
            "correct": [float(r["status"] == "correct") for r in results],
            "undecided": [float(r["status"] in _UNDECIDED) for r in results],
        }
        for name in (self.server.service.spec.names if self.server.service.spec else []):
            logs[f"reward/{name}"] = [r["components"][name] for r in results]
        self._reply(200, {"rewards": [r["reward"] for r in results], "scores": [r["score"] for r in results],
                          "extra_logs": logs}, path, len(rows), t0)

    def _body(self) -> Any:
        length = self.headers.get("Content-Length")
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked" or length is None:
            self.close_connection = True
            raise ProtocolError("a Content-Length header is required", 411)
        try:
            n = int(length)
        except ValueError:
            self.close_connection = True
            raise ProtocolError("Content-Length must be an integer") from None
        if n < 0 or n > self.server.max_body_bytes:
            self.close_connection = True  # the body is not read: the connection cannot be reused
            raise ProtocolError(f"request body of {n} bytes; at most {self.server.max_body_bytes}", 413)
        try:
            raw = self.rfile.read(n)
        except OSError:  # the client stalled past io_timeout_s or went away: drop it without a reply
            self.close_connection = True
            raise _Dropped() from None
        if len(raw) < n:
            self.close_connection = True
            raise ProtocolError("request body shorter than its Content-Length")
        if not self._working():
            raise _Dropped()
        try:
            return json.loads(raw)
        except (ValueError, RecursionError) as exc:
            raise ProtocolError(f"request body is not JSON: {str(exc)[:200]}") from None

    def _reply(self, code: int, payload: dict[str, Any], path: str, rows: int, t0: float) -> None:
        try:
            data = json.dumps(payload, allow_nan=False, default=str).encode()
        except ValueError:  # a non-finite number from a reward: strict JSON has no spelling for it
            code, data = 500, b'{"error": "a reward was not a finite number"}'

        try:
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            if self.close_connection:
                self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(data)
        except OSError:
            self.close_connection = True
        self.server.metrics.record(path, code, rows, time.perf_counter() - t0)


def make_server(service: RewardService, host: str = "127.0.0.1", port: int = 0, **limits: Any) -> RewardServer:
    """A bound (not yet serving) server; ``port=0`` picks a free port (see ``server.url``)."""
    service.check()
    return RewardServer((host, port), service, **limits)


def serve(service: RewardService, host: str = "127.0.0.1", port: int = 8000, **limits: Any) -> None:
    """Serve until interrupted."""
    server = make_server(service, host, port, **limits)
    print(f"rlvr serve: {service.describe()} on {server.url} (POST /get_reward, POST /score, GET /health, GET /metrics)",
          file=sys.stderr, flush=True)
    try:
        server.serve_forever()
    finally:
        server.server_close()


def add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``rlvr serve`` that bound what a client may ask for (``serve_from_args`` reads them)."""
    parser.add_argument("--allow-option", action="append", default=[], metavar="NAME", dest="allow_option",
                        help="a verifier option request rows may set (repeatable; none by default). Options naming "
                             "files, folders, URLs, hosts, databases or credentials are never given to clients")
    parser.add_argument("--max-timeout-s", type=float, default=DEFAULT_MAX_TIMEOUT_S, dest="max_timeout_s",
                        help="the largest per-row timeout_s a request may ask for (with --allow-option timeout_s); "
                             "larger ones are clamped to it")
    parser.add_argument("--request-deadline-s", type=float, default=30.0, dest="request_deadline_s",
                        help="a request (headers and body) must arrive whole within this many seconds")


def serve_from_args(args: argparse.Namespace) -> None:
    """``rlvr serve``: the service and limits from the parsed command line, then serve until interrupted."""
    settings = {"allow_options": frozenset(getattr(args, "allow_option", None) or ()),
                "max_timeout_s": getattr(args, "max_timeout_s", DEFAULT_MAX_TIMEOUT_S)}
    if getattr(args, "config", None):
        service = RewardService.from_config(args.config, **settings)
    else:
        service = RewardService(getattr(args, "verifier", None) or "exact", **settings)
    limits = {name: getattr(args, name) for name in ("max_rows", "max_connections", "request_deadline_s")
              if getattr(args, name, None) is not None}
    serve(service, args.host, args.port, **limits)
