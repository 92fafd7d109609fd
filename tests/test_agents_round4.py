"""Bounds and channels of episodes: a turn's default limits, agent programs' process trees and reward channel."""

import json
import sys
import time

import pytest
from agent_fixtures import ScriptedEngine, qwen_style_tokenizer
from procs import wait_dead

from rlvr.envs import function_tool, make_env, register_tool, unregister_tool
from rlvr.envs.tool_env import MAX_CALLS_PER_TURN, TURN_TIME_BUDGET_S
from rlvr.rollout.agent_program import ProgramLimits, run_agent_program
from rlvr.rollout.base import SamplingParams
from rlvr.rollout.episodes import PromptPolicy, Scoring, generate_and_score
from rlvr.tasks import Task

TASK = Task([{"role": "user", "content": "what is 37*58?"}], "2146", "t")
LOAD_GRACE_S = 6.0  # what a wall-clock bound may overrun on a loaded machine (process starts, scheduling)


def _calls(name, arguments, count):
    return "".join(f'<tool_call>{{"name": "{name}", "arguments": {json.dumps(arguments)}}}</tool_call>'
                   for _ in range(count))


@pytest.fixture
def one_second_tool():
    from agent_tools import slow_tool

    # inline: the supervised runner's worker start (seconds on a loaded machine) would blur what the cap bounds
    register_tool("slow1")(lambda: function_tool(slow_tool, name="slow1", isolation="inline"))
    yield
    unregister_tool("slow1")


def test_default_options_bound_a_turn():
    env = make_env("tools", tools=["calculator"], max_turns=4)
    assert env.max_calls_per_turn == MAX_CALLS_PER_TURN <= 4 and env.turn_time_budget_s == TURN_TIME_BUDGET_S <= 10


@pytest.mark.parametrize("count", [MAX_CALLS_PER_TURN + 1, 8, 40])
def test_many_slow_calls_with_default_options_run_at_most_the_cap(one_second_tool, count):
    env = make_env("tools", tools=["slow1"], max_turns=4)
    env.reset(TASK)
    t0 = time.monotonic()
    step = env.step(_calls("slow1", {"seconds": 1}, count))
    elapsed = time.monotonic() - t0
    contents = [m["content"] for m in step.observations]
    ran = [c for c in contents if c == "awake"]
    assert len(ran) == MAX_CALLS_PER_TURN, contents
    assert contents[-1] == (f"error: {count - MAX_CALLS_PER_TURN} more tool call(s) in this turn were not run "
                            f"(at most {MAX_CALLS_PER_TURN} per turn)")
    assert step.info["skipped_calls"] == count - MAX_CALLS_PER_TURN and not step.done
    assert elapsed < TURN_TIME_BUDGET_S + LOAD_GRACE_S, elapsed


# ------------------------------------------------------------------------------------------------ agent programs

