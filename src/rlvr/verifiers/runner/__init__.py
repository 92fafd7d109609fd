"""The one place rewards are called: every verifier and user reward function runs through a RewardRunner.

    from rlvr.verifiers.runner import RewardRunner, ScoreRequest, CallableRequest

    with RewardRunner(workers=2, timeout_s=5.0, memory_mb=2048) as runner:
        verdicts = runner.score([
            ScoreRequest("numeric", "so 42", "42"),              # "inline" verifier: called right here
            CallableRequest(my_module.my_reward, response, ref),  # user reward: runs in a supervised worker
        ])
        runner.stats()   # calls, cache_hits, timeouts, errors, worker_restarts, latency_p50_ms, latency_p99_ms, ...

Files: requests.py (what is asked), api.py (RewardRunner, score_batch, the default runner), calls.py (calling one
function, to_verdict), cache.py (the verdict cache), pool.py (worker supervision), worker.py (the worker process),
decode.py (results as size-capped JSON), tree.py (killing a process tree), stats.py (counters).

How a request is called
- A registered verifier declared ``isolation="inline"`` (registry.py) is called directly in the caller's thread:
  no IPC, nothing to supervise (such verifiers bound their own time and memory on any input).
- A registered verifier declared ``isolation="threads"`` (one that waits on sandboxed processes of its own, like
  "code") is called in the caller's process on the runner's thread pool, so a batch runs across all cores.
- A registered verifier declared ``isolation="process"`` and EVERY user callable (CallableRequest) runs in a pool
  of worker processes. Each call has a hard wall-clock budget (``options["timeout_s"]``, else the runner's
  ``timeout_s``) measured from the call (a worker's start-up counts; a call queued behind busy workers is
  measured from when a worker slot frees for it); past it the sample gets Verdict(0.0, "timeout", "timeout") at
  once, by ``timeout_s + pool.DEADLINE_GRACE_S`` (0.5 s) whatever the call does, then the worker and every
  process below it get SIGKILL (also those that left its process group or session) and a fresh worker takes
  its place. A result complete only after the deadline is a timeout, never credit. A
  worker that dies (segfault, os._exit, killed) is replaced and the sample gets status "error", reason
  "worker_died" (a death on a worker that had served other calls first re-runs the call once on another worker,
  so it is never charged to a call that did not cause it). A MemoryError under the worker's memory cap gives
  status "error", reason "memory_limit" (and the worker is recycled, since its heap may be fragmented).
- Between calls a worker kills what the previous call started and puts back the process-wide state a call can
  change (standard descriptors and streams, signals and timers, working directory, environment, umask, limits,
  numeric contexts and library modes, import machinery; the full list is process_state.py's); a call that changes
  what cannot be put back, or leaves a thread running, makes the worker retire after answering.
- Results come back as JSON, never pickle: details hold plain data (other objects arrive as their repr), a
  result larger than ``max_result_bytes`` (default 1 MiB) becomes "error"/"result_too_large", and a worker that
  sends anything else is killed ("error"/"bad_result"). Nothing a reward returns runs code in the caller.
- Nothing a reward function raises or does reaches the caller as an exception. Caller errors do raise, before
  anything is scored: an unknown verifier name (UnknownVerifierError), an item that is not a request (TypeError),
  a closed runner (RuntimeError).

User reward functions: ``fn(response, reference, **options) -> float | Verdict``
- They are sent to the workers pickled BY REFERENCE (module + name), so they must be defined at the top level of
  an importable module. Workers are fresh interpreters that never import the caller's main script, so a script
  needs no ``if __name__ == "__main__":`` guard for them, and a function defined in the script itself
  (``__main__``) gets status "error", reason "unpicklable_reward", with a message saying to move it into a module
  and import it. A lambda, a nested function or anything else that cannot be pickled gets the same verdict (also
  when a worker cannot import it). Registered "process" verifiers are shipped the same way.
- A float return becomes a Verdict (see to_verdict); so does a Verdict, whose score must be finite (else status
  "error", reason "non_finite_score"); a raised exception becomes status "error", reason "verifier_raised", with
  the exception's repr and traceback in details.

Keyword arguments the runner passes only to functions whose signature accepts them (names the parameter or takes
``**kwargs``): ``timeout_s`` (from the options), and ``prompt`` and ``meta``, the request's fields, when they are
not None (judges and rewards that depend on the task's state need them); ``truncated`` (the response hit the
length limit) only to a function whose signature names it. A request giving ``prompt``, ``meta`` or ``truncated``
both as a field and in its options is a caller error (ValueError).

Cache: an LRU of verdicts keyed by (verifier, response, canonical JSON of reference, options, prompt, meta and
truncated).
Only verdicts of pooled calls are cached (inline verifiers cost less than a lookup); only deterministic statuses
(correct, incorrect, partial, undecidable), never timeout or error; only when reference, options, prompt and meta
are plain JSON values (str/int/float/bool/None, lists, dicts with str keys). Registered verifiers are keyed by
name and function. User callables are cached only when they are plain module-level functions (keyed by module and
qualified name, and assumed pure); pass ``CallableRequest(..., cache=False)`` for a reward that is not (e.g. a
sampling judge). Identical requests in flight at the same time are run once.
"""

from rlvr.verifiers.runner.api import RewardRunner, default_runner, score_batch, set_default_runner
from rlvr.verifiers.runner.cache import CacheInfo
from rlvr.verifiers.runner.calls import call_verifier, to_verdict
from rlvr.verifiers.runner.requests import CallableRequest, ScoreRequest

__all__ = [
    "CacheInfo",
    "CallableRequest",
    "RewardRunner",
    "ScoreRequest",
    "call_verifier",
    "default_runner",
    "score_batch",
    "set_default_runner",
    "to_verdict",
]
