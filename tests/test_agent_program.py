"""Agents written for the OpenAI API, trained through rlvr's endpoint (rollout.agent_command): real subprocesses using
the official openai client, real HTTP on loopback, the trained ids checked against the ids the engine sampled."""

import json
import os
import sys
import threading
import time
import urllib.error
import urllib.request

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from rlvr.cli import main
from rlvr.errors import UserError
from rlvr.rollout import HFEngine, SamplingParams, make_engine
from rlvr.rollout.agent_endpoint import AgentEndpoint, EndpointSettings
from rlvr.rollout.agent_program import ProgramLimits, parse_output, run_agent_program, stitch, task_payload
from rlvr.rollout.episodes import PromptPolicy
from rlvr.tasks import Task
from rlvr.tasks.jsonl import write_jsonl
import rlvr.train.loop as loop

pytest.importorskip("openai")

# An agent loop with a tool of its own: ask, run the calculator locally, show the model its result, ask again.
# argv[1] = "keep" sends the history as the model wrote it; "drop" replaces the first reply (as thinking templates
# drop earlier reasoning), so the second prompt no longer extends the first.
AGENT = '''
import json, sys
from openai import OpenAI

task = json.load(sys.stdin)
client = OpenAI()

def calculator(expression):
    a, b = expression.rstrip("=").split("+")
    return str(int(a) + int(b))

messages = [{"role": "user", "content": task["prompt"]}]
first = client.chat.completions.create(model="policy", messages=messages, max_tokens=3)
reply = first.choices[0].message.content if sys.argv[1] == "keep" else "(reasoning dropped)"
messages += [{"role": "assistant", "content": reply},
             {"role": "user", "content": "calculator: " + calculator(task["prompt"])}]
second = client.chat.completions.create(model="policy", messages=messages, max_tokens=3)
print(json.dumps({"answer": second.choices[0].message.content.strip()}))
'''

# A template whose assistant turns end with EOS, as most chat models' do: the model's own EOS is then part of the
# next prompt, and multi-call episodes stitch into one row.
EOS_TEMPLATE = ("{{ bos_token }}{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}"
                "{% if m['role'] == 'assistant' %}{{ eos_token }}{% endif %}\n{% endfor %}"
                "{% if add_generation_prompt %}assistant: {% endif %}")

LOAD_GRACE_S = 8.0  # seconds a wall-clock bound may overrun on a loaded machine (model build, process starts)


@pytest.fixture
def agent_script(tmp_path):
    path = tmp_path / "agent.py"
    path.write_text(AGENT)
    return path


@pytest.fixture
def eos_model_dir(tiny_model_dir, tmp_path):
    path = tmp_path / "model"
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    tokenizer.chat_template = EOS_TEMPLATE
    tokenizer.save_pretrained(path)
    AutoModelForCausalLM.from_pretrained(tiny_model_dir).save_pretrained(path)
    return path


def _record_generate(monkeypatch):
    """Every call the engine served: (prompt ids, sampled ids, their log-probs)."""
    served = []
    original = HFEngine.generate

    def generate(self, prompts, params):
        out = original(self, prompts, params)
        for row, prompt in enumerate(prompts):
            length = int(out.response_mask[row].sum())
            served.append((list(prompt), out.response_ids[row, :length].tolist(), out.logprobs[row, :length].tolist()))
        return out

    monkeypatch.setattr(HFEngine, "generate", generate)
    return served


def _runs(mask):
    """(start, end) of each run of 1s in a 0/1 list."""
    runs, start = [], None
    for i, v in enumerate(list(mask) + [0]):
        if v and start is None:
            start = i
        if not v and start is not None:
            runs.append((start, i))
            start = None
    return runs


