"""`rlvr serve` gives a client nothing of the server's: per-row options only from the operator's allow-list, never a
server path, URL or credential (even when allowed), no time budget past the server's cap; slow-dripping clients
cannot hold the server; one bad row gets its own verdict. Real HTTP on 127.0.0.1."""

from __future__ import annotations

import argparse
import http.client
import json
import socket
import sqlite3
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from rlvr.serve import RewardService, add_serve_arguments

from test_serve import get, post, server_for  # noqa: F401  (server_for: the loopback-server fixture)


class Listener:
    """A loopback HTTP server that records every request it gets (the host a client would like the server's
    judge, with the server's API key, to call)."""

    def __init__(self):
        self.requests = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                owner.requests.append((self.path, dict(self.headers)))
                body = b'{"choices": [{"message": {"content": "CORRECT"}}]}'
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def close(self):
        self.server.shutdown()
        self.server.server_close()


GOOD = {"response": "42", "reference": "42"}


@pytest.mark.parametrize("options", [{"timeout_s": 1.0}, {"choices": "AB"}, {"base_url": "http://x"}, {"anything": 1}])
def test_options_the_operator_did_not_allow_are_refused_per_row(server_for, options):
    server = server_for(RewardService("exact"))
    status, reply = post(server, "/score", {"rows": [GOOD, {**GOOD, "verifier_options": options}, GOOD]})
    assert status == 200
    results = reply["results"]
    assert [r["status"] for r in results] == ["correct", "error", "correct"]
    assert results[1]["reason"] == "option_not_allowed" and results[1]["reward"] == 0.0
    assert next(iter(options)) in results[1]["error"] and "--allow-option" in results[1]["error"]


def test_allowed_options_are_used(server_for):
    server = server_for(RewardService("exact", allow_options={"choices"}))
    rows = [{"response": "(B)", "reference": "B", "verifier": "choice", "verifier_options": {"choices": "ABC"}},
            {"response": "(D)", "reference": "B", "verifier": "choice", "verifier_options": {"choices": "ABC"}}]
    status, reply = post(server, "/score", {"rows": rows})
    assert [(r["status"], r["reason"]) for r in reply["results"]] == [("correct", "choice_match"),
                                                                       ("incorrect", "invalid_choice")]


@pytest.mark.parametrize("name", ["base_url", "api_key_env", "db_dir", "rubric", "judge", "api_key", "cwd", "url",
                                  "cache_path", "log_file"])
def test_options_naming_server_resources_cannot_be_allowed(name):
    with pytest.raises(ValueError, match="server resource"):
        RewardService("exact", allow_options={name})
    parser = argparse.ArgumentParser()
    add_serve_arguments(parser)
    args = parser.parse_args(["--allow-option", "timeout_s", "--allow-option", name])
    assert args.allow_option == ["timeout_s", name]
    with pytest.raises(ValueError, match=name):
        RewardService("exact", allow_options=frozenset(args.allow_option))


@pytest.mark.parametrize("value", ["http://10.0.0.1/v1", "https://evil.example/v1", "//evil.example", "file:///etc/passwd",
                                   "/etc/passwd", "~/.ssh/id_rsa", "../secrets.sqlite", "./db.sqlite", "C:\\x.db",
                                   ["ok", "/etc/shadow"], {"nested": {"deeper": "https://evil.example"}},
                                   {"base_url": "relative-but-named"}])
def test_allowed_options_never_carry_paths_or_urls(server_for, value):
    server = server_for(RewardService("exact", allow_options={"choices", "extra"}))
    rows = [{"response": "(B)", "reference": "B", "verifier": "choice", "verifier_options": {"extra": value}}, GOOD]
    status, reply = post(server, "/score", {"rows": rows})
    assert status == 200
    refused, scored = reply["results"]
    assert (refused["status"], refused["reason"]) == ("error", "server_resource"), refused
    assert scored["status"] == "correct"


def test_a_client_cannot_point_the_servers_judge_at_its_own_host(server_for, tmp_path, monkeypatch):
    pytest.importorskip("openai")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-server-secret")
    theirs, ours = Listener(), Listener()
    try:
        config = tmp_path / "judge.yaml"
        config.write_text(f"data:\n  verifier: judge\n  verifier_options: {{base_url: '{ours.url}', model: m, "
                          f"backoff_s: 0.01}}\n")
        server = server_for(RewardService.from_config(config, allow_options={"model", "timeout_s"}))
        hostile = [
            {"response": "It is Paris.", "reference": "Paris", "verifier_options": {"base_url": theirs.url}},
            {"response": "It is Paris.", "reference": "Paris", "verifier_options": {"model": theirs.url}},
            {"response": "It is Paris.", "reference": "Paris", "verifier": "judge",
             "verifier_options": {"base_url": theirs.url, "model": "m"}},
            {"response": "It is Paris.", "reference": "Paris", "verifier": "rubric",
             "verifier_options": {"judge": {"base_url": theirs.url, "model": "m"}}},
        ]
        status, reply = post(server, "/score", {"rows": hostile})
        assert status == 200
        assert [r["status"] for r in reply["results"]] == ["error"] * len(hostile)
        assert {r["reason"] for r in reply["results"]} <= {"option_not_allowed", "server_resource"}
        time.sleep(0.2)
        assert theirs.requests == []  # the server's key never left for the client's host
    finally:
        theirs.close()
        ours.close()


