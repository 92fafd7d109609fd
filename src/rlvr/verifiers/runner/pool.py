"""The worker pool: reward worker processes owned by ONE dispatcher thread, which starts them, hands out queued
calls, enforces deadlines, reads results and replaces the dead. Callers only append to the queue and wake it.

Workers are fresh interpreters started as ``python -P -m rlvr.verifiers.runner.worker`` (worker.py): they inherit
none of the caller's threads, locks, CUDA state or open files, and never import the caller's main module, so a
script without an ``if __name__ == "__main__":`` guard is not re-run by them. The price, about 0.2-0.5 s per
worker start, is paid on the first pooled request and after a worker is lost, not per call.

The dispatcher never blocks on a worker: requests are written and results read through non-blocking pipes
under poll(), results are size-capped JSON frames decoded by decode.py, and killed workers are reaped later.

Deadlines. A call's clock starts when the call is submitted, or, when every worker was busy with earlier calls
then, when a worker slot frees for it: a worker's start-up (also a replacement's, after a timeout) counts against
the call that waits for it. A result is credited only if it is complete by ``clock + timeout_s``; past that the
caller gets Verdict(0.0, "timeout") at once, and only then is the worker killed (SIGSTOP, SIGKILL: no signal a
call can ignore or block), so the caller has its verdict by ``clock + timeout_s + DEADLINE_GRACE_S`` whatever the
call does (sleeps, ignores or blocks signals, forks children that do, returns a huge or slow-to-encode result).
"""

from __future__ import annotations

import collections
import os
import pickle
import select
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

from rlvr.verifiers.base import Status, Verdict
from rlvr.verifiers.runner import decode, tree
from rlvr.verifiers.runner.calls import MAX_ERROR_CHARS, error

STARTUP_TIMEOUT_S = 60.0  # a worker that is not ready by then is killed
MAX_START_FAILURES = 3  # consecutive failed worker starts before queued requests are failed instead of retried
_NO_PIDFD_POLL_S = 0.05  # how often exits are polled where pidfd_open is unavailable
_ENVELOPE_BYTES = 1024  # room for the message around a verdict of max_result_bytes
# What a caller may wait beyond a call's timeout_s for its verdict: the dispatcher's wake-up and bookkeeping,
# on a loaded machine. Documented in the package docstring and docs/security.md.
DEADLINE_GRACE_S = 0.5
_REAP_WAIT_S = 10.0  # how long a killed worker may take to be reaped before close() stops waiting for it


class Task:
    """One pooled call, possibly awaited by several identical requests (waiters)."""

    __slots__ = ("fn_blob", "args_blob", "timeout_s", "key", "label", "waiters", "retried", "submitted", "deadline")

    def __init__(self, fn_blob: bytes, args_blob: bytes, timeout_s: float, key: Any, label: str):
        self.fn_blob, self.args_blob, self.timeout_s, self.key, self.label = fn_blob, args_blob, timeout_s, key, label
        self.waiters: list[Any] = []
        self.retried = False
        self.submitted = time.monotonic()
        self.deadline: float | None = None  # set once the call has a worker slot (see the module docstring)


class _Worker:
    __slots__ = ("proc", "pid", "pidfd", "request_fd", "reader", "outbuf", "state", "task", "deadline", "sent_at",
                 "seq", "served", "killed")

    def __init__(self, proc: subprocess.Popen, request_fd: int, result_fd: int, max_frame: int, deadline: float):
        self.proc, self.pid = proc, proc.pid
        try:
            self.pidfd: int | None = os.pidfd_open(proc.pid)  # readable once it exits; only we can reap it
        except (AttributeError, OSError):
            self.pidfd = None
        self.request_fd = request_fd
        self.reader = decode.FrameReader(result_fd, max_frame)
        self.outbuf = bytearray()
        self.state = "starting"  # -> "idle" <-> "busy"
        self.task: Task | None = None
        self.deadline: float | None = deadline
        self.sent_at = 0.0
        self.seq = 0
        self.served = 0  # calls answered: a death on a worker that served others is not blamed on the call at once
        self.killed: list[int] = []  # the pids SIGKILLed with it, waited for by close()