def test_cli_trains_on_the_ids_the_endpoint_sampled(tmp_path, eos_model_dir, agent_script, monkeypatch):
    """`rlvr train` with rollout.agent_command: 3 steps; every trained token is a token the engine sampled, in the
    context it was sampled in, with its log-prob; the loss is on those tokens only."""
    data = tmp_path / "tasks.jsonl"
    write_jsonl(data, [{"prompt": f"{a}+{b}=", "reference": str(a + b)} for a, b in [(1, 2), (3, 4), (2, 2)]])
    served = _record_generate(monkeypatch)
    trained = []
    prepare = loop.prepare_experience

    def spy(model, batch, *args, **kwargs):
        trained.append(batch)
        return prepare(model, batch, *args, **kwargs)

    monkeypatch.setattr(loop, "prepare_experience", spy)
    out = tmp_path / "run"
    command = f"{sys.executable} {agent_script} keep"
    assert main(["train", "examples/arithmetic.yaml", f"model.path={eos_model_dir}", f"data.train={data}",
                 f"train.out={out}", "train.steps=3", "data.prompts_per_step=1", "rollout.group_size=2",
                 "rollout.max_new_tokens=16", "train.progress=false", f"rollout.agent_command={command}"]) == 0
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert all(r["agent/calls_mean"] == 2 and r["agent/failed_frac"] == 0 for r in rows)
    assert len(trained) == 3 and len(served) == 3 * 2 * 2
    stitched = 0
    for batch, row in zip(trained, rows):
        assert batch.size == 2
        untrained = 0
        for i in range(batch.size):
            prompt = batch.prompt_ids[i][batch.prompt_mask[i].bool()].tolist()
            length = int(batch.response_mask[i].sum())
            response = batch.response_ids[i, :length].tolist()
            loss = batch.loss_mask[i, :length].tolist()
            assert loss and not any(batch.loss_mask[i, length:].tolist())
            segments = _runs(loss)
            # both calls in one row; one when the reply held a special token the text left out (the second prompt
            # then does not extend the first, and only the second call is trained)
            assert len(segments) in (1, 2)
            stitched += len(segments) == 2
            untrained += 2 - len(segments)
            for start, end in segments:  # each trained run: exactly what the engine sampled after exactly this context
                context, sampled = prompt + response[:start], response[start:end]
                match = [s for s in served if s[0] == context and s[1][:len(sampled)] == sampled
                         and (len(sampled) == len(s[1]) or len(sampled) == 3)]  # the agent asks for 3 tokens a call
                assert match, "a trained run the engine did not sample after this context"
                torch.testing.assert_close(batch.logprobs[i, start:end], torch.tensor(match[0][2][:len(sampled)]))
        assert row["agent/untrained_calls_mean"] == untrained / batch.size
    assert stitched  # the random model writes a special token in a call about one time in nine


def _run(tmp_path, command, tasks, *, n=2, limits=ProgramLimits(), template=None, max_new_tokens=16):
    from rlvr.models import TinySpec, build_tiny_model

    model, tokenizer = build_tiny_model(TinySpec(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64))
    if template:
        tokenizer.chat_template = template
    engine = make_engine("hf", model, tokenizer)
    return run_agent_program(engine, tokenizer, tasks, SamplingParams(n=n, max_new_tokens=max_new_tokens),
                             PromptPolicy(agent_command=command), limits), tokenizer


def test_history_rewritten_by_the_program_trains_what_was_sent(tmp_path, agent_script, monkeypatch):
    """The second call's prompt does not extend the first call's: the row is the last call as it was sent, the first
    call's reply is not trained (it was never in the context the program sent)."""
    served = _record_generate(monkeypatch)
    run, tokenizer = _run(tmp_path, f"{sys.executable} {agent_script} drop", [Task("1+2=", "3", "a")],
                          template=EOS_TEMPLATE)
    assert run.metrics["agent/untrained_calls_mean"] == 1 and run.metrics["agent/calls_mean"] == 2
    b = run.batch
    for i in range(2):
        prompt = b.prompt_ids[i][b.prompt_mask[i].bool()].tolist()
        assert "(reasoning dropped)" in tokenizer.decode(prompt)
        length = int(b.response_mask[i].sum())
        assert b.loss_mask[i, :length].tolist() == [1] * length  # the last call's sampled ids, nothing inserted
        assert any(s[0] == prompt and s[1][:length] == b.response_ids[i, :length].tolist() for s in served)