def test_a_request_cannot_name_a_database_file_on_the_server(server_for, tmp_path):
    db = tmp_path / "private.sqlite"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE secrets (v TEXT)")
        conn.execute("INSERT INTO secrets VALUES ('hunter2')")
    server = server_for(RewardService("sql"))
    rows = [
        {"response": "SELECT v FROM secrets", "reference": {"gold": "SELECT 'hunter2'", "db": str(db)}},
        {"response": "SELECT 1", "reference": {"gold": "SELECT 1", "schema": "CREATE TABLE t (x INT);"}},
    ]
    status, reply = post(server, "/score", {"rows": rows})
    assert status == 200
    refused, scored = reply["results"]
    assert (refused["status"], refused["reason"], refused["reward"]) == ("error", "server_resource", 0.0)
    assert "'db'" in refused["error"]
    assert scored["status"] == "correct"
    status, reply = post(server, "/get_reward", {"query": ["SELECT v FROM secrets"], "prompts": [""],
                                                 "labels": [{"gold": "SELECT 'hunter2'", "db": str(db)}]})
    assert status == 200 and reply["rewards"] == [0.0] and reply["extra_logs"]["undecided"] == [1.0]


def test_a_time_budget_past_the_servers_cap_is_clamped(server_for):
    server = server_for(RewardService("exact", allow_options={"timeout_s"}, max_timeout_s=1.0))
    slow = {"response": "a" * 40 + "b", "reference": {"pattern": "(a+)+$"}, "verifier": "regex",
            "verifier_options": {"timeout_s": 3600}}
    t0 = time.monotonic()
    status, reply = post(server, "/score", {"rows": [slow, GOOD]})
    assert status == 200 and time.monotonic() - t0 < 10.0
    assert [r["status"] for r in reply["results"]] == ["timeout", "correct"]


@pytest.mark.parametrize("budget", [-1, 0, "10", float("nan"), True, None, [1]])
def test_a_bad_time_budget_is_that_rows_error(server_for, budget):
    server = server_for(RewardService("exact", allow_options={"timeout_s"}))
    row = {**GOOD, "verifier_options": {"timeout_s": budget}}
    body = json.dumps({"rows": [row, GOOD]}).replace("NaN", "1e999")  # strict JSON has no NaN; 1e999 is inf
    conn = http.client.HTTPConnection(*server.server_address[:2], timeout=30)
    conn.request("POST", "/score", body.encode())
    reply = json.loads(conn.getresponse().read())
    conn.close()
    assert [r["status"] for r in reply["results"]] == ["error", "correct"]
    assert reply["results"][0]["reason"] == "bad_option"


def test_one_row_that_breaks_scoring_gets_its_own_verdict(server_for):
    # a row giving "prompt" both as a field and as an option is a caller error inside the runner
    server = server_for(RewardService("exact", allow_options={"prompt"}))
    rows = [GOOD, {"response": "x", "reference": "x", "prompt": "p", "verifier_options": {"prompt": "q"}},
            {"response": "no", "reference": "yes"}]
    status, reply = post(server, "/score", {"rows": rows})
    assert status == 200
    assert [r["status"] for r in reply["results"]] == ["correct", "error", "incorrect"]
    assert reply["results"][1]["reason"] == "row_failed" and reply["results"][1]["error"]


def test_get_reward_without_labels_is_rejected_naming_the_field(server_for):
    server = server_for(RewardService("exact"))
    status, reply = post(server, "/get_reward", {"query": ["42"], "prompts": [""]})
    assert status == 400 and "'labels'" in reply["error"]
    status, reply = post(server, "/get_reward", {"query": ["42"], "prompts": [""], "labels": None})
    assert status == 400 and "'labels'" in reply["error"]
    status, reply = post(server, "/get_reward", {"prompts": [""], "labels": ["42"]})
    assert status == 400 and "'query'" in reply["error"]


def _drip(server, payload, stop, interval=0.05):
    """A client that sends ``payload`` one byte at a time; returns when the server closes or ``stop`` is set."""
    try:
        with socket.create_connection(server.server_address[:2], timeout=10) as s:
            for byte in payload:
                if stop.is_set():
                    return
                s.sendall(bytes([byte]))
                time.sleep(interval)
    except OSError:
        pass


