"""Sandbox folders on the host: where they are made, who owns each, and removing those whose checker died.

Each sandbox gets a folder ``rlvr-sandbox-*`` under the base directory: the ``sandbox_dir`` option, else the
``RLVR_SANDBOX_DIR`` environment variable, else the system temp dir. Its owner (the checker process) holds an
exclusive ``flock`` on the folder's ``owner`` file for as long as the folder exists. The kernel drops that
lock when the owner dies, however it dies, and the owner writes its pid only once it holds the lock, so a
folder whose lock can be taken and whose owner file names a pid belongs to a dead checker. The first
sandbox a process makes under a base directory removes every such folder there (as training removes its
partial checkpoints on start). A live checker's folder is never touched; a folder without a pid yet (its
owner may be between creating the file and locking it) is removed only once it is ``GRACE_S`` seconds old.

Only the ``box`` sub-folder is ever shown to the program (read-only at the bubblewrap level); the owner file
is root's and out of its sight.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path

ENV = "RLVR_SANDBOX_DIR"
PREFIX = "rlvr-sandbox-"
OWNER = "owner"
GRACE_S = 60.0

_swept: set[str] = set()
_swept_lock = threading.Lock()


def base_dir(chosen: str | os.PathLike | None = None) -> Path:
    """The directory sandbox folders are made in (created if missing)."""
    path = Path(chosen or os.environ.get(ENV) or tempfile.gettempdir()).resolve()
    path.mkdir(parents=True, exist_ok=True)
    return path


def remove_orphans(base: Path) -> list[Path]:
    """Delete the sandbox folders under ``base`` whose owner is dead; returns what was deleted."""
    removed = []
    try:
        entries = list(os.scandir(base))
    except OSError:
        return removed
    now = time.time()
    for entry in entries:
        if not entry.name.startswith(PREFIX) or not entry.is_dir(follow_symlinks=False):
            continue
        folder = Path(entry.path)
        try:
            fd = os.open(folder / OWNER, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
        except FileNotFoundError:
            # no owner file: made by an older rlvr, or its owner died before writing one
            try:
                if now - entry.stat(follow_symlinks=False).st_mtime > GRACE_S:
                    shutil.rmtree(folder, ignore_errors=True)
                    removed.append(folder)
            except OSError:
                pass
            continue
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)  # a live checker holds it
            continue
        try:
            claimed = os.read(fd, 32).strip() != b""
            if claimed or now - os.fstat(fd).st_mtime > GRACE_S:
                shutil.rmtree(folder, ignore_errors=True)
                removed.append(folder)
        except OSError:
            pass
        finally:
            os.close(fd)
    return removed


def sweep_once(base: Path) -> None:
    """Remove orphans under ``base`` the first time this process uses it."""
    key = str(base)
    with _swept_lock:
        if key in _swept:
            return
        _swept.add(key)
    remove_orphans(base)


class SandboxFolder:
    """A fresh ``rlvr-sandbox-*`` folder, locked by this process until ``remove()``."""

    def __init__(self, chosen: str | os.PathLike | None = None, prefix: str = ""):
        base = base_dir(chosen)
        sweep_once(base)
        self.path = Path(tempfile.mkdtemp(prefix=PREFIX + prefix, dir=base))
        self._fd: int | None = None
        try:
            fd = os.open(self.path / OWNER, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
            self._fd = fd
            fcntl.flock(fd, fcntl.LOCK_EX)  # blocks only while a sweeper looks at this new folder
            os.write(fd, f"{os.getpid()}\n".encode())  # for people; the lock is what counts
            os.chmod(self.path, 0o755)
            self.box = self.path / "box"
            self.box.mkdir(mode=0o755)
            os.chmod(self.box, 0o755)
        except BaseException:
            self.remove()
            raise

    def remove(self) -> None:
        """Delete the folder, then drop the lock (so no sweeper ever sees it unlocked while it exists)."""
        shutil.rmtree(self.path, ignore_errors=True)
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
