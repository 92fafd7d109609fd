"""RewardRunner, the process-wide default runner and ``score_batch``: planning a batch (inline, threads, cache,
pool) and collecting its verdicts in order. See the package docstring for what a caller can rely on."""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import os
import pickle
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from rlvr.verifiers.base import Status, Verdict
from rlvr.verifiers.registry import get_verifier, verifier_isolation
from rlvr.verifiers.runner.cache import CacheInfo, VerdictCache, cache_key, copy_verdict
from rlvr.verifiers.runner.calls import bad_timeout, error, guarded_call, keyword_args, qualname
from rlvr.verifiers.runner.pool import Pool, Task
from rlvr.verifiers.runner.requests import CallableRequest, ScoreRequest
from rlvr.verifiers.runner.stats import Stats

DEFAULT_MAX_RESULT_BYTES = 1 << 20

# True inside a worker process (set by worker.py): there everything runs inline (the worker itself is the
# sandbox; no nested pools).
_IN_WORKER = False

# Every open runner's internals, closed by an atexit hook so that no worker outlives the interpreter.
_LIVE_CORES: weakref.WeakSet[_Core] = weakref.WeakSet()


def _close_all_runners() -> None:
    for core in list(_LIVE_CORES):
        try:
            core.close()
        except Exception:
            pass


atexit.register(_close_all_runners)


# ------------------------------------------------------------------------------------ module-level functions


def score_batch(items: Sequence[ScoreRequest | CallableRequest]) -> list[Verdict]:
    """One Verdict per request, in order, through the default runner (``default_runner()``). Never raises because
    of a response or a verifier's failure; an unknown verifier name (a caller error) raises UnknownVerifierError
    before anything is scored."""
    items = list(items)
    if not items:
        return []
    return default_runner().score(items)


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


class RewardRunner:
    """Supervised reward calls: inline verifiers in the caller, everything else in a pool of worker processes
    with hard timeouts, a memory cap and a verdict cache. Thread-safe; see the package docstring.

    workers: worker processes (started on the first process-isolated request, replaced when they die).
    timeout_s: default wall-clock budget of one pooled call (a request's options["timeout_s"] overrides it).
    memory_mb: address space (RLIMIT_AS) a worker may use ON TOP of its idle footprint (interpreter and rlvr,
        measured once when the worker starts); None or 0: no cap.
    cache_size: verdicts kept in the LRU cache (0 disables it); cache_max_chars bounds the characters of
        responses/references/options it holds in total.
    max_result_bytes: the largest verdict a worker may send back, as JSON; a larger one becomes status
        "error", reason "result_too_large".
    """

    def __init__(
        self,
        workers: int = 2,
        timeout_s: float = 5.0,
        memory_mb: int | None = 2048,
        cache_size: int = 65536,
        *,
        cache_max_chars: int = 256 * 2**20,
        max_result_bytes: int = DEFAULT_MAX_RESULT_BYTES,
    ):
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
            raise ValueError(f"workers must be an int >= 1, got {workers!r}")
        if bad_timeout(timeout_s):
            raise ValueError(f"timeout_s must be a finite number > 0, got {timeout_s!r}")
        if memory_mb is not None and (isinstance(memory_mb, bool) or not isinstance(memory_mb, int) or memory_mb < 0):
            raise ValueError(f"memory_mb must be an int >= 0 or None, got {memory_mb!r}")
        if isinstance(cache_size, bool) or not isinstance(cache_size, int) or cache_size < 0:
            raise ValueError(f"cache_size must be an int >= 0, got {cache_size!r}")
        if isinstance(max_result_bytes, bool) or not isinstance(max_result_bytes, int) or max_result_bytes < 1024:
            raise ValueError(f"max_result_bytes must be an int >= 1024, got {max_result_bytes!r}")
        self.workers, self.timeout_s, self.memory_mb, self.cache_size = workers, float(timeout_s), memory_mb, cache_size
        self.max_result_bytes = max_result_bytes
        self._core = _Core(workers, float(timeout_s), memory_mb or 0, cache_size, cache_max_chars, max_result_bytes)
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
        return self._core.cache.info()

    def cache_clear(self) -> None:
        self._core.cache.clear()

    def stats(self) -> dict[str, Any]:
        """Counters since creation or the last reset_stats(): calls (requests scored), cache_hits, timeouts and
        errors (verdicts with those statuses), worker_restarts (workers replaced after a timeout, death or memory
        error), worker_start_failures, inline_calls, process_calls, latency_p50_ms / latency_p99_ms (time to run one
        verifier call, over the last 4096 calls; 0.0 before any), plus workers (alive now) and queued."""
        return self._core.stats()

    def reset_stats(self) -> None:
        self._core.stats_.reset()

    @property
    def closed(self) -> bool:
        return self._core.closed

    def close(self) -> None:
        """Kill all workers (and everything they started) and refuse further requests. Idempotent."""
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
    prompt: Any
    meta: dict[str, Any] | None
    cacheable: bool
    threaded: bool = False  # a "threads" verifier: called in this process on the runner's thread pool
    truncated: bool = False

    def kwargs(self) -> dict[str, Any]:
        return keyword_args(self.fn, self.options, self.prompt, self.meta, truncated=self.truncated)


