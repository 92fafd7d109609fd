"""Long-lived bubblewrap sandboxes that each run a fork server (``zygote.py``), kept in a pool.

Starting bubblewrap and a Python interpreter costs tens of milliseconds per program; forking a process that
already runs Python costs about one. Each ``ForkServer`` is one bubblewrap sandbox (the same namespaces,
read-only binds and environment as a per-program sandbox, see sandbox.py) with its own uid, serving one
program at a time: each program gets a fresh child with its own mount and IPC namespaces, a fresh tmpfs
/tmp and /dev/shm, that uid with no capabilities, and the rlimits; when its first process ends, or at the
checker's word, every process of the uid is killed before the next program may start (zygote.py).

A server is used by one ``Sandbox`` at a time (``ForkServerPool.acquire`` / ``release``); idle servers are
kept, up to ``max_idle``, for the next call. One whose answers stop making sense is closed, never reused.
The pool is only used where the checker is root (the program's uid must differ from the server's).
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

from rlvr.verifiers.code.folders import SandboxFolder

CONTROL_TIMEOUT_S = 10.0  # a server that does not answer a control request in this time is broken


class ForkServer:
    """One bubblewrap sandbox running ``zygote.py``; ``run`` forks a program into a fresh isolated child."""

    def __init__(self, *, network: bool, base: str, slots, argv_for, harness_files):
        """``slots`` hands out uids (sandbox._UidSlots); ``argv_for(box, uid)`` is the bubblewrap command;
        the server's folder is made under ``base`` (folders.base_dir)."""
        self.network, self.base, self.slots = network, base, slots
        self.key = (network, base)
        self.broken = False
        self.uid = slots.acquire()
        try:
            self.folder = SandboxFolder(base, prefix="server-")
        except BaseException:
            slots.release(self.uid)
            raise
        try:
            for source in (*harness_files,):
                shutil.copyfile(source, self.folder.box / source.name)
                os.chmod(self.folder.box / source.name, 0o644)
            self.control, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            settings = {"uid": self.uid, "control": theirs.fileno(), "sys_path": _site_dirs()}
            argv = argv_for(self.folder.box, self.uid) + [sys.executable, "-I", "-S", "-B", "/box/zygote.py",
                                                json.dumps(settings)]
            self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                         stderr=subprocess.DEVNULL, env={}, start_new_session=True,
                                         pass_fds=[theirs.fileno()], close_fds=True)
            theirs.close()
            answer = self.receive(CONTROL_TIMEOUT_S)
            if answer != "ready":
                raise OSError(f"the fork server did not start: {answer}")
        except BaseException:
            self.close()
            raise

    def alive(self) -> bool:
        return not self.broken and self.proc.poll() is None

    def receive(self, timeout_s: float) -> str:
        """The server's next line; a silent, closed or nonsensical server is marked broken."""
        try:
            self.control.settimeout(max(0.0, timeout_s))
            data = self.control.recv(256)
        except (TimeoutError, BlockingIOError):
            raise TimeoutError from None
        except OSError as exc:
            self.broken = True
            raise OSError(f"the fork server failed: {exc}") from exc
        if not data:
            self.broken = True
            raise OSError("the fork server exited")
        return data.decode("ascii", "replace")

    def request(self, message: dict, fds: list[int] = ()) -> None:
        try:
            self.control.settimeout(CONTROL_TIMEOUT_S)
            socket.send_fds(self.control, [json.dumps(message).encode()], list(fds))
        except OSError as exc:
            self.broken = True
            raise OSError(f"the fork server failed: {exc}") from exc

    def run(self, mode: str, limits: dict, program: bytes, *, tmp_bytes: int, shm_bytes: int,
            channel: tuple[int, int] | None) -> ForkedProcess:
        """Fork ``program`` in ``mode`` ("run" or "serve"); its stdio are pipes to this process."""
        memfd = os.memfd_create("program", os.MFD_CLOEXEC)
        stdin_r, stdin_w = os.pipe()
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        ours, theirs = [stdin_w, out_r, err_r], [memfd, stdin_r, out_w, err_w]
        try:
            view = memoryview(program)
            while view:
                view = view[os.write(memfd, view):]
            self.request({"op": "start", "mode": mode, "limits": limits, "tmp_bytes": tmp_bytes,
                          "shm_bytes": shm_bytes}, theirs + list(channel or ()))
        except BaseException:
            for fd in ours:
                os.close(fd)
            raise
        finally:
            for fd in theirs:
                os.close(fd)
        process = ForkedProcess(self, *ours)
        try:
            answer = self.receive(CONTROL_TIMEOUT_S)
        except TimeoutError:
            answer = "failed: no answer"
        if answer != "started":
            self.broken = True
            process.close_streams()
            raise OSError(f"the fork server could not start the program ({answer})")
        return process

    def close(self) -> None:
        self.broken = True
        proc = getattr(self, "proc", None)
        if proc is not None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # bubblewrap's PID namespace dies with it
            except (ProcessLookupError, PermissionError):
                pass
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        control = getattr(self, "control", None)
        if control is not None:
            control.close()
        self.folder.remove()
        if self.uid is not None:
            self.slots.release(self.uid)
            self.uid = None


