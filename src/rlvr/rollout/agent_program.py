"""Episodes run by the user's own agent program (``rollout.agent_command``) against rlvr's OpenAI-compatible endpoint.

    run = run_agent_program(engine, tokenizer, tasks, SamplingParams(n=4, max_new_tokens=128), policy)

For each of the ``params.n`` episodes of each task, the program named by ``policy.agent_command`` (split like a shell
line, run without a shell) starts with ``OPENAI_BASE_URL`` (rlvr.rollout.agent_endpoint, on loopback) and
``OPENAI_API_KEY`` (a random key of that episode) in its environment and the task on stdin as one JSON object::

    {"id": "...", "prompt": "..." or [messages], "meta": {...}, "sample": 0}

never the reference (nor meta keys that may hold the answer: HIDDEN_META_KEYS). The program may call the endpoint
any number of times and run tools of its own; it prints its final answer on stdout: plain text, or a JSON object
``{"answer": "..."}``. A reward of its own goes to the file named by ``RLVR_REWARD_FILE`` (a number, or
``{"reward": 0.5}``), never stdout: stdout often carries the model's text, which must not be able to pay itself
(a ``reward`` key on stdout is ignored). A program that exits non-zero, outlives its deadline or prints nothing has
the empty answer, counted in ``agent/failed_frac`` / ``agent/timeout_frac``; stdout beyond the output cap is dropped
(``agent/output_capped_frac``). Each program runs under a small supervisor that is the subreaper of everything the
program starts (Linux ``PR_SET_CHILD_SUBREAPER``): when the program exits or its deadline passes, every process of
its tree is killed, those that left its session (``setsid``, a double fork) included. Nothing the model makes a
program do stops the run; only a command failing in EVERY episode of a collection before a single call to the model
(a broken command, not a verdict) is a UserError that shows its stderr.

The trained row of an episode (one row per episode, rows i*n .. i*n+n-1 answer tasks[i]) is built from the calls
as the engine saw them, never from re-rendered text: when each call's prompt ids begin with the previous call's
prompt ids followed by its sampled ids, the calls form ONE row: the first call's prompt, then every call's sampled
ids (loss 1, the engine's log-probs) and, between them, the tokens the program added (tool results, turn markers;
loss 0). Where that prefix relation breaks (a thinking template that drops earlier reasoning, a program that
rewrote its history), the row is the longest run of calls at the end of the episode for which it holds: the
earlier calls are context in the prompt as it was sent and are not trained (``agent/untrained_calls_mean``).
An episode without any call has an empty response.

Rewards: the task's verifier scores the answer as for any task. A reward the program reports is added (reward part
``agent_reward``) only where the verifier had nothing to check: the task has no reference and the verdict is the
verifier's "bad_reference" error (rlvr.rollout.episodes.score_episodes). Wherever a verifier judged the answer (a
reference, tests in meta, a reward model), it is logged (``agent/reward_mean``) and ignored, so a program cannot
grade itself past the verifier.
"""

from __future__ import annotations

import json
import logging
import math
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from rlvr.errors import UserError
from rlvr.models import encode_prompt
from rlvr.rollout.agent import AGENT_REWARD, EpisodeRun, episode_batch
from rlvr.rollout.agent_endpoint import AgentEndpoint, Call, EndpointSettings
from rlvr.rollout.base import RolloutBatch, RolloutEngine, SamplingParams
from rlvr.tasks import Task

log = logging.getLogger(__name__)

HIDDEN_META_KEYS = frozenset({"answer", "answers", "reference", "solution", "solutions", "expected", "expected_output",
                              "gold", "label", "labels", "target", "tests", "expert", "hint", "hints", "completion"})


@dataclass(frozen=True)
class ProgramLimits:
    deadline_s: float = 120.0  # wall clock per program run
    output_bytes: int = 64 * 2**10  # stdout kept per program
    concurrent: int = 16  # programs running at once
    kill_grace_s: float = 5.0  # after the deadline, how long the supervisor may take to kill the program's tree


REWARD_FILE_ENV = "RLVR_REWARD_FILE"
_REWARD_BYTES = 4096

