"""The one place rewards are called: every verifier and user reward function runs through a RewardRunner.

    from rlvr.verifiers.runner import RewardRunner, ScoreRequest, CallableRequest

    with RewardRunner(workers=2, timeout_s=5.0, memory_mb=2048) as runner:
        verdicts = runner.score([
            ScoreRequest("numeric", "so 42", "42"),              # "inline" verifier: called right here
            CallableRequest(my_module.my_reward, response, ref),  # user reward: runs in a supervised worker
        ])
        runner.stats()   # calls, cache_hits, timeouts, errors, worker_restarts, latency_p50_ms, latency_p99_ms, ...

How a request is called
- A registered verifier declared ``isolation="inline"`` (registry.py) is called directly in the caller's thread:
  no IPC, nothing to supervise (such verifiers bound their own time and memory on any input).
- A registered verifier declared ``isolation="threads"`` (one that waits on sandboxed processes of its own, like
  "code") is called in the caller's process on the runner's thread pool, so a batch runs across all cores.
- A registered verifier declared ``isolation="process"`` and EVERY user callable (CallableRequest) runs in a pool
  of worker processes. Each call has a hard wall-clock budget (``options["timeout_s"]``, else the runner's
  ``timeout_s``); past it the worker and its whole process group get SIGKILL, a fresh worker takes its place and the
  sample gets Verdict(0.0, "timeout", "timeout"). A worker that dies (segfault, os._exit, killed) is replaced and the
  sample gets status "error", reason "worker_died". A MemoryError under the worker's memory cap gives status "error",
  reason "memory_limit" (and the worker is recycled, since its heap may be fragmented).
- Nothing a reward function raises or does reaches the caller as an exception. Caller errors do raise, before
  anything is scored: an unknown verifier name (UnknownVerifierError), an item that is not a request (TypeError),
  a closed runner (RuntimeError).

User reward functions: ``fn(response, reference, **options) -> float | Verdict``
- They are sent to the workers pickled BY REFERENCE (module + name), so they must be defined at the top level of
  an importable module (a script's own ``__main__`` works too, as long as its top-level code is guarded by
  ``if __name__ == "__main__":``, since workers re-import it like any multiprocessing "spawn" child).
  A lambda, a nested function or anything else that cannot be pickled gets status "error", reason
  "unpicklable_reward" (also when a worker cannot import it). Registered "process" verifiers are shipped the same way.
- ``timeout_s`` is passed on to the function only if its signature names it or takes ``**kwargs``.
- A float return becomes a Verdict (see to_verdict); a raised exception becomes status "error", reason
  "verifier_raised", with the exception's repr and traceback in details.

Cache: an LRU of verdicts keyed by (verifier, response, canonical JSON of reference, canonical JSON of options).
Only verdicts of pooled calls are cached (inline verifiers cost less than a lookup); only deterministic statuses
(correct, incorrect, partial, undecidable), never timeout or error; only when reference and options are plain JSON
values (str/int/float/bool/None, lists, dicts with str keys). Registered verifiers are keyed by name and function.
User callables are cached only when they are plain module-level functions (keyed by module and qualified name,
and assumed pure); pass ``CallableRequest(..., cache=False)`` for a reward that is not (e.g. a sampling judge).
Identical requests in flight at the same time are run once.
"""

from __future__ import annotations

import asyncio
import atexit
import collections
import contextlib
import concurrent.futures
import copy
import dataclasses
import functools
import inspect
import json
import math
import multiprocessing
import multiprocessing.connection
import numbers
import os
import pickle
import signal
import sys
import threading
import time
import traceback
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from rlvr.verifiers.base import Status, Verdict
from rlvr.verifiers.registry import VerifierFn, get_verifier, verifier_isolation

_MAX_ERROR_CHARS = 2000
_LATENCY_WINDOW = 4096  # recent calls the latency percentiles are computed over
_STARTUP_TIMEOUT_S = 120.0  # a worker that is not ready by then is killed (its start imports the user's main module)
_MAX_START_FAILURES = 3  # consecutive failed worker starts before queued requests are failed instead of retried
_DETERMINISTIC = frozenset({Status.CORRECT, Status.INCORRECT, Status.PARTIAL, Status.UNDECIDABLE})

# True inside a worker process: there everything runs inline (the worker itself is the sandbox; no nested pools).
_IN_WORKER = False

# Every open runner's internals, closed by an atexit hook so that no worker outlives the interpreter. It is
# registered after multiprocessing's own exit hook (imported above), so it runs first: the dispatcher stops before
# multiprocessing terminates the (daemonic) workers, and does not replace them as they die.
_LIVE_CORES: weakref.WeakSet[_Core] = weakref.WeakSet()


def _close_all_runners() -> None:
    for core in list(_LIVE_CORES):
        try:
            core.close()
        except Exception:
            pass


atexit.register(_close_all_runners)


# ------------------------------------------------------------------------------------------------ requests


@dataclass(frozen=True)
class ScoreRequest:
    """Score ``response`` against ``reference`` with the verifier named ``verifier`` and these options."""

    verifier: str
    response: str
    reference: Any
    options: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class CallableRequest:
    """Score ``response`` with a user reward function ``fn(response, reference, **options) -> float | Verdict``.

    ``fn`` must be importable by reference (a module-level function); it always runs in a supervised worker.
    ``cache=False`` keeps its verdicts out of the cache (for rewards that are not pure functions of their inputs)."""

    fn: Callable[..., Any]
    response: str
    reference: Any
    options: dict[str, Any] = field(default_factory=dict)
    cache: bool = True


