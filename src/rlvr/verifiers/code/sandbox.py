"""Run a model-written Python program as a sandboxed process.

Isolation levels, strongest first (``isolation_level()`` detects what this machine allows):

``bwrap``   bubblewrap: new PID, network, IPC and UTS namespaces; the host filesystem is invisible except
            the system and Python directories, bound read-only; the program's only writable places are a
            size-capped tmpfs at /tmp (its cwd and HOME) and /dev/shm, gone when it exits; when the checker
            is root the program runs under its own unprivileged uid (one per concurrent sandbox).
``process`` no namespaces: a separate process group in a fresh temp dir that is its cwd and HOME, under
            its own uid when the checker is root and the interpreter is reachable by that uid. It has the
            network and can write wherever that uid may; a run that asks for no network is refused here.

Every level: a minimal environment (none of the checker's variables), rlimits on address space, CPU time,
processes, file size and open files, stdout/stderr captured up to a cap (the rest is read and dropped),
and a wall-clock limit after which the whole sandbox is killed, children included (the PID namespace
dies with its first process; at the ``process`` level every process of the sandbox's uid is killed).

At the ``bwrap`` level as root, a ``Sandbox`` does not start bubblewrap itself: it borrows a pooled fork
server (pool.py, zygote.py), a long-lived bubblewrap sandbox that forks each program into a fresh child
with the same guarantees (its own mount and IPC namespaces and tmpfs, its own uid, every process of that
uid killed when it ends). The program's source then never touches the host's disk.
"""

from __future__ import annotations

import fcntl
import functools
import json
import os
import select
import shutil
import signal
import site
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from rlvr.verifiers.code.folders import SandboxFolder, base_dir
from rlvr.verifiers.code.pool import POOL, ForkedProcess, ForkServer

INSIDE = Path(__file__).with_name("inside.py")
HARNESS_FILES = (INSIDE, Path(__file__).with_name("codec.py"))  # what the sandbox runs, besides the program
SERVER_FILES = (*HARNESS_FILES, Path(__file__).with_name("zygote.py"))
LEVELS = ("bwrap", "process")
_UID_BASE = 200_000  # sandbox uids: _UID_BASE + 0..4095, never a real account
# one place per machine, whatever each checker's TMPDIR or sandbox dir, so no two checkers share a uid
_UID_LOCKS = Path("/tmp/rlvr-uid-locks")


class SandboxUnavailable(RuntimeError):
    """The isolation the caller asked for cannot be had on this machine (the message says why)."""


