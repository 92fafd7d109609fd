"""`rlvr serve` over real HTTP on 127.0.0.1: OpenRLHF's /get_reward gives the rewards `verify` gives on the same
rows; the batch endpoint, health and metrics; hostile clients and slow rewards do not take the server down."""

from __future__ import annotations

import http.client
import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from rlvr.serve import RewardService, make_server
from rlvr.verifiers import verify

ROWS = [  # (prompt, response, reference)
    ("What is 2+3? ", "I add them: \\boxed{5}", "5"),
    ("What is 2+3? ", "It is 6.", "5"),
    ("Half of 1? ", "The answer is $\\frac{1}{2}$", "0.5"),
    ("Solve x^2=4, x>0. ", "x = 2", "2"),
    ("Name a prime. ", "", "7"),
    ("What is 10/4? ", "#### 2.5", "5/2"),
]


@pytest.fixture
def server_for():
    started = []

    def start(service, **limits):
        server = make_server(service, "127.0.0.1", 0, **limits)
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.shutdown()
        server.server_close()


def post(server, path, body, timeout=30):
    host, port = server.server_address[:2]
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    conn.request("POST", path, data, {"Content-Type": "application/json"})
    resp = conn.getresponse()
    out = resp.status, json.loads(resp.read() or b"null")
    conn.close()
    return out


def get(server, path, timeout=10):
    conn = http.client.HTTPConnection(*server.server_address[:2], timeout=timeout)
    conn.request("GET", path)
    resp = conn.getresponse()
    out = resp.status, json.loads(resp.read())
    conn.close()
    return out


def test_get_reward_equals_verify_on_the_same_rows(server_for):
    server = server_for(RewardService("math"))
    body = {"query": [p + r for p, r, _ in ROWS], "prompts": [p for p, _, _ in ROWS], "labels": [g for _, _, g in ROWS]}
    status, reply = post(server, "/get_reward", body)
    expected = [verify("math", r, g).score for _, r, g in ROWS]
    assert status == 200
    assert reply["rewards"] == expected == reply["scores"]
    assert expected == [1.0, 0.0, 1.0, 1.0, 0.0, 1.0]  # the rows mean what they say
    assert reply["extra_logs"]["correct"] == expected
    assert len(reply["extra_logs"]["undecided"]) == len(ROWS)


def test_query_without_its_prompt_is_scored_whole(server_for):
    server = server_for(RewardService("exact"))
    status, reply = post(server, "/get_reward", {"query": ["42", "pre 42"], "prompts": ["x", "pre "], "labels": ["42", "42"]})
    assert reply["rewards"] == [1.0, 1.0]


def test_batch_endpoint_rows_name_their_verifier(server_for):
    server = server_for(RewardService("exact"))
    rows = [{"response": "so 1,234.", "reference": "1234", "verifier": "numeric"},
            {"response": "(B)", "reference": "B", "verifier": "choice"},
            {"response": "yes", "reference": "no"}]
    status, reply = post(server, "/score", {"rows": rows})
    assert status == 200
    assert [r["status"] for r in reply["results"]] == ["correct", "correct", "incorrect"]
    assert [r["reward"] for r in reply["results"]] == [verify(r.get("verifier", "exact"), r["response"], r["reference"]).score
                                                       for r in rows]


def test_composed_reward_from_a_config(server_for, tmp_path):
    config = tmp_path / "reward.yaml"
    config.write_text("data: {verifier: numeric}\nreward:\n  terms:\n"
                      "    - {name: format, verifier: format, weight: 0.5}\n"
                      "    - {name: correct, verifier: task, weight: 1.0, gate: format}\n")
    server = server_for(RewardService.from_config(config))
    good = "<think>2+2</think><answer>4</answer>"
    status, reply = post(server, "/get_reward", {"query": [good, "4", "<think>x</think><answer>5</answer>"],
                                                 "prompts": ["", "", ""], "labels": ["4", "4", "4"]})
    assert reply["rewards"] == [1.5, 0.0, 0.5]
    assert reply["extra_logs"]["reward/format"] == [1.0, 0.0, 1.0]
    assert reply["extra_logs"]["reward/correct"] == [1.0, 0.0, 0.0]
    bad = tmp_path / "bad.yaml"
    bad.write_text("reward:\n  terms:\n    - {name: long, kind: overlong}\n")
    with pytest.raises(ValueError, match="token lengths"):
        RewardService.from_config(bad)