class Pool:
    """See the module docstring. ``on_done(task, verdict, seconds)`` is called once per task (from the dispatcher
    thread, or from ``close``); ``wanted(task)`` says whether anybody still waits for a queued task."""

    def __init__(self, workers: int, memory_mb: int, max_result_bytes: int, stats: Any, *,
                 on_done: Callable, wanted: Callable):
        self.size = workers
        self.memory_mb = memory_mb
        self.max_result_bytes = max_result_bytes
        self.stats = stats
        self.on_done = on_done
        self.wanted = wanted
        self.lock = threading.Lock()
        self.queue: collections.deque[Task] = collections.deque()
        self.workers: list[_Worker] = []
        self.dying: list[_Worker] = []  # killed, not reaped yet
        self.freed_at = 0.0  # when a worker slot last became free (a call ended, a worker was lost)
        self.want = 0  # how many workers to keep alive (0 until the first request, or after repeated start failures)
        self.start_failures = 0
        self.thread: threading.Thread | None = None
        self.closing = False
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_r, False)
        os.set_blocking(self.wake_w, False)

    # ------------------------------------------------------------------------------ caller side

    def submit(self, task: Task) -> None:
        with self.lock:
            refused = self.closing
            if not refused:
                self.queue.append(task)
                self.want = self.size
                if self.thread is None or not self.thread.is_alive():
                    self.thread = threading.Thread(target=self._run, name="rlvr-reward-dispatcher", daemon=True)
                    self.thread.start()
        if refused:
            self.on_done(task, error("runner_closed", "the RewardRunner was closed", task.label), None)
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
                _kill(w)

    def _wake(self) -> None:
        try:
            os.write(self.wake_w, b"x")
        except OSError:  # pipe full (a wake-up is pending anyway) or closed
            pass

    # -------------------------------------------------------------------------- dispatcher side

    def _run(self) -> None:
        try:
            self._loop()
        except BaseException as exc:  # a bug here must not leave callers waiting forever
            detail = "".join(traceback.format_exception(exc))[-MAX_ERROR_CHARS:]
            self._shutdown("runner_internal_error", detail)
        else:
            self._shutdown("runner_closed", "the RewardRunner was closed")

    def _loop(self) -> None:
        while True:
            with self.lock:
                if self.closing:
                    return
            self._maintain()
            self._reap_dying()
            self._start_clocks()
            self._assign()
            poller = select.poll()
            poller.register(self.wake_r, select.POLLIN)
            owners: dict[int, _Worker] = {}
            deadlines = []
            for w in self.workers:
                if not w.reader.eof:
                    poller.register(w.reader.fd, select.POLLIN)
                    owners[w.reader.fd] = w
                if w.pidfd is not None:
                    poller.register(w.pidfd, select.POLLIN)
                    owners[w.pidfd] = w
                else:
                    deadlines.append(time.monotonic() + _NO_PIDFD_POLL_S)
                if w.outbuf:
                    poller.register(w.request_fd, select.POLLOUT)
                    owners[w.request_fd] = w
                if w.deadline is not None:
                    deadlines.append(w.deadline)
            deadlines += [t.deadline for t in list(self.queue) if t.deadline is not None]
            if self.dying:
                deadlines.append(time.monotonic() + _NO_PIDFD_POLL_S)
            timeout_ms = None
            if deadlines:
                timeout_ms = max(0, int((min(deadlines) - time.monotonic()) * 1000) + 1)
            events = poller.poll(timeout_ms)
            touched: dict[int, _Worker] = {}
            exited: set[int] = set()
            for fd, _ in events:
                if fd == self.wake_r:
                    try:
                        while os.read(self.wake_r, 4096):
                            pass
                    except OSError:
                        pass
                elif fd in owners:
                    w = owners[fd]
                    touched[id(w)] = w
                    if fd == w.pidfd:
                        exited.add(id(w))
            now = time.monotonic()  # results seen by now arrived by now: they count if this is within the deadline
            for w in list(self.workers):
                if id(w) in touched or w.pidfd is None:
                    self._service(w, exited=id(w) in exited or w.pidfd is None or w.reader.eof, seen=now)
                if w in self.workers and w.deadline is not None and time.monotonic() >= w.deadline:
                    self._expire(w)
            self._expire_queued()

    def _start_clocks(self) -> None:
        """Start the clock of each queued call that has a worker slot (an idle or starting worker, or one still
        to start): the first calls of the queue, as many as there are such slots."""
        busy = sum(1 for w in self.workers if w.state == "busy")
        slots = max(0, self.size - busy)
        with self.lock:
            waiting = list(self.queue)[:slots]
        for task in waiting:
            if task.deadline is None:
                task.deadline = max(task.submitted, self.freed_at) + task.timeout_s

    def _expire_queued(self) -> None:
        """Calls whose clock ran out before a worker could take them (a slow worker start)."""
        now = time.monotonic()
        with self.lock:
            late = [t for t in self.queue if t.deadline is not None and now >= t.deadline]
            for task in late:
                self.queue.remove(task)
        for task in late:
            self._timed_out(task, "no worker was ready in time")

    def _timed_out(self, task: Task, why: str | None = None) -> None:
        details: dict[str, Any] = {"timeout_s": task.timeout_s, "verifier": task.label}
        if why:
            details["error"] = why
        self.on_done(task, Verdict(0.0, Status.TIMEOUT, "timeout", details=details), task.timeout_s)

    def _maintain(self) -> None:
        while len(self.workers) < self.want:
            if not self._start_worker():
                break

    def _start_worker(self) -> bool:
        request_r, request_w = os.pipe()
        result_r, result_w = os.pipe()
        try:
            proc = subprocess.Popen(
                [*_interpreter(), "-m", "rlvr.verifiers.runner.worker", str(request_r), str(result_w)],
                pass_fds=(request_r, result_w),
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # its own session and process group: no terminal signals, killable as one
                env=_worker_env(),
            )
        except Exception as exc:
            for fd in (request_w, result_r):
                os.close(fd)
            self._start_failed({"error": repr(exc)[:MAX_ERROR_CHARS]})
            return False
        finally:
            os.close(request_r)
            os.close(result_w)
        os.set_blocking(request_w, False)
        os.set_blocking(result_r, False)
        w = _Worker(proc, request_w, result_r, self.max_result_bytes + _ENVELOPE_BYTES,
                    time.monotonic() + STARTUP_TIMEOUT_S)
        # "" on sys.path (a notebook, `python -c`) means the caller's working directory: the worker gets it as an
        # absolute path, so it imports the caller's own modules as the caller does
        init = {"sys_path": [p or os.getcwd() for p in sys.path], "memory_mb": self.memory_mb, "parent_pid": os.getpid(),
                "max_result_bytes": self.max_result_bytes}
        w.outbuf += decode.frame(pickle.dumps(init, protocol=pickle.HIGHEST_PROTOCOL))
        self.workers.append(w)
        self._flush(w)
        return True

    def _start_failed(self, details: dict[str, Any]) -> None:
        self.stats.add("worker_start_failures")
        self.start_failures += 1
        if self.start_failures >= MAX_START_FAILURES:  # it will not get better by retrying: fail what waits
            with self.lock:
                failed, self.queue = list(self.queue), collections.deque()
                self.want = 0  # the next submit tries again
            self.start_failures = 0
            for task in failed:
                self.on_done(task, error("worker_start_failed", "a reward worker could not start", task.label,
                                         **details), None)

    def _assign(self) -> None:
        for w in list(self.workers):
            if w.state != "idle":
                continue
            task = self._next_task()
            while task is not None and task.deadline is not None and time.monotonic() >= task.deadline:
                self._timed_out(task, "no worker was ready in time")  # sending it would only cost a worker
                task = self._next_task()
            if task is None:
                return
            w.seq += 1
            w.outbuf += decode.frame(pickle.dumps((w.seq, task.fn_blob, task.args_blob),
                                                  protocol=pickle.HIGHEST_PROTOCOL))
            w.state, w.task = "busy", task
            w.sent_at = time.monotonic()
            if task.deadline is None:
                task.deadline = max(task.submitted, self.freed_at) + task.timeout_s
            w.deadline = task.deadline
            self._flush(w)

    def _next_task(self) -> Task | None:
        while True:
            with self.lock:
                if not self.queue:
                    return None
                task = self.queue.popleft()
            if self.wanted(task):
                return task

    def _flush(self, w: _Worker) -> None:
        """Write what is pending to the worker without blocking (the rest when its pipe has room)."""
        while w.outbuf:
            try:
                n = os.write(w.request_fd, w.outbuf)
            except BlockingIOError:
                return
            except OSError:  # it has gone: its exit is handled by _service
                w.outbuf.clear()
                return
            del w.outbuf[:n]

    def _service(self, w: _Worker, *, exited: bool = True, seen: float | None = None) -> None:
        """Write and read what a worker's pipes allow; reap it once it has exited (looked at only when
        ``exited`` says it may have: a wait on the process costs more than the rest of a call's handling)."""
        if w.outbuf:
            self._flush(w)
        try:
            frames = w.reader.read()
        except decode.ProtocolError as exc:
            self._broken(w, "result_too_large", f"the reward's result was refused: {exc}")
            return
        if frames and w.state == "busy" and w.deadline is not None \
                and (time.monotonic() if seen is None else seen) > w.deadline:
            self._expire(w, force=True)  # complete only after its deadline: a timeout, never credit
            return
        for payload in frames:
            try:
                self._handle(w, decode.decode(payload))
            except decode.ProtocolError as exc:
                self._broken(w, "bad_result", f"the worker sent a malformed result: {exc}")
                return
            if w not in self.workers:
                return
        if (exited or w.reader.eof) and w.proc.poll() is not None:
            self._reap(w)

    def _handle(self, w: _Worker, message: dict[str, Any]) -> None:
        if w.state == "starting" and "ready" in message:
            w.state, w.deadline = "idle", None
            self.start_failures = 0
            return
        if w.state != "busy" or message.get("seq") != w.seq or type(message.get("retire")) is not bool:
            raise decode.ProtocolError("a message out of turn")
        verdict = decode.decode_verdict(message.get("verdict"))
        task, w.task = w.task, None
        w.state, w.deadline = "idle", None
        self.freed_at = time.monotonic()
        w.served += 1
        seconds = time.monotonic() - w.sent_at
        if message["retire"]:  # e.g. after a MemoryError: start afresh (counted before the caller sees the verdict)
            self._forget(w, kill=True)
            self.stats.add("worker_restarts")
        if task is not None:
            self.on_done(task, verdict, seconds)

    def _broken(self, w: _Worker, reason: str, message: str) -> None:
        """A worker broke the protocol: kill it; the call it was running (whose code did it) gets ``reason``."""
        task, w.task = w.task, None
        was_starting = w.state == "starting"
        self._forget(w, kill=True)
        if was_starting:
            self._start_failed({"error": message})
            return
        self.stats.add("worker_restarts")
        if task is not None:
            self.on_done(task, error(reason, message, task.label), time.monotonic() - w.sent_at)

    def _reap(self, w: _Worker) -> None:
        """A worker exited on its own: account for it and forget it (the next loop starts a replacement)."""
        self._forget(w, kill=True)
        code = w.proc.returncode
        details: dict[str, Any] = {"exitcode": code}
        if code is not None and code < 0:
            try:
                details["signal"] = signal.Signals(-code).name
            except ValueError:
                details["signal"] = -code
        if w.state == "starting":
            self._start_failed(details)
            return
        task, w.task = w.task, None
        self.stats.add("worker_restarts")
        if task is None:
            return
        if w.served and not task.retried:
            # This worker ran other calls before: one of them may have left something that killed it later.
            # Run the call again on a fresh worker, so that a death is only charged to a call that causes it.
            task.retried = True
            with self.lock:
                self.queue.appendleft(task)
            return
        details["timeout_s"] = task.timeout_s
        verdict = Verdict(0.0, Status.ERROR, "worker_died", details={"verifier": task.label, **details})
        self.on_done(task, verdict, time.monotonic() - w.sent_at)

    def _expire(self, w: _Worker, *, force: bool = False) -> None:
        if not force:
            self._service(w)  # the answer may have come in just now
            if w not in self.workers or w.deadline is None or time.monotonic() < w.deadline:
                return
        if w.state == "starting":
            self._forget(w, kill=True)
            self._start_failed({"error": f"not ready after {STARTUP_TIMEOUT_S:g} s"})
            return
        task, w.task = w.task, None
        self.stats.add("worker_restarts")  # counted before the caller sees the verdict
        if task is not None:  # the verdict first: killing and reaping are the pool's business, not the caller's
            self._timed_out(task)
        self._forget(w, kill=True)

    def _forget(self, w: _Worker, *, kill: bool = False) -> None:
        if w in self.workers and w.state == "busy":
            self.freed_at = time.monotonic()
        if kill:
            _kill(w, wait=False)
            if w.proc.returncode is None:
                self.dying.append(w)
        try:
            self.workers.remove(w)
        except ValueError:
            pass
        for fd in (w.request_fd, w.reader.fd, w.pidfd):
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass
        w.pidfd = None

    def _reap_dying(self) -> None:
        self.dying = [w for w in self.dying if w.proc.poll() is None]

    def _shutdown(self, reason: str, message: str) -> None:
        """Kill every worker; fail what is queued or running. Safe to call twice."""
        killed = list(self.workers)
        for w in killed:
            task, w.task = w.task, None
            self._forget(w, kill=True)
            if task is not None:
                self.on_done(task, error(reason, message, task.label), None)
        # so that when close() returns, nothing of ours still runs: a keeper reaped at once may leave its worker
        # still exiting, so every killed tree is waited for, not only the keepers still running
        for w in killed + [w for w in self.dying if w not in killed]:
            _kill(w, wait=True)
        self.dying = []
        with self.lock:
            failed, self.queue = list(self.queue), collections.deque()
            self.thread = None if self.thread is threading.current_thread() else self.thread
        for task in failed:
            self.on_done(task, error(reason, message, task.label), None)


