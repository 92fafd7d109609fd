"""The reward worker process: ``python -P -m rlvr.verifiers.runner.worker REQUEST_FD RESULT_FD``.

Started by the pool (pool.py) as a fresh interpreter that imports rlvr and never the caller's main module, so a
user script without an ``if __name__ == "__main__":`` guard is not re-run by its workers (and functions defined
in that script cannot be loaded here: the caller refuses them with a verdict that says where to move them).

Two processes per worker:
- the keeper (the process the pool started) is a child subreaper: it forks the worker, and when the worker dies,
  however it dies, kills every process left below it and exits with the worker's status;
- the worker, a child subreaper too, runs calls one at a time. After each call it kills whatever the call
  started, and puts back what a call may change in the process (process_state.py: descriptors, standard
  streams, signal handlers and mask, timers and hooks, working directory, umask, resource limits, the Python and
  C-level environment, decimal and floating-point modes, numerical libraries' global modes, sys.path/sys.modules,
  builtins, interpreter limits, warning filters, locale). A call that left threads running, or a state that
  cannot be put back, makes it retire after answering, so nothing of one call can act during the next.

Protocol (frames: 4-byte big-endian length, then the payload):
- pool -> worker, pickled (the caller is trusted): first {"sys_path", "memory_mb", "parent_pid", "max_result_bytes"},
  then (seq, fn_blob, args_blob) per call;
- worker -> pool, JSON (decode.py; nothing a reward returns is unpickled by the caller): {"ready": pid,
  "limit": bytes or null}, then {"seq": n, "verdict": {...}, "retire": bool} per call.
"""

from __future__ import annotations

import _thread
import os
import pickle
import signal
import sys
import time
import types
from typing import Any

from rlvr.verifiers.runner import decode, tree
from rlvr.verifiers.runner.calls import error, guarded_call
from rlvr.verifiers.runner.process_state import ProcessState
_REAP_S = 2.0  # how long the worker waits for killed descendants to be reaped before it retires instead


def main(argv: list[str]) -> None:
    request_fd, result_fd = int(argv[0]), int(argv[1])
    for fd in (request_fd, result_fd):
        os.set_inheritable(fd, False)  # programs a call runs do not get the channel
    payload = _read_frame(request_fd)
    if payload is None:
        os._exit(1)
    init = pickle.loads(payload)
    tree.die_with_parent(signal.SIGTERM)
    if os.getppid() != init["parent_pid"]:  # the caller died before we could ask to follow it
        os._exit(1)
    tree.become_subreaper()
    _no_core_files()
    keeper = os.getpid()
    worker = os.fork()
    if worker == 0:
        try:
            tree.die_with_parent(signal.SIGKILL)
            if os.getppid() == keeper:
                _serve(init, request_fd, result_fd)
        finally:
            os._exit(0)
    _keep(worker, request_fd, result_fd)


# ------------------------------------------------------------------------------------------------ the keeper


def _keep(worker: int, request_fd: int, result_fd: int) -> None:
    """Wait for the worker; then kill what is left below us and exit as it did."""
    os.close(request_fd)
    os.close(result_fd)
    signal.signal(signal.SIGINT, signal.SIG_IGN)

    def on_term(signum: int, frame: Any) -> None:  # the caller's dispatcher went away
        tree.kill_tree(os.getpid(), include_root=False)
        os._exit(1)

    signal.signal(signal.SIGTERM, on_term)
    while True:
        try:
            pid, status = os.waitpid(-1, 0)
        except ChildProcessError:
            os._exit(1)
        if pid == worker:
            break
    tree.kill_tree(os.getpid(), include_root=False)
    _reap_all(time.monotonic() + _REAP_S)
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
    os._exit(os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 1)