def test_health_metrics_and_unknown_paths(server_for):
    server = server_for(RewardService("numeric"))
    assert get(server, "/health") == (200, {"status": "ok", "reward": {"verifier": "numeric", "terms": []}})
    post(server, "/get_reward", {"query": ["1"], "prompts": [""], "labels": ["1"]})
    status, metrics = get(server, "/metrics")
    assert status == 200 and metrics["requests"]["/get_reward 200"] == 1 and metrics["rows"] == 1
    assert "latency_p99_ms" in metrics and "calls" in metrics["runner"]
    assert get(server, "/nope")[0] == 404
    assert post(server, "/nope", {})[0] == 404


@pytest.mark.parametrize("body, code", [
    (b"{not json", 400),
    (b"[1, 2]", 400),
    (json.dumps({"query": "one string"}).encode(), 400),
    (json.dumps({"query": ["a", "b"], "labels": ["x"]}).encode(), 400),
    (json.dumps({"query": [1], "prompts": [None]}).encode(), 400),
    (b"[" * 100000 + b"]" * 100000, 400),  # nesting deep enough to blow a recursive parser
])
def test_malformed_bodies_get_400(server_for, body, code):
    server = server_for(RewardService("exact"))
    assert post(server, "/get_reward", body)[0] == code
    assert get(server, "/health")[0] == 200


def test_batch_rows_are_validated(server_for):
    server = server_for(RewardService("exact"))
    assert post(server, "/score", {"rows": [{"response": 3}]})[0] == 400
    status, reply = post(server, "/score", {"rows": [{"response": "x", "verifier": "nope"}]})
    assert status == 400 and "unknown verifier" in reply["error"]


