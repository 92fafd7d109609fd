"""A fork server that runs INSIDE a long-lived bubblewrap sandbox: one fresh, isolated, limited process per
program, without starting bubblewrap or Python again.

Executed as a script (``python -I -S -B zygote.py SETTINGS``) as root inside the sandbox, with CAP_SETUID,
CAP_SETGID and CAP_SYS_ADMIN; it imports only the standard library and ``inside.py``. It never runs program
code itself. For each program the checker sends one request on the control socket (a SOCK_SEQPACKET
socket): the mode, the limits, and the fds of the program's source (a memfd), stdin, stdout, stderr and, to
serve, the channel. The server forks a child that, before the program runs:
  - starts a new session and keeps only its own fds (stdio and the channel: never the control socket);
  - enters a mount and an IPC namespace of its own, with a fresh size-capped tmpfs on /tmp (its cwd and
    HOME) and on /dev/shm, so nothing another program wrote is visible and nothing it writes survives it;
  - drops to the sandbox's unprivileged uid (losing every capability), applies the rlimits, and runs
    the program exactly as ``inside.py`` would.
When the program's first process ends, or the checker asks, every process of the uid is killed (a helper
with that uid sends ``kill(-1, SIGKILL)``, repeated until none is left) before the next program may start:
one program at a time per server, so no two programs ever share the uid, the tmpfs or a process.

Replies, one line of text each: ``ready``, ``started``, ``failed WHY``, ``exit CODE``, ``swept``.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import socket
import sys

CLONE_NEWNS, CLONE_NEWIPC = 0x00020000, 0x08000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 0x1, 0x2, 0x4, 0x20, 0x1000, 0x4000, 0x40000
PR_SET_CHILD_SUBREAPER = 36
MNT_DETACH = 2
_libc = ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _load_inside():
    import importlib.util

    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "inside.py")
    spec = importlib.util.spec_from_file_location("rlvr_inside", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _mount_tmpfs(target: bytes, size: int) -> None:
    options = f"size={max(4096, int(size))},mode=1777".encode()
    _check(_libc.mount(b"tmpfs", target, b"tmpfs", MS_NOSUID | MS_NODEV, options), f"mount {target!r}")


def _exit_code(exc: BaseException | None) -> int:
    """What the interpreter's exit status would be after ``exc`` (None: the program returned)."""
    if exc is None:
        return 0
    if isinstance(exc, SystemExit):
        if exc.code is None:
            return 0
        if isinstance(exc.code, int):
            return exc.code & 0xFF
        print(exc.code, file=sys.stderr)
        return 1
    import traceback

    traceback.print_exception(exc)
    return 1


def _python_dirs_under_tmp() -> list[str]:
    """The interpreter's folders that live under /tmp (a virtual environment in a checkout there): the fresh
    tmpfs a program gets on /tmp would hide them, so they are bound into it again, read-only."""
    import site

    dirs = {sys.prefix, sys.base_prefix, *site.getsitepackages(), *(p for p in sys.path if p)}
    under = sorted((d for d in dirs if d.startswith("/tmp/") and os.path.isdir(d)), key=len)
    return [d for i, d in enumerate(under) if not any(d.startswith(o.rstrip("/") + "/") for o in under[:i])]


def _isolate(inside, uid: int, tmp_bytes: int, shm_bytes: int) -> None:
    """Own mount and IPC namespaces, fresh tmpfs on /tmp (the cwd) and /dev/shm, then the sandbox's uid."""
    keep = _python_dirs_under_tmp()
    _check(_libc.unshare(CLONE_NEWNS | CLONE_NEWIPC), "unshare")
    _check(_libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None), "make / private")
    # folders of the interpreter under /tmp are parked on /dev/shm (a bind made in this namespace), /tmp is
    # covered by its fresh tmpfs, they are bound back read-only, and the parking places go again
    parked = []
    for i, folder in enumerate(keep):
        hold = f"/dev/shm/.rlvr-keep-{os.getpid()}-{i}"
        os.mkdir(hold, 0o700)
        _check(_libc.mount(folder.encode(), hold.encode(), None, MS_BIND | MS_REC, None), f"park {folder}")
        parked.append(hold)
    _mount_tmpfs(b"/tmp", tmp_bytes)
    for folder, hold in zip(keep, parked):
        os.makedirs(folder, mode=0o755, exist_ok=True)
        target = folder.encode()
        _check(_libc.mount(hold.encode(), target, None, MS_BIND | MS_REC, None), f"bind {folder}")
        _check(_libc.mount(None, target, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV, None),
               f"read-only {folder}")
        _check(_libc.umount2(hold.encode(), MNT_DETACH), f"unpark {folder}")
        os.rmdir(hold)
    _mount_tmpfs(b"/dev/shm", shm_bytes)
    os.chdir("/tmp")
    inside.drop_privileges(uid)