def _kill(w: _Worker, *, wait: bool = True) -> None:
    """SIGKILL a worker's keeper and every process below it (frozen first, see tree.py); with ``wait``, reap the
    keeper and wait for the others to be gone (else the pool reaps it later, see ``_reap_dying``)."""
    if w.proc.returncode is None:  # not reaped yet, so its pid is still its own
        w.killed += tree.kill_tree(w.pid, include_root=True)
        try:
            os.killpg(w.pid, signal.SIGKILL)  # the keeper leads a process group; also without /proc
        except OSError:
            pass
    if not wait:
        w.proc.poll()
        return
    try:
        w.proc.wait(timeout=_REAP_WAIT_S)
    except subprocess.TimeoutExpired:
        pass
    tree.wait_gone(w.killed, _REAP_WAIT_S)


def _interpreter() -> list[str]:
    """This interpreter with its flags, and -P so that the current directory cannot shadow a module."""
    try:
        flags = subprocess._args_from_interpreter_flags()  # what multiprocessing passes to its children
    except Exception:
        flags = []
    return [sys.executable, *flags, "-P"]


_ENV_LOCK = threading.Lock()
_RLVR_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def _worker_env() -> dict[str, str]:
    """The caller's environment, with the directory this rlvr was imported from first on PYTHONPATH (the worker
    gets the caller's full sys.path once it runs; this is only so it can import rlvr to start with)."""
    with _ENV_LOCK:
        env = dict(os.environ)
    path = env.get("PYTHONPATH")
    env["PYTHONPATH"] = _RLVR_ROOT + (os.pathsep + path if path else "")
    return env
