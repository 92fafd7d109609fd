"""Data rows never choose where the trainer connects nor which secret it sends: a row's endpoint options (the remote
verifier's url, a judge's base_url, headers, api_key_env, ...) are refused in training, evaluation and the other
places that score rows, and the address the row named is never contacted (a real loopback listener records it)."""

from __future__ import annotations

import json
import threading
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from rlvr.config import config_from_dict
from rlvr.rollout.episodes import Scoring, score
from rlvr.tasks import Task
from rlvr.tasks.base import DataError
from rlvr.tasks.jsonl import load_jsonl
from rlvr.verifiers.row_options import REASON, row_option_problem


@contextmanager
def listener():
    """A loopback server that answers both protocols the trainer speaks (OpenRLHF rewards, chat completions,
    approving everything) and records each request; yields (base address, requests)."""
    seen = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            seen.append((self.path, dict(self.headers), body))
            if self.path.endswith("/chat/completions"):
                reply = {"id": "x", "object": "chat.completion", "created": 0, "model": "m",
                         "choices": [{"index": 0, "finish_reason": "stop",
                                      "message": {"role": "assistant", "content": "VERDICT: CORRECT"}}]}
            else:
                reply = {"rewards": [1.0]}
            data = json.dumps(reply).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield f"127.0.0.1:{httpd.server_address[1]}", seen
    finally:
        httpd.shutdown()
        httpd.server_close()


def row_attempts(address: str) -> list[tuple[str, dict]]:
    """(verifier, row options) pairs that each try to point the trainer at ``address`` or name a secret."""
    http = f"http://{address}"
    return [
        ("remote", {"url": f"{http}/get_reward"}),
        ("remote", {"URL": f"{http}/get_reward"}),
        ("remote", {"headers": {"Authorization": "Bearer x"}}),
        ("judge", {"base_url": f"{http}/v1", "model": "m"}),
        ("judge", {"baseURL": f"{http}/v1", "model": "m"}),
        ("judge", {"base-url": f"{http}/v1", "model": "m"}),
        ("judge", {"api_key_env": "AWS_SECRET_ACCESS_KEY"}),
        ("judge", {"apiKey": "sk-row"}),
        ("rubric", {"judge": {"base_url": f"{http}/v1", "model": "m"}}),
        ("calibrated", {"inner": "remote", "inner_options": {"url": f"{http}/get_reward"}}),
        ("noisy", {"inner": "remote", "inner_options": {"judge_url": f"{http}/get_reward"}}),
        ("judge", {"template": f"{http}/v1"}),  # an innocuous name holding an address
        ("judge", {"extra": [{"x": f"//{address}/v1"}]}),
        ("judge", {"target": address}),
        ("judge", {"target": f"localhost:{address.rsplit(':', 1)[1]}"}),
        ("code", {"network": True}),
        ("judge", {"proxy": f"{http}"}),
        ("judge", {"port": int(address.rsplit(":", 1)[1])}),
        ("judge", {"password": "hunter2"}),
        ("judge", {"Authorization": "Bearer x"}),
    ]


@pytest.mark.parametrize("index", range(len(row_attempts("127.0.0.1:1"))))
def test_row_endpoint_options_are_refused_by_name_and_by_value(index):
    _, options = row_attempts("127.0.0.1:8000")[index]
    problem = row_option_problem(options)
    assert problem and "verifier_options" in problem and "config" in problem


@pytest.mark.parametrize("options, config", [
    ({"timeout_s": 5}, {}),
    ({"rel_tol": 1e-6, "abs_tol": 0.0, "case_sensitive": True}, {}),
    ({"model": "judge-2", "graded": True, "scale": 5}, {}),
    ({"template": "Question: {question}\nSee http://example.com for context.\n{response}"}, {}),
    ({"choices": ["A: 10:30", "B: 11:45"]}, {}),
    ({"inner": "math", "inner_options": {"tuple_order": True}}, {}),
    ({"base_url": "http://127.0.0.1:9/v1"}, {"base_url": "http://127.0.0.1:9/v1"}),  # the config's own choice
    ({"base_url": None, "network": False}, {}),  # nothing chosen
    ({"tags": ["think", "answer"], "box_constraint": True, "image_size": [32, 32]}, {}),
])
def test_ordinary_row_options_pass(options, config):
    assert row_option_problem(options, config) is None


