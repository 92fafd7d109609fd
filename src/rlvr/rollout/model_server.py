"""Serve a trained model folder at an OpenAI-compatible endpoint, e.g. a judge trained with ``rlvr train`` for the
``judge`` verifier of another run.

    python -m rlvr.rollout.model_server runs/judge/checkpoint-200 --port 8000 [--api-key-env JUDGE_KEY] [--name judge]
    # then: data.verifier=judge data.verifier_options.base_url=http://127.0.0.1:8000/v1
    #       data.verifier_options.model=judge

Served: ``POST /v1/chat/completions`` and ``POST /v1/completions`` by the agent endpoint of training
(rollout/agent_endpoint.py: the prompt rendered with the folder's chat template, sampled by the hf engine, calls
waiting at the same time generated as one batch) and ``GET /v1/models``. Each request is its own episode: it may
sample up to ``--max-tokens`` tokens (and never past the model's context). Greedy by default (``--temperature 0``); a
request asking for another temperature is served at the server's. With an API key (read from the environment
variable named by ``--api-key-env``, never from the command line, where other users could read it) a request without
``Authorization: Bearer KEY`` is refused with 401; without one every request is served. A request naming another
model than ``--name`` gets 404, as from other OpenAI-compatible servers.

The process prints ``serving MODEL_DIR as NAME at http://HOST:PORT/v1`` once it accepts requests (``--port 0``
picks a free port: read it there), and stops cleanly on SIGINT or SIGTERM, printing how many requests it served.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from typing import Any

from rlvr.errors import UserError
from http.server import ThreadingHTTPServer

from rlvr.rollout.agent_endpoint import AgentEndpoint, EndpointSettings, RequestError, _Handler, _Server

DEFAULT_NAME = "rlvr-model"


class _Keys(dict):
    """The endpoint's episodes; with ``open_key`` True any key is known (a server without an API key)."""

    def __init__(self, open_key: bool):
        super().__init__()
        self.open_key = open_key

    def __contains__(self, key: object) -> bool:
        return self.open_key or dict.__contains__(self, key)


class _ModelHandler(_Handler):
    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        endpoint = self.server.endpoint
        if self.path.rstrip("/") != "/v1/models":
            return self._error(404, f"no such path {self.path}: served are /v1/chat/completions, /v1/completions, "
                                    "/v1/models")
        if self._key() not in endpoint.calls:
            return self._error(401, "invalid API key")
        self._send(200, {"object": "list", "data": [{"id": endpoint.name, "object": "model", "created": 0,
                                                      "owned_by": "rlvr"}]})


class _ModelHTTPServer(_Server):
    def __init__(self, address: tuple[str, int], endpoint: AgentEndpoint):
        self.endpoint = endpoint
        ThreadingHTTPServer.__init__(self, address, _ModelHandler)


class ModelServer(AgentEndpoint):
    """The agent endpoint with one request per episode, a fixed API key (or none), a model name and a port."""

    def __init__(self, engine, tokenizer, settings: EndpointSettings, *, api_key: str | None = None,
                 name: str = DEFAULT_NAME, host: str = "127.0.0.1", port: int = 0):
        super().__init__(engine, tokenizer, settings, host=host)
        self.api_key, self.name = api_key or None, name
        self.calls = _Keys(open_key=self.api_key is None)
        if self.api_key:
            self.calls[self.api_key] = []  # GET /v1/models checks the caller's key against the episodes
        self.requests = 0
        # the endpoint of training listens on a free port with the policy's name; a server listens where it is
        # told and answers /v1/models with its own name
        self.server.shutdown()
        self.server.server_close()
        self.server = _ModelHTTPServer((host, port), self)
        self._thread = threading.Thread(target=self.server.serve_forever, name="rlvr-serve-model", daemon=True)
        self._thread.start()

    def admit(self, key: str | None, path: str, body: Any):
        if self.api_key is not None and key != self.api_key:
            with self._lock:
                self.counts["refused"] += 1
            raise RequestError("invalid API key: send the key of --api-key-env as 'Authorization: Bearer KEY'", 401)
        model = body.get("model") if isinstance(body, dict) else None
        if model is not None and model != self.name:
            raise RequestError(f"the model {model!r} does not exist: this server serves {self.name!r}", 404)
        with self._lock:
            self.requests += 1
        episode = self.open_episode()
        try:
            call = super().admit(episode, path, body)
        except BaseException:
            self._forget(episode)
            raise
        if isinstance(call, dict):
            self._forget(episode)
        return call

    def wait(self, call) -> dict[str, Any]:
        try:
            return super().wait(call)
        finally:
            if call.done.is_set():  # else the engine may still reach it and record it under its episode
                self._forget(call.episode)

    def reply(self, call) -> dict[str, Any]:
        return {**super().reply(call), "model": self.name}

    def _forget(self, episode: str) -> None:
        with self._lock:
            dict.pop(self.calls, episode, None)
            self.spent.pop(episode, None)