# ------------------------------------------------------------------------------------ module-level functions


def score_batch(items: Sequence[ScoreRequest | CallableRequest]) -> list[Verdict]:
    """One Verdict per request, in order, through the default runner (``default_runner()``). Never raises because
    of a response or a verifier's failure; an unknown verifier name (a caller error) raises UnknownVerifierError
    before anything is scored."""
    items = list(items)
    if not items:
        return []
    return default_runner().score(items)


def call_verifier(fn: VerifierFn, response: str, reference: Any, options: dict[str, Any] | None = None) -> Verdict:
    """Call one verifier in this process, unsupervised; any exception becomes Verdict(0.0, "error",
    "verifier_raised") (a MemoryError: reason "memory_limit")."""
    return _guarded_call(fn, response, reference, options or {})


def to_verdict(result: Any) -> Verdict:
    """A verifier's return value as a Verdict. A float keeps its value: status "correct" if >= 1,
    "incorrect" if <= 0, "partial" in between, reason "float_reward"."""
    if isinstance(result, Verdict):
        return result
    if isinstance(result, numbers.Real):
        score = float(result)
        if not math.isfinite(score):
            return Verdict(0.0, Status.ERROR, "bad_float_reward", details={"error": f"verifier returned {score}"})
        if score >= 1:
            status = Status.CORRECT
        elif score <= 0:
            status = Status.INCORRECT
        else:
            status = Status.PARTIAL
        return Verdict(score, status, "float_reward")
    return Verdict(
        0.0,
        Status.ERROR,
        "bad_verifier_return",
        details={"error": f"verifier returned {type(result).__name__}, expected a Verdict or a float"},
    )


_DEFAULT: RewardRunner | None = None
_DEFAULT_LOCK = threading.Lock()


def default_runner() -> RewardRunner:
    """The process-wide runner behind ``score_batch`` and ``verify``, created on first use with default settings
    (no worker starts until a process-isolated request arrives). A closed default runner is replaced."""
    global _DEFAULT
    with _DEFAULT_LOCK:
        if _DEFAULT is None or _DEFAULT.closed:
            _DEFAULT = RewardRunner()
        return _DEFAULT


def set_default_runner(runner: RewardRunner | None) -> RewardRunner | None:
    """Make ``runner`` the default (None: a fresh default on next use); returns the previous one, not closed."""
    global _DEFAULT
    with _DEFAULT_LOCK:
        previous, _DEFAULT = _DEFAULT, runner
        return previous


def _forget_default_after_fork() -> None:
    # A forked child must not use (or kill) its parent's workers; it gets its own default runner on demand.
    global _DEFAULT, _DEFAULT_LOCK
    _DEFAULT = None
    _DEFAULT_LOCK = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_default_after_fork)


# ----------------------------------------------------------------------------------------------- the runner


class CacheInfo(NamedTuple):
    hits: int
    misses: int
    maxsize: int
    currsize: int


class RewardRunner:
    """Supervised reward calls: inline verifiers in the caller, everything else in a pool of worker processes
    with hard timeouts, a memory cap and a verdict cache. Thread-safe; see the module docstring.

    workers: worker processes (started on the first process-isolated request, replaced when they die).
    timeout_s: default wall-clock budget of one pooled call (a request's options["timeout_s"] overrides it).
    memory_mb: address space (RLIMIT_AS) a worker may use ON TOP of its idle footprint (interpreter, rlvr and
        whatever the caller's main module imports, measured once when the worker starts); None or 0: no cap.
    cache_size: verdicts kept in the LRU cache (0 disables it); cache_max_chars bounds the characters of
        responses/references/options it holds in total.
    """

    def __init__(
        self,
        workers: int = 2,
        timeout_s: float = 5.0,
        memory_mb: int | None = 2048,
        cache_size: int = 65536,
        *,
        cache_max_chars: int = 256 * 2**20,
    ):
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
            raise ValueError(f"workers must be an int >= 1, got {workers!r}")
        if _bad_timeout(timeout_s):
            raise ValueError(f"timeout_s must be a finite number > 0, got {timeout_s!r}")
        if memory_mb is not None and (isinstance(memory_mb, bool) or not isinstance(memory_mb, int) or memory_mb < 0):
            raise ValueError(f"memory_mb must be an int >= 0 or None, got {memory_mb!r}")
        if isinstance(cache_size, bool) or not isinstance(cache_size, int) or cache_size < 0:
            raise ValueError(f"cache_size must be an int >= 0, got {cache_size!r}")
        self.workers, self.timeout_s, self.memory_mb, self.cache_size = workers, float(timeout_s), memory_mb, cache_size
        self._core = _Core(workers, float(timeout_s), memory_mb or 0, cache_size, cache_max_chars)
        # Closes the pool when this runner is garbage-collected (and at exit, with _close_all_runners), so no worker
        # outlives the runner or the interpreter even if close() is never called.
        self._finalizer = weakref.finalize(self, self._core.close)

    def score(self, items: Sequence[ScoreRequest | CallableRequest]) -> list[Verdict]:
        """One Verdict per item, in input order. Pooled items of one batch run in parallel across the workers."""
        plan = self._core.plan(list(items))
        return self._core.finish(plan)

    async def score_async(self, items: Sequence[ScoreRequest | CallableRequest]) -> list[Verdict]:
        """``score`` for asyncio code: cache lookups, inline verifiers and dispatch run in a thread, and pooled
        results are awaited, so the event loop never blocks on a reward."""
        items = list(items)
        if not items:
            return []
        plan = await asyncio.to_thread(self._core.plan, items)
        pending = [asyncio.wrap_future(p) for p in plan if isinstance(p, concurrent.futures.Future)]
        if pending:
            await asyncio.gather(*pending)
        return self._core.finish(plan)

    def cache_info(self) -> CacheInfo:
        """(hits, misses, maxsize, currsize) of the verdict cache, like functools.lru_cache."""
        return self._core.cache_info()

    def cache_clear(self) -> None:
        self._core.cache_clear()

    def stats(self) -> dict[str, Any]:
        """Counters since creation or the last reset_stats(): calls (requests scored), cache_hits, timeouts and
        errors (verdicts with those statuses), worker_restarts (workers replaced after a timeout, death or memory
        error), worker_start_failures, inline_calls, process_calls, latency_p50_ms / latency_p99_ms (time to run one
        verifier call, over the last 4096 calls; 0.0 before any), plus workers (alive now) and queued."""
        return self._core.stats()

    def reset_stats(self) -> None:
        self._core.reset_stats()

    @property
    def closed(self) -> bool:
        return self._core.closed

    def close(self) -> None:
        """Kill all workers (and their process groups) and refuse further requests. Idempotent."""
        self._finalizer()

    def __enter__(self) -> RewardRunner:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return f"RewardRunner(workers={self.workers}, timeout_s={self.timeout_s}, memory_mb={self.memory_mb}, {state})"