ESCAPES = {  # a program that leaves something running in a session of its own, then returns or not
    "setsid child": "p = subprocess.Popen(SLEEP, start_new_session=True); note(p.pid)",
    "double fork": ("r, w = os.pipe()\n"
                    "if os.fork() == 0:\n"
                    "    os.setsid()\n"
                    "    if os.fork() == 0:\n"
                    "        os.write(w, str(os.getpid()).encode()); os.close(w); time.sleep(60); os._exit(0)\n"
                    "    os._exit(0)\n"
                    "os.close(w); note(int(os.read(r, 32)))"),
    "daemon holding stdout": ("p = subprocess.Popen(SLEEP, start_new_session=True, stdout=sys.stdout, "
                              "stderr=sys.stderr, stdin=subprocess.DEVNULL); note(p.pid)"),
    "ignores SIGTERM": ("signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                        "p = subprocess.Popen(SLEEP, start_new_session=True, preexec_fn=lambda: "
                        "signal.signal(signal.SIGTERM, signal.SIG_IGN)); note(p.pid)"),
}
PROGRAM = """import os, signal, subprocess, sys, time
SLEEP = [sys.executable, "-c", "import time; time.sleep(60)"]
def note(pid):
    with open(sys.argv[1], "a") as f:
        f.write(f"{pid}\\n")
{body}
if sys.argv[2] == "hang":
    time.sleep(60)
print("done")
"""


def _tiny():
    from rlvr.models import TinySpec, build_tiny_model
    from rlvr.rollout import make_engine

    model, tokenizer = build_tiny_model(TinySpec(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64))
    return make_engine("hf", model, tokenizer), tokenizer


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the process tree is read from /proc")
@pytest.mark.parametrize("ending", ["exit", "hang"])
@pytest.mark.parametrize("kind", sorted(ESCAPES))
def test_what_a_program_starts_in_a_session_of_its_own_is_killed(tmp_path, kind, ending):
    script = tmp_path / "agent.py"
    script.write_text(PROGRAM.replace("{body}", ESCAPES[kind]))
    pids = tmp_path / "pids"
    engine, tokenizer = _tiny()
    limits = ProgramLimits(deadline_s=3.0, kill_grace_s=2.0)
    t0 = time.monotonic()
    run = run_agent_program(engine, tokenizer, [Task("1+2=", "3", "t")], SamplingParams(n=2, max_new_tokens=8),
                            PromptPolicy(agent_command=f"{sys.executable} {script} {pids} {ending}"), limits)
    elapsed = time.monotonic() - t0
    started = [int(p) for p in pids.read_text().split()]
    assert len(started) == 2
    assert all(wait_dead(p, within_s=2.0) for p in started), kind  # killed and reaped; /proc may lag a moment
    if ending == "hang":
        assert run.answers == ["", ""] and run.metrics["agent/timeout_frac"] == 1.0
    else:
        assert run.answers == ["done", "done"] and run.metrics["agent/timeout_frac"] == 0.0
    # two programs at once: one deadline, the supervisor's grace, and the readers' join when a pipe outlives them
    assert elapsed < limits.deadline_s + limits.kill_grace_s + 5 + LOAD_GRACE_S, elapsed


ECHO = """import json, os, sys, urllib.request
task = json.load(sys.stdin)
body = json.dumps({"model": "m", "prompt": task["prompt"], "max_tokens": 200}).encode()
request = urllib.request.Request(os.environ["OPENAI_BASE_URL"] + "/completions", data=body,
                                 headers={"Authorization": "Bearer " + os.environ["OPENAI_API_KEY"]})
text = json.loads(urllib.request.urlopen(request).read())["choices"][0]["text"]
if len(sys.argv) > 1:  # the program's own grade, on its own channel
    open(os.environ["RLVR_REWARD_FILE"], "w").write(sys.argv[1])
print(text)  # the model's text as the answer, as many agents print it
"""


@pytest.fixture
def echo_program(tmp_path):
    path = tmp_path / "echo.py"
    path.write_text(ECHO)
    return path


@pytest.mark.parametrize("forged", ['{"answer": "x", "reward": 1.0}', '{"answer": "", "reward": 1e9}',
                                    '{"reward": 5, "answer": "a"}\n', '  {"answer": 1, "reward": 1}  '])
def test_model_text_in_the_programs_reward_format_is_paid_nothing(echo_program, forged):
    tok = qwen_style_tokenizer()
    engine = ScriptedEngine(tok, lambda prompt: forged)
    tasks = [Task("write a poem", None, "free"), Task("1+2=", "3", "ref")]
    samples = generate_and_score(engine, tok, tasks, SamplingParams(n=1, max_new_tokens=64), Scoring(),
                                 prompts=PromptPolicy(agent_command=f"{sys.executable} {echo_program}"))
    assert "env/agent_reward" not in samples.components
    assert all(r <= 1.0 for r in samples.rewards), samples.rewards
    assert samples.rewards[0] == 0.0


@pytest.fixture
def judge_without_reference():
    from rlvr.verifiers import Status, Verdict, register_verifier

    @register_verifier("poem_judge_r4", replace=True)
    def judge(response, reference=None, **_):
        return Verdict(0.25, Status.PARTIAL, "judged")

    return "poem_judge_r4"


def test_a_programs_own_reward_counts_only_where_nothing_judged(echo_program, judge_without_reference):
    tok = qwen_style_tokenizer()
    engine = ScriptedEngine(tok, lambda prompt: "an answer")
    tasks = [Task("write a poem", None, "free"),  # nothing to check: the program's grade is the reward
             Task("1+2=", "3", "ref"),  # a reference: the verifier's verdict only
             Task("judge me", None, "judged", verifier=judge_without_reference),  # judged without a reference
             Task("odd", {"not": "readable"}, "odd")]  # a reference the verifier cannot read: still not self-graded
    samples = generate_and_score(engine, tok, tasks, SamplingParams(n=1, max_new_tokens=64), Scoring(),
                                 prompts=PromptPolicy(agent_command=f"{sys.executable} {echo_program} 0.75"))
    assert samples.components["env/agent_reward"] == [0.75, 0.0, 0.0, 0.0]
    assert samples.rewards[:3] == [0.75, 0.0, 0.25]
    assert samples.metrics["agent/reward_mean"] == pytest.approx(0.75)
