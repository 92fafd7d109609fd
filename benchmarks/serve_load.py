"""Load test of `rlvr serve` on loopback: throughput and latency, then the same load under attack.

    python benchmarks/serve_load.py [--requests 20000] [--rows 8] [--concurrency 8] [--verifier math]
                                    [--max-seconds 60] [--seed 0]

Starts `rlvr serve --verifier V` as a subprocess on 127.0.0.1 (a free port) and sends OpenRLHF-style
POST /get_reward requests, each with --rows math rows (half right, half wrong), from --concurrency client threads
with persistent connections, after one untimed warm-up request per client (imports, first parses):
  1. clean: --requests requests; prints requests/s, rows/s and latency p50/p90/p99, and checks every reward
     against the row's known answer;
  2. under attack: the same load while other threads, all the time, send (a) requests whose reward is slow
     (a catastrophically backtracking regex, killed by the runner at 2 s), (b) malformed JSON, an oversized
     Content-Length and unknown paths, and (c) stalled connections that send half a request and go quiet;
     prints the same figures for the normal requests, what the attackers got back, and whether /health
     still answers.
Each phase stops early after --max-seconds. Exits non-zero if a normal request failed or got a wrong reward.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_batch(rng: random.Random, rows: int):
    prompts, queries, labels, expected = [], [], [], []
    for _ in range(rows):
        a, b = rng.randint(1, 999), rng.randint(1, 999)
        right = rng.random() < 0.5
        prompt = f"Compute {a} + {b}. Put the answer in \\boxed{{}}.\n"
        answer = a + b if right else a + b + rng.randint(1, 9)
        prompts.append(prompt)
        queries.append(prompt + f"Adding the units and carrying gives \\boxed{{{answer}}}.")
        labels.append(str(a + b))
        expected.append(1.0 if right else 0.0)
    return {"query": queries, "prompts": prompts, "labels": labels}, expected


def percentile(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] if values else float("nan")


class Client:
    def __init__(self, port: int):
        self.port, self.conn = port, None

    def post(self, path: str, body: bytes, timeout: float = 60.0):
        for attempt in range(2):  # one reconnect: the server may close an idle keep-alive connection
            if self.conn is None:
                self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
            try:
                self.conn.request("POST", path, body, {"Content-Type": "application/json"})
                resp = self.conn.getresponse()
                return resp.status, resp.read()
            except (OSError, http.client.HTTPException):
                self.conn.close()
                self.conn = None
                if attempt:
                    raise
        raise AssertionError("unreachable")


def normal_load(port: int, n_requests: int, rows: int, concurrency: int, seed: int, max_seconds: float):
    latencies, failures, wrong = [], Counter(), 0
    lock = threading.Lock()
    counter = iter(range(n_requests))
    deadline = time.monotonic() + max_seconds

    def worker(k: int):
        nonlocal wrong
        rng, client = random.Random(seed * 1000 + k), Client(port)
        while time.monotonic() < deadline:
            with lock:
                i = next(counter, None)
            if i is None:
                return
            body, expected = make_batch(rng, rows)
            t0 = time.perf_counter()
            try:
                status, data = client.post("/get_reward", json.dumps(body).encode())
            except (OSError, http.client.HTTPException) as exc:
                with lock:
                    failures[type(exc).__name__] += 1
                continue
            dt = time.perf_counter() - t0
            with lock:
                if status != 200:
                    failures[f"HTTP {status}"] += 1
                else:
                    latencies.append(dt)
                    wrong += json.loads(data)["rewards"] != expected

    t0 = time.perf_counter()
    threads = [threading.Thread(target=worker, args=(k,)) for k in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    return {"requests": len(latencies), "rows": len(latencies) * rows, "wall_s": wall,
            "requests_per_s": len(latencies) / wall, "rows_per_s": len(latencies) * rows / wall,
            "p50_ms": percentile(latencies, 0.5) * 1e3, "p90_ms": percentile(latencies, 0.9) * 1e3,
            "p99_ms": percentile(latencies, 0.99) * 1e3, "failures": dict(failures), "wrong_rewards": wrong}


def attackers(port: int, stop: threading.Event, seen: Counter, lock: threading.Lock):
    slow = json.dumps({"rows": [{"response": "a" * 40 + "b", "reference": {"pattern": "(a+)+$"}, "verifier": "regex",
                                 "verifier_options": {"timeout_s": 2.0}}]}).encode()

    def note(what):
        with lock:
            seen[what] += 1

    def slow_rewards():
        client = Client(port)
        while not stop.is_set():
            status, data = client.post("/score", slow)
            note(f"slow reward -> HTTP {status} {json.loads(data)['results'][0]['status'] if status == 200 else ''}".strip())

    def garbage():
        rng = random.Random(1)
        bodies = [b"{not json", b"[" * 50000, json.dumps({"query": "x"}).encode(), b"\xff\xfe\x00"]
        while not stop.is_set():
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
                    kind = rng.randrange(3)
                    if kind == 0:
                        body = rng.choice(bodies)
                        s.sendall(b"POST /get_reward HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
                    elif kind == 1:
                        s.sendall(b"POST /get_reward HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999\r\n\r\n")
                    else:
                        s.sendall(b"GET /../../etc/passwd HTTP/1.1\r\nHost: x\r\n\r\n")
                    note("garbage -> " + s.recv(64).split(b"\r\n")[0].decode(errors="replace"))
            except OSError as exc:
                note(f"garbage -> {type(exc).__name__}")
            time.sleep(0.01)

    def stallers():
        held = []
        while not stop.is_set():
            try:
                s = socket.create_connection(("127.0.0.1", port), timeout=5)
                s.sendall(b"POST /get_reward HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{\"query\"")
                held.append(s)
                note("stalled connection opened")
            except OSError as exc:
                note(f"stall -> {type(exc).__name__}")
            if len(held) > 8:
                held.pop(0).close()
            time.sleep(0.5)
        for s in held:
            s.close()

    return [threading.Thread(target=f, daemon=True) for f in (slow_rewards, slow_rewards, garbage, stallers)]


def health(port: int) -> bool:
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        conn.request("GET", "/health")
        return conn.getresponse().status == 200
    except OSError:
        return False


def show(name: str, r: dict) -> None:
    print(f"{name:>13}: {r['requests']} requests ({r['rows']} rows) in {r['wall_s']:.1f}s = {r['requests_per_s']:.1f} req/s, "
          f"{r['rows_per_s']:.0f} rows/s; latency p50 {r['p50_ms']:.1f} ms, p90 {r['p90_ms']:.1f} ms, "
          f"p99 {r['p99_ms']:.1f} ms; failures {r['failures'] or 0}, wrong rewards {r['wrong_rewards']}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--requests", type=int, default=20000)
    ap.add_argument("--rows", type=int, default=8)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--verifier", default="math")
    ap.add_argument("--max-seconds", type=float, default=60.0)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    port = free_port()
    src = Path(__file__).resolve().parent.parent / "src"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(src), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, "-m", "rlvr.cli", "serve", "--verifier", args.verifier, "--port", str(port),
                             "--allow-option", "timeout_s"],  # the slow-reward attacker asks for its own budget
                            env=env, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while not health(port):
            if time.monotonic() > deadline or proc.poll() is not None:
                print("server did not start", file=sys.stderr)
                return 1
            time.sleep(0.2)
        print(f"rlvr serve --verifier {args.verifier} on 127.0.0.1:{port}; {args.concurrency} clients, "
              f"{args.rows} rows a request; {os.cpu_count()} CPUs")
        normal_load(port, args.concurrency, args.rows, args.concurrency, args.seed + 99, args.max_seconds)  # warm-up
        clean = normal_load(port, args.requests, args.rows, args.concurrency, args.seed, args.max_seconds)
        show("clean", clean)

        stop, lock, seen = threading.Event(), threading.Lock(), Counter()
        threads = attackers(port, stop, seen, lock)
        for t in threads:
            t.start()
        time.sleep(1.0)
        attacked = normal_load(port, args.requests, args.rows, args.concurrency, args.seed + 1, args.max_seconds)
        stop.set()
        for t in threads:
            t.join(10)
        show("under attack", attacked)
        for what, n in sorted(seen.items()):
            print(f"{'':>15}{n:6d} x {what}")
        alive = health(port)
        print(f"{'':>15}server healthy afterwards: {alive}")
        ok = alive and not clean["failures"] and not attacked["failures"] and not clean["wrong_rewards"] \
            and not attacked["wrong_rewards"]
        return 0 if ok else 1
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


if __name__ == "__main__":
    sys.exit(main())
