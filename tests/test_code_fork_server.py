"""The fork server (pool.py, zygote.py): programs forked inside a long-lived bubblewrap sandbox keep every
isolation promise of a sandbox of their own. Each program below runs for real in a pooled server, and the
next program on the same server looks for what the previous one left: files, processes, IPC objects, memory,
privileges and the server's own control socket."""

from __future__ import annotations

import os
import signal
import threading
import uuid

import pytest

from code_sandbox_checks import assert_no_trace, sandbox_base  # noqa: F401 - a fixture
from rlvr.verifiers import Status, verify
from rlvr.verifiers.code.pool import POOL


def judge(program: str, *tests: str, **options):
    return verify("code", f"```python\n{program}\n```", {"language": "python", "tests": list(tests)},
                  **{"timeout_s": 3.0, **options})


def servers() -> list:
    return [server for idle in POOL.idle.values() for server in idle]


@pytest.fixture(autouse=True)
def _root_only():
    if os.geteuid() != 0:
        pytest.skip("the fork server is used only when the checker is root")


def test_programs_run_in_a_pooled_server():
    v = judge("def f(): return 1", "assert f() == 1")
    assert v.status == Status.CORRECT and v.details["fork_server"] is True
    first = servers()
    assert len(first) == 1
    judge("def f(): return 1", "assert f() == 1")
    assert servers() == first  # reused, not started again


def test_the_next_program_finds_nothing_of_the_previous_one():
    secret = "LEFT-" + uuid.uuid4().hex
    first = (
        "import ctypes, os, subprocess\n"
        f"open('/tmp/left', 'w').write({secret!r})\n"
        f"open('/dev/shm/left', 'w').write({secret!r})\n"
        "libc = ctypes.CDLL(None)\n"
        "SHM = libc.shmget(0x5EC12E7, 4096, 0o1666)\n"  # IPC_CREAT | 0666
        f"subprocess.Popen(['sleep', '300', {secret!r}], start_new_session=True)\n"
        "def f(): return SHM >= 0\n"
    )
    assert judge(first, "assert f()").status == Status.CORRECT
    second = (
        "import ctypes, gc, os\n"
        "def found():\n"
        "    seen = []\n"
        "    for path in ('/tmp/left', '/dev/shm/left'):\n"
        "        if os.path.exists(path): seen.append(path)\n"
        "    if ctypes.CDLL(None).shmget(0x5EC12E7, 0, 0) >= 0: seen.append('shm')\n"
        "    for pid in os.listdir('/proc'):\n"
        "        try:\n"
        "            if b'LEFT-' in open(f'/proc/{pid}/cmdline', 'rb').read(): seen.append(pid)\n"
        "        except OSError: pass\n"
        "    seen += [o for o in gc.get_objects() if isinstance(o, str) and o.startswith('LEFT-')]\n"
        "    return seen\n"
    )
    v = judge(second, "assert found() == []")
    assert v.status == Status.CORRECT, v.details
    assert len(servers()) == 1  # both ran on the same server
    assert_no_trace()


def test_a_detached_daemon_does_not_outlive_its_program():
    """A stdin/stdout program leaves a daemon (own session, non-dumpable, stdio closed) and exits by itself:
    the daemon dies with it, and the next program on the server (same uid) finds no process of its uid
    but its own."""
    first = (
        "import ctypes, os, time\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)\n"  # PR_SET_DUMPABLE 0
        "    for fd in (0, 1, 2): os.close(fd)\n"
        "    time.sleep(300)\n"
        "    os._exit(0)\n"
        "print('started')\n"
    )
    v = verify("code", f"```python\n{first}\n```", {"io": [{"input": "", "output": "started\n"}]}, timeout_s=3)
    assert v.status == Status.CORRECT, v.details
    assert_no_trace()  # gone when the call returns, not only when the next program starts
    second = (
        "import os\n"
        "def others():\n"
        "    found = []\n"
        "    for p in os.listdir('/proc'):\n"
        "        if not p.isdigit() or int(p) == os.getpid(): continue\n"
        "        try: status = open(f'/proc/{p}/status').read()\n"
        "        except OSError: continue\n"
        "        if int(status.split('Uid:')[1].split()[0]) == os.getuid(): found.append(p)\n"
        "    return found\n"
    )
    v = judge(second, "assert others() == []")
    assert v.status == Status.CORRECT and len(servers()) == 1, v.details
    assert_no_trace()