# The supervisor of one program (run as ``python -I -S -c SUPERVISOR ARGV...``, stdlib only so it starts in
# milliseconds): the subreaper of the program's tree, it kills every process of it when the program exits or on
# SIGTERM (the deadline), reaps them, and exits with the program's status. Processes that call setsid or double-fork
# are reparented to it, not to init, so none escapes.
SUPERVISOR = r"""
import ctypes, os, signal, sys, time
class Stop(Exception):
    pass
def stop(*_):
    raise Stop
signal.signal(signal.SIGTERM, stop)
try:
    ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
except (OSError, AttributeError):
    pass
argv = sys.argv[1:]
child = os.fork()
if child == 0:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        os.execvp(argv[0], argv)
    except OSError as exc:
        os.write(2, ("cannot run %r: %s\n" % (argv[0], exc)).encode())
    os._exit(127)
code = 143
try:
    while True:
        pid, status = os.waitpid(-1, 0)
        if pid == child:
            code = os.waitstatus_to_exitcode(status)
            code = 128 - code if code < 0 else code
            break
except (Stop, ChildProcessError):
    pass
signal.signal(signal.SIGTERM, signal.SIG_IGN)
def tree():
    parents = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open("/proc/%s/stat" % name) as f:
                    parents.setdefault(int(f.read().rsplit(")", 1)[1].split()[1]), []).append(int(name))
            except (OSError, ValueError, IndexError):
                pass
    out, todo = [], [os.getpid()]
    while todo:
        for pid in parents.get(todo.pop(), []):
            out.append(pid)
            todo.append(pid)
    return out
until = time.monotonic() + 10
while time.monotonic() < until:
    pids = tree() if os.path.isdir("/proc/self") else []
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    try:
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass
    except ChildProcessError:
        if not pids:
            break
    if not pids:
        break
    time.sleep(0.005)
os._exit(code)
"""


@dataclass
class _Program:
    index: int
    task: Task
    key: str
    process: subprocess.Popen | None = None
    started: float = 0.0
    stdout: bytearray = field(default_factory=bytearray)
    stderr: bytearray = field(default_factory=bytearray)
    capped: bool = False
    readers: list[threading.Thread] = field(default_factory=list)
    status: str = "pending"  # pending, running, ok, failed, timeout
    answer: str = ""
    reward: float | None = None
    reward_file: str = ""
    stdout_reward: bool = False  # stdout held a "reward" key (ignored: REWARD_FILE_ENV is the reward's channel)


def task_payload(task: Task, sample: int) -> dict[str, Any]:
    """What the program reads on stdin: the task without its reference or answer-bearing meta keys."""
    meta = {k: v for k, v in (task.meta or {}).items() if k not in HIDDEN_META_KEYS}
    return {"id": task.id, "prompt": task.prompt, "meta": meta, "sample": sample}


def _finite(value: Any) -> float | None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    return float(value) if ok else None


def parse_output(text: str) -> tuple[str, float | None]:
    """(answer, the "reward" stdout held or None) from a program's stdout: a JSON object with "answer", else the
    whole text stripped. The reward is returned only to be reported as ignored: stdout is the model's channel too."""
    text = text.strip()
    if text.startswith("{"):
        try:
            obj = json.loads(text)
        except ValueError:
            obj = None
        if isinstance(obj, dict) and "answer" in obj:
            return str(obj["answer"]), _finite(obj.get("reward"))
    return text, None


def read_reward(path: str) -> float | None:
    """The reward a program wrote to its REWARD_FILE_ENV file: a finite number, or {"reward": number}."""
    try:
        with open(path, "rb") as f:
            data = f.read(_REWARD_BYTES + 1)
    except OSError:
        return None
    if len(data) > _REWARD_BYTES:
        return None
    try:
        value = json.loads(data.decode("utf-8"))
    except (ValueError, UnicodeDecodeError):
        return None
    return _finite(value.get("reward") if isinstance(value, dict) else value)


def _drain(stream, into: bytearray, cap: int, program: _Program | None = None) -> None:
    """Read a pipe to its end, keeping the first ``cap`` bytes (the rest is read and dropped, so the program never
    blocks on a full pipe); ``program.capped`` says whether anything was dropped."""
    try:
        while chunk := stream.read1(65536) if hasattr(stream, "read1") else stream.read(65536):
            room = cap - len(into)
            if room > 0:
                into += chunk[:room]
            if len(chunk) > room and program is not None:
                program.capped = True
    except (OSError, ValueError):
        pass


def _feed(stream, data: bytes) -> None:
    try:
        stream.write(data)
        stream.close()
    except (OSError, ValueError):  # the program exited or closed stdin without reading it: its business
        pass


def _kill(process: subprocess.Popen, grace_s: float = 5.0) -> None:
    """End the supervisor, which kills the program's whole tree first (SUPERVISOR); its process group is killed
    too, in case the supervisor itself cannot finish within ``grace_s``."""
    if process.poll() is None:
        try:
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=grace_s)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            pass
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        process.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass


def program_env(base_url: str, key: str, reward_file: str = "") -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_") and k != REWARD_FILE_ENV}
    no_proxy = ",".join(x for x in (env.get("NO_PROXY") or env.get("no_proxy"), "127.0.0.1", "localhost") if x)
    env.update(OPENAI_BASE_URL=base_url, OPENAI_API_KEY=key, NO_PROXY=no_proxy, no_proxy=no_proxy)
    if reward_file:
        env[REWARD_FILE_ENV] = reward_file
    return env