def _reap_all(deadline: float) -> bool:
    """Reap every child; False if some are still alive at ``deadline``."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return True
        if pid == 0:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.001)


# ------------------------------------------------------------------------------------------------ the worker


def _serve(init: dict[str, Any], request_fd: int, result_fd: int) -> None:
    from rlvr.verifiers.runner import api

    api._IN_WORKER = True  # here every request runs inline: the worker itself is the sandbox
    sys.path[:] = init["sys_path"]
    # Pickled references to the caller's script ("__main__.fn") must fail to load, not find this module's names.
    sys.modules["__main__"] = types.ModuleType("__main__")
    tree.become_subreaper()
    import rlvr.verifiers  # noqa: F401  (registers the built-in verifiers)

    limit = _cap_address_space(init["memory_mb"])
    max_bytes = init["max_result_bytes"]
    state = _State((request_fd, result_fd))
    me = os.getpid()
    _send(result_fd, decode.encode({"ready": os.getpid(), "limit": limit}, max_bytes))
    while True:
        payload = _read_frame(request_fd)
        if payload is None:  # the pool closed us
            return
        seq, fn_blob, args_blob = pickle.loads(payload)
        verdict = _run_task(fn_blob, args_blob)
        if os.getpid() != me:  # a child the call forked, returning into this loop: it must not answer or serve
            os._exit(0)
        try:  # the returned object's own code (properties, repr) runs here, still within the call's deadline
            plain = decode.plain_verdict(verdict, max_bytes)
        except decode.TooLarge:
            plain = decode.plain_verdict(error(
                "result_too_large", f"the verdict takes more than {max_bytes} bytes as JSON (the runner's "
                "max_result_bytes)", limit=max_bytes), max_bytes)
        except BaseException as exc:  # its own code raised; only our own exception's text is safe to read
            why = exc.args[0] if type(exc) is decode.Unencodable else f"{type(exc).__name__} while reading it"
            plain = decode.plain_verdict(error("bad_verifier_return", f"the verdict cannot be sent: {why}"), max_bytes)
        # after a MemoryError the heap may be fragmented: start afresh
        retire = (plain["status"], plain["reason"]) == ("error", "memory_limit")
        if not state.restore():
            retire = True
        try:
            message = decode.encode({"seq": seq, "verdict": plain, "retire": retire}, max_bytes)
        except decode.TooLarge:  # the message around the verdict tipped it over
            plain = decode.plain_verdict(error("result_too_large", "the verdict is too large"), max_bytes)
            message = decode.encode({"seq": seq, "verdict": plain, "retire": retire}, max_bytes)
        _send(result_fd, message)
        if retire:
            return


def _run_task(fn_blob: bytes, args_blob: bytes) -> Any:
    from rlvr.verifiers.registry import get_verifier

    oom = False
    try:
        kind, target = pickle.loads(fn_blob)
        if kind == "name":
            try:
                fn = get_verifier(target)
            except KeyError:
                return error(
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
        hint = ""
        if "__main__" in str(exc):
            hint = (" (functions of the script being run, __main__, cannot be loaded: workers never re-run the "
                    "script; move the function into a module and import it)")
        return error(
            "unpicklable_reward",
            f"the reward function could not be loaded in the worker: {exc!r}{hint}; it must be defined at the top "
            "level of a module the worker can import",
        )
    if oom:
        return error("memory_limit", "MemoryError while loading the reward function")
    try:
        response, reference, kwargs = pickle.loads(args_blob)
    except MemoryError:
        oom = True
    except BaseException as exc:
        return error("unpicklable_arguments", f"the request could not be unpickled in the worker: {exc!r}")
    if oom:
        return error("memory_limit", "MemoryError while loading the request")
    return guarded_call(fn, response, reference, kwargs, catch_all=True)


class _State:
    """What a call may change in the worker process, recorded when the worker is ready and put back after
    every call. ``restore`` returns False when the worker cannot be made clean and must retire."""

    def __init__(self, channel: tuple[int, ...] = ()) -> None:
        self.process = ProcessState(keep_fds=channel)
        self.threads = _thread._count()

    def restore(self) -> bool:
        clean = _kill_descendants()
        clean = not self.process.restore() and clean
        # A Python thread the call started is still running: it could act during the next call. (Threads of
        # native libraries, such as BLAS pools, run no Python code and are not counted.)
        if _thread._count() > self.threads:
            clean = False
        return clean


def _kill_descendants() -> bool:
    """Kill every process a call left below the worker (a subreaper, so orphans are still ours) and reap them."""
    try:
        pid, _ = os.waitpid(-1, os.WNOHANG)
    except ChildProcessError:
        return True  # no child at all, alive or dead: the common case, one system call
    if pid == 0:
        tree.kill_tree(os.getpid(), include_root=False)
    return _reap_all(time.monotonic() + _REAP_S)


def _no_core_files() -> None:
    try:
        import resource

        resource.setrlimit(resource.RLIMIT_CORE, (0, resource.getrlimit(resource.RLIMIT_CORE)[1]))
    except (ImportError, ValueError, OSError):
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


# ------------------------------------------------------------------------------------------------ the channel


def _read_frame(fd: int) -> bytes | None:
    header = _read_exactly(fd, decode.HEADER.size)
    if header is None:
        return None
    (n,) = decode.HEADER.unpack(header)
    return _read_exactly(fd, n)


def _read_exactly(fd: int, n: int) -> bytes | None:
    chunks, got = [], 0
    while got < n:
        try:
            chunk = os.read(fd, min(n - got, 1 << 20))
        except InterruptedError:
            continue
        except OSError:
            return None
        if not chunk:
            return None
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def _send(fd: int, payload: bytes) -> None:
    data = memoryview(decode.frame(payload))
    while data:
        try:
            n = os.write(fd, data)
        except InterruptedError:
            continue
        except OSError:  # the pool has gone
            os._exit(0)
        data = data[n:]


if __name__ == "__main__":
    from rlvr.verifiers.runner import worker as _worker  # the package's copy, not this __main__ one

    _worker.main(sys.argv[1:])