def test_a_program_holds_no_privilege_and_no_handle_on_its_server():
    program = (
        "import os, signal, socket\n"
        "def caps():\n"
        "    status = open('/proc/self/status').read().splitlines()\n"
        "    return {l.split(':')[0]: int(l.split()[1], 16) for l in status if l.startswith(('Cap', 'NoNew'))}\n"
        "def fds():\n"
        "    return sorted(int(fd) for fd in os.listdir('/proc/self/fd'))\n"
        "def hits():\n"
        "    hit = []\n"
        "    for pid in os.listdir('/proc'):\n"
        "        if pid.isdigit() and int(pid) != os.getpid():\n"
        "            try: os.kill(int(pid), signal.SIGKILL); hit.append(pid)\n"
        "            except OSError: pass\n"
        "    return hit\n"
        "def ids(): return os.getuid(), os.geteuid(), os.getgid(), os.getgroups()\n"
    )
    v = judge(program, "assert caps()['CapEff'] == caps()['CapPrm'] == caps()['CapAmb'] == 0",
              "assert caps()['NoNewPrivs'] == 1",  # setuid binaries grant nothing
              "assert fds() == [0, 1, 2, 3, 4, 5]",  # stdio, the channel, and the listing itself
              "assert hits() == []", "u, eu, g, groups = ids()\nassert u == eu == g >= 200_000 and groups == []")
    assert v.status == Status.CORRECT, v.details
    assert judge("def f(): return 2", "assert f() == 2").status == Status.CORRECT  # the server is unharmed


def test_a_runaway_program_is_killed_and_the_server_reused():
    bomb = "import os\ndef f():\n    while True:\n        try: os.fork()\n        except OSError: pass\n"
    v = judge(bomb, "f()", timeout_s=1.5, processes=16)
    assert [t["status"] for t in v.details["tests"]] == ["timeout"]
    assert_no_trace()
    before = servers()
    assert judge("def f(): return 3", "assert f() == 3").status == Status.CORRECT
    assert servers() == before


def test_a_dead_server_is_replaced():
    assert judge("def f(): return 1", "assert f() == 1").status == Status.CORRECT
    (server,) = servers()
    os.killpg(server.proc.pid, signal.SIGKILL)
    server.proc.wait(5)
    v = judge("def f(): return 1", "assert f() == 1")
    assert v.status == Status.CORRECT, v.details
    assert servers() and servers()[0] is not server


def test_concurrent_programs_get_servers_and_uids_of_their_own(tmp_path):
    """Three programs at once: whenever two run at the same time, they run under different uids."""
    out = tmp_path / "answers"  # the tests run in judge processes: their way out to us is a file
    program = "import os, time\ndef who():\n    t = time.time()\n    time.sleep(1.0)\n    return os.getuid(), t, time.time()"
    test = f"line = repr(who())\nwith open({str(out)!r}, 'a') as f:\n    f.write(line + '\\n')"
    threads = [threading.Thread(target=judge, args=(program, test), kwargs={"timeout_s": 5}) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    answers = [eval(line) for line in out.read_text().splitlines()]
    assert len(answers) == 3
    overlapping = [(a, b) for i, a in enumerate(answers) for b in answers[i + 1:] if a[1] < b[2] and b[1] < a[2]]
    assert overlapping, answers
    assert all(a[0] != b[0] for a, b in overlapping), answers
    assert_no_trace()


def test_io_programs_get_a_fresh_process_per_case():
    # entries of /tmp other than the interpreter's own folders (a checkout under /tmp is bound in read-only)
    program = ("import os, sys\nmine = {p.split('/')[2] for p in sys.path + [sys.prefix] if p.startswith('/tmp/')}\n"
               "n = len(set(os.listdir('/tmp')) - mine)\nopen(f'/tmp/{os.getpid()}', 'w')\nprint(n, input())\n")
    cases = [{"input": f"{i}\n", "output": f"0 {i}\n"} for i in range(3)]
    v = verify("code", f"```python\n{program}\n```", {"io": cases}, timeout_s=3)
    assert v.status == Status.CORRECT and v.details["fork_server"], v.details
    assert_no_trace()


def test_a_forked_checker_does_not_share_its_parents_servers():
    assert judge("def f(): return 1", "assert f() == 1").status == Status.CORRECT
    parents = servers()
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # a checker forked by its user (multiprocessing's fork start method does this)
        try:
            ok = not servers() and judge("def f(): return 1", "assert f() == 1").status == Status.CORRECT
            os.write(write, b"1" if ok and not set(servers()) & set(parents) else b"0")
        finally:
            POOL.close()  # os._exit skips atexit
            os._exit(0)
    os.waitpid(child, 0)
    assert os.read(read, 1) == b"1"
    assert servers() == parents and judge("def f(): return 2", "assert f() == 2").status == Status.CORRECT


def test_where_the_isolation_steps_are_refused_programs_get_a_sandbox_each(monkeypatch):
    """A fork server checks its isolation steps before serving; in a sandbox that may not mount (here:
    started without CAP_SYS_ADMIN) it refuses to start, and programs run in a bubblewrap of their own."""
    from rlvr.verifiers.code import sandbox

    real = sandbox._bwrap_argv
    monkeypatch.setattr(sandbox, "_bwrap_argv", lambda *a, **k: real(*a, **{**k, "admin": False}))
    monkeypatch.setattr(sandbox, "_FORK_SERVER_FAILED", [])
    v = judge("def f(): return 1", "assert f() == 1")
    assert v.status == Status.CORRECT and v.details["fork_server"] is False, v.details
    assert "isolation steps" in sandbox._FORK_SERVER_FAILED[0]
    assert servers() == []
    assert_no_trace()