def test_stitch_by_hand():
    from rlvr.rollout.agent_endpoint import Call

    a = Call("k", "chat", [1, 2], 3, sampled_ids=[5, 6], logprobs=[-0.5, -0.6])
    b = Call("k", "chat", [1, 2, 5, 6, 9, 9], 3, sampled_ids=[7], logprobs=[-0.7])
    c = Call("k", "chat", [1, 2, 5, 6, 9, 9, 7, 8], 3, sampled_ids=[4, 3], logprobs=[-0.4, -0.3])
    prompt, ids, loss, logprobs, _, untrained = stitch([0], [a, b, c])
    assert (prompt, ids, loss, untrained) == ([1, 2], [5, 6, 9, 9, 7, 8, 4, 3], [1, 1, 0, 0, 1, 0, 1, 1], 0)
    assert logprobs == [-0.5, -0.6, 0.0, 0.0, -0.7, 0.0, -0.4, -0.3]
    rewritten = Call("k", "chat", [1, 2, 5, 0, 9], 3, sampled_ids=[8], logprobs=[-0.8])  # a's reply altered
    assert stitch([0], [a, rewritten])[:4] == ([1, 2, 5, 0, 9], [8], [1], [-0.8])
    assert stitch([0], [b, rewritten, c])[5] == 2  # c does not extend the rewritten call: the two before it are context
    assert stitch([1, 2, 3], []) == ([1, 2, 3], [], [], [], [], 0)


MISBEHAVING = {
    "crash": ("import json, os, sys, urllib.request\n"  # asks the model once, then crashes
              "body = json.dumps({'model': 'm', 'prompt': '1+2=', 'max_tokens': 2}).encode()\n"
              "urllib.request.urlopen(urllib.request.Request(os.environ['OPENAI_BASE_URL'] + '/completions', data=body, "
              "headers={'Authorization': 'Bearer ' + os.environ['OPENAI_API_KEY']}))\n"
              "sys.stdout.write('42'); sys.exit(3)"),
    "hang": "import subprocess, sys, time; p = subprocess.Popen(['sleep', '60']); open(sys.argv[2], 'a').write(f'{p.pid}\\n'); time.sleep(60)",
    "orphan": "import subprocess, sys; p = subprocess.Popen(['sleep', '60']); open(sys.argv[2], 'a').write(f'{p.pid}\\n'); print('done')",
    "flood": "import sys; sys.stdout.write('x' * 10_000_000)",
    "silent": "pass",
    "divide": "1 / 0",
    "reward": ("import json, os; open(os.environ['RLVR_REWARD_FILE'], 'w').write('0.7'); "
               "print(json.dumps({'answer': 'seven'}))"),
    "stdout_reward": "import json; print(json.dumps({'answer': 'seven', 'reward': 0.7}))",
    "echo": "import sys; print(sys.stdin.read())",
    "badkey": ("import os, urllib.request, urllib.error\n"
               "req = urllib.request.Request(os.environ['OPENAI_BASE_URL'] + '/chat/completions', data=b'{}', "
               "headers={'Authorization': 'Bearer wrong', 'Content-Type': 'application/json'})\n"
               "try:\n    urllib.request.urlopen(req)\nexcept urllib.error.HTTPError as e:\n    print(e.code)"),
}


@pytest.fixture
def misbehaving(tmp_path):
    path = tmp_path / "program.py"
    path.write_text("import sys\nexec(" + repr(MISBEHAVING) + "[sys.argv[1]])\n")
    return path