def test_a_row_cannot_pick_another_endpoint_than_the_configs():
    config = {"base_url": "http://127.0.0.1:9/v1"}
    assert row_option_problem({"base_url": "http://127.0.0.1:10/v1"}, config)


@pytest.mark.parametrize("index", range(len(row_attempts("127.0.0.1:1"))))
def test_scoring_in_training_and_eval_refuses_the_row_and_never_connects(index):
    """The scoring step of training and evaluation (rollout.episodes.score) with tasks built in code."""
    with listener() as (address, seen):
        verifier, options = row_attempts(address)[index]
        bad = Task("What is 2+2?", "4", "bad", verifier=verifier, verifier_options=options)
        plain = Task("What is 2+2?", "4", "plain")
        verdicts = score([bad, plain], ["4", "4"], Scoring("exact"))
    assert verdicts[0].status.value == "error" and verdicts[0].reason == REASON and verdicts[0].score == 0.0
    assert "config" in verdicts[0].details["error"]
    assert verdicts[1].status.value == "correct"  # the other rows are scored
    assert seen == []


def test_the_configs_endpoint_is_used_and_rows_without_endpoints_reach_it():
    with listener() as (address, seen):
        scoring = Scoring("remote", {"url": f"http://{address}/get_reward"})
        tasks = [Task("q", "4", "a", verifier_options={"timeout_s": 5}),
                 Task("q", "4", "b", verifier_options={"url": f"http://{address}/get_reward"}),  # repeats the config
                 Task("q", "4", "c", verifier_options={"url": "http://127.0.0.1:9/get_reward"})]
        verdicts = score(tasks, ["4", "4", "4"], scoring)
    assert [v.reason for v in verdicts] == ["remote_reward", "remote_reward", REASON]
    assert len(seen) == 2


def _write_rows(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.mark.parametrize("index", range(len(row_attempts("127.0.0.1:1"))))
def test_a_data_file_row_naming_an_endpoint_is_a_load_error_with_file_line_and_field(tmp_path, index):
    verifier, options = row_attempts("127.0.0.1:8000")[index]
    path = _write_rows(tmp_path / "rows.jsonl", [{"prompt": "1+1=", "reference": "2"},
                                                 {"prompt": "2+2=", "reference": "4", "verifier": verifier,
                                                  "verifier_options": options}])
    with pytest.raises(DataError) as info:
        load_jsonl(path)
    message = str(info.value)
    assert f"{path}:2" in message and "field 'verifier_options" in message and "\n" not in message


def test_training_on_such_rows_stops_before_any_connection(tiny_model_dir, tmp_path):
    from rlvr.train import train

    with listener() as (address, seen):
        data = _write_rows(tmp_path / "train.jsonl", [
            {"prompt": "1+1=", "reference": "2"},
            {"prompt": "2+2=", "reference": "4", "verifier": "remote",
             "verifier_options": {"url": f"http://{address}/get_reward"}},
            {"prompt": "3+3=", "reference": "6", "verifier": "judge",
             "verifier_options": {"base_url": f"http://{address}/v1", "model": "m"}},
        ])
        cfg = {"model": {"path": str(tiny_model_dir)}, "data": {"train": str(data), "prompts_per_step": 2},
               "rollout": {"group_size": 2, "max_new_tokens": 2},
               "train": {"steps": 1, "out": str(tmp_path / "run"), "progress": False}}
        with pytest.raises(DataError, match=r"train\.jsonl:2: field 'verifier_options\.url'"):
            train(config_from_dict(cfg))
    assert seen == []


def test_evaluating_such_rows_stops_before_any_connection(tiny_model_dir, tmp_path):
    from rlvr.eval.evaluate import evaluate_model

    with listener() as (address, seen):
        data = _write_rows(tmp_path / "eval.jsonl", [
            {"prompt": "3+3=", "reference": "6", "verifier": "judge",
             "verifier_options": {"base_url": f"http://{address}/v1", "model": "m"}},
        ])
        with pytest.raises(DataError, match=r"eval\.jsonl:1: field 'verifier_options\.base_url'"):
            evaluate_model(str(tiny_model_dir), str(data), verifier="exact", max_new_tokens=2)
    assert seen == []


def test_rlvr_verify_refuses_the_row_and_scores_the_others(tmp_path):
    from rlvr.cli import main

    with listener() as (address, seen):
        rows = _write_rows(tmp_path / "rows.jsonl", [
            {"response": "4", "reference": "4"},
            {"response": "4", "reference": "4", "verifier": "remote",
             "verifier_options": {"url": f"http://{address}/get_reward"}},
        ])
        out = tmp_path / "out.jsonl"
        main(["verify", "--input", str(rows), "--output", str(out), "--verifier", "exact"])
    results = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["reason"] for r in results][1] == REASON and results[0]["status"] == "correct"
    assert seen == []