class ForkedProcess:
    """A program the fork server started: the parts of ``subprocess.Popen`` the harness uses."""

    def __init__(self, server: ForkServer, stdin: int, stdout: int, stderr: int):
        self.server = server
        self.stdin = open(stdin, "wb", buffering=0)
        self.stdout = open(stdout, "rb", buffering=0)
        self.stderr = open(stderr, "rb", buffering=0)
        self.returncode: int | None = None
        self.ended = False  # the server confirmed that none of its processes is left

    def _handle(self, line: str) -> None:
        if line.startswith("exit "):
            self.returncode = int(line.split()[1])
            self.ended = True
        elif line == "swept":
            self.ended = True
        else:
            self.server.broken = True
            raise OSError(f"unexpected answer from the fork server: {line!r}")

    def poll(self) -> int | None:
        while self.returncode is None and not self.server.broken:
            try:
                self._handle(self.server.receive(0.0))
            except (TimeoutError, OSError):
                break
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = time.monotonic() + (CONTROL_TIMEOUT_S if timeout is None else timeout)
        while self.returncode is None:
            try:
                self._handle(self.server.receive(deadline - time.monotonic()))
            except TimeoutError:
                raise subprocess.TimeoutExpired("program", timeout) from None
        return self.returncode

    def kill(self) -> None:
        """Kill every process of the program and wait until the server says none is left."""
        if self.ended or self.server.broken:
            return
        self.server.request({"op": "kill"})
        deadline = time.monotonic() + CONTROL_TIMEOUT_S
        try:
            while True:
                line = self.server.receive(deadline - time.monotonic())
                if line == "swept":
                    break
                self._handle(line)
        except (TimeoutError, OSError):
            self.server.broken = True
        self.ended = True
        if self.returncode is None:
            self.returncode = -signal.SIGKILL

    def close_streams(self) -> None:
        for stream in (self.stdin, self.stdout, self.stderr):
            try:
                stream.close()
            except OSError:
                pass


class ForkServerPool:
    """Idle fork servers by (network, base dir); ``acquire`` hands one out, starting one if none is idle."""

    def __init__(self, max_idle: int | None = None):
        self.max_idle = max_idle or max(2, os.cpu_count() or 2)
        self.idle: dict[tuple[bool, str], list[ForkServer]] = {}
        self.lock = threading.Lock()

    def acquire(self, key: tuple[bool, str], make) -> ForkServer:
        while True:
            with self.lock:
                idle = self.idle.get(key)
                server = idle.pop() if idle else None
            if server is None:
                return make()
            if server.alive():
                return server
            server.close()

    def release(self, server: ForkServer, *, healthy: bool) -> None:
        if healthy and server.alive():
            with self.lock:
                idle = self.idle.setdefault(server.key, [])
                if sum(map(len, self.idle.values())) < self.max_idle:
                    idle.append(server)
                    return
        server.close()

    def forget(self) -> None:
        """In a child of a fork of this process: the servers are the parent's, never to be used here."""
        self.idle = {}
        self.lock = threading.Lock()

    def close(self) -> None:
        """Close every idle server (those in use close when they are released)."""
        with self.lock:
            servers = [s for group in self.idle.values() for s in group]
            for group in self.idle.values():
                group.clear()
        for server in servers:
            server.close()


def _site_dirs() -> list[str]:
    import site

    return [d for d in site.getsitepackages() if os.path.isdir(d)]


POOL = ForkServerPool()
atexit.register(POOL.close)
os.register_at_fork(after_in_child=POOL.forget)