def test_limits_on_rows_and_body_size(server_for):
    server = server_for(RewardService("exact"), max_rows=3, max_body_bytes=10_000)
    assert post(server, "/get_reward", {"query": ["a"] * 4})[0] == 413
    with socket.create_connection(server.server_address[:2], timeout=5) as s:  # announced, never sent
        s.sendall(b"POST /get_reward HTTP/1.1\r\nHost: x\r\nContent-Length: 999999999\r\n\r\n")
        assert b" 413 " in s.recv(4096).split(b"\r\n")[0]
    with socket.create_connection(server.server_address[:2], timeout=5) as s:
        s.sendall(b"POST /get_reward HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
        assert b" 411 " in s.recv(4096).split(b"\r\n")[0]


def test_a_stalled_client_is_dropped_and_others_are_served(server_for):
    server = server_for(RewardService("exact"), io_timeout_s=1.0)
    s = socket.create_connection(server.server_address[:2], timeout=5)
    s.sendall(b"POST /get_reward HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")  # then silence
    t0 = time.monotonic()
    assert post(server, "/get_reward", {"query": ["a"], "prompts": [""], "labels": ["a"]})[1]["rewards"] == [1.0]
    assert time.monotonic() - t0 < 1.0  # not queued behind the stalled one
    s.settimeout(3)
    assert s.recv(4096) == b""  # after io_timeout_s the server closed the stalled connection, without a reply
    s.close()
    assert get(server, "/metrics")[1]["dropped_connections"] >= 1


def test_idle_connections_give_their_slots_up_and_busy_ones_get_503(server_for):
    server = server_for(RewardService("exact", allow_options={"timeout_s"}), max_connections=2, io_timeout_s=3.0)
    idle = [socket.create_connection(server.server_address[:2], timeout=5) for _ in range(2)]
    time.sleep(0.2)
    assert get(server, "/health")[0] == 200  # an idle connection gave its slot up
    assert get(server, "/metrics")[1]["evicted_connections"] >= 1
    for s in idle:
        s.close()
    # every slot busy scoring: a new connection gets 503 at once, not a place in a queue
    slow = {"rows": [{"response": "a" * 40 + "b", "reference": {"pattern": "(a+)+$"}, "verifier": "regex",
                      "verifier_options": {"timeout_s": 2.0}}]}
    threads = [threading.Thread(target=post, args=(server, "/score", slow)) for _ in range(2)]
    for t in threads:
        t.start()
    time.sleep(0.5)
    with socket.create_connection(server.server_address[:2], timeout=5) as s:
        s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        assert b" 503 " in s.recv(4096).split(b"\r\n")[0]
    for t in threads:
        t.join(30)
    time.sleep(0.3)
    assert get(server, "/health")[0] == 200  # slots come back when the work is done


def test_a_slow_reward_does_not_starve_fast_requests(server_for):
    server = server_for(RewardService("exact", allow_options={"timeout_s"}))
    slow = {"rows": [{"response": "a" * 40 + "b", "reference": {"pattern": "(a+)+$"}, "verifier": "regex",
                      "verifier_options": {"timeout_s": 3.0}}]}
    result = {}
    thread = threading.Thread(target=lambda: result.update(slow=post(server, "/score", slow)))
    thread.start()
    time.sleep(0.3)
    t0 = time.monotonic()
    for _ in range(20):
        assert post(server, "/get_reward", {"query": ["x"], "prompts": [""], "labels": ["x"]})[1]["rewards"] == [1.0]
    fast_s = time.monotonic() - t0
    thread.join(30)
    assert result["slow"][1]["results"][0]["status"] == "timeout"
    assert fast_s < 2.0, fast_s


def test_cli_serve_runs_and_answers(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent / "src")}
    proc = subprocess.Popen([sys.executable, "-m", "rlvr.cli", "serve", "--verifier", "numeric", "--port", str(port)],
                            env=env, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
                conn.request("POST", "/get_reward", json.dumps({"query": ["Q: 7"], "prompts": ["Q: "], "labels": ["7"]}))
                reply = json.loads(conn.getresponse().read())
                break
            except OSError:
                time.sleep(0.3)
        assert reply["rewards"] == [1.0]
    finally:
        proc.terminate()
        proc.wait(10)


def test_the_verl_snippet_in_the_docs_scores_through_the_server(server_for, monkeypatch):
    import re

    docs = (Path(__file__).resolve().parent.parent / "docs" / "rewards.md").read_text()
    block = next(b for b in re.findall(r"```python\n(.*?)```", docs, re.S) if "def compute_score" in b)
    namespace = {}
    exec(block, namespace)
    server = server_for(RewardService("math"))
    monkeypatch.setenv("RLVR_REWARD_URL", server.url)
    assert namespace["compute_score"]("x", "so \\boxed{12}", "12") == 1.0
    assert namespace["compute_score"]("x", "so \\boxed{13}", "12") == 0.0


def test_a_judge_served_from_a_config(server_for, tmp_path):
    pytest.importorskip("openai")
    from judge_standin import ScriptedJudgeServer_standin, reference_in_response

    with ScriptedJudgeServer_standin(reference_in_response) as judge_server:
        config = tmp_path / "judge.yaml"
        config.write_text(f"data:\n  verifier: judge\n  verifier_options: {{base_url: '{judge_server.base_url}', "
                          f"model: m-served, backoff_s: 0.01}}\n")
        server = server_for(RewardService.from_config(config))
        status, reply = post(server, "/get_reward", {"query": ["Q? It is Paris.", "Q? Lyon.", "Q? Solution:"],
                                                     "prompts": ["Q? ", "Q? ", "Q? "], "labels": ["Paris"] * 3})
        assert status == 200 and reply["rewards"] == [1.0, 0.0, 0.0]
        assert len(judge_server.requests) == 2  # the bare opener never reached the judge
        assert "Task:\nQ? \n" in judge_server.requests[0]["messages"][1]["content"]  # the prompt reached it
