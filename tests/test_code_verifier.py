"""The "code" verifier: correct and incorrect programs in both test styles, and every hostile behaviour the
sandbox must withstand (no undeserved credit, no trace on the host, the checker alive). Hostile programs
only ever target loopback and are bounded by short time limits and small resource limits."""

from __future__ import annotations

import os
import socket
import tempfile
import threading
import time
import uuid
from pathlib import Path

import pytest

from rlvr.verifiers import ScoreRequest, Status, score_batch, verify
from rlvr.verifiers.code import extract_program, isolation_level
from code_sandbox_checks import assert_no_trace, sandbox_base  # noqa: F401 - sandbox_base is a fixture

FAST = {"timeout_s": 2.0}


def py(src: str) -> str:
    return f"Here is my solution.\n```python\n{src}\n```\n"


def assert_tests(*lines: str) -> dict:
    return {"language": "python", "tests": list(lines)}


ADD_TESTS = assert_tests("assert add(1, 2) == 3", "assert add(-1, 1) == 0", "assert add(2, 2) == 4")


@pytest.fixture(autouse=True, params=["fork server", "a sandbox per program"])
def _how_sandboxes_start(request, monkeypatch):
    """Every test runs both ways: forked in a pooled sandbox (as root) and in a bubblewrap of its own."""
    monkeypatch.setenv("RLVR_FORK_SERVER", "1" if request.param == "fork server" else "0")


@pytest.fixture(scope="module", autouse=True)
def _bubblewrap_is_installed():
    assert isolation_level() == "bwrap", (
        "the code sandbox needs bubblewrap and namespaces (apt-get install bubblewrap); `make test` installs it"
    )


# ------------------------------------------------------------------------------------------ extraction

EXTRACT = [
    ("```python\na = 1\n```", "a = 1\n"),
    ("text\n```py\na = 1\n```\nmore\n```python3\nb = 2\n```", "b = 2\n"),
    ("```\nbare = 1\n```", "bare = 1\n"),
    ("```python\nfirst = 1\n```\n```bash\nls\n```", "first = 1\n"),
    ("```python\nunclosed = 1\nstill = 2", "unclosed = 1\nstill = 2"),
    ("no fence at all\nx = 1", "no fence at all\nx = 1"),
]


@pytest.mark.parametrize("response, program", EXTRACT)
def test_extract_last_fenced_block(response, program):
    assert extract_program(response) == program


# ------------------------------------------------------------------------------------- honest programs

ASSERT_CASES = [
    ("def add(a, b):\n    return a + b", Status.CORRECT, 1.0),
    ("def add(a, b):\n    return a - b", Status.INCORRECT, 0.0),
    ("def add(a, b):\n    return 0", Status.PARTIAL, 1 / 3),
    ("def add(a, b):\n    return a * b", Status.PARTIAL, 1 / 3),
    ("def add(a, b):\n    raise ValueError('no')", Status.INCORRECT, 0.0),
    ("def add(a, b)\n    return a + b", Status.INCORRECT, 0.0),  # syntax error
    ("import numpy as np\ndef add(a, b):\n    return np.int64(a) + np.int64(b)", Status.CORRECT, 1.0),
]


@pytest.mark.parametrize("program, status, score", ASSERT_CASES)
def test_assert_style(program, status, score):
    v = verify("code", py(program), ADD_TESTS, **FAST)
    assert (v.status, v.score) == (status, pytest.approx(score)), v
    assert len(v.details["tests"]) == 3 and v.details["isolation"] == "bwrap"