def _child(inside, settings: dict, request: dict, fds: list[int]) -> None:
    """In the forked child: isolate, drop privileges, run the program; never returns."""
    code = 1
    try:
        os.setsid()
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        program_fd, stdin, stdout, stderr, *channel = fds
        os.lseek(program_fd, 0, os.SEEK_SET)  # the checker's writes moved the shared offset to the end
        with os.fdopen(program_fd, "rb") as f:
            program = f.read().decode("utf-8", "replace")
        import fcntl

        # out of the way first, so that no target number is a source still to be copied
        high = [fcntl.fcntl(fd, fcntl.F_DUPFD, 256) for fd in (stdin, stdout, stderr, *channel)]
        for target, fd in enumerate(high):
            os.dup2(fd, target)
        os.closerange(3 + len(channel), 1 << 16)
        _isolate(inside, settings["uid"], request["tmp_bytes"], request["shm_bytes"])
        limits = dict(request["limits"])
        if channel:
            limits["channel"] = [3, 4]
    except BaseException as exc:  # noqa: BLE001 - the checker sees it on the program's stderr
        try:
            os.write(2, f"sandbox set-up failed: {exc!r}\n".encode())
        finally:
            os._exit(125)
    try:
        os.environ.clear()
        os.environ.update({"HOME": "/tmp", "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"})
        sys.argv = ["/box/inside.py", request["mode"], json.dumps(limits)]
        sys.modules["__main__"] = inside
        try:
            inside.execute(request["mode"], program, limits)
            code = _exit_code(None)
        except BaseException as exc:  # noqa: BLE001 - reported as the interpreter would
            code = _exit_code(exc)
        try:
            import threading

            threading._shutdown()  # wait for the program's non-daemon threads, as a normal exit does
            import atexit

            atexit._run_exitfuncs()
        except BaseException:  # noqa: BLE001
            pass
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except BaseException:  # noqa: BLE001
                code = code or 120
    finally:
        os._exit(code)


class Server:
    """The fork server's loop: one request at a time on the control socket."""

    def __init__(self, settings: dict):
        self.settings = settings
        self.uid = int(settings["uid"])
        self.control = socket.socket(fileno=int(settings["control"]))
        self.inside = _load_inside()
        self.current: int | None = None  # the program's first process
        _check(_libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0), "subreaper")  # orphans come back to us
        self.wake_r, wake_w = os.pipe()
        os.set_blocking(self.wake_r, False)
        os.set_blocking(wake_w, False)
        signal.set_wakeup_fd(wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)

    def reply(self, text: str) -> None:
        self.control.send(text.encode())

    def reap(self, sweep: bool = True) -> None:
        """Collect dead children (orphans too: we are the subreaper); when the program's first process is
        among them, kill what it started (``sweep``) and report its exit status."""
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if pid == self.current:
                self.current = None
                if sweep:
                    self.sweep()  # what it started dies with it, as with a PID namespace of its own
                self.reply(f"exit {os.waitstatus_to_exitcode(status)}")

    def processes(self) -> list[int]:
        """Processes of the uid, by their real uid in /proc/PID/status (the owner of /proc/PID turns to
        root when a process makes itself non-dumpable, so it cannot be trusted)."""
        found = []
        for name in os.listdir("/proc"):
            if name.isdigit():
                try:
                    with open(f"/proc/{name}/status", "rb") as f:
                        for line in f:
                            if line.startswith(b"Uid:"):
                                if int(line.split()[1]) == self.uid:
                                    found.append(int(name))
                                break
                except (OSError, ValueError, IndexError):
                    continue
        return found

    def sweep(self, always: bool = True) -> bool:
        """Kill every process of the uid; True once none is left. With ``always`` the first round runs
        whatever /proc shows: a helper with the uid signals all it may, which no way of hiding escapes."""
        for attempt in range(100):
            if (attempt or not always) and not self.processes():
                return True
            helper = os.fork()
            if helper == 0:
                try:
                    os.setgroups([])
                    os.setgid(self.uid)
                    os.setuid(self.uid)
                    os.kill(-1, signal.SIGKILL)  # every process this uid may signal: the program's, all of them
                finally:
                    os._exit(0)
            os.waitpid(helper, 0)
            self.reap(sweep=False)  # already sweeping
        return not self.processes()

    def start(self, request: dict, fds: list[int]) -> None:
        try:
            # the last program's end was swept already; this only checks that nothing is left
            if self.current is not None or not self.sweep(always=False):
                self.reply("failed the previous program is still running")
                return
            pid = os.fork()
            if pid == 0:
                self.control.close()
                _child(self.inside, self.settings, request, fds)
            self.current = pid
            self.reply("started")
        finally:
            for fd in fds:
                os.close(fd)

    def isolation_works(self) -> bool:
        """Fork one child through the isolation steps before serving: where this kernel or container does
        not allow them, the checker must start programs some other way, not find every program dead."""
        pid = os.fork()
        if pid == 0:
            code = 125
            try:
                _isolate(self.inside, self.uid, 1 << 20, 1 << 16)
                expected = {d[len("/tmp/"):].split("/")[0] for d in _python_dirs_under_tmp()}
                code = 0 if os.getuid() == self.uid and set(os.listdir("/tmp")) == expected else 125
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        return os.waitstatus_to_exitcode(status) == 0

    def serve(self) -> None:
        import select

        poller = select.poll()
        poller.register(self.control, select.POLLIN)
        poller.register(self.wake_r, select.POLLIN)
        if not self.isolation_works():
            self.reply("failed the isolation steps are not allowed here")
            return
        self.reply("ready")
        while True:
            for fd, _ in poller.poll():
                if fd == self.wake_r:
                    try:
                        os.read(self.wake_r, 4096)
                    except BlockingIOError:
                        pass
                    self.reap()
                    continue
                message, fds, _, _ = socket.recv_fds(self.control, 65536, 8)
                if not message:
                    return  # the checker is gone
                request = json.loads(message)
                if request["op"] == "start":
                    self.start(request, fds)
                else:
                    for extra in fds:
                        os.close(extra)
                    if request["op"] == "kill":
                        self.sweep()
                        self.reap()
                        self.reply("swept")


def main() -> None:
    settings = json.loads(sys.argv[1])
    sys.path.extend(settings.get("sys_path", []))
    Server(settings).serve()


if __name__ == "__main__":
    main()