@dataclass(frozen=True)
class Limits:
    timeout_s: float = 5.0  # wall clock, per test
    memory_mb: int = 1024  # address space
    processes: int = 64
    disk_bytes: int = 256 * 1024 * 1024  # all files written, in total (the tmpfs size at the bwrap level)
    output_bytes: int = 1024 * 1024  # captured per stream; the rest is dropped
    open_files: int = 64

    def __post_init__(self):
        for name in ("timeout_s", "memory_mb", "processes", "disk_bytes", "output_bytes", "open_files"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise ValueError(f"{name} must be a number > 0, got {value!r}")
        if self.processes > 4096:
            raise ValueError(f"processes must be <= 4096, got {self.processes}")


@dataclass
class RunResult:
    stdout: bytes
    stderr: bytes
    returncode: int | None  # None: killed at the time limit
    timed_out: bool
    wall_s: float
    stdout_dropped: int = 0
    stderr_dropped: int = 0


# ------------------------------------------------------------------------------------------- detection


@functools.lru_cache(maxsize=1)
def isolation_level() -> str:
    """The strongest level this machine allows (probed once per process)."""
    bwrap = shutil.which("bwrap")
    if bwrap and sys.platform.startswith("linux"):
        probe = _bwrap_argv(bwrap, Path(tempfile.gettempdir()), network=False, uid=None, disk_bytes=1 << 20)
        try:
            done = subprocess.run(probe + ["/bin/true"], capture_output=True, timeout=10, env={})
            if done.returncode == 0:
                return "bwrap"
        except (OSError, subprocess.SubprocessError):
            pass
    return "process"


def level_description(level: str) -> dict:
    return {
        "bwrap": {"network": "none", "filesystem": "read-only system dirs; tmpfs /tmp", "pid_namespace": True},
        "process": {"network": "host", "filesystem": "host (uid permissions)", "pid_namespace": False},
    }[level]


# ------------------------------------------------------------------------------------------ uid slots


class _UidSlots:
    """Distinct uids for concurrent sandboxes, so one sandbox's process limit and signals never touch
    another's. A uid is held with an exclusive lock on a file, so checker processes never share one."""

    def __init__(self, size: int = 4096, per_process: int = 64):
        self.size = size
        self.available = threading.Semaphore(per_process)
        self.held: dict[int, int] = {}  # uid -> fd of its lock file
        self.lock = threading.Lock()

    def acquire(self, timeout_s: float = 30.0) -> int:
        if not self.available.acquire(timeout=timeout_s):
            raise SandboxUnavailable("every sandbox slot of this process is busy")
        try:
            directory = _UID_LOCKS
            directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            start = (os.getpid() * 7919) % self.size
            for k in range(self.size):
                uid = _UID_BASE + (start + k) % self.size
                with self.lock:
                    if uid in self.held:
                        continue
                    fd = os.open(directory / str(uid), os.O_RDWR | os.O_CREAT, 0o600)
                    try:
                        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    except OSError:
                        os.close(fd)
                        continue
                    self.held[uid] = fd
                    return uid
            raise SandboxUnavailable("no free sandbox uid")
        except BaseException:
            self.available.release()
            raise

    def release(self, uid: int) -> None:
        with self.lock:
            fd = self.held.pop(uid, None)
        if fd is not None:
            os.close(fd)  # closing drops the lock
            self.available.release()


_SLOTS = _UidSlots()
_FORK_SERVER_FAILED: list[str] = []  # why fork servers cannot start here: then a sandbox per program


def _other_users_can_run_python() -> bool:
    """Can an unprivileged uid reach this interpreter (every directory on the way world-searchable)?"""
    for path in {Path(sys.executable).resolve(), Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve()}:
        for parent in [path, *path.parents]:
            try:
                if parent.is_dir() and not os.stat(parent).st_mode & 0o001:
                    return False
            except OSError:
                return False
    return True


# ---------------------------------------------------------------------------------------------- argv


def _python_dirs() -> list[str]:
    dirs = {sys.prefix, sys.base_prefix, str(Path(sys.executable).resolve().parent.parent)}
    for d in site.getsitepackages():
        dirs.add(d)
    out: list[str] = []
    for d in sorted(dirs, key=len):
        if os.path.isdir(d) and not any(d.startswith(o.rstrip("/") + "/") for o in out):
            out.append(d)
    return out


def _tmpfs_sizes(disk_bytes: int) -> tuple[int, int]:
    """Bytes of the /tmp and /dev/shm tmpfs mounts: ``disk_bytes`` in total, /dev/shm the small one."""
    shm = max(1, min(16 << 20, disk_bytes // 8))
    return max(1, disk_bytes - shm), shm


def _bwrap_argv(bwrap: str, box: Path, *, network: bool, uid: int | None, disk_bytes: int,
                admin: bool = False, die_with_parent: bool = True) -> list[str]:
    """The bubblewrap command for a sandbox. ``admin`` adds CAP_SYS_ADMIN (a fork server mounts each
    program's own tmpfs); a fork server outlives the thread that starts it, so it does not die with it
    (it exits when the checker's end of its control socket closes)."""
    argv = [bwrap]
    # the writable mounts come first, so that read-only binds below them (a venv under /tmp) stay visible;
    # /tmp and a small /dev/shm are size-capped tmpfs mounts, disk_bytes in total
    tmp, shm = _tmpfs_sizes(disk_bytes)
    argv += ["--proc", "/proc", "--perms", "1777", "--size", str(tmp), "--tmpfs", "/tmp"]
    argv += ["--dev", "/dev", "--perms", "1777", "--size", str(shm), "--tmpfs", "/dev/shm"]
    for top in ("usr", "bin", "lib", "lib64", "lib32", "sbin", "etc"):
        path = Path("/") / top
        if path.is_symlink():
            argv += ["--symlink", os.readlink(path), str(path)]
        elif path.is_dir():
            argv += ["--ro-bind", str(path), str(path)]
    made: set[str] = set()
    for d in _python_dirs():
        if d.startswith(("/usr/", "/etc/")):
            continue
        # parents are created searchable: a copy of /root's 0700 would lock the sandbox's uid out
        for parent in reversed(Path(d).parents[:-1]):
            if str(parent) not in made and str(parent) != "/tmp":
                made.add(str(parent))
                argv += ["--perms", "0755", "--dir", str(parent)]
        argv += ["--ro-bind", d, d]
    argv += ["--ro-bind", str(box), "/box", "--chdir", "/tmp"]
    argv += ["--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
    if not network:
        argv += ["--unshare-net"]
    argv += ["--die-with-parent"] if die_with_parent else []
    argv += ["--new-session", "--clearenv"]
    argv += ["--setenv", "HOME", "/tmp", "--setenv", "PATH", "/usr/bin:/bin", "--setenv", "LANG", "C.UTF-8"]
    if uid is not None:  # as root bubblewrap keeps every capability unless told; the harness needs only
        # these, to drop to this uid itself before it reads the program
        argv += ["--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    if admin:
        argv += ["--cap-add", "CAP_SYS_ADMIN"]
    return argv


# --------------------------------------------------------------------------------------------- sandbox


@dataclass
class Sandbox:
    """One program in one sandbox folder; ``start`` launches a process, ``close`` removes every trace.

    Use as a context manager. ``level`` None picks the strongest available; asking for ``network=False``
    (the default) where the strongest level cannot block the network raises SandboxUnavailable."""

    program: str
    limits: Limits = field(default_factory=Limits)
    network: bool = False
    level: str | None = None
    base_dir: str | None = None  # where the sandbox folder is made (folders.base_dir)
    fork_server: bool = True  # at the bwrap level as root: fork programs in a pooled sandbox (pool.py)

    def __post_init__(self):
        available = isolation_level()
        if self.level is None:
            self.level = available
        if self.level not in LEVELS:
            raise ValueError(f"isolation must be one of {', '.join(LEVELS)}, got {self.level!r}")
        if self.level == "bwrap" and available != "bwrap":
            raise SandboxUnavailable("bubblewrap isolation was asked for but is not available on this machine "
                                     "(install it: apt-get install bubblewrap)")
        if self.level == "process" and not self.network:
            raise SandboxUnavailable(
                "network isolation is not available on this machine (bubblewrap is missing or cannot create "
                "namespaces here); install bubblewrap (apt-get install bubblewrap), or pass network=True to run "
                "programs with the host's network at the 'process' level"
            )
        self.uid: int | None = None
        self.folder: SandboxFolder | None = None
        self.server: ForkServer | None = None
        self.procs: list = []
        self.closed = False
        if self.level == "bwrap" and self.fork_server and os.geteuid() == 0 and not _FORK_SERVER_FAILED:
            try:
                self.server = self._acquire_server()
                self.uid = self.server.uid
                return
            except (OSError, subprocess.SubprocessError) as exc:  # e.g. mounts refused in a container
                _FORK_SERVER_FAILED.append(str(exc))
        try:
            if os.geteuid() == 0 and (self.level == "bwrap" or _other_users_can_run_python()):
                self.uid = _SLOTS.acquire()
            self.folder = SandboxFolder(self.base_dir)
            self.dir = self.folder.box  # what the program may see: its source and the harness
            # a response may hold lone surrogates: they become U+FFFD (and a syntax error), not a crash
            (self.dir / "solution.py").write_bytes(self.program.encode("utf-8", "replace"))
            for source in HARNESS_FILES:
                shutil.copyfile(source, self.dir / source.name)
            for name in ("solution.py", *(source.name for source in HARNESS_FILES)):
                os.chmod(self.dir / name, 0o644)
            self.work = self.folder.path / "work"  # the program's cwd at the process level
            self.work.mkdir()
            if self.uid is not None and self.level == "process":
                os.chown(self.work, self.uid, self.uid)
            os.chmod(self.work, 0o700)
        except BaseException:
            self.close()
            raise

    def _acquire_server(self) -> ForkServer:
        network, base = self.network, str(base_dir(self.base_dir))

        def make() -> ForkServer:
            bwrap = shutil.which("bwrap") or "bwrap"
            return ForkServer(network=network, base=base, slots=_SLOTS, harness_files=SERVER_FILES,
                              argv_for=lambda box, uid: _bwrap_argv(bwrap, box, network=network, uid=uid,
                                                                    disk_bytes=1 << 20, admin=True,
                                                                    die_with_parent=False))

        return POOL.acquire((network, base), make)

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def details(self) -> dict:
        return {"isolation": self.level, **level_description(self.level), "separate_uid": self.uid is not None,
                "fork_server": self.server is not None}

    def _limits(self, mode: str, cpu_s: float, channel: tuple[int, int] | None) -> dict:
        box = "/box" if self.level == "bwrap" else str(self.dir)
        return {
            "program": f"{box}/solution.py",
            "memory_bytes": int(self.limits.memory_mb) * 1024 * 1024,
            "cpu_s": max(1, int(cpu_s + 1)),
            "processes": int(self.limits.processes),
            "file_bytes": int(self.limits.disk_bytes),
            "open_files": int(self.limits.open_files),
            "uid": self.uid,
            "sys_path": [d for d in site.getsitepackages() if os.path.isdir(d)],
            "channel": list(channel) if channel else None,
        }

    def start(self, mode: str, *, cpu_s: float, channel: tuple[int, int] | None = None) -> subprocess.Popen:
        """Launch the harness in ``mode`` ("run" or "serve") with stdin/stdout/stderr as pipes; ``channel``
        is the (read, write) pair of fds the "serve" harness talks to the checker on."""
        if self.server is not None:
            return self._fork(mode, cpu_s, channel)
        python = sys.executable
        limits = json.dumps(self._limits(mode, cpu_s, channel))
        if self.level == "bwrap":
            argv = _bwrap_argv(shutil.which("bwrap") or "bwrap", self.dir, network=self.network, uid=self.uid,
                               disk_bytes=int(self.limits.disk_bytes))
            argv += [python, "-I", "-S", "-B", "/box/inside.py", mode, limits]
            cwd, env = None, {}
        else:
            argv = [python, "-I", "-S", "-B", str(self.dir / "inside.py"), mode, limits]
            cwd = str(self.work)
            env = {"HOME": str(self.work), "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
        proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=cwd, env=env,
            start_new_session=True, pass_fds=channel or (), close_fds=True,
        )
        self.procs.append(proc)
        return proc

    def _fork(self, mode: str, cpu_s: float, channel: tuple[int, int] | None) -> ForkedProcess:
        limits = self._limits(mode, cpu_s, channel)
        tmp, shm = _tmpfs_sizes(int(self.limits.disk_bytes))
        program = self.program.encode("utf-8", "replace")
        for attempt in range(2):  # a server that died while idle is replaced once
            try:
                proc = self.server.run(mode, limits, program, tmp_bytes=tmp, shm_bytes=shm, channel=channel)
                break
            except OSError:
                if attempt or not self.server.broken or self.procs:
                    raise
                POOL.release(self.server, healthy=False)
                self.server = self._acquire_server()
                self.uid = self.server.uid
        self.procs.append(proc)
        return proc

    def run(self, stdin: bytes = b"", *, timeout_s: float | None = None) -> RunResult:
        """Run the program once as ``__main__`` with ``stdin``; capture its output under the caps."""
        timeout = self.limits.timeout_s if timeout_s is None else timeout_s
        proc = self.start("run", cpu_s=timeout)
        return communicate(proc, stdin, timeout, self.limits.output_bytes, kill=lambda: self.kill(proc))

    def kill(self, proc) -> None:
        """SIGKILL the process group (at the bwrap level the PID namespace dies with it); a forked program
        and every process it started are killed by its fork server."""
        if isinstance(proc, ForkedProcess):
            proc.kill()
            return
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            proc.kill()
        except ProcessLookupError:
            pass

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        for proc in self.procs:
            if proc.poll() is None:
                self.kill(proc)
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
            for stream in (proc.stdin, proc.stdout, proc.stderr):
                if stream is not None:
                    try:
                        stream.close()
                    except OSError:
                        pass
        if self.server is not None:
            healthy = all(getattr(proc, "ended", False) for proc in self.procs)
            POOL.release(self.server, healthy=healthy)
            return
        if self.uid is not None:
            if self.level == "process":
                kill_uid(self.uid)
            _SLOTS.release(self.uid)
        if self.folder is not None:
            self.folder.remove()


def uid_of(pid: str) -> int | None:
    """The real uid of a process, from /proc/PID/status (the owner of /proc/PID is root for a process that
    made itself non-dumpable)."""
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f:
                if line.startswith(b"Uid:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def kill_uid(uid: int) -> int:
    """SIGKILL every process owned by ``uid`` (a sandbox's own uid: whatever escaped its process group)."""
    killed = 0
    for _ in range(3):
        found = 0
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit() or uid_of(entry.name) != uid:
                continue
            try:
                os.kill(int(entry.name), signal.SIGKILL)
                found += 1
            except (ProcessLookupError, PermissionError):
                continue
        killed += found
        if not found:
            break
        time.sleep(0.01)
    return killed


def communicate(proc: subprocess.Popen, stdin: bytes, timeout_s: float, cap: int, kill) -> RunResult:
    """Feed ``stdin``, read stdout/stderr (keeping ``cap`` bytes of each, dropping the rest) until the
    process exits or ``timeout_s`` passes (then ``kill()``)."""
    start = time.monotonic()
    deadline = start + timeout_s
    out = {proc.stdout.fileno(): bytearray(), proc.stderr.fileno(): bytearray()}
    dropped = dict.fromkeys(out, 0)
    open_fds = set(out)
    pending = memoryview(stdin)
    write_fd = proc.stdin.fileno()
    if not stdin:
        proc.stdin.close()
        write_fd = None
    else:
        os.set_blocking(write_fd, False)
    timed_out = False
    while open_fds or write_fd is not None:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            timed_out = True
            break
        poller = select.poll()  # not select(): a busy checker may hold fds numbered past 1024
        for fd in open_fds:
            poller.register(fd, select.POLLIN)
        if write_fd is not None:
            poller.register(write_fd, select.POLLOUT)
        events = dict(poller.poll(min(remaining, 0.5) * 1000))
        if write_fd is not None and events.get(write_fd):
            try:
                n = os.write(write_fd, pending[: 1 << 16])
                pending = pending[n:]
            except BlockingIOError:
                pass
            except OSError:
                pending = pending[:0]
            if not pending:
                proc.stdin.close()
                write_fd = None
        for fd in [fd for fd in open_fds if events.get(fd)]:
            try:
                chunk = os.read(fd, 1 << 16)
            except BlockingIOError:
                continue
            if not chunk:
                open_fds.discard(fd)
                continue
            room = cap - len(out[fd])
            if room > 0:
                out[fd] += chunk[:room]
            dropped[fd] += max(0, len(chunk) - max(room, 0))
    if timed_out:
        kill()
    try:
        returncode = proc.wait(timeout=max(0.05, deadline - time.monotonic()) if not timed_out else 5)
    except subprocess.TimeoutExpired:
        kill()
        timed_out = True
        returncode = proc.wait(timeout=5)
    o, e = proc.stdout.fileno(), proc.stderr.fileno()
    return RunResult(bytes(out[o]), bytes(out[e]), None if timed_out else returncode, timed_out,
                     time.monotonic() - start, dropped[o], dropped[e])
