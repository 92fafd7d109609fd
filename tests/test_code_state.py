"""Nothing one program writes into a per-kernel store reaches the next program: kernel keyrings, SysV shared
memory, semaphores and message queues, POSIX message queues and shared memory, abstract unix sockets, files
in /tmp. Each case runs two real programs one after the other, with the fork server and with a bubblewrap
sandbox per program: the first leaves a note, the second looks for it."""

from __future__ import annotations

import uuid

import pytest

from code_sandbox_checks import assert_no_trace, sandbox_base  # noqa: F401 - a fixture
from rlvr.verifiers import Status, verify

PRELUDE = """
import ctypes, os, socket, time
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
NAME = {name!r}
KEY = {key}
"""

# kind -> (the first program's write(): True when the note was left, the second program's found())
STORES = {
    "keyring": (
        # the user keyring, the session keyring and the user-session keyring: add_key must be refused
        "def write():\n"
        "    ids = [libc.syscall(248, b'user', NAME.encode(), b'note', 4, ring) for ring in (-4, -3, -5)]\n"
        "    return all(i < 0 for i in ids) or ids\n",
        "def found():\n"
        "    return [r for r in (-4, -3, -5) if libc.syscall(250, 10, r, b'user', NAME.encode(), 0) >= 0]\n",
    ),
    "keyring_request_key": (  # keyctl's own way in: the user keyring's id, created on demand
        "def write():\n"
        "    return libc.syscall(250, 0, -4, 1) < 0 and libc.syscall(249, b'user', NAME.encode(), None, 0) < 0\n",
        "def found():\n"
        "    return libc.syscall(249, b'user', NAME.encode(), None, 0) >= 0\n",
    ),
    "sysv_shm": (
        "def write():\n"
        "    return libc.shmget(KEY, 4096, 0o1666) >= 0\n",  # IPC_CREAT | 0666
        "def found():\n"
        "    return libc.shmget(KEY, 0, 0) >= 0\n",
    ),
    "sysv_msg": (
        "def write():\n"
        "    return libc.msgget(KEY, 0o1666) >= 0\n",
        "def found():\n"
        "    return libc.msgget(KEY, 0) >= 0\n",
    ),
    "sysv_sem": (
        "def write():\n"
        "    return libc.semget(KEY, 1, 0o1666) >= 0\n",
        "def found():\n"
        "    return libc.semget(KEY, 0, 0) >= 0\n",
    ),
    "posix_mqueue": (
        "rt = ctypes.CDLL('librt.so.1', use_errno=True)\n"
        "def write():\n"
        "    return rt.mq_open(('/' + NAME).encode(), os.O_CREAT | os.O_RDWR, 0o666, None) >= 0\n",
        "rt = ctypes.CDLL('librt.so.1', use_errno=True)\n"
        "def found():\n"
        "    return rt.mq_open(('/' + NAME).encode(), os.O_RDONLY) >= 0\n",
    ),
    "posix_shm_and_tmp": (
        "def write():\n"
        "    for folder in ('/dev/shm', '/tmp'):\n"
        "        with open(os.path.join(folder, NAME), 'w') as f:\n"
        "            f.write('note')\n"
        "    return True\n",
        "def found():\n"
        "    return [f for f in ('/dev/shm', '/tmp') if os.path.exists(os.path.join(f, NAME))]\n",
    ),
    "abstract_socket": (
        # a child keeps the name bound after the program's first process has ended
        "def write():\n"
        "    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)\n"
        "    s.bind('\\0' + NAME)\n"
        "    s.listen(1)\n"
        "    if os.fork() == 0:\n"
        "        os.setsid()\n"
        "        time.sleep(60)\n"
        "        os._exit(0)\n"
        "    return True\n",
        "def found():\n"
        "    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)\n"
        "    try:\n"
        "        s.connect('\\0' + NAME)\n"
        "        return True\n"
        "    except OSError:\n"
        "        return False\n",
    ),
}


def program(kind: str, part: int, name: str, key: int) -> str:
    return "```python\n" + PRELUDE.format(name=name, key=key) + STORES[kind][part] + "\n```"


@pytest.mark.parametrize("fork_server", [True, False], ids=["fork_server", "bwrap_per_program"])
@pytest.mark.parametrize("kind", sorted(STORES))
def test_a_note_left_by_one_program_is_not_seen_by_the_next(kind, fork_server):
    name, key = "rlvr-" + uuid.uuid4().hex[:12], 0x5E000000 + uuid.uuid4().int % 0xFFFFF
    first = verify("code", program(kind, 0, name, key), {"tests": ["assert write() is True"]},
                   timeout_s=5.0, fork_server=fork_server)
    assert first.status == Status.CORRECT, first.details  # the note was left (or, for keyrings, refused)
    second = verify("code", program(kind, 1, name, key), {"tests": ["assert not found(), found()"]},
                    timeout_s=5.0, fork_server=fork_server)
    assert second.status == Status.CORRECT, second.details["tests"]
    assert_no_trace()