@dataclass
class _Resolved:
    inline: bool
    fn: Callable[..., Any]
    name: str | None  # registered verifier name, None for a user callable
    response: Any
    reference: Any
    options: dict[str, Any]
    cacheable: bool
    threaded: bool = False  # a "threads" verifier: called in this process on the runner's thread pool


class _Task:
    """One pooled call, possibly awaited by several identical requests (waiters)."""

    __slots__ = ("fn_blob", "args_blob", "timeout_s", "key", "label", "waiters")

    def __init__(self, fn_blob: bytes, args_blob: bytes, timeout_s: float, key: Any, label: str):
        self.fn_blob, self.args_blob, self.timeout_s, self.key, self.label = fn_blob, args_blob, timeout_s, key, label
        self.waiters: list[concurrent.futures.Future] = []


class _Stats:
    _COUNTERS = (
        "calls",
        "cache_hits",
        "timeouts",
        "errors",
        "worker_restarts",
        "worker_start_failures",
        "inline_calls",
        "process_calls",
    )

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.counts = dict.fromkeys(self._COUNTERS, 0)
        self.latencies: collections.deque[float] = collections.deque(maxlen=_LATENCY_WINDOW)

    def add(self, name: str, n: int = 1) -> None:
        with self.lock:
            self.counts[name] += n

    def snapshot(self) -> dict[str, Any]:
        with self.lock:
            out: dict[str, Any] = dict(self.counts)
            lat = sorted(self.latencies)
        out["latency_p50_ms"] = _percentile(lat, 0.50) * 1000.0
        out["latency_p99_ms"] = _percentile(lat, 0.99) * 1000.0
        return out

    def reset(self) -> None:
        with self.lock:
            self.counts = dict.fromkeys(self._COUNTERS, 0)
            self.latencies.clear()