class _Core:
    """Everything behind a RewardRunner (kept apart so the dispatcher thread never holds the runner alive)."""

    def __init__(self, workers: int, timeout_s: float, memory_mb: int, cache_size: int, cache_max_chars: int,
                 max_result_bytes: int):
        self.timeout_s = timeout_s
        self.lock = threading.Lock()  # guards the in-flight table, task waiters and the thread pool
        self.cache = VerdictCache(cache_size, cache_max_chars)
        self.inflight: dict[Any, Task] = {}
        self.thread_pool: concurrent.futures.ThreadPoolExecutor | None = None
        self.closed = False
        self.owner_pid = os.getpid()
        self.stats_ = Stats()
        self.pool = Pool(workers, memory_mb, max_result_bytes, self.stats_, on_done=self._on_done, wanted=self._wanted)
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
                out[i] = self._threads().submit(guarded_call, r.fn, r.response, r.reference, r.kwargs())
            elif not r.inline:
                out[i] = self._submit(r)
        latencies = []
        for i, r in enumerate(resolved):
            if r.inline:
                t0 = time.perf_counter()
                out[i] = guarded_call(r.fn, r.response, r.reference, r.kwargs())
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
        prompt, meta = getattr(item, "prompt", None), getattr(item, "meta", None)
        if meta is not None and not isinstance(meta, dict):
            raise TypeError(f"request meta must be a dict or None, got {type(meta).__name__}")
        truncated = _flag(getattr(item, "truncated", False))
        for field_name, value in (("prompt", prompt), ("meta", meta), ("truncated", truncated or None)):
            if value is not None and field_name in options:
                raise ValueError(f"the request carries {field_name!r} both as a field and in its options; give it once")
        return _Resolved(inline, fn, name, item.response, item.reference, dict(options), prompt, meta, cacheable,
                         threaded, truncated)

    def _submit(self, r: _Resolved) -> Verdict | concurrent.futures.Future:
        label = r.name if r.name is not None else qualname(r.fn)
        timeout = r.options.get("timeout_s")
        timeout = self.timeout_s if timeout is None else timeout
        if bad_timeout(timeout):
            return error("bad_timeout", f"timeout_s must be a finite number > 0, got {timeout!r}", label)
        timeout = float(timeout)
        if getattr(r.fn, "__module__", None) == "__main__":
            return _from_main_script(label)

        key = cache_key(r.name, r.fn, r.response, r.reference, r.options, r.prompt, r.meta) \
            if r.cacheable and self.cache.maxsize else None
        if key is not None and r.truncated:  # the same text, cut off by the length limit, is another request
            key = (("truncated", key[0]), *key[1:])
        if key is not None:
            hit = self.cache.get(key)
            if hit is not None:
                self.stats_.add("cache_hits")
                return hit

        try:
            fn_blob = pickle.dumps(("fn", r.fn), protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as exc:
            if r.name is None:
                return _unpicklable(label, exc)
            fn_blob = pickle.dumps(("name", r.name))  # the worker looks the name up in its own registry
        try:
            args_blob = pickle.dumps((r.response, r.reference, r.kwargs()), protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as exc:
            return error("unpicklable_arguments", f"cannot pickle the response/reference/options: {exc!r}", label)

        future: concurrent.futures.Future = concurrent.futures.Future()
        with self.lock:
            task = self.inflight.get(key) if key is not None else None
            if task is not None:  # the same request is already running: wait for that one
                task.waiters.append(future)
                self.stats_.add("cache_hits")
                return future
            task = Task(fn_blob, args_blob, timeout, key, label)
            task.waiters.append(future)
            if key is not None:
                self.inflight[key] = task
        self.stats_.add("process_calls")
        self.pool.submit(task)
        return future

    # --------------------------------------------------------------------- called by the dispatcher

    def _wanted(self, task: Task) -> bool:
        """False (and forget the task) when every request waiting for it was cancelled."""
        with self.lock:
            if any(not f.cancelled() for f in task.waiters):
                return True
            if task.key is not None and self.inflight.get(task.key) is task:
                del self.inflight[task.key]
            return False

    def _on_done(self, task: Task, verdict: Verdict, seconds: float | None) -> None:
        with self.lock:
            if task.key is not None and self.inflight.get(task.key) is task:
                del self.inflight[task.key]
            waiters, task.waiters = task.waiters, []
        if task.key is not None:
            self.cache.put(task.key, verdict)
        if seconds is not None:
            with self.stats_.lock:
                self.stats_.latencies.append(seconds)
        for i, future in enumerate(waiters):
            if future.done():
                continue
            try:
                future.set_result(verdict if i == 0 else copy_verdict(verdict))
            except concurrent.futures.InvalidStateError:  # cancelled meanwhile
                pass

    # --------------------------------------------------------------------------------- bookkeeping

    def stats(self) -> dict[str, Any]:
        out = self.stats_.snapshot()
        out["workers"] = self.pool.alive()
        out["queued"] = self.pool.queued()
        return out

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


def _flag(value: Any) -> bool:
    """A request's ``truncated`` as a bool (numpy and 0-d tensor booleans too); anything else is a caller error."""
    if not isinstance(value, bool):
        item = getattr(value, "item", None)  # numpy / torch scalars
        value = item() if callable(item) and getattr(value, "ndim", 0) == 0 else value
    if isinstance(value, bool) or (isinstance(value, int) and value in (0, 1)):
        return bool(value)
    raise TypeError(f"request truncated must be a bool, got {type(value).__name__}: {str(value)[:100]!r}")


def _unpicklable(label: str, exc: BaseException) -> Verdict:
    return error(
        "unpicklable_reward",
        f"cannot send {label} to a worker process ({exc!r}): reward functions are pickled by reference, so they "
        "must be defined at the top level of an importable module (not a lambda, a nested function or a method "
        "of a local object)",
        label,
    )


def _from_main_script(label: str) -> Verdict:
    return error(
        "unpicklable_reward",
        f"{label} is defined in the script being run (__main__). Reward workers never re-run that script (so a "
        "script without an `if __name__ == \"__main__\":` guard cannot start itself again), so they cannot load "
        "it: move the function into a module next to the script (e.g. my_rewards.py) and import it from there",
        label,
    )