def test_assert_style_rich_tests():
    program = py(
        "class Stack:\n"
        "    def __init__(self): self.items = []\n"
        "    def push(self, x): self.items.append(x); return self\n"
        "    def pop(self): return self.items.pop()\n"
        "def evens(n):\n    for i in range(n):\n        if i % 2 == 0: yield i\n"
        "def parse(s):\n    if not s: raise ValueError('empty')\n    return {'k': (1, 2.5, None, {3})}\n"
    )
    ref = assert_tests(
        "s = Stack()\ns.push(1).push(2)\nassert s.pop() == 2 and s.pop() == 1",
        "assert list(evens(7)) == [0, 2, 4, 6]",
        "assert parse('x') == {'k': (1, 2.5, None, {3})}",
        "try:\n    parse('')\nexcept ValueError:\n    pass\nelse:\n    raise AssertionError('no error')",
        "import math\nassert math.isclose(sum(evens(5)) / 3, 2.0)",
    )
    v = verify("code", program, ref, **FAST)
    assert v.status == Status.CORRECT, v.details


IO = {"language": "python", "io": [{"input": "1 2\n", "output": "3\n"}, {"input": "10 5\n", "output": "15"}]}


@pytest.mark.parametrize("program, status", [
    ("a, b = map(int, input().split())\nprint(a + b)", Status.CORRECT),
    ("a, b = map(int, input().split())\nprint(a + b, '  ')\nprint()\nprint()", Status.CORRECT),  # trailing space
    ("print(3)", Status.PARTIAL),
    ("a, b = map(int, input().split())\nprint(a + b)\nraise SystemExit(1)", Status.INCORRECT),  # non-zero exit
    ("import os, signal\nprint(3)\nos.kill(os.getpid(), signal.SIGSEGV)", Status.INCORRECT),
    ("import sys\nprint(int(sys.stdin.readline().split()[0]) + 2, file=sys.stderr)\nprint(3)", Status.PARTIAL),
])
def test_io_style(program, status):
    v = verify("code", py(program), IO, **FAST)
    assert v.status == status, v.details


def test_bad_reference_is_an_error():
    for ref in (None, {"tests": []}, {"io": [{"input": 1}]}, {"language": "rust", "tests": ["x"]}, {"x": 1}):
        v = verify("code", py("x = 1"), ref)
        assert (v.status, v.reason) == (Status.ERROR, "bad_reference"), ref


# --------------------------------------------------------------------------------------------- hostile


HOSTILE_ASSERT = {
    "early exit in a call": "import sys\ndef add(a, b):\n    sys.exit(0)",
    "os._exit at load": "import os\nos._exit(0)\ndef add(a, b): return a + b",
    "os._exit in a call": "import os\ndef add(a, b):\n    os._exit(0)",
    "lying __eq__": "class Any:\n    def __eq__(self, o): return True\n    __hash__ = None\ndef add(a, b): return Any()",
    "int subclass": "class Z(int):\n    def __eq__(self, o): return True\ndef add(a, b): return Z(7)",
    "assert tampering": (
        "import builtins\nbuiltins.AssertionError = type('Quiet', (Exception,), {})\n"
        "def add(a, b): return 7"
    ),
    "shadowed builtins": "def len(x): return 3\ndef sorted(x): return [1, 2, 3]\ndef add(a, b): return 7",
    "fake success output": (
        "import sys\nprint('All tests passed! PASSED 3/3')\nsys.stdout.flush()\ndef add(a, b): return 7"
    ),
    "frame inspection": (
        "import sys, gc\ndef add(a, b):\n    for f in list(sys._current_frames().values()):\n"
        "        while f is not None:\n            f.f_locals.get('x'); f = f.f_back\n"
        "    for o in gc.get_objects():\n        pass\n    return 7"
    ),
}


@pytest.mark.parametrize("name", HOSTILE_ASSERT)
def test_hostile_assert_programs_get_no_credit(name):
    v = verify("code", py(HOSTILE_ASSERT[name]), ADD_TESTS, **FAST)
    assert v.score == 0.0 and v.status == Status.INCORRECT, (name, v)
    assert_no_trace()


def test_a_forged_library_name_gains_nothing():
    program = py(
        "def add(a, b):\n"
        "    def anything(): pass\n"
        "    anything.__module__ = 'unittest.mock'\n"
        "    anything.__qualname__ = 'ANY'\n"
        "    return anything\n"
    )
    v = verify("code", program, ADD_TESTS, **FAST)
    assert v.score == 0.0, v.details