def _supervised(argv: list[str]) -> list[str]:
    """``argv`` under SUPERVISOR where /proc can list the program's tree (Linux); elsewhere as it is (its process
    group is killed)."""
    if not sys.platform.startswith("linux") or not os.path.isdir("/proc/self") or not sys.executable:
        return argv
    return [sys.executable, "-I", "-S", "-c", SUPERVISOR, *argv]


def _start(program: _Program, argv: list[str], base_url: str, limits: ProgramLimits, sample: int) -> None:
    if shutil.which(argv[0]) is None:  # the supervisor would start; say here that the program cannot
        raise UserError(f"rollout.agent_command={shlex.join(argv)!r} could not start: no program {argv[0]!r} "
                        "(not a path to an executable file, nor found on PATH)")
    try:
        program.process = subprocess.Popen(_supervised(argv), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                           stderr=subprocess.PIPE, start_new_session=True,
                                           env=program_env(base_url, program.key, program.reward_file))
    except OSError as exc:
        raise UserError(f"rollout.agent_command={shlex.join(argv)!r} could not start: {exc}") from None
    program.started, program.status = time.monotonic(), "running"
    p = program.process
    payload = (json.dumps(task_payload(program.task, sample), default=str) + "\n").encode()
    program.readers = [threading.Thread(target=_drain, args=(p.stdout, program.stdout, limits.output_bytes, program),
                                        daemon=True),
                       threading.Thread(target=_drain, args=(p.stderr, program.stderr, 65536), daemon=True),
                       threading.Thread(target=_feed, args=(p.stdin, payload), daemon=True)]
    for t in program.readers:
        t.start()


_LOGGED: set[str] = set()


def _finish(program: _Program, timed_out: bool, grace_s: float = 5.0) -> None:
    p = program.process
    _kill(p, grace_s)  # at its deadline; or, once it exited, whatever it left running (and holding its pipes)
    for t in program.readers:
        t.join(timeout=5)
    code = p.returncode
    if timed_out:
        program.status = "timeout"
    elif code != 0:
        program.status = "failed"
    else:
        program.status = "ok"
        program.answer, on_stdout = parse_output(program.stdout.decode("utf-8", errors="replace"))
        program.stdout_reward = on_stdout is not None
        program.reward = read_reward(program.reward_file) if program.reward_file else None
    if program.status != "ok" and program.status not in _LOGGED:
        _LOGGED.add(program.status)
        tail = program.stderr.decode("utf-8", errors="replace").strip()[-800:]
        log.warning("task %s: the agent program %s (exit status %s); its answer is empty. stderr ends: %s",
                    program.task.id, "ran past its deadline" if timed_out else "failed", code, tail or "(nothing)")


def run_programs(endpoint: AgentEndpoint, programs: list[_Program], argv: list[str], limits: ProgramLimits,
                 samples: int) -> None:
    """Run every program (``limits.concurrent`` at once), serving their calls on this thread until all have ended."""
    waiting = list(programs)
    running: list[_Program] = []
    try:
        while waiting or running:
            while waiting and len(running) < limits.concurrent:
                program = waiting.pop(0)
                _start(program, argv, endpoint.base_url, limits, program.index % samples)
                running.append(program)
            endpoint.pump(wait_s=0.02, expected=len(running))
            now = time.monotonic()
            for program in list(running):
                if program.process.poll() is not None or now - program.started > limits.deadline_s:
                    _finish(program, timed_out=program.process.poll() is None, grace_s=limits.kill_grace_s)
                    running.remove(program)
    finally:
        for program in running:
            _kill(program.process, limits.kill_grace_s)


Row = tuple[list[int], list[int], list[int], list[float], list[float], int]


def stitch(prompt_ids: list[int], calls: list[Call]) -> Row:
    """(prompt ids, response ids, loss mask, log-probs, entropy, untrained calls) of one episode (module docstring).
    ``prompt_ids``: the task's own prompt, for an episode without calls."""
    if not calls:
        return prompt_ids, [], [], [], [], 0
    first = len(calls) - 1
    while first > 0:
        before = calls[first - 1]
        sent = before.prompt_ids + before.sampled_ids
        if calls[first].prompt_ids[:len(sent)] != sent:
            break
        first -= 1
    chain = calls[first:]
    ids, loss, logprobs, entropy = [], [], [], []
    context = list(chain[0].prompt_ids)
    for call in chain:
        inserted = call.prompt_ids[len(context):]  # empty for the first call of the chain
        ids += inserted + call.sampled_ids
        loss += [0] * len(inserted) + [1] * len(call.sampled_ids)
        logprobs += [0.0] * len(inserted) + call.logprobs
        entropy += [0.0] * len(inserted) + (call.entropy or [0.0] * len(call.sampled_ids))
        context = call.prompt_ids + call.sampled_ids
    return list(chain[0].prompt_ids), ids, loss, logprobs, entropy, first