@pytest.mark.parametrize("name", ["port", "headers", "proxy", "baseURL", "server_address", "network", "auth"])
def test_the_server_cannot_allow_an_endpoint_option(name):
    from rlvr.serve import RewardService

    with pytest.raises(ValueError, match="--allow-option"):
        RewardService("exact", allow_options=frozenset({name}))


def test_the_server_refuses_an_allowed_option_holding_an_address():
    from rlvr.serve import RewardService

    service = RewardService("judge", allow_options=frozenset({"template"}))
    result = service.score([{"response": "4", "reference": "4", "verifier_options": {"template": "localhost:8000"}}])
    assert result[0]["status"] == "error" and result[0]["reason"] == "server_resource"


def rubric_references(address: str) -> list:
    """Inline rubrics in a row's reference whose criteria carry endpoint options."""
    http = f"http://{address}"
    judged = {"name": "judged", "check": {"judge": "Says Paris.", "options": {"base_url": f"{http}/v1", "model": "m"}}}
    remote = {"name": "remote", "check": {"verifier": "remote", "reference": "Paris",
                                          "options": {"url": f"{http}/get_reward"}}}
    keyed = {"name": "keyed", "check": {"judge": "Says Paris.", "options": {"api_key_env": "AWS_SECRET_ACCESS_KEY"}}}
    return [{"rubric": {"criteria": [judged]}, "answer": "Paris"},
            {"rubric": {"criteria": [remote]}, "answer": "Paris"},
            {"rubric": {"criteria": [keyed]}, "answer": "Paris"},
            [judged]]


@pytest.mark.parametrize("index", range(4))
def test_endpoint_options_inside_a_rows_rubric_are_refused(index, tmp_path):
    with listener() as (address, seen):
        reference = rubric_references(address)[index]
        task = Task("Capital of France?", reference, "r", verifier="rubric")
        verdict = score([task], ["Paris"], Scoring("exact"))[0]
        path = _write_rows(tmp_path / "rows.jsonl", [{"prompt": "Capital of France?", "reference": reference,
                                                      "verifier": "rubric"}])
        with pytest.raises(DataError, match=r"rows\.jsonl:1: field 'reference"):
            load_jsonl(path)
    assert verdict.reason == REASON and seen == []


def test_a_reference_without_options_is_untouched():
    from rlvr.verifiers.row_options import reference_problem

    assert reference_problem({"url": "http://example.com", "items": [1, 2]}) is None  # a JSON answer, not options
    assert reference_problem([8, 16, 24, 40]) is None


@pytest.mark.parametrize("code", [301, 302, 307, 308])
def test_the_judge_never_follows_a_redirect_elsewhere(code):
    """A judge endpoint that redirects (to a host that would approve everything) gets an error verdict; the other
    host hears nothing, neither the prompt and response nor the key."""
    pytest.importorskip("openai")
    from rlvr.verifiers import verify

    with listener() as (elsewhere, elsewhere_seen):
        class Redirect(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                self.send_response(code)
                self.send_header("Location", f"http://{elsewhere}{self.path}")
                self.send_header("Content-Length", "0")
                self.end_headers()

        httpd = ThreadingHTTPServer(("127.0.0.1", 0), Redirect)
        httpd.daemon_threads = True
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
        try:
            base_url = f"http://127.0.0.1:{httpd.server_address[1]}/v1"
            verdict = verify("judge", "The answer is 4.", "4", base_url=base_url, model="m-redirect", prompt="2+2?",
                             cache=False, timeout_s=10, max_retries=0)
        finally:
            httpd.shutdown()
            httpd.server_close()
    assert verdict.status.value == "error" and verdict.score == 0.0, verdict
    assert elsewhere_seen == []
