"""Attacks on the checker itself, one group per class of issue 15, each run for real: a hostile program in a
real bubblewrap sandbox, talking to the checker over the real channel. The checker never trusts, waits on
or executes what the sandbox sends: it does not freeze, does not grow without bound, imports nothing,
honours a control message only where the protocol allows it, and never lets the program stand in for a
library the tests use."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time

import pytest

from code_sandbox_checks import assert_no_trace, sandbox_base  # noqa: F401 - a fixture
from rlvr.verifiers import Status, verify
from rlvr.verifiers.code import isolation_level

# a program reaches the channel through the fds it is told about, or by patching the harness (__main__)
CHANNEL = "import json, os, struct, sys, time\nrfd, wfd = json.loads(sys.argv[2])['channel']\n"


@pytest.fixture(scope="module", autouse=True)
def _bubblewrap_is_installed():
    assert isolation_level() == "bwrap", "these attacks need bubblewrap (apt-get install bubblewrap)"


def judge(program: str, *tests: str, timeout_s: float = 2.0, **options):
    t0 = time.monotonic()
    v = verify("code", f"```python\n{program}\n```", {"language": "python", "tests": list(tests)},
               timeout_s=timeout_s, **options)
    return v, time.monotonic() - t0


def statuses(v) -> list[tuple[str, str | None]]:
    return [(t["status"], t.get("reason")) for t in v.details["tests"]]


# ------------------------------------------------------------------------------- deadlines and size caps


def test_a_partial_frame_then_silence_costs_one_time_budget():
    program = CHANNEL + (
        "def add(a, b):\n"
        "    os.write(wfd, struct.pack('>I', 1000) + b'l' * 10)\n"
        "    time.sleep(600)\n"
    )
    v, took = judge(program, "assert add(1, 2) == 3", "assert add(2, 2) == 4")
    assert statuses(v) == [("timeout", "timeout"), ("failed", "not_run")]
    assert took < 2.0 + 4
    assert_no_trace()


def test_a_program_that_never_reads_cannot_block_the_checkers_writes():
    # the server loop stops reading; the test then sends a value far larger than a pipe holds
    program = "import __main__, time\n__main__.recv = lambda fd: time.sleep(600)\ndef add(a, b): return a + b\n"
    v, took = judge(program, "assert add(b'x' * 30_000_000, b'') == b'x' * 30_000_000")
    assert statuses(v) == [("timeout", "timeout")]
    assert took < 2.0 + 4
    assert_no_trace()


def test_an_announced_frame_over_the_cap_is_refused_unread():
    program = CHANNEL + "def add(a, b):\n    os.write(wfd, struct.pack('>I', 2 ** 32 - 1))\n    time.sleep(600)\n"
    v, took = judge(program, "assert add(1, 2) == 3")
    assert statuses(v) == [("failed", "protocol_violation")] and took < 4
    assert_no_trace()


def test_a_flood_of_output_while_the_channel_is_silent_is_drained():
    program = "import sys\ndef add(a, b):\n    sys.stdout.write('x' * 50_000_000)\n    return a + b\n"
    v, _ = judge(program, "assert add(1, 2) == 3", timeout_s=10)
    assert v.status == Status.CORRECT, v.details
    assert_no_trace()


# ---------------------------------------------------------------------- linear decoding, bounded memory

# The reply to ``forge()`` is the frame ``FRAME`` builds, written by a patched harness: bytes no honest
# sandbox would send, and that the program does not have to build as Python objects first.
FORGE = """
import __main__, os, struct
codec = __main__.codec
real_send = __main__.send
pending = []
def send(fd, message):
    if pending:
        body = pending.pop()
        data = memoryview(struct.pack('>I', len(body)) + body)
        while data:
            data = data[os.write(fd, data):]
        return
    real_send(fd, message)
__main__.send = send
def ok(tag, count, members):
    out = bytearray(b't\\x02s\\x02ok' + tag)
    codec._varint(out, count)
    return bytes(out) + members
def forge():
    pending.append(FRAME())