def to_batch(rows: list[Row], truncated: list[bool], pad_id: int, n: int, has_entropy: bool, device) -> RolloutBatch:
    return episode_batch([row[:5] for row in rows], truncated, pad_id, n, device, has_entropy)


def _transcript(calls: list[Call]) -> list[dict[str, Any]]:
    """The last call's messages (or its prompt as text) and the model's reply; empty without a call."""
    if not calls:
        return []
    last = calls[-1]
    sent = [dict(m) for m in last.messages] if last.messages is not None else [
        {"role": "user", "content": last.prompt_text}]
    return sent + [{"role": "assistant", "content": last.text}]


def run_agent_program(engine: RolloutEngine, tokenizer, tasks: list[Task], params: SamplingParams, policy,
                      limits: ProgramLimits = ProgramLimits()) -> EpisodeRun:
    """``params.n`` runs of ``policy.agent_command`` per task (module docstring)."""
    argv = shlex.split(policy.agent_command or "")
    if not argv:
        raise UserError("rollout.agent_command is empty: name the program to run for each episode")
    settings = EndpointSettings(temperature=params.temperature, top_p=params.top_p, top_k=params.top_k,
                                episode_tokens=params.max_new_tokens, max_prompt_tokens=policy.max_tokens,
                                template_kwargs=dict(policy.chat_template_kwargs))
    endpoint = AgentEndpoint(engine, tokenizer, settings)
    rewards_dir = tempfile.mkdtemp(prefix="rlvr-agent-rewards-")  # mode 0700: this user's programs only
    try:
        programs = [_Program(i, task, endpoint.open_episode(), reward_file=os.path.join(rewards_dir, f"{i}.json"))
                    for i, task in enumerate(t for t in tasks for _ in range(params.n))]
        run_programs(endpoint, programs, argv, limits, params.n)
    finally:
        endpoint.close()
        shutil.rmtree(rewards_dir, ignore_errors=True)
    if any(p.stdout_reward for p in programs) and "stdout_reward" not in _LOGGED:
        _LOGGED.add("stdout_reward")
        log.warning("the agent program printed a \"reward\" on stdout; it is ignored (stdout carries the model's "
                    "text): write the reward to the file named by $%s", REWARD_FILE_ENV)
    if all(p.status == "failed" and not endpoint.calls[p.key] for p in programs):
        tail = programs[0].stderr.decode("utf-8", errors="replace").strip()[-1500:]
        raise UserError(f"rollout.agent_command={policy.agent_command!r} failed in every episode before calling the "
                        f"model (exit status {programs[0].process.returncode}); its stderr ends:\n"
                        f"{tail or '(nothing)'}")
    rows, truncated, parts, stats, transcripts = [], [], [], [], []
    has_entropy, device = True, None
    for program in programs:
        calls = endpoint.calls[program.key]
        own_prompt = calls[0].prompt_ids if calls else encode_prompt(tokenizer, program.task.prompt,
                                                                       policy.chat_template_kwargs)
        rows.append(stitch(own_prompt, calls))
        truncated.append(bool(calls) and calls[-1].finish_reason == "length")
        has_entropy = has_entropy and all(c.entropy is not None for c in calls)
        no_reference = program.task.reference is None  # score_episodes keeps it only where nothing was judged
        parts.append({AGENT_REWARD: program.reward} if program.reward is not None and no_reference else {})
        stats.append({"turns": len(calls), "tool_calls": 0, "tool_errors": 0, "malformed_calls": 0,
                      "truncated": int(truncated[-1]), "env_errors": int(program.status != "ok")})
        transcripts.append(_transcript(calls))
    device = getattr(getattr(engine, "model", None), "device", None)
    batch = to_batch(rows, truncated, tokenizer.pad_token_id, params.n, has_entropy, device)
    n = max(len(programs), 1)
    rewards = [p.reward for p in programs if p.reward is not None]
    metrics = {"agent/failed_frac": sum(p.status == "failed" for p in programs) / n,
               "agent/timeout_frac": sum(p.status == "timeout" for p in programs) / n,
               "agent/output_capped_frac": sum(p.capped for p in programs) / n,
               "agent/calls_mean": sum(len(endpoint.calls[p.key]) for p in programs) / n,
               "agent/untrained_calls_mean": sum(r[5] for r in rows) / n,
               "agent/refused_requests": float(endpoint.counts["refused"]),
               "agent/budget_spent_calls": float(endpoint.counts["budget_spent"]),
               "agent/temperature_overridden": float(endpoint.counts["temperature_overridden"])}
    if rewards:
        metrics["agent/reward_mean"] = sum(rewards) / len(rewards)
    return EpisodeRun(batch, [p.answer for p in programs], parts, stats, metrics, transcripts)