class _Core:
    """Everything behind a RewardRunner (kept apart so the dispatcher thread never holds the runner alive)."""

    def __init__(self, workers: int, timeout_s: float, memory_mb: int, cache_size: int, cache_max_chars: int):
        self.timeout_s = timeout_s
        self.cache_size = cache_size
        self.cache_max_chars = cache_max_chars
        self.lock = threading.Lock()  # guards the cache, the in-flight table and task waiters
        self.cache: collections.OrderedDict[Any, tuple[Verdict, int]] = collections.OrderedDict()
        self.cache_chars = 0
        self.hits = self.misses = 0
        self.inflight: dict[Any, _Task] = {}
        self.thread_pool: concurrent.futures.ThreadPoolExecutor | None = None
        self.closed = False
        self.owner_pid = os.getpid()
        self.stats_ = _Stats()
        self.pool = _Pool(workers, memory_mb, self.stats_, on_done=self._on_done, wanted=self._wanted)
        _LIVE_CORES.add(self)

    # ---------------------------------------------------------------------------------- scoring

    def plan(self, items: list[Any]) -> list[Verdict | concurrent.futures.Future]:
        """Verdicts for what is answered at once (inline, cache, bad request) and futures for pooled calls."""
        if self.closed:
            raise RuntimeError("this RewardRunner is closed")
        if os.getpid() != self.owner_pid:
            raise RuntimeError("this RewardRunner belongs to another process (it was forked); create a new one")
        resolved = [self._resolve(item) for item in items]  # caller errors raise here, before anything runs
        out: list[Verdict | concurrent.futures.Future | None] = [None] * len(items)
        for i, r in enumerate(resolved):  # dispatch pooled calls first: they run while inline ones are computed
            if r.threaded:
                out[i] = self._threads().submit(_guarded_call, r.fn, r.response, r.reference,
                                                _options_for(r.fn, r.options))
            elif not r.inline:
                out[i] = self._submit(r)
        latencies = []
        for i, r in enumerate(resolved):
            if r.inline:
                t0 = time.perf_counter()
                out[i] = _guarded_call(r.fn, r.response, r.reference, _options_for(r.fn, r.options))
                latencies.append(time.perf_counter() - t0)
        with self.stats_.lock:
            self.stats_.counts["calls"] += len(items)
            self.stats_.counts["inline_calls"] += len(latencies)
            self.stats_.latencies.extend(latencies)
        return out  # type: ignore[return-value]

    def finish(self, plan: list[Verdict | concurrent.futures.Future]) -> list[Verdict]:
        try:
            verdicts = [p.result() if isinstance(p, concurrent.futures.Future) else p for p in plan]
        except BaseException:  # e.g. KeyboardInterrupt while waiting: drop what has not started yet
            for p in plan:
                if isinstance(p, concurrent.futures.Future):
                    p.cancel()
            raise
        timeouts = sum(v.status == Status.TIMEOUT for v in verdicts)
        errors = sum(v.status == Status.ERROR for v in verdicts)
        if timeouts or errors:
            with self.stats_.lock:
                self.stats_.counts["timeouts"] += timeouts
                self.stats_.counts["errors"] += errors
        return verdicts

    def _resolve(self, item: Any) -> _Resolved:
        threaded = False
        if isinstance(item, ScoreRequest):
            fn = get_verifier(item.verifier)
            isolation = "inline" if _IN_WORKER else verifier_isolation(item.verifier)
            inline, threaded = isolation == "inline", isolation == "threads"
            name, cacheable = item.verifier, True
        elif isinstance(item, CallableRequest):
            if not callable(item.fn):
                raise TypeError(f"CallableRequest.fn must be callable, got {type(item.fn).__name__}")
            fn, inline, name, cacheable = item.fn, _IN_WORKER, None, bool(item.cache)
        else:
            raise TypeError(f"expected a ScoreRequest or a CallableRequest, got {type(item).__name__}")
        options = item.options
        if options is None:
            options = {}
        elif not isinstance(options, dict):
            raise TypeError(f"request options must be a dict, got {type(options).__name__}")
        return _Resolved(inline, fn, name, item.response, item.reference, dict(options), cacheable, threaded)

    def _submit(self, r: _Resolved) -> Verdict | concurrent.futures.Future:
        label = r.name if r.name is not None else _qualname(r.fn)
        timeout = r.options.get("timeout_s")
        timeout = self.timeout_s if timeout is None else timeout
        if _bad_timeout(timeout):
            return _error("bad_timeout", f"timeout_s must be a finite number > 0, got {timeout!r}", label)
        timeout = float(timeout)

        key = self._cache_key(r) if r.cacheable and self.cache_size else None
        if key is not None:
            with self.lock:
                hit = self.cache.get(key)
                if hit is not None:
                    self.cache.move_to_end(key)
                    self.hits += 1
                    self.stats_.add("cache_hits")
                    return _copy_verdict(hit[0])
                self.misses += 1

        try:
            fn_blob = pickle.dumps(("fn", r.fn), protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as exc:
            if r.name is None:
                return _unpicklable(label, exc)
            fn_blob = pickle.dumps(("name", r.name))  # the worker looks the name up in its own registry
        try:
            args_blob = pickle.dumps(
                (r.response, r.reference, _options_for(r.fn, r.options)), protocol=pickle.HIGHEST_PROTOCOL
            )
        except Exception as exc:
            return _error("unpicklable_arguments", f"cannot pickle the response/reference/options: {exc!r}", label)

        future: concurrent.futures.Future = concurrent.futures.Future()
        with self.lock:
            task = self.inflight.get(key) if key is not None else None
            if task is not None:  # the same request is already running: wait for that one
                task.waiters.append(future)
                self.stats_.add("cache_hits")
                return future
            task = _Task(fn_blob, args_blob, timeout, key, label)
            task.waiters.append(future)
            if key is not None:
                self.inflight[key] = task
        self.stats_.add("process_calls")
        self.pool.submit(task)
        return future

    def _cache_key(self, r: _Resolved) -> Any:
        if not isinstance(r.response, str):
            return None
        if r.name is not None:
            ident = ("verifier", r.name, _qualname(r.fn))
        else:
            qual = _module_level_name(r.fn)
            if qual is None:
                return None
            ident = ("callable", qual)
        ref, opts = _canonical_json(r.reference), _canonical_json(r.options)
        if ref is None or opts is None:
            return None
        return (ident, r.response, ref, opts)

    # --------------------------------------------------------------------- called by the dispatcher

    def _wanted(self, task: _Task) -> bool:
        """False (and forget the task) when every request waiting for it was cancelled."""
        with self.lock:
            if any(not f.cancelled() for f in task.waiters):
                return True
            if task.key is not None and self.inflight.get(task.key) is task:
                del self.inflight[task.key]
            return False

    def _on_done(self, task: _Task, verdict: Verdict, seconds: float | None) -> None:
        with self.lock:
            if task.key is not None:
                if self.inflight.get(task.key) is task:
                    del self.inflight[task.key]
                if verdict.status in _DETERMINISTIC:
                    self._cache_put(task.key, verdict)
            waiters, task.waiters = task.waiters, []
        if seconds is not None:
            with self.stats_.lock:
                self.stats_.latencies.append(seconds)
        for i, future in enumerate(waiters):
            if future.done():
                continue
            try:
                future.set_result(verdict if i == 0 else _copy_verdict(verdict))
            except concurrent.futures.InvalidStateError:  # cancelled meanwhile
                pass

    def _cache_put(self, key: Any, verdict: Verdict) -> None:
        if not self.cache_size:
            return
        size = len(key[1]) + len(key[2]) + len(key[3]) + 256
        if size > self.cache_max_chars:
            return
        old = self.cache.pop(key, None)
        if old is not None:
            self.cache_chars -= old[1]
        self.cache[key] = (_copy_verdict(verdict), size)
        self.cache_chars += size
        while self.cache and (len(self.cache) > self.cache_size or self.cache_chars > self.cache_max_chars):
            _, (_, evicted) = self.cache.popitem(last=False)
            self.cache_chars -= evicted

    # --------------------------------------------------------------------------------- bookkeeping

    def cache_info(self) -> CacheInfo:
        with self.lock:
            return CacheInfo(self.hits, self.misses, self.cache_size, len(self.cache))

    def cache_clear(self) -> None:
        with self.lock:
            self.cache.clear()
            self.cache_chars = 0
            self.hits = self.misses = 0

    def stats(self) -> dict[str, Any]:
        out = self.stats_.snapshot()
        out["workers"] = self.pool.alive()
        out["queued"] = self.pool.queued()
        return out

    def reset_stats(self) -> None:
        self.stats_.reset()

    def _threads(self) -> concurrent.futures.ThreadPoolExecutor:
        with self.lock:
            if self.thread_pool is None:
                self.thread_pool = concurrent.futures.ThreadPoolExecutor(
                    max_workers=max(2, os.cpu_count() or 2), thread_name_prefix="rlvr-verifier")
            return self.thread_pool

    def close(self) -> None:
        if os.getpid() != self.owner_pid:  # a forked child's copy (e.g. at its exit): the workers are not its own
            return
        self.closed = True
        self.pool.close()
        if self.thread_pool is not None:
            self.thread_pool.shutdown(wait=False, cancel_futures=True)


# ------------------------------------------------------------------------------------------------- the pool


class _Worker:
    __slots__ = ("proc", "conn", "state", "task", "deadline", "sent_at", "seq")

    def __init__(self, proc: Any, conn: Any, deadline: float):
        self.proc, self.conn = proc, conn
        self.state = "starting"  # -> "idle" <-> "busy"
        self.task: _Task | None = None
        self.deadline: float | None = deadline
        self.sent_at = 0.0
        self.seq = 0


class _Pool:
    """Worker processes owned by ONE dispatcher thread, which starts them, hands out queued tasks, enforces
    deadlines and replaces the dead. Callers only append to the queue and wake the dispatcher.

    Workers are started with the "spawn" context: a fresh interpreter that inherits none of the caller's threads
    (torch, tokenizers, the trainer's own), locks, CUDA state or open files, so fork-in-a-threaded-process
    deadlocks cannot happen; each worker is our direct child, so we can kill its process group and reap it, and
    no shared forkserver process outlives close(). The price, about 0.1-0.3 s per worker start, is paid on the
    first pooled request and after a worker is lost, not per call.
    """

    def __init__(self, workers: int, memory_mb: int, stats: _Stats, *, on_done: Callable, wanted: Callable):
        self.size = workers
        self.memory_mb = memory_mb
        self.stats = stats
        self.on_done = on_done
        self.wanted = wanted
        self.ctx = multiprocessing.get_context("spawn")
        self.lock = threading.Lock()
        self.queue: collections.deque[_Task] = collections.deque()
        self.workers: list[_Worker] = []
        self.want = 0  # how many workers to keep alive (0 until the first request, or after repeated start failures)
        self.start_failures = 0
        self.last_start_error: dict[str, Any] = {}
        self.thread: threading.Thread | None = None
        self.closing = False
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_r, False)
        os.set_blocking(self.wake_w, False)

    # ------------------------------------------------------------------------------ caller side

    def submit(self, task: _Task) -> None:
        with self.lock:
            if self.closing:
                refused = True
            else:
                refused = False
                self.queue.append(task)
                self.want = self.size
                if self.thread is None or not self.thread.is_alive():
                    self.thread = threading.Thread(target=self._run, name="rlvr-reward-dispatcher", daemon=True)
                    self.thread.start()
        if refused:
            self.on_done(task, _error("runner_closed", "the RewardRunner was closed", task.label), None)
        else:
            self._wake()

    def alive(self) -> int:
        return sum(1 for w in list(self.workers) if w.state != "starting")

    def queued(self) -> int:
        return len(self.queue)

    def close(self) -> None:
        with self.lock:
            if self.closing:
                return
            self.closing = True
            thread = self.thread
        self._wake()
        if thread is not None and thread is threading.current_thread():
            return  # called from the dispatcher itself (a finalizer run there): its loop exits and cleans up
        if thread is not None:
            thread.join(timeout=30)
        if thread is None or not thread.is_alive():
            self._shutdown("runner_closed", "the RewardRunner was closed")
            for fd in (self.wake_r, self.wake_w):
                try:
                    os.close(fd)
                except OSError:
                    pass
        else:  # the dispatcher is stuck (should not happen): kill the workers from here anyway
            for w in list(self.workers):
                _kill(w.proc)

    def _wake(self) -> None:
        try:
            os.write(self.wake_w, b"x")
        except (BlockingIOError, OSError):  # pipe full (a wake-up is pending anyway) or closed
            pass

    # -------------------------------------------------------------------------- dispatcher side

    def _run(self) -> None:
        try:
            self._loop()
        except BaseException as exc:  # a bug here must not leave callers waiting forever
            detail = "".join(traceback.format_exception(exc))[-_MAX_ERROR_CHARS:]
            self._shutdown("runner_internal_error", detail)
        else:
            self._shutdown("runner_closed", "the RewardRunner was closed")

    def _loop(self) -> None:
        while True:
            with self.lock:
                if self.closing:
                    return
            now = time.monotonic()
            self._maintain(now)
            self._assign(now)
            waitables: list[Any] = [self.wake_r]
            deadlines = []
            for w in self.workers:
                waitables += [w.conn, w.proc.sentinel]
                if w.deadline is not None:
                    deadlines.append(w.deadline)
            timeout = max(0.0, min(deadlines) - time.monotonic()) if deadlines else None
            ready = multiprocessing.connection.wait(waitables, timeout)
            if self.wake_r in ready:
                try:
                    while os.read(self.wake_r, 4096):
                        pass
                except (BlockingIOError, OSError):
                    pass
            now = time.monotonic()
            for w in list(self.workers):
                if w.conn in ready or w.proc.sentinel in ready:
                    self._service(w)
                elif w.deadline is not None and now >= w.deadline:
                    self._expire(w)

    def _maintain(self, now: float) -> None:
        while len(self.workers) < self.want:
            if not self._start_worker(now):
                break

    def _start_worker(self, now: float) -> bool:
        parent_conn, child_conn = self.ctx.Pipe()
        proc = self.ctx.Process(
            target=_worker_main,
            args=(child_conn, self.memory_mb, os.getpid()),
            name="rlvr-reward-worker",
            daemon=True,
        )
        try:
            with _main_module_without_unreadable_file():
                proc.start()
        except Exception as exc:
            parent_conn.close()
            self._start_failed({"error": repr(exc)[:_MAX_ERROR_CHARS]})
            return False
        finally:
            child_conn.close()
        self.workers.append(_Worker(proc, parent_conn, now + _STARTUP_TIMEOUT_S))
        return True

    def _start_failed(self, details: dict[str, Any]) -> None:
        self.stats.add("worker_start_failures")
        self.start_failures += 1
        self.last_start_error = details
        if self.start_failures >= _MAX_START_FAILURES:  # it will not get better by retrying: fail what waits
            with self.lock:
                failed, self.queue = list(self.queue), collections.deque()
                self.want = 0  # the next submit tries again
            self.start_failures = 0
            for task in failed:
                self.on_done(task, _error("worker_start_failed", "a reward worker could not start", task.label,
                                          **details), None)

    def _assign(self, now: float) -> None:
        for w in list(self.workers):
            if w.state != "idle":
                continue
            task = self._next_task()
            if task is None:
                return
            w.seq += 1
            try:
                w.conn.send((w.seq, task.fn_blob, task.args_blob))
            except (OSError, ValueError, EOFError):  # it died while idle: requeue the task, reap the worker
                with self.lock:
                    self.queue.appendleft(task)
                self._reap(w)
                continue
            w.state, w.task = "busy", task
            w.sent_at, w.deadline = time.monotonic(), time.monotonic() + task.timeout_s

    def _next_task(self) -> _Task | None:
        while True:
            with self.lock:
                if not self.queue:
                    return None
                task = self.queue.popleft()
            if self.wanted(task):
                return task

    def _service(self, w: _Worker) -> None:
        """Read what a worker sent; reap it if it is gone."""
        dead = False
        try:
            while w.conn.poll():
                message = w.conn.recv()
                if message[0] == "ready":
                    w.state, w.deadline = "idle", None
                    self.start_failures = 0
                elif message[0] == "result":
                    _, seq, verdict, retire = message
                    task, w.task = w.task, None
                    w.state, w.deadline = "idle", None
                    seconds = time.monotonic() - w.sent_at
                    if retire:  # e.g. after a MemoryError: start afresh (counted before the caller sees the verdict)
                        self._replace(w, restart=True)
                    if task is not None and seq == w.seq:
                        self.on_done(task, verdict, seconds)
                    if retire:
                        return
        except (EOFError, OSError):
            dead = True
        except Exception:  # a message that does not unpickle here: treat the worker as broken
            dead = True
        if dead or not w.proc.is_alive():
            self._reap(w)

    def _reap(self, w: _Worker) -> None:
        """A worker died on its own: account for it and forget it (the next loop starts a replacement)."""
        _kill(w.proc)  # its leftover process group, and reap it
        code = w.proc.exitcode
        details: dict[str, Any] = {"exitcode": code}
        if code is not None and code < 0:
            try:
                details["signal"] = signal.Signals(-code).name
            except ValueError:
                details["signal"] = -code
        if w.state == "starting":
            self._forget(w)
            self._start_failed(details)
            return
        task, w.task = w.task, None
        self._forget(w)  # already killed and reaped above
        self.stats.add("worker_restarts")
        if task is not None:
            details["timeout_s"] = task.timeout_s
            verdict = Verdict(0.0, Status.ERROR, "worker_died", details={"verifier": task.label, **details})
            self.on_done(task, verdict, time.monotonic() - w.sent_at)

    def _expire(self, w: _Worker) -> None:
        if w.conn.poll():  # the answer came in just now
            self._service(w)
            return
        if w.state == "starting":
            self._forget(w, kill=True)
            self._start_failed({"error": f"not ready after {_STARTUP_TIMEOUT_S:g} s"})
            return
        task, w.task = w.task, None
        self._replace(w, restart=True)
        if task is not None:
            details = {"timeout_s": task.timeout_s, "verifier": task.label}
            self.on_done(task, Verdict(0.0, Status.TIMEOUT, "timeout", details=details), task.timeout_s)

    def _replace(self, w: _Worker, *, restart: bool) -> None:
        self._forget(w, kill=True)
        if restart:
            self.stats.add("worker_restarts")

    def _forget(self, w: _Worker, *, kill: bool = False) -> None:
        if kill:
            _kill(w.proc)
        try:
            self.workers.remove(w)
        except ValueError:
            pass
        try:
            w.conn.close()
        except OSError:
            pass
        try:
            w.proc.close()
        except (ValueError, AttributeError):
            pass

    def _shutdown(self, reason: str, message: str) -> None:
        """Kill every worker; fail what is queued or running. Safe to call twice."""
        for w in list(self.workers):
            task, w.task = w.task, None
            self._forget(w, kill=True)
            if task is not None:
                self.on_done(task, _error(reason, message, task.label), None)
        with self.lock:
            failed, self.queue = list(self.queue), collections.deque()
            self.thread = None if self.thread is threading.current_thread() else self.thread
        for task in failed:
            self.on_done(task, _error(reason, message, task.label), None)