def test_an_always_true_contains_gains_nothing():
    program = py("class Everything:\n    def __contains__(self, x): return True\n    def __iter__(self): return iter(())\n"
                 "def primes(n): return Everything()")
    v = verify("code", program, assert_tests("assert 7 in primes(10)", "assert 4 not in primes(10)"), **FAST)
    assert v.score == 0.5 and v.details["tests"][0]["status"] == "failed", v.details


def test_garbage_on_the_channel_is_the_programs_failure():
    program = py(
        "import json, os, struct, sys\n"
        "fd = json.loads(sys.argv[2])['channel'][1]\n"
        "def add(a, b):\n"
        "    body = b'[' * 100000 + b']' * 100000\n"
        "    os.write(fd, struct.pack('>I', len(body)) + body)\n"
        "    return a + b\n"
    )
    v = verify("code", program, ADD_TESTS, **FAST)
    assert v.status == Status.INCORRECT and v.details["tests"][0]["reason"] == "protocol_violation", v.details


def test_undecodable_responses_release_their_sandbox():
    from rlvr.verifiers.code.pool import POOL
    from rlvr.verifiers.code.sandbox import _SLOTS

    for _ in range(3):
        v = verify("code", "def add(a, b):\n    return a + b  # \ud800", ADD_TESTS, **FAST)
        assert v.status == Status.CORRECT  # the lone surrogate (in a comment) is replaced, not a crash
    assert set(_SLOTS.held) == {server.uid for idle in POOL.idle.values() for server in idle}
    assert_no_trace()


def test_shadowed_builtins_do_not_reach_the_tests():
    program = py("def len(x): return 3\ndef f(): return []")
    v = verify("code", program, assert_tests("assert len(f()) == 3"), **FAST)
    assert v.status == Status.INCORRECT


def test_patched_library_functions_do_not_reach_the_tests():
    program = py("import math\nmath.isclose = lambda *a, **k: True\ndef area(r): return 1.0")
    v = verify("code", program, assert_tests("assert math.isclose(area(1), 3.14159, rel_tol=1e-3)"), **FAST)
    assert v.status == Status.INCORRECT


def test_program_cannot_find_the_expected_value():
    secret = "XYZZY-" + uuid.uuid4().hex
    program = py(
        "import gc, os, sys\n"
        "def secret():\n"
        "    found = []\n"
        "    for o in gc.get_objects():\n"
        "        if isinstance(o, str) and 'XYZZY-' in o: found.append(o)\n"
        "    for root in ('/box', '/tmp', '/proc/self', os.getcwd()):\n"
        "        for dirpath, _, files in os.walk(root):\n"
        "            for name in files:\n"
        "                try: text = open(os.path.join(dirpath, name), errors='ignore').read(1 << 20)\n"
        "                except Exception: continue\n"
        "                i = text.find('XYZZY-')\n"
        "                if i >= 0: found.append(text[i:i + 38])\n"
        "            if dirpath.count('/') > 4: break\n"
        "    found += [v for v in os.environ.values() if 'XYZZY-' in v]\n"
        "    return found[0] if found else 'nothing'\n"
    )
    v = verify("code", program, assert_tests(f"assert secret() == {secret!r}"), timeout_s=5)
    assert v.status == Status.INCORRECT, v.details


def test_checker_environment_is_not_visible(monkeypatch):
    secret = "env-" + uuid.uuid4().hex
    monkeypatch.setenv("RLVR_TEST_SECRET", secret)
    program = py(
        "import os\n"
        "def leak():\n"
        "    seen = [os.environ.get('RLVR_TEST_SECRET', '')]\n"
        "    for pid in ('1', str(os.getppid()), 'self'):\n"
        "        try: seen.append(open(f'/proc/{pid}/environ', 'rb').read().decode(errors='ignore'))\n"
        "        except Exception: pass\n"
        "    return [s for s in seen if 'RLVR_TEST_SECRET' in s]\n"
    )
    v = verify("code", program, assert_tests("assert leak() == []"), **FAST)
    assert v.status == Status.CORRECT, v.details


