"""The "judge" verifier: an LLM behind an OpenAI-compatible chat endpoint decides whether a response is right.

    verify("judge", "The capital is Paris.", "Paris", base_url="http://127.0.0.1:8000/v1", model="judge",
           prompt="What is the capital of France?")

reference: the gold answer (a string; None grades without one). The task's text comes from ``meta["question"]``,
else the request's ``prompt`` (a string or chat messages).

Options (all optional except where the environment does not give them):
- base_url, model: the endpoint and model; default: the environment variables RLVR_JUDGE_BASE_URL, RLVR_JUDGE_MODEL.
- api_key_env: the environment variable holding the key (default OPENAI_API_KEY; a local server needs none).
- template: "reference", "no_reference" or a format string with {question}, {reference}, {response}; system: the
  system message (default: the hardened one in prompts.py).
- graded (False): ask for "SCORE: N" out of ``scale`` (10) instead of a verdict; the score is N / scale.
- prechecks (True): stop empty answers, bare openers and verdicts, empty answer boxes, refusals, grader-directed
  talk and grading templates before calling the judge, on a normalised skeleton of the response (precheck.py); the
  verdict is "incorrect" with reason "precheck_<why>".
- max_response_chars (16000): the longest response a judge is shown. A longer one is never cut and sent as if it
  were whole (the part beyond the cut could hold another answer): the verdict is "undecidable" with reason
  "response_too_long", and no judge call is made. Prechecks or not, the judge sees the response without invisible
  format characters (zero-width spaces and joiners, bidi marks).
- timeout_s (30): the whole budget of the call, retries and waiting for a slot included.
- max_concurrency (8), max_retries (3), backoff_s (0.5), max_tokens (512), temperature (0.0), cache (True),
  max_reply_bytes (4 MiB: a bigger reply body is an error, read no further).

Verdicts: "correct" / "incorrect" (reason "judge_correct" / "judge_incorrect"), "partial" for a graded score
between 0 and 1 ("judge_score"), "undecidable" when the reply cannot be parsed ("unparsable_judgement"),
"timeout" when the deadline passed ("judge_timeout", "judge_busy"), "error" when the endpoint refused
("judge_error", "bad_judge_config", "judge_unavailable" without the openai package). details hold the reply's
tail, latency_ms, tokens, attempts and whether it came from the cache.

Registered with isolation="threads": it spends its time waiting on the network and bounds that time itself.
"""

from __future__ import annotations

import os
from typing import Any

from rlvr.verifiers.base import Status, Verdict
from rlvr.verifiers.judge.client import JudgeClient, JudgeReply, JudgeUnavailable
from rlvr.verifiers.judge.parse import Judgement, parse_judgement
from rlvr.verifiers.judge.precheck import precheck, visible
from rlvr.verifiers.judge.prompts import build_messages, question_of
from rlvr.verifiers.registry import register_verifier

BASE_URL_ENV, MODEL_ENV = "RLVR_JUDGE_BASE_URL", "RLVR_JUDGE_MODEL"
MAX_RESPONSE_CHARS = 16_000
_CLIENT_SETTINGS = ("max_concurrency", "max_retries", "backoff_s", "max_tokens", "temperature", "max_reply_bytes")


def judge_client(base_url: str | None = None, model: str | None = None, *, api_key_env: str = "OPENAI_API_KEY",
                 **settings: Any) -> JudgeClient:
    """The shared client for these options, with base_url/model from the environment when not given."""
    return JudgeClient.shared(base_url or os.environ.get(BASE_URL_ENV, ""), model or os.environ.get(MODEL_ENV, ""),
                              api_key_env=api_key_env, **settings)


@register_verifier("judge", isolation="threads")
def judge(response: str, reference: Any = None, *, prompt: Any = None, meta: dict[str, Any] | None = None,
          base_url: str | None = None, model: str | None = None, api_key_env: str = "OPENAI_API_KEY",
          template: str | None = None, system: str | None = None, graded: bool = False, scale: int = 10,
          prechecks: bool = True, timeout_s: float = 30.0, cache: bool = True,
          max_response_chars: int = MAX_RESPONSE_CHARS, **settings: Any) -> Verdict:
    unknown = sorted(set(settings) - set(_CLIENT_SETTINGS))
    if unknown:
        return Verdict(0.0, Status.ERROR, "bad_judge_config", details={"error": f"unknown options: {unknown}"})
    if not isinstance(response, str):
        reason = "precheck_not_text" if prechecks else "bad_response"
        return Verdict(0.0, Status.INCORRECT if prechecks else Status.ERROR, reason,
                       details={"error": "response is not a string"})
    shown = visible(response)
    if len(shown) > int(max_response_chars):
        return Verdict(0.0, Status.UNDECIDABLE, "response_too_long",
                       details={"chars": len(shown), "max_response_chars": int(max_response_chars)})
    question = question_of(prompt, meta)
    if prechecks:
        why = precheck(response, prompt=question if question != "(not given)" else None,
                       reference=reference if isinstance(reference, str) else None, max_chars=int(max_response_chars))
        if why is not None:
            return Verdict(0.0, Status.INCORRECT, f"precheck_{why}", details={"precheck": why})
    try:
        client = judge_client(base_url, model, api_key_env=api_key_env, **settings)
        messages = build_messages(shown, reference, question, template=template, system=system,
                                  graded=graded, scale=scale, max_response_chars=int(max_response_chars))
    except ImportError as exc:
        return Verdict(0.0, Status.ERROR, "judge_unavailable", details={"error": str(exc)})
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        return Verdict(0.0, Status.ERROR, "bad_judge_config", details={"error": f"{type(exc).__name__}: {exc}"})
    try:
        reply = client.complete(messages, timeout_s=float(timeout_s), cache=cache)
    except JudgeUnavailable as exc:
        status = Status.TIMEOUT if exc.kind in ("timeout", "busy") else Status.ERROR
        return Verdict(0.0, status, f"judge_{exc.kind}", details={"error": str(exc), "attempts": exc.attempts})
    return judgement_verdict(parse_judgement(reply.text, graded=graded, scale=scale), reply)


def judgement_verdict(j: Judgement, reply: JudgeReply) -> Verdict:
    details = {"reply_tail": reply.text[-500:], "latency_ms": round(reply.latency_s * 1000.0, 3),
               "prompt_tokens": reply.prompt_tokens, "completion_tokens": reply.completion_tokens,
               "attempts": reply.attempts, "cached": reply.cached}
    if j.score is None:
        return Verdict(0.0, Status.UNDECIDABLE, "unparsable_judgement", j.evidence or None, details)
    status = {"correct": Status.CORRECT, "incorrect": Status.INCORRECT}.get(j.label, Status.PARTIAL)
    reason = {"correct": "judge_correct", "incorrect": "judge_incorrect"}.get(j.label, "judge_score")
    return Verdict(j.score, status, reason, j.evidence, details)


__all__ = ["JudgeClient", "JudgeReply", "JudgeUnavailable", "Judgement", "build_messages", "judge", "judge_client",
           "parse_judgement", "precheck"]