def _kill(proc: Any) -> None:
    """SIGKILL a worker's process group (it leads one: see _worker_main) and the worker, then reap it."""
    pid = proc.pid
    if pid is not None:
        # The group id equals the worker's pid; Linux does not reuse a pid still in use as a group id, so this can
        # only hit the worker and what it started (also after the worker itself has exited).
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError, OSError):
            pass
        try:
            if proc.exitcode is None:  # not reaped yet, so the pid is still this worker's
                os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError, OSError, ValueError):
            pass
    try:
        proc.join(timeout=10)
    except (AssertionError, ValueError):  # not started / already closed
        pass


# ----------------------------------------------------------------------------------------------- the worker


def _worker_main(conn: Any, memory_mb: int, parent_pid: int) -> None:
    """Body of a worker process: lead a process group, cap memory, then run calls until the parent goes away."""
    global _IN_WORKER
    _IN_WORKER = True
    try:
        os.setpgid(0, 0)  # so a timeout kills the worker AND whatever the verifier started
    except OSError:
        pass
    _die_with_parent()
    if os.getppid() != parent_pid:  # the parent died before we could ask to follow it
        os._exit(1)
    try:
        import resource

        resource.setrlimit(resource.RLIMIT_CORE, (0, resource.getrlimit(resource.RLIMIT_CORE)[1]))  # no core files
    except (ImportError, ValueError, OSError):
        pass
    import rlvr.verifiers  # noqa: F401  (registers the built-in verifiers)

    limit = _cap_address_space(memory_mb)
    conn.send(("ready", os.getpid(), limit))
    while True:
        try:
            seq, fn_blob, args_blob = conn.recv()
        except (EOFError, OSError):  # the parent closed us
            return
        verdict = _run_task(fn_blob, args_blob)
        retire = verdict.reason == "memory_limit"
        try:
            conn.send(("result", seq, verdict, retire))
        except (EOFError, OSError, BrokenPipeError):
            return
        except Exception as exc:  # the verifier's Verdict does not pickle
            conn.send(("result", seq, _error("unpicklable_result", f"the verdict cannot be pickled: {exc!r}"), retire))
        if retire:
            return