def test_no_writes_outside_the_sandbox():
    target = Path(tempfile.gettempdir()) / f"rlvr-escape-{uuid.uuid4().hex}"
    home = Path.home() / f"rlvr-escape-{uuid.uuid4().hex}"
    program = py(
        "def escape(paths):\n"
        "    wrote = []\n"
        "    for p in paths:\n"
        "        try:\n"
        "            open(p, 'w').write('x'); wrote.append(p)\n"
        "        except Exception: pass\n"
        "    return wrote\n"
    )
    paths = [str(target), str(home), "/etc/rlvr-escape", "/usr/rlvr-escape", "/box/x"]
    verify("code", program, assert_tests(f"escape({paths!r})"), **FAST)
    for p in paths[:4]:
        assert not os.path.exists(p), p
    assert_no_trace()


def test_no_network_even_to_loopback():
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    listener.settimeout(0.2)
    port = listener.getsockname()[1]
    connections = []

    def accept_for_a_while():
        deadline = time.monotonic() + 4
        while time.monotonic() < deadline:
            try:
                conn, _ = listener.accept()
                connections.append(conn)
            except OSError:
                continue

    watcher = threading.Thread(target=accept_for_a_while)
    watcher.start()
    program = py(
        "import socket\n"
        "def reach(port):\n"
        "    try:\n"
        "        s = socket.create_connection(('127.0.0.1', port), timeout=1); s.sendall(b'hi'); return True\n"
        "    except OSError:\n"
        "        return False\n"
    )
    try:
        v = verify("code", program, assert_tests(f"assert reach({port}) is False"), **FAST)
    finally:
        watcher.join()
        listener.close()
    assert connections == [] and v.status == Status.CORRECT, v.details


def test_fork_bomb_is_contained():
    program = py(
        "import os\n"
        "def add(a, b):\n"
        "    while True:\n"
        "        try: os.fork()\n"
        "        except OSError: pass\n"
    )
    t0 = time.monotonic()
    v = verify("code", program, ADD_TESTS, timeout_s=1.5, processes=32)
    assert v.score == 0.0 and time.monotonic() - t0 < 10
    assert [t["status"] for t in v.details["tests"]] == ["timeout", "failed", "failed"]
    assert_no_trace()


def test_memory_bomb_is_contained():
    program = py("def add(a, b):\n    x = bytearray(8 * 1024 ** 3)\n    return a + b")
    v = verify("code", program, ADD_TESTS, timeout_s=2, memory_mb=256)
    assert v.score == 0.0 and v.status == Status.INCORRECT
    assert_no_trace()


def test_children_do_not_outlive_the_run():
    marker = uuid.uuid4().hex[:12]
    program = py(
        "import os, subprocess, time\n"
        f"subprocess.Popen(['sleep', '300'])\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        f"        os.execvp('sleep', ['sleep', '301', '{marker}'])\n"
        "    os._exit(0)\n"
        "def add(a, b): return a + b\n"
    )
    v = verify("code", program, ADD_TESTS, **FAST)
    assert v.status == Status.CORRECT
    assert_no_trace()
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                cmdline = open(f"/proc/{entry.name}/cmdline", "rb").read()
            except OSError:
                continue
            assert marker.encode() not in cmdline


def test_killing_the_parent_fails_harmlessly():
    program = py(
        "import os, signal\n"
        "def add(a, b):\n"
        "    for pid in (os.getppid(), 1, -1):\n"
        "        try: os.kill(pid, signal.SIGKILL)\n"
        "        except OSError: pass\n"
        "    return a + b\n"
    )
    v = verify("code", program, ADD_TESTS, **FAST)
    assert v.status in (Status.CORRECT, Status.INCORRECT)  # what it may kill is its own sandbox
    assert os.getpid() > 0 and verify("code", py("def add(a, b): return a + b"), ADD_TESTS).score == 1.0
    assert_no_trace()


