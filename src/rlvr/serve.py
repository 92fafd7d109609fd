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
protocol's JSON (400), a client that sends too slowly (its connection is dropped after ``io_timeout_s``), and
more than ``max_connections`` open connections (503 at once, so a flood cannot queue forever). It listens
on 127.0.0.1 unless told otherwise.
"""

from __future__ import annotations

import collections
import json
import socket
import sys
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from rlvr.tasks import Task
from rlvr.verifiers import Status, Verdict, score_batch
from rlvr.verifiers.compose import RewardSpec, compose, parse_spec
from rlvr.verifiers.registry import get_verifier

_UNDECIDED = (Status.TIMEOUT, Status.ERROR, Status.UNDECIDABLE)


class ProtocolError(ValueError):
    """A request body the server cannot use; ``code`` is the HTTP status to answer with."""

    def __init__(self, message: str, code: int = 400):
        super().__init__(message)
        self.code = code


@dataclass
class RewardService:
    """What the server scores with: a verifier (and its options) for rows that name none, and optionally a
    composed reward. ``score(rows)`` is the whole server minus HTTP."""

    verifier: str = "exact"
    verifier_options: dict[str, Any] = field(default_factory=dict)
    spec: RewardSpec | None = None

    @classmethod
    def from_config(cls, path: str | Path) -> RewardService:
        """``data.verifier`` / ``data.verifier_options`` and ``reward.terms`` of a YAML config."""
        import yaml

        raw = yaml.safe_load(Path(path).read_text()) or {}
        if not isinstance(raw, dict):
            raise ValueError(f"{path}: expected a mapping at the top level")
        data, reward = raw.get("data") or {}, raw.get("reward") or {}
        spec = parse_spec(reward["terms"], where=f"{path}: reward.terms") if reward.get("terms") else None
        if spec is not None:
            lengthy = [t.name for t in spec.terms if t.kind != "verifier"]
            if lengthy:
                raise ValueError(f"{path}: reward.terms {lengthy} need token lengths from the trainer; "
                                 f"the server scores verifier terms only")
        service = cls(data.get("verifier", "exact"), dict(data.get("verifier_options") or {}), spec)
        service.check()
        return service

    def check(self) -> None:
        """Raise UnknownVerifierError now, at start-up, for a verifier that does not exist."""
        get_verifier(self.verifier)
        for term in (self.spec.verifier_terms() if self.spec else []):
            if not term.uses_task_verifier:
                get_verifier(term.verifier)

    def describe(self) -> dict[str, Any]:
        return {"verifier": self.verifier, "terms": self.spec.names if self.spec else []}

    def score(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """One result per row: reward (composed), score/status/reason/extracted (the task verifier's verdict),
        and components (each term's score) with a composed reward."""
        from rlvr.rollout.episodes import Scoring, score_requests

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


def _result(v: Verdict, reward: float) -> dict[str, Any]:
    extracted = v.extracted if v.extracted is None or len(v.extracted) <= 1000 else v.extracted[:1000] + "..."
    return {"reward": float(reward), "score": float(v.score), "status": v.status.value, "reason": v.reason,
            "extracted": extracted}


def _strings(body: dict, key: str, n: int | None = None, *, required: bool = True) -> list[Any] | None:
    value = body.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, list):
        raise ProtocolError(f"'{key}' must be a list")
    if n is not None and len(value) != n:
        raise ProtocolError(f"'{key}' has {len(value)} items; 'query' has {n}")
    return value


def openrlhf_rows(body: Any, max_rows: int) -> list[dict[str, Any]]:
    """Rows from OpenRLHF's body {"query": [...], "prompts": [...], "labels": [...]}."""
    if not isinstance(body, dict):
        raise ProtocolError("expected a JSON object with 'query', 'prompts' and 'labels'")
    queries = _strings(body, "query")
    if len(queries) > max_rows:
        raise ProtocolError(f"{len(queries)} rows; this server takes at most {max_rows} a request", 413)
    prompts = _strings(body, "prompts", len(queries), required=False) or [None] * len(queries)
    labels = _strings(body, "labels", len(queries), required=False) or [None] * len(queries)
    rows = []
    for i, (query, prompt) in enumerate(zip(queries, prompts)):
        if not isinstance(query, str) or not (prompt is None or isinstance(prompt, str)):
            raise ProtocolError(f"query[{i}] and prompts[{i}] must be strings")
        response = query[len(prompt):] if prompt and query.startswith(prompt) else query
        rows.append({"response": response, "reference": labels[i], "prompt": prompt})
    return rows


def batch_rows(body: Any, max_rows: int) -> list[dict[str, Any]]:
    """Rows from the batch endpoint's body {"rows": [{"response", "reference", ...}, ...]}."""
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
        self.rejected_connections = self.dropped_connections = 0
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
                   "rejected_connections": self.rejected_connections, "dropped_connections": self.dropped_connections}
        for name, q in (("latency_p50_ms", 0.5), ("latency_p99_ms", 0.99)):
            out[name] = lat[min(len(lat) - 1, int(q * len(lat)))] * 1000.0 if lat else 0.0
        return out


class RewardServer(ThreadingHTTPServer):
    """A threading HTTP server with a cap on open connections; each request is handled by RewardHandler."""

    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], service: RewardService, *, max_body_bytes: int = 32 * 2**20,
                 max_rows: int = 4096, max_connections: int = 64, io_timeout_s: float = 15.0):
        self.service, self.max_body_bytes, self.max_rows = service, max_body_bytes, max_rows
        self.io_timeout_s = io_timeout_s
        self.metrics = _Metrics()
        self._slots = threading.BoundedSemaphore(max_connections)
        super().__init__(address, RewardHandler)

    def process_request(self, request: socket.socket, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            with self.metrics.lock:
                self.metrics.rejected_connections += 1
            try:
                request.settimeout(1.0)
                body = b'{"error": "server busy: too many open connections"}'
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
            self._slots.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A connection that failed outside a handler's own checks is counted and closed, not printed."""
        with self.metrics.lock:
            self.metrics.dropped_connections += 1

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}"


class RewardHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: RewardServer
    server_version = "rlvr-serve"

    def setup(self) -> None:
        self.timeout = self.server.io_timeout_s  # a client that stalls mid-request is dropped
        super().setup()
        # Headers and body go out as two writes; without TCP_NODELAY, Nagle's algorithm holds the body until the
        # client's delayed ACK of the headers, about 40 ms on every keep-alive request.
        try:
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            pass

    def log_message(self, format: str, *args: Any) -> None:  # quiet: /metrics counts requests
        pass

    def do_GET(self) -> None:
        t0 = time.perf_counter()
        path = self.path.split("?", 1)[0]
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
        except Exception as exc:  # a caller error the checks above missed; the server stays up
            return self._reply(500, {"error": f"{type(exc).__name__}: {str(exc)[:500]}"}, path, len(rows), t0)
        if path == "/score":
            return self._reply(200, {"results": results}, path, len(rows), t0)
        logs: dict[str, list[float]] = {
            "correct": [float(r["status"] == "correct") for r in results],
            "undecided": [float(r["status"] in {s.value for s in _UNDECIDED}) for r in results],
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