def _run_task(fn_blob: bytes, args_blob: bytes) -> Verdict:
    oom = False
    try:
        kind, target = pickle.loads(fn_blob)
        if kind == "name":
            try:
                fn = get_verifier(target)
            except KeyError:
                return _error(
                    "unpicklable_reward",
                    f"verifier {target!r} cannot be pickled by reference and is not registered in the worker; "
                    "define and register it at the top level of an importable module",
                    target,
                )
        else:
            fn = target
    except MemoryError:
        oom = True
    except BaseException as exc:
        return _error(
            "unpicklable_reward",
            f"the reward function could not be loaded in the worker: {exc!r}; it must be defined at the top level "
            "of a module the worker can import",
        )
    if oom:
        return _error("memory_limit", "MemoryError while loading the reward function")
    try:
        response, reference, options = pickle.loads(args_blob)
    except MemoryError:
        oom = True
    except BaseException as exc:
        return _error("unpicklable_arguments", f"the request could not be unpickled in the worker: {exc!r}")
    if oom:
        return _error("memory_limit", "MemoryError while loading the request")
    return _guarded_call(fn, response, reference, options, catch_all=True)


def _die_with_parent() -> None:
    """Linux: SIGKILL this process when the thread that started it (the dispatcher) goes away."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG
    except Exception:
        pass


def _cap_address_space(memory_mb: int) -> int | None:
    """Set RLIMIT_AS (soft) to the current address space plus ``memory_mb``; return the limit in bytes."""
    if not memory_mb:
        return None
    try:
        import resource
    except ImportError:
        return None
    baseline = 0
    try:
        with open("/proc/self/statm") as f:
            baseline = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        pass
    limit = baseline + memory_mb * 2**20
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    # Only the soft limit: a verifier may still start a sandboxed child with its own (lower or higher, up to
    # the hard limit) cap. Never loosen a limit that is already stricter.
    for existing in (soft, hard):
        if existing != resource.RLIM_INFINITY:
            limit = min(limit, existing)
    try:
        resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    except (ValueError, OSError):
        return None
    return limit


# -------------------------------------------------------------------------------------------------- helpers


def _guarded_call(
    fn: Callable[..., Any], response: Any, reference: Any, options: dict[str, Any], *, catch_all: bool = False
) -> Verdict:
    """Call ``fn`` and turn whatever happens into a Verdict. In the caller's process KeyboardInterrupt still
    propagates; in a worker (catch_all) nothing does."""
    oom = False
    try:
        return to_verdict(fn(response, reference, **options))
    except MemoryError:
        oom = True  # build the verdict after the handler, once the failed call's frames are released
    except (Exception, SystemExit) as exc:
        return _raised(exc)
    except BaseException as exc:
        if not catch_all:
            raise
        return _raised(exc)
    if oom:
        return Verdict(0.0, Status.ERROR, "memory_limit", details={"error": "MemoryError"})
    raise AssertionError("unreachable")


def _raised(exc: BaseException) -> Verdict:
    error = repr(exc)
    if len(error) > _MAX_ERROR_CHARS:
        error = error[:_MAX_ERROR_CHARS] + "..."
    try:
        tb = "".join(traceback.format_exception(exc))
    except Exception:
        tb = ""
    if len(tb) > _MAX_ERROR_CHARS:
        tb = "..." + tb[-_MAX_ERROR_CHARS:]
    return Verdict(0.0, Status.ERROR, "verifier_raised", details={"error": error, "traceback": tb})


def _error(reason: str, message: str, verifier: str | None = None, **extra: Any) -> Verdict:
    details: dict[str, Any] = {"error": message, **extra}
    if verifier is not None:
        details["verifier"] = verifier
    return Verdict(0.0, Status.ERROR, reason, details=details)


def _unpicklable(label: str, exc: BaseException) -> Verdict:
    return _error(
        "unpicklable_reward",
        f"cannot send {label} to a worker process ({exc!r}): reward functions are pickled by reference, so they "
        "must be defined at the top level of an importable module (not a lambda, a nested function or a method "
        "of a local object)",
        label,
    )


def _bad_timeout(value: Any) -> bool:
    return (
        isinstance(value, bool)
        or not isinstance(value, numbers.Real)
        or not math.isfinite(float(value))
        or float(value) <= 0
    )


def _copy_verdict(v: Verdict) -> Verdict:
    """A verdict whose details the caller may mutate without touching the cache or another caller's copy."""
    if not v.details:
        return v
    try:
        details = copy.deepcopy(v.details)
    except Exception:
        details = dict(v.details)
    return dataclasses.replace(v, details=details)