def test_filling_the_disk_is_capped():
    program = py(
        "def add(a, b):\n"
        "    n = 0\n"
        "    try:\n"
        "        with open('fill', 'wb') as f:\n"
        "            while True:\n"
        "                f.write(b'x' * (1 << 20)); n += 1\n"
        "    except OSError:\n"
        "        pass\n"
        "    try:\n"
        "        with open('/dev/shm/fill', 'wb') as f:\n"
        "            while True: f.write(b'x' * (1 << 20)); n += 1\n"
        "    except OSError:\n"
        "        pass\n"
        "    return n\n"
    )
    v = verify("code", program, assert_tests("assert 8 <= add(1, 2) <= 32"), timeout_s=5,
               disk_bytes=32 * 1024 * 1024)
    assert v.status == Status.CORRECT, v.details  # 32 MiB across /tmp and /dev/shm, nothing more
    assert_no_trace()


@pytest.mark.parametrize("style", ["tests", "io"])
def test_gigabytes_of_output_are_dropped(style):
    flood = "import sys\nchunk = 'x' * (1 << 20)\nwhile True:\n    sys.stdout.write(chunk)\n"
    if style == "tests":
        program, ref = py("def add(a, b):\n" + "\n".join("    " + line for line in flood.splitlines())), ADD_TESTS
    else:
        program, ref = py(flood), IO
    t0 = time.monotonic()
    v = verify("code", program, ref, timeout_s=1.5)
    assert v.score == 0.0 and time.monotonic() - t0 < 8
    assert_no_trace()


def test_an_infinite_loop_costs_one_budget():
    tests = assert_tests(*["assert add(1, 1) == 2"] * 6)
    t0 = time.monotonic()
    verify("code", py("def add(a, b):\n    return a + b"), tests, timeout_s=1.0)
    honest = time.monotonic() - t0  # a sandbox's start and six tests on this machine, as loaded as it is now
    t0 = time.monotonic()
    v = verify("code", py("def add(a, b):\n    while True: pass"), tests, timeout_s=1.0)
    # one budget on top of what the honest run took, with a margin for a loaded machine; six would be 6 s
    assert time.monotonic() - t0 < honest + 1.0 + 2.0
    assert [t["status"] for t in v.details["tests"]] == ["timeout"] + ["failed"] * 5


def test_refuses_to_run_without_network_isolation():
    v = verify("code", py("def add(a, b): return a + b"), ADD_TESTS, isolation="process")
    assert (v.status, v.reason) == (Status.ERROR, "isolation_unavailable")
    assert "network" in v.details["error"]


def test_process_level_runs_when_network_is_allowed():
    v = verify("code", py("def add(a, b): return a + b"), ADD_TESTS, isolation="process", network=True)
    assert v.status == Status.CORRECT and v.details["isolation"] == "process"
    assert_no_trace()


def test_a_batch_runs_on_the_thread_pool():
    good, bad = py("def add(a, b): return a + b"), py("def add(a, b): return 0")
    verdicts = score_batch([ScoreRequest("code", good if i % 2 == 0 else bad, ADD_TESTS) for i in range(8)])
    assert [v.status for v in verdicts] == [Status.CORRECT, Status.PARTIAL] * 4
    assert_no_trace()


def test_the_program_holds_no_capability():
    program = py(
        "def status():\n"
        "    lines = open('/proc/self/status').read().splitlines()\n"
        "    return {l.split(':')[0]: int(l.split()[1], 16) for l in lines if l.startswith(('Cap', 'NoNew'))}\n"
    )
    v = verify("code", program, assert_tests(
        "s = status()\nassert s['CapEff'] == s['CapPrm'] == s['CapAmb'] == 0 and s['NoNewPrivs'] == 1"), **FAST)
    assert v.status == Status.CORRECT, v.details