@pytest.mark.parametrize("slow_part", ["headers", "body"])
def test_slow_dripping_clients_do_not_block_health_or_others(server_for, slow_part):
    server = server_for(RewardService("exact"), max_connections=4, io_timeout_s=5.0, request_deadline_s=60.0)
    head = b"POST /get_reward HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\nX-Pad: " + b"a" * 4000 + b"\r\n\r\n"
    stop = threading.Event()
    drippers = []
    for _ in range(8):  # twice the slots
        if slow_part == "body":
            sock = socket.create_connection(server.server_address[:2], timeout=10)
            sock.sendall(b"POST /get_reward HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\n\r\n{")
            drippers.append(sock)
        else:
            t = threading.Thread(target=_drip, args=(server, head, stop), daemon=True)
            t.start()
            drippers.append(t)
    try:
        time.sleep(0.5)
        for _ in range(5):
            t0 = time.monotonic()
            assert get(server, "/health", timeout=5)[0] == 200
            assert time.monotonic() - t0 < 2.0
            status, reply = post(server, "/get_reward", {"query": ["7"], "prompts": [""], "labels": ["7"]}, timeout=5)
            assert (status, reply["rewards"]) == (200, [1.0])
            assert time.monotonic() - t0 < 2.0
            time.sleep(0.1)
        assert get(server, "/metrics")[1]["evicted_connections"] >= 1
    finally:
        stop.set()
        for d in drippers:
            if isinstance(d, socket.socket):
                d.close()
            else:
                d.join(10)


def test_a_dripping_request_is_dropped_at_the_deadline(server_for):
    server = server_for(RewardService("exact"), io_timeout_s=5.0, request_deadline_s=1.0)
    with socket.create_connection(server.server_address[:2], timeout=10) as s:
        t0 = time.monotonic()
        closed_after = None
        for byte in b"GET /health HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * 200:
            try:
                s.sendall(bytes([byte]))
            except OSError:
                closed_after = time.monotonic() - t0
                break
            time.sleep(0.05)  # each byte well inside io_timeout_s: only the request deadline can end it
            s.setblocking(False)
            try:
                if s.recv(1) == b"":
                    closed_after = time.monotonic() - t0
                    break
            except BlockingIOError:
                pass
            except OSError:
                closed_after = time.monotonic() - t0
                break
            finally:
                s.setblocking(True)
    assert closed_after is not None and closed_after < 4.0, closed_after
    assert get(server, "/health")[0] == 200


def test_the_command_line_helpers_serve_with_the_operators_allow_list(tmp_path):
    """What `rlvr serve` runs: the serve subcommand's own arguments, add_serve_arguments, serve_from_args."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    script = (
        "import argparse, sys\n"
        "from rlvr.serve import add_serve_arguments, serve_from_args\n"
        "srv = argparse.ArgumentParser()\n"
        "srv.add_argument('--verifier'); srv.add_argument('--config'); srv.add_argument('--host', default='127.0.0.1')\n"
        "srv.add_argument('--port', type=int, required=True); srv.add_argument('--max-rows', type=int, default=4096)\n"
        "srv.add_argument('--max-connections', type=int, default=64)\n"
        "add_serve_arguments(srv)\n"
        "serve_from_args(srv.parse_args(sys.argv[1:]))\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    proc = subprocess.Popen([sys.executable, "-c", script, "--verifier", "exact", "--port", str(port),
                             "--allow-option", "timeout_s", "--max-timeout-s", "1"],
                            env=env, stderr=subprocess.PIPE, text=True, cwd=str(Path(__file__).parent))
    try:
        deadline, reply = time.monotonic() + 60, None
        slow = {"response": "a" * 40 + "b", "reference": {"pattern": "(a+)+$"}, "verifier": "regex",
                "verifier_options": {"timeout_s": 600}}
        rows = [slow, {**GOOD, "verifier_options": {"choices": "AB"}}, GOOD]
        warm = {"rows": [{"response": "abc", "reference": "a.c", "verifier": "regex"}]}  # starts the workers
        while time.monotonic() < deadline:
            try:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
                conn.request("POST", "/score", json.dumps(warm))
                conn.getresponse().read()
                t0 = time.monotonic()
                conn.request("POST", "/score", json.dumps({"rows": rows}))
                reply = json.loads(conn.getresponse().read())
                elapsed = time.monotonic() - t0
                break
            except OSError:
                time.sleep(0.3)
        assert reply is not None, proc.stderr.read() if proc.poll() is not None else "no reply"
        assert [r["status"] for r in reply["results"]] == ["timeout", "error", "correct"]
        assert reply["results"][1]["reason"] == "option_not_allowed"
        assert elapsed < 20.0  # the 600 s budget was clamped to the server's 1 s (slack for a loaded machine)
    finally:
        proc.terminate()
        proc.wait(10)
    bad = subprocess.run([sys.executable, "-c", script, "--port", "1", "--allow-option", "base_url"], env=env,
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode != 0 and "base_url" in bad.stderr


@pytest.mark.parametrize("name", ["timeout_s", "per_test_timeout_s", "backoff_s", "deadline", "budget_seconds"])
def test_every_time_budget_is_clamped_or_refused(name):
    service = RewardService("exact", allow_options={name}, max_timeout_s=2.0)
    row = service.admit({**GOOD, "verifier_options": {name: 3600}})
    assert row["verifier_options"][name] == 2.0
    assert service.admit({**GOOD, "verifier_options": {name: 1.5}})["verifier_options"][name] == 1.5
    with pytest.raises(ValueError, match=name):
        service.admit({**GOOD, "verifier_options": {name: "forever"}})