def _percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return 0.0
    rank = max(1, math.ceil(q * len(sorted_values)))  # nearest-rank
    return sorted_values[rank - 1]


def _options_for(fn: Callable[..., Any], options: dict[str, Any]) -> dict[str, Any]:
    """``options`` without "timeout_s" unless ``fn`` accepts it (the runner enforces the budget either way)."""
    if "timeout_s" not in options or _accepts_timeout(fn):
        return options
    return {k: v for k, v in options.items() if k != "timeout_s"}


def _accepts_timeout(fn: Callable[..., Any]) -> bool:
    try:
        return _accepts_timeout_cached(fn)
    except TypeError:  # unhashable callable
        return _signature_accepts_timeout(fn)


@functools.lru_cache(maxsize=1024)
def _accepts_timeout_cached(fn: Callable[..., Any]) -> bool:
    return _signature_accepts_timeout(fn)


def _signature_accepts_timeout(fn: Callable[..., Any]) -> bool:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    for p in params:
        if p.kind is inspect.Parameter.VAR_KEYWORD:
            return True
        if p.name == "timeout_s" and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY):
            return True
    return False


def _qualname(fn: Any) -> str:
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', type(fn).__qualname__)}"


def _module_level_name(fn: Any) -> str | None:
    """"module:qualname" for a plain function reachable under that name in its module; None otherwise."""
    if not inspect.isfunction(fn):
        return None
    module, qualname = getattr(fn, "__module__", None), getattr(fn, "__qualname__", "")
    if not module or not qualname or "<" in qualname:
        return None
    obj: Any = sys.modules.get(module)
    for part in qualname.split("."):
        obj = getattr(obj, part, None)
    return f"{module}:{qualname}" if obj is fn else None


def _canonical_json(value: Any) -> str | None:
    """A canonical JSON text for plain JSON values (dict keys sorted); None for anything else."""
    if not _plain_json(value, 0):
        return None
    try:
        return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    except (TypeError, ValueError, RecursionError):
        return None


def _plain_json(value: Any, depth: int) -> bool:
    if depth > 64:
        return False
    kind = type(value)
    if value is None or kind in (str, int, float, bool):
        return True
    if kind is list:
        return all(_plain_json(v, depth + 1) for v in value)
    if kind is dict:
        return all(type(k) is str and _plain_json(v, depth + 1) for k, v in value.items())
    return False


@contextlib.contextmanager
def _main_module_without_unreadable_file():
    """A spawned worker re-imports the parent's __main__ from its file; when that "file" cannot be read
    (``python - < script``, some embedded interpreters: ``<stdin>``), hide it so the worker starts without it
    instead of dying on start-up. Reward functions must then live in importable modules, as documented."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if main is None or path is None or os.path.isfile(path):
        yield
        return
    del main.__file__
    try:
        yield
    finally:
        main.__file__ = path

