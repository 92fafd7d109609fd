"""The "remote" verifier: a reward server speaking OpenRLHF's protocol (a real `rlvr serve` process on loopback)
rewards a training run; an unreachable or broken server is a verdict, never an exception."""

import http.client
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rlvr.config import config_from_dict
from rlvr.train import train
from rlvr.train.metrics import read_metrics
from rlvr.verifiers import verify

from conftest import one_digit_rl_config


def _port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server():
    port = _port()
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent / "src")}
    proc = subprocess.Popen([sys.executable, "-m", "rlvr.cli", "serve", "--verifier", "exact", "--port", str(port)],
                            env=env, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            conn.request("GET", "/health")
            if conn.getresponse().status == 200:
                break
        except OSError:
            time.sleep(0.3)
    # The server loads its verifiers on the first request; on a loaded machine that alone can take most of a
    # call's budget, so the tests start once it has scored one row.
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=180)
    conn.request("POST", "/get_reward", json.dumps({"query": ["1"], "prompts": [""], "labels": ["1"]}),
                 {"Content-Type": "application/json"})
    conn.getresponse().read()
    yield f"http://127.0.0.1:{port}/get_reward"
    proc.terminate()
    proc.wait(10)


def test_the_server_decides(server):
    assert verify("remote", "46", "46", url=server, prompt="12+34=").status.value == "correct"
    assert verify("remote", "47", "46", url=server, prompt="12+34=").score == 0.0


@pytest.mark.parametrize("url, reason", [
    (None, "bad_url"),
    ("file:///etc/passwd", "bad_url"),
    (f"http://127.0.0.1:{_port()}/get_reward", "remote_unreachable"),  # nothing listens there
])
def test_a_server_that_cannot_answer_is_an_error_verdict(url, reason):
    verdict = verify("remote", "46", "46", url=url)
    assert verdict.status.value == "error" and verdict.reason == reason


def test_a_broken_reply_is_an_error_verdict(server):
    bad = server.replace("/get_reward", "/health")  # answers, but not with rewards (GET-only path: HTTP error)
    assert verify("remote", "46", "46", url=bad).reason in ("remote_http_error", "remote_bad_reply")


def test_the_server_rewards_a_training_run(server, warm_model_dir, tmp_path):
    cfg = one_digit_rl_config(warm_model_dir, tmp_path / "remote", steps=2)
    cfg["data"].update(verifier="remote", verifier_options={"url": server}, prompts_per_step=4)
    cfg["rollout"].update(group_size=4, max_new_tokens=3)
    remote = read_metrics(train(config_from_dict(cfg)))
    cfg = one_digit_rl_config(warm_model_dir, tmp_path / "local", steps=2)
    cfg["data"].update(verifier="exact", prompts_per_step=4)
    cfg["rollout"].update(group_size=4, max_new_tokens=3)
    local = read_metrics(train(config_from_dict(cfg)))
    assert [r["reward_mean"] for r in remote] == [r["reward_mean"] for r in local]  # same samples, same verdicts
    assert any(r["reward_mean"] > 0 for r in remote)


# --- the call's deadline and redirects: real loopback servers ---------------------------------------------------

import threading
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@contextmanager
def _loopback(answer):
    """A loopback HTTP server whose POST handler is ``answer(handler)``; yields (url, requests seen), each request
    as (path, headers)."""
    seen = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            seen.append((self.path, dict(self.headers)))
            try:
                answer(self)
            except OSError:  # the client hung up (its deadline passed)
                pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/get_reward", seen
    finally:
        httpd.shutdown()
        httpd.server_close()


def _reply(handler, code=200, body=b'{"rewards": [1.0]}', headers=()):
    handler.send_response(code)
    for name, value in headers:
        handler.send_header(name, value)
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


def _drip_body(handler, pause=0.25):
    body = b'{"rewards": [1.0]}' + b" " * 200
    handler.send_response(200)
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    for i in range(len(body)):
        handler.wfile.write(body[i:i + 1])
        handler.wfile.flush()
        time.sleep(pause)


def _drip_headers(handler, pause=0.25):
    head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n" + b"X-Pad: " + b"a" * 200 + b"\r\n"
    for i in range(len(head)):
        handler.wfile.write(head[i:i + 1])
        handler.wfile.flush()
        time.sleep(pause)


def _stall_then_answer(handler, pause=0.6):
    # each pause alone is shorter than the budget, together they are far longer
    handler.send_response(200)
    handler.send_header("Content-Length", "64")
    handler.end_headers()
    for _ in range(64):
        time.sleep(pause)
        handler.wfile.write(b" ")
        handler.wfile.flush()


# The budget is the call's, measured the way the verifier measures it (wall clock from the call); the grace
# covers a loaded machine's scheduling, far below what a per-read timeout would allow (tens of seconds).
BUDGET_S, GRACE_S = 1.0, 2.0


@pytest.mark.parametrize("serve", [_drip_body, _drip_headers, _stall_then_answer],
                         ids=["drips-the-body", "drips-the-headers", "stalls-under-the-per-read-timeout"])
def test_timeout_is_a_deadline_for_the_whole_call(serve):
    with _loopback(serve) as (url, seen):
        t0 = time.monotonic()
        verdict = verify("remote", "46", "46", url=url, timeout_s=BUDGET_S)
        took = time.monotonic() - t0
    assert seen, "the server was reached"
    assert verdict.status.value == "timeout" and verdict.reason == "remote_timeout", verdict
    assert took < BUDGET_S + GRACE_S, took


@pytest.mark.parametrize("code", [301, 302, 303, 307, 308])
@pytest.mark.parametrize("same_host", [False, True], ids=["other-origin", "same-origin"])
def test_redirects_are_not_followed_and_credentials_stay_home(code, same_host):
    with _loopback(lambda h: _reply(h, body=b'{"rewards": [1.0]}')) as (elsewhere, elsewhere_seen):
        def redirect(handler):
            target = handler.path + "/moved" if same_host else elsewhere
            _reply(handler, code, b"moved", [("Location", target)])

        with _loopback(redirect) as (url, seen):
            verdict = verify("remote", "wrong", "46", url=url, timeout_s=5,
                             headers={"Authorization": "Bearer operator-secret"})
    assert seen and seen[0][1].get("Authorization") == "Bearer operator-secret"  # the configured server gets it
    assert len(seen) == 1 and not elsewhere_seen, "no second request, least of all to another host"
    assert verdict.status.value == "error" and verdict.reason == "remote_redirect" and verdict.score == 0.0
    assert "redirect" in verdict.details["error"]


@pytest.mark.parametrize("code, body, reason", [
    (200, b'{"rewards": [0.25]}', "remote_reward"),
    (500, b"boom", "remote_http_error"),
    (200, b'{"rewards": []}', "remote_bad_reply"),
    (200, b"x" * (1 << 21), "remote_bad_reply"),
])
def test_one_request_each_way(code, body, reason):
    with _loopback(lambda h: _reply(h, code, body)) as (url, seen):
        verdict = verify("remote", "46", "46", url=url, timeout_s=5)
    assert verdict.reason == reason and len(seen) == 1


@pytest.mark.parametrize("options", [{"timeout_s": 0}, {"timeout_s": float("nan")}, {"timeout_s": "5"},
                                     {"headers": ["Authorization: x"]}, {"headers": {"X": 1}}])
def test_bad_options_are_error_verdicts_before_any_connection(options):
    with _loopback(_reply) as (url, seen):
        verdict = verify("remote", "46", "46", url=url, **options)
    assert verdict.status.value == "error" and verdict.reason == "bad_option" and not seen