def build_server(model_dir: str, *, port: int = 0, host: str = "127.0.0.1", name: str = DEFAULT_NAME,
                 api_key: str | None = None, temperature: float = 0.0, max_tokens: int = 256,
                 max_prompt_tokens: int | None = None, device: str = "auto") -> ModelServer:
    """A ModelServer for the Hugging Face folder ``model_dir`` on the hf engine."""
    from rlvr.models.loading import load_model
    from rlvr.rollout import build_engine

    model, tokenizer = load_model(model_dir, device=device)
    model.eval()  # the endpoint generates under torch.no_grad
    engine = build_engine("hf", model, tokenizer)
    settings = EndpointSettings(temperature=temperature, episode_tokens=max_tokens,
                                max_prompt_tokens=max_prompt_tokens)
    return ModelServer(engine, tokenizer, settings, api_key=api_key, name=name, host=host, port=port)


def serve(server: ModelServer, stop: threading.Event) -> None:
    """Generate for waiting requests until ``stop`` is set; a generation that fails answers its requests with 503
    and the server goes on."""
    while not stop.is_set():
        try:
            server.pump(wait_s=0.1)
        except Exception as exc:  # noqa: BLE001 - its requests got the error; the next ones may be fine
            print(f"model_server: generation failed: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m rlvr.rollout.model_server", description=__doc__.split("\n\n")[0])
    p.add_argument("model_dir", help="a Hugging Face model folder, e.g. a run's checkpoint-N")
    p.add_argument("--port", type=int, default=8000, help="port to listen on (0: a free one, printed)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default: loopback only)")
    p.add_argument("--name", default=DEFAULT_NAME, help="the model name requests must give")
    p.add_argument("--api-key-env", help="environment variable holding the API key requests must send")
    p.add_argument("--temperature", type=float, default=0.0, help="sampling temperature (0: greedy)")
    p.add_argument("--max-tokens", type=int, default=256, help="most tokens sampled per request")
    p.add_argument("--max-prompt-tokens", type=int, help="longest prompt in tokens (default: the model's context)")
    p.add_argument("--device", default="auto", help="cpu, cuda, mps or auto")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    api_key = None
    if args.api_key_env:
        api_key = os.environ.get(args.api_key_env)
        if not api_key:
            print(f"model_server: --api-key-env {args.api_key_env}: that environment variable is not set or empty",
                  file=sys.stderr)
            return 2
    if args.max_tokens < 1 or args.temperature < 0:
        print("model_server: --max-tokens must be >= 1 and --temperature >= 0", file=sys.stderr)
        return 2
    try:
        server = build_server(args.model_dir, port=args.port, host=args.host, name=args.name, api_key=api_key,
                              temperature=args.temperature, max_tokens=args.max_tokens,
                              max_prompt_tokens=args.max_prompt_tokens, device=args.device)
    except (UserError, FileNotFoundError, OSError) as exc:
        print(f"model_server: {exc}", file=sys.stderr)
        return 2
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    print(f"serving {args.model_dir} as {args.name} at {server.base_url}", flush=True)
    try:
        serve(server, stop)
    finally:
        server.close()
    print(f"served {server.requests} requests ({server.counts['refused']} refused)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
