"""Reward workers and the user's main script: a script without an ``if __name__ == "__main__":`` guard that
scores through process workers finishes at once, in a real interpreter, and a reward defined in the script gets
a verdict that says what to do."""

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

TESTS = Path(__file__).resolve().parent
SRC = TESTS.parent / "src"


def _run(script: str, cwd: Path, timeout: float = 60) -> tuple[subprocess.CompletedProcess, float]:
    path = cwd / "user_script.py"
    path.write_text(textwrap.dedent(script))
    # no empty entry: an empty PYTHONPATH component would put the working directory on the user's own sys.path
    parts = [str(SRC), str(TESTS), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(parts)}
    t0 = time.monotonic()
    out = subprocess.run([sys.executable, str(path)], cwd=cwd, env=env, capture_output=True, text=True,
                         timeout=timeout)
    return out, time.monotonic() - t0


def test_a_script_without_a_main_guard_scores_through_workers(tmp_path):
    out, elapsed = _run(
        """
        import reward_fns as rf
        from rlvr.verifiers import CallableRequest, ScoreRequest, score_batch

        print("top level ran", flush=True)   # a worker re-running this script would print it again

        def reward_in_script(response, reference):
            return 1.0

        verdicts = score_batch([
            CallableRequest(rf.match, "a", "a"),
            CallableRequest(rf.pid_verdict, "b", None),
            ScoreRequest("regex", "2024", r"\\d+"),          # a registered "process" verifier
            CallableRequest(reward_in_script, "a", "a"),
        ])
        for v in verdicts:
            print(v.status.value, v.reason)
        print("message:", verdicts[3].details["error"])
        """,
        tmp_path,
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines.count("top level ran") == 1, out.stdout
    assert lines[1:5] == ["correct float_reward", "correct pid", "correct regex_match", "error unpicklable_reward"]
    message = lines[5]
    assert "__main__" in message and "move the function into a module" in message
    assert elapsed < 30, elapsed  # about 1 s on an idle machine; before, this hung for good


def test_a_guarded_script_gets_the_same_verdicts(tmp_path):
    out, _ = _run(
        """
        import reward_fns as rf
        from rlvr.verifiers import CallableRequest, RewardRunner

        def reward_in_script(response, reference):
            return 1.0

        if __name__ == "__main__":
            with RewardRunner(workers=1) as runner:
                verdicts = runner.score([CallableRequest(rf.match, "a", "a"),
                                         CallableRequest(reward_in_script, "a", "a")])
            print(*[v.reason for v in verdicts])
        """,
        tmp_path,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["float_reward", "unpicklable_reward"]


def test_a_module_in_the_working_directory_cannot_shadow_what_workers_import(tmp_path):
    # Workers start with -P: the working directory is not put in front of the standard library.
    (tmp_path / "signal.py").write_text("raise SystemExit('shadowed')\n")
    (tmp_path / "json.py").write_text("raise SystemExit('shadowed')\n")
    out, _ = _run(
        """
        import sys
        sys.path.remove(sys.path[0])   # the user's own interpreter does not import from here either
        import reward_fns as rf
        from rlvr.verifiers import CallableRequest, score_batch
        print(score_batch([CallableRequest(rf.match, "a", "a")])[0].status.value)
        """,
        tmp_path,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "correct"