def test_misbehaving_programs_are_verdicts(tmp_path, misbehaving):
    pids = tmp_path / "pids"
    limits = ProgramLimits(deadline_s=3.0, output_bytes=1000)
    for kind in ("crash", "hang", "orphan", "flood", "silent"):
        started = time.monotonic()
        run, _ = _run(tmp_path, f"{sys.executable} {misbehaving} {kind} {pids}", [Task("1+2=", "3", "t")], limits=limits)
        # what the run promises: the deadline, then the supervisor's grace; plus a margin for a loaded machine
        assert time.monotonic() - started < limits.deadline_s + limits.kill_grace_s + LOAD_GRACE_S, kind
        assert run.batch.size == 2
        if kind == "crash":  # what it sampled before crashing is trained, with the empty answer's reward
            assert run.metrics["agent/calls_mean"] == 1 and int(run.batch.loss_mask.sum()) > 0
        else:
            assert int(run.batch.loss_mask.sum()) == 0  # no call: nothing to train
        if kind == "flood":
            assert run.answers == ["x" * 1000] * 2 and run.metrics["agent/output_capped_frac"] == 1.0
        elif kind == "orphan":
            assert run.answers == ["done", "done"]
        else:
            assert run.answers == ["", ""], kind  # a crash's partial output is not an answer
        assert run.metrics["agent/failed_frac"] == (1.0 if kind == "crash" else 0.0)
        assert run.metrics["agent/timeout_frac"] == (1.0 if kind == "hang" else 0.0)
        assert all(s["env_errors"] == (kind in ("crash", "hang")) for s in run.stats)
    assert len(pids.read_text().split()) == 4
    for pid in pids.read_text().split():  # what a program started, hung or exited, was killed with it
        assert not _alive(int(pid))


