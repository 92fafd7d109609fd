"""ScriptedJudgeServer_standin: an OpenAI-compatible chat-completions server on 127.0.0.1 whose replies are
scripted by the test. It stands in for a real judge model where a test needs exact behaviour (retries, slow or
broken replies, exact verdicts); it is not a model."""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def accept_all(messages):
    return "The response looks fine.\nVERDICT: CORRECT"


def reference_in_response(messages):
    """Says CORRECT when the reference answer appears inside the fenced response (a crude but honest judge)."""
    user = messages[-1]["content"]
    ref = re.search(r"Reference answer:\n(.*?)\n\n<<<RESPONSE>>>", user, re.S)
    resp = re.search(r"<<<RESPONSE>>>\n(.*)\n<<<END RESPONSE>>>", user, re.S)
    ok = bool(ref and resp and ref.group(1).strip() and ref.group(1).strip() in resp.group(1))
    return f"Checked.\nVERDICT: {'CORRECT' if ok else 'INCORRECT'}"


class ScriptedJudgeServer_standin:
    """``reply(messages) -> str`` answers each request; ``script`` (a list) is consumed first, one item per
    request: ("status", code), ("sleep", seconds) then the reply, ("text", str), ("raw", bytes), ("drip", bytes,
    seconds per byte)."""

    def __init__(self, reply: Callable = accept_all, script: list | None = None):
        self.reply, self.script = reply, list(script or [])
        self.requests: list[dict] = []
        self.active = self.max_active = 0
        self.lock = threading.Lock()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                with owner.lock:
                    owner.requests.append(body)
                    owner.active += 1
                    owner.max_active = max(owner.max_active, owner.active)
                    action = owner.script.pop(0) if owner.script else None
                self.counted = True
                try:
                    self._answer(body, action)
                finally:
                    self._done()

            def _done(self):
                # A request stops counting as in flight before its reply is written: once the client has the
                # reply it may send the next one, which must not overlap this one in the count.
                if self.counted:
                    self.counted = False
                    with owner.lock:
                        owner.active -= 1

            def _answer(self, body, action):
                if action and action[0] == "status":
                    return self._send(action[1], json.dumps({"error": {"message": "scripted failure"}}).encode())
                if action and action[0] == "sleep":
                    time.sleep(action[1])
                if action and action[0] == "raw":
                    return self._send(200, action[1])
                if action and action[0] == "drip":  # the body, one byte every action[2] seconds
                    payload, pause = action[1], action[2]
                    self._done()
                    try:
                        self.send_response(200)
                        self.send_header("Content-Type", "application/json")
                        self.send_header("Content-Length", str(len(payload)))
                        self.end_headers()
                        for i in range(len(payload)):
                            self.wfile.write(payload[i:i + 1])
                            self.wfile.flush()
                            time.sleep(pause)
                    except (BrokenPipeError, ConnectionResetError):
                        pass
                    return
                text = action[1] if action and action[0] == "text" else owner.reply(body["messages"])
                out = {"id": "x", "object": "chat.completion", "created": 0, "model": body.get("model", "m"),
                       "choices": [{"index": 0, "finish_reason": "stop",
                                    "message": {"role": "assistant", "content": text}}],
                       "usage": {"prompt_tokens": 11, "completion_tokens": 5, "total_tokens": 16}}
                self._send(200, json.dumps(out).encode())

            def _send(self, code, payload):
                self._done()
                try:
                    self.send_response(code)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):
                    pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()