"""
M = 2 ** 61 - 1  # every multiple of M hashes to 0


def forged(frame: str) -> str:
    return FORGE + f"M = {M}\ndef FRAME():\n    return {frame}\n"


@pytest.mark.parametrize("frame", [
    "ok(b'S', 200_000, b''.join(codec.encode(i * M) for i in range(200_000)))",
    "ok(b'z', 200_000, b''.join(codec.encode(i * M) for i in range(200_000)))",
    "ok(b'd', 200_000, b''.join(codec.encode(i * M) + b'N' for i in range(200_000)))",
    "ok(b'S', 200_000, b''.join(codec.encode((i * M, 1)) for i in range(200_000)))",
])
def test_colliding_hashes_cannot_make_decoding_quadratic(frame):
    v, took = judge(forged(frame), "forge()", "assert forge is not None", timeout_s=10)
    assert statuses(v) == [("error", "value_too_large"), ("passed", None)], v.details
    assert took < 10, took  # inserting 200,000 members with one hash is quadratic: minutes
    assert_no_trace()


@pytest.mark.parametrize("frame", [
    "ok(b'x', 2, codec.encode('eval') + codec.encode(('1 + 1',)))",  # a kind that does not exist
    "ok(b'x', 2, codec.encode('fraction') + codec.encode((1, 0)))",  # a constructor that raises
    "ok(b'x', 2, codec.encode('decimal') + codec.encode((1.5,)))",  # fields of the wrong type
])
def test_a_forged_standard_library_value_is_a_violation(frame):
    v, _ = judge(forged(frame), "forge()", "assert forge is not None")
    assert statuses(v) == [("failed", "protocol_violation")] * 2, v.details
    assert_no_trace()


def test_an_honest_set_with_few_collisions_is_carried():
    v, _ = judge(f"def make():\n    return {{i * {M} for i in range(32)}} | {{-1, -2}}\n",
                 f"assert make() == {{i * {M} for i in range(32)}} | {{-1, -2}}")
    assert v.status == Status.CORRECT, v.details


MEASURE_GROWTH = """
import json, resource, sys
from rlvr.verifiers import verify
def peak():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
verify("code", "```python\\ndef f(): return 1\\n```", {"tests": ["assert f() == 1"]})  # warm up
before = peak()
v = verify("code", sys.argv[1], {"tests": ["forge()"]}, timeout_s=60)
print(json.dumps({"grew": peak() - before, "tests": v.details.get("tests")}))
"""


@pytest.mark.parametrize("frame", [
    "ok(b'l', 30_000_000, b'l\\x00' * 30_000_000)",  # 60 MB of empty lists: about 2.6 GB rebuilt naively
    "ok(b'l', 20_000_000, b'l\\x01N' * 20_000_000)",
])
def test_a_large_reply_cannot_grow_the_checker_without_bound(frame):
    """Run in a process of its own, so the checker's peak memory is this reply's alone."""
    program = f"```python\n{forged(frame)}\n```"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run([sys.executable, "-c", MEASURE_GROWTH, program], capture_output=True, text=True,
                          env=env, timeout=240)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert [(t["status"], t["reason"]) for t in result["tests"]] == [("error", "value_too_large")], result
    assert result["grew"] < 450 * 1024 * 1024, result  # the decoder's cost cap is 256 MiB


def test_a_reply_built_to_be_slow_to_decode_times_out():
    # 30 million members of one byte each, under the cost cap: decoding them has the test's deadline
    v, took = judge(forged("ok(b'l', 30_000_000, b'N' * 30_000_000)"), "forge()", timeout_s=1.5)
    assert statuses(v) == [("timeout", "timeout")], v.details
    assert took < 1.5 + 6
    assert_no_trace()


# ----------------------------------------------------------------------- nothing imported, nothing run


def test_module_names_sent_by_the_sandbox_import_nothing_in_the_checker():
    watched = ["__phello__", "unittest.__main__", "antigravity", "this", "rlvr_not_a_module"]
    assert not any(name in sys.modules for name in watched[:3])
    program = "import types\n" + "".join(
        f"m{i} = types.ModuleType({name!r})\n" for i, name in enumerate(watched)
    ) + f"def get(i):\n    return [m0, m1, m2, m3, m4][i]\n"
    tests = [f"get({i})" for i in range(len(watched))] + ["assert m0.__name__"]
    v, _ = judge(program, *tests)
    assert [name for name in watched[:3] if name in sys.modules] == []
    assert [t["status"] for t in v.details["tests"][:5]] == ["passed"] * 5  # a placeholder, not a module
    assert v.details["tests"][5]["status"] == "failed"  # m0 is not given to the tests at all
    assert_no_trace()


def test_exception_names_cannot_reach_anything_but_builtin_exceptions():
    program = (
        "import __main__\n"
        "real = __main__.send\n"
        "def send(fd, message):\n"
        "    if message[0] == 'error':\n"
        "        message = ('error', '__import__', 'os', 'system')\n"
        "    real(fd, message)\n"
        "__main__.send = send\n"
        "def add(a, b): raise ValueError('no')\n"
    )
    v, _ = judge(program, "add(1, 2)")
    assert statuses(v) == [("failed", "exception")] and "RemoteError" in v.details["tests"][0]["message"]
    assert_no_trace()


# ------------------------------------------------------------------- control messages in their state only

PATCH_REPLIES = (
    "import __main__\n"
    "real = __main__.send\n"
    "def send(fd, message):\n"
    "    if message[0] == 'ok' and message[1] is not True and type(message[1]) is not dict:\n"
    "        message = REPLACEMENT\n"
    "    real(fd, message)\n"
    "__main__.send = send\n"
)


@pytest.mark.parametrize("replacement", [("stop",), ("hello", {}), ("ok", 1, 2), ("too_large", 7)])
def test_a_control_message_out_of_place_is_a_violation(replacement):
    program = f"REPLACEMENT = {replacement!r}\n" + PATCH_REPLIES + "def is_even(n): return False\n"
    v, _ = judge(program, "assert all(map(is_even, [2, 4, 6]))", "assert is_even(2) is False")
    assert v.score == 0.0 and statuses(v)[0] == ("failed", "protocol_violation"), v.details
    assert_no_trace()


def test_stop_still_ends_an_honest_iteration():
    program = "def evens(n):\n    yield from range(0, n, 2)\n"
    v, _ = judge(program, "assert list(evens(7)) == [0, 2, 4, 6]", "assert all(x % 2 == 0 for x in evens(9))")
    assert v.status == Status.CORRECT, v.details


# --------------------------------------------------------------------- libraries stay the checker's own


def test_a_patched_numpy_does_not_reach_the_tests():
    honest = "import numpy as np\ndef f():\n    return np.array([1.0, 2.0])\n"
    lying = "import numpy as np\nnp.allclose = lambda *a, **k: True\ndef f():\n    return np.array([0.0, 0.0])\n"
    tests = ["assert np.allclose(f(), [1.0, 2.0])", "import numpy\nassert numpy.allclose(f(), [1.0, 2.0])"]
    assert judge(honest, *tests)[0].status == Status.CORRECT
    v, _ = judge(lying, *tests)
    assert v.score == 0.0, v.details
    assert_no_trace()


def test_a_library_the_checker_has_not_imported_is_not_a_proxy():
    name = next(m for m in ("wave", "sndhdr", "xdrlib", "nntplib") if m not in sys.modules)
    program = f"import {name}\n{name}.lie = lambda *a: True\ndef f(): return 1\n"
    v, _ = judge(program, f"assert {name}.lie(f())")
    assert v.score == 0.0 and "NameError" in v.details["tests"][0]["message"], v.details
    assert name not in sys.modules
    assert_no_trace()


def test_library_objects_returned_are_plain_values():
    program = "import numpy as np\ndef f():\n    return np.arange(6).reshape(2, 3), np.float32(0.5), np.bool_(True)\n"
    v, _ = judge(program, "a, b, c = f()\nassert a == [[0, 1, 2], [3, 4, 5]] and type(b) is float and c is True")
    assert v.status == Status.CORRECT, v.details