def _alive(pid: int) -> bool:
    """Running, not a zombie left for a container's init to reap."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_a_command_that_never_works_is_one_error(tmp_path, misbehaving):
    """Failing in every episode before any call is a broken command: one error with its stderr, not a run of zeros."""
    with pytest.raises(UserError, match="rollout.agent_command=.* failed in every episode(.|\n)*ZeroDivisionError"):
        _run(tmp_path, f"{sys.executable} {misbehaving} divide x", [Task("1+2=", "3", "t")])
    with pytest.raises(UserError, match="could not start"):
        _run(tmp_path, str(tmp_path / "no-such-program"), [Task("1+2=", "3", "t")])


def test_returned_reward_counts_only_without_a_reference(tmp_path, misbehaving):
    tasks = [Task("1+2=", "3", "ref"), Task("write a poem", None, "free")]
    run, _ = _run(tmp_path, f"{sys.executable} {misbehaving} reward x", tasks, n=1)
    assert run.answers == ["seven", "seven"]
    assert run.parts == [{}, {"agent_reward": 0.7}]
    assert run.metrics["agent/reward_mean"] == pytest.approx(0.7)
    run, _ = _run(tmp_path, f"{sys.executable} {misbehaving} stdout_reward x", tasks, n=1)
    assert run.answers == ["seven", "seven"] and run.parts == [{}, {}]  # stdout is not the reward's channel


def test_the_program_never_sees_the_answer(tmp_path, misbehaving):
    task = Task("1+2=", "3", "t7", meta={"solution": "1+2=3", "answer": "3", "difficulty": 2, "source": "s"})
    run, _ = _run(tmp_path, f"{sys.executable} {misbehaving} echo x", [task], n=2)
    seen = [json.loads(a) for a in run.answers]
    assert seen == [{"id": "t7", "prompt": "1+2=", "meta": {"difficulty": 2, "source": "s"}, "sample": s} for s in (0, 1)]
    assert task_payload(task, 0) == seen[0]


def test_a_wrong_key_is_refused(tmp_path, misbehaving):
    run, _ = _run(tmp_path, f"{sys.executable} {misbehaving} badkey x", [Task("1+2=", "3", "t")], n=1)
    assert run.answers == ["401"] and run.metrics["agent/refused_requests"] == 1


@pytest.mark.parametrize("text, expected", [
    ("  7\n", ("7", None)), ('{"answer": 7, "reward": 1}', ("7", 1.0)), ('{"answer": "a", "reward": "high"}', ("a", None)),
    ('{"answer": "a", "reward": NaN}', ("a", None)), ('{"reward": 1}', ('{"reward": 1}', None)), ("{not json", ("{not json", None)),
])
def test_parse_output(text, expected):
    assert parse_output(text) == expected


# ------------------------------------------------------------------------------------------ the endpoint itself

def _post(url, key, body):
    request = urllib.request.Request(url, data=json.dumps(body).encode(),
                                     headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def _serve(endpoint, requests):
    """Send ``requests`` (url suffix, key, body) from threads while this thread pumps the engine."""
    results = [None] * len(requests)

    def send(i, path, key, body):
        results[i] = _post(endpoint.base_url + path, key, body)

    threads = [threading.Thread(target=send, args=(i, *r)) for i, r in enumerate(requests)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 30
    while any(t.is_alive() for t in threads) and time.monotonic() < deadline:
        endpoint.pump(wait_s=0.05)
    return results


def test_endpoint_token_in_token_out(tiny):
    model, tokenizer = tiny
    endpoint = AgentEndpoint(make_engine("hf", model, tokenizer), tokenizer, EndpointSettings(episode_tokens=5))
    try:
        key = endpoint.open_episode()
        ids = tokenizer("7+1=")["input_ids"]
        (code, body), = _serve(endpoint, [("/completions", key, {"model": "m", "prompt": ids, "max_tokens": 4,
                                                                   "temperature": 0.3})])
        assert code == 200 and body["object"] == "text_completion"
        call = endpoint.calls[key][0]
        assert call.prompt_ids == ids and 1 <= len(call.sampled_ids) <= 4 and len(call.logprobs) == len(call.sampled_ids)
        assert body["choices"][0]["text"] == tokenizer.decode(call.sampled_ids, skip_special_tokens=True)
        assert body["usage"]["completion_tokens"] == len(call.sampled_ids)
        assert endpoint.counts["temperature_overridden"] == 1
        # the rest of the 5-token budget, then an empty reply that samples nothing
        left = 5 - len(call.sampled_ids)
        (code, body), = _serve(endpoint, [("/completions", key, {"model": "m", "prompt": "1+1=", "max_tokens": 9})])
        assert code == 200 and len(endpoint.calls[key][1].sampled_ids) <= left
        if len(endpoint.calls[key][1].sampled_ids) == left:
            (code, body), = _serve(endpoint, [("/completions", key, {"model": "m", "prompt": "1+1="})])
            assert code == 200 and body["choices"][0] == {"index": 0, "text": "", "finish_reason": "length", "logprobs": None}
            assert len(endpoint.calls[key]) == 2
    finally:
        endpoint.close()


@pytest.mark.parametrize("path, body, code, message", [
    ("/chat/completions", {"model": "m", "messages": [{"role": "user", "content": "hi"}], "n": 2}, 400, "n must be 1"),
    ("/chat/completions", {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}, 400, "stream"),
    ("/chat/completions", {"model": "m", "messages": []}, 400, "messages must be a non-empty list"),
    ("/chat/completions", {"model": "m", "messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, 400, "text"),
    ("/completions", {"model": "m", "prompt": [10 ** 9]}, 400, "token ids"),
    ("/completions", {"model": "m", "prompt": "hi", "max_tokens": 0}, 400, "max_tokens"),
    ("/completions", {"model": "m", "prompt": "x" * 500}, 400, "fills the model's context"),
    ("/embeddings", {"model": "m"}, 404, "no such path"),
])
def test_endpoint_refuses_what_it_cannot_serve(tiny, path, body, code, message):
    model, tokenizer = tiny
    endpoint = AgentEndpoint(make_engine("hf", model, tokenizer), tokenizer)
    try:
        key = endpoint.open_episode()
        (got, reply), = _serve(endpoint, [(path, key, body)])
        assert got == code and message in reply["error"]["message"]
        assert endpoint.calls[key] == []
    finally:
        endpoint.close()


def test_concurrent_calls_are_one_batch(tiny, monkeypatch):
    model, tokenizer = tiny
    engine = make_engine("hf", model, tokenizer)
    sizes = []
    original = engine.generate
    monkeypatch.setattr(engine, "generate", lambda prompts, params: sizes.append(len(prompts)) or original(prompts, params))
    endpoint = AgentEndpoint(engine, tokenizer, EndpointSettings(batch_window_s=0.5))
    try:
        keys = [endpoint.open_episode() for _ in range(4)]
        results = _serve(endpoint, [("/chat/completions", k, {"model": "m", "max_tokens": 2,
                                                                "messages": [{"role": "user", "content": "2+2="}]})
                                    for k in keys])
        assert [code for code, _ in results] == [200] * 4
        assert sum(sizes) == 4 and max(sizes) > 1
    finally:
        endpoint.close()


class _ScriptedEngine:
    """Replies with the next of ``texts`` (then EOS), log-prob -1 per token."""

    def __init__(self, tokenizer, texts):
        self.tokenizer, self.texts, self.prompts = tokenizer, list(texts), []

    def generate(self, prompts, params):
        from rlvr.rollout.base import RolloutBatch

        self.prompts += prompts
        rows = [self.tokenizer(self.texts.pop(0), add_special_tokens=False)["input_ids"] + [self.tokenizer.eos_token_id]
                for _ in prompts]
        width = max(map(len, rows))
        ids = torch.tensor([r + [0] * (width - len(r)) for r in rows])
        mask = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows])
        return RolloutBatch(torch.tensor(prompts), torch.ones(len(prompts), len(prompts[0]), dtype=torch.long), ids,
                            mask, -mask.float(), torch.zeros(len(prompts), dtype=torch.bool), torch.arange(len(prompts)))

    def sync_weights(self, model):
        pass


def test_openai_tool_calls_round_trip(tiny):
    """A request with tools gets the model's Hermes-format call back as tool_calls; the program's next request
    (an assistant message with tool_calls, arguments as a JSON string, and a tool message) is rendered and served."""
    from openai import OpenAI

    _, tokenizer = tiny
    engine = _ScriptedEngine(tokenizer, ['<tool_call>{"name": "add", "arguments": {"a": 2, "b": 3}}</tool_call>', "5"])
    endpoint = AgentEndpoint(engine, tokenizer)
    tools = [{"type": "function", "function": {"name": "add", "parameters": {"type": "object", "properties": {}}}}]
    replies = []

    def program(key):
        client = OpenAI(base_url=endpoint.base_url, api_key=key, max_retries=0)
        messages = [{"role": "user", "content": "2+3="}]
        first = client.chat.completions.create(model="m", messages=messages, tools=tools)
        replies.append(first)
        messages += [first.choices[0].message.model_dump(exclude_none=True),
                     {"role": "tool", "tool_call_id": first.choices[0].message.tool_calls[0].id, "content": "5"}]
        replies.append(client.chat.completions.create(model="m", messages=messages, tools=tools))

    try:
        key = endpoint.open_episode()
        thread = threading.Thread(target=program, args=(key,))
        thread.start()
        deadline = time.monotonic() + 30
        while thread.is_alive() and time.monotonic() < deadline:
            endpoint.pump(wait_s=0.05)
        first, second = replies
        call = first.choices[0].message.tool_calls[0]
        assert first.choices[0].finish_reason == "tool_calls" and first.choices[0].message.content is None
        assert (call.function.name, json.loads(call.function.arguments)) == ("add", {"a": 2, "b": 3})
        assert second.choices[0].message.content == "5" and second.choices[0].message.tool_calls is None
        assert "tool: 5" in tokenizer.decode(endpoint.calls[key][1].prompt_ids)
    finally:
        endpoint.close()
