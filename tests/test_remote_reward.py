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
