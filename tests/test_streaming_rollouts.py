"""Streaming, partial, bounded-staleness rollouts (cluster.partial_rollouts, cluster.max_staleness).

Fast tests drive the streaming collector (rlvr.train.streaming) with a scripted pool whose every token says which
weights sampled it, so the logged versions are checked against what actually happened; the continuation entry
point (rlvr.rollout.partial) is checked against the tiny model's own forward. Two Ray tests train end to end: the
staleness bound read back from the logged versions, and exact resume after kill -9 of the driver."""

from __future__ import annotations

import json
import os
import pickle
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from rlvr.config import ConfigError, config_from_dict
from rlvr.models import encode_prompt
from rlvr.models.tiny import build_tiny_model, char_tokenizer
from rlvr.rollout import SamplingParams, build_engine
from rlvr.rollout.episodes import PromptPolicy, Scoring
from rlvr.rollout.partial import Piece, continue_rows
from rlvr.tasks import load_data, make_sampler
from rlvr.train.reward_errors import RewardErrorLog
from rlvr.train.streaming import VERSIONS_FILE, StreamingRollouts, check_streaming, chunk_tokens

from conftest import SMALL

ROOT = Path(__file__).resolve().parents[1]


# --- the continuation entry point --------------------------------------------------------------------------------

def test_a_continued_response_samples_from_the_prompt_and_its_prefix():
    """Each chunk's tokens carry the log-prob the model gives them after prompt + everything before them (the
    tiny model's teacher-forced forward), budgets are kept, and an end-of-sequence ends the row."""
    model, tokenizer = build_tiny_model(SMALL, seed=0)
    engine = build_engine("hf", model, tokenizer)
    prompts = [encode_prompt(tokenizer, f"{i}+{i}=") for i in range(4)]
    params = SamplingParams(n=1, max_new_tokens=99, temperature=1.0)
    torch.manual_seed(0)
    prefixes = [[] for _ in prompts]
    budgets = [3, 5, 3, 5]
    first = continue_rows(engine, prompts, prefixes, budgets, params)
    assert [len(p.tokens) <= b for p, b in zip(first, budgets)] == [True] * 4
    second = continue_rows(engine, prompts, [p.tokens for p in first], [4] * 4, params)
    eos = tokenizer.eos_token_id
    for prompt, a, b in zip(prompts, first, second):
        assert a.finished == (a.tokens[-1] == eos)
        ids = prompt + a.tokens + b.tokens
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([ids])).logits[0].float()
        sampled = torch.tensor(ids[len(prompt):])[:, None]
        expected = torch.log_softmax(logits, -1)[len(prompt) - 1:-1].gather(-1, sampled).squeeze(-1)
        assert torch.allclose(torch.tensor(a.logprobs + b.logprobs), expected, atol=1e-4)


def test_continue_rows_refuses_what_it_cannot_continue():
    model, tokenizer = build_tiny_model(SMALL, seed=0)
    engine = build_engine("hf", model, tokenizer)
    with pytest.raises(ValueError, match="one each per row"):
        continue_rows(engine, [[1]], [], [1], SamplingParams())
    with pytest.raises(ValueError, match="at least one token"):
        continue_rows(engine, [[1]], [[]], [0], SamplingParams())


# --- the streaming collector with a scripted pool ----------------------------------------------------------------

class ScriptedPool:
    """Rollout workers whose "model" ends a response with probability ``stop`` per token (long-tailed lengths, a
    fixed share reaching the limit) and marks each token's log-prob with the weights' version: -(version + 1). Its
    version goes up at every ``sync_weights``; a round samples with the version held when it is submitted, as Ray's
    in-order actor calls do."""

    device = torch.device("cpu")

    def __init__(self, eos: int, stop: float = 0.15):
        self.eos, self.stop, self.version = eos, stop, 0
        self.rows_per_round: list[int] = []

    def sync_weights(self) -> None:
        self.version += 1

    def submit_chunks(self, prompts, prefixes, budgets, params, seed):
        rng = torch.Generator().manual_seed(seed)
        pieces = []
        for budget in budgets:
            tokens = []
            for _ in range(budget):
                ends = float(torch.rand((), generator=rng)) < self.stop
                tokens.append(self.eos if ends else 4 + int(torch.randint(0, 10, (), generator=rng)))
                if ends:
                    break
            mark = -(self.version + 1.0)
            pieces.append(Piece(tokens, [mark] * len(tokens), [0.0] * len(tokens), tokens[-1] == self.eos))
        self.rows_per_round.append(len(budgets))
        return pieces

    def gather_chunks(self, handle):
        return handle


def scripted_run(tmp_path, *, staleness: int, steps: int = 12, prompts: int = 4, n: int = 4, max_new: int = 24):
    cfg = config_from_dict({
        "data": {"train": "arithmetic:train:digits=1", "verifier": "exact", "prompts_per_step": prompts},
        "rollout": {"group_size": n, "max_new_tokens": max_new},
        "train": {"steps": steps, "out": str(tmp_path), "progress": False},
        "cluster": {"backend": "ray", "partial_rollouts": True, "max_staleness": staleness},
    })
    tokenizer = char_tokenizer()
    Path(tmp_path).mkdir(parents=True, exist_ok=True)
    tasks = load_data(cfg.data, "train")
    run = SimpleNamespace(
        cfg=cfg, engine=ScriptedPool(tokenizer.eos_token_id), tokenizer=tokenizer, dir=Path(tmp_path),
        sampler=make_sampler(tasks, cfg.data, seed=cfg.train.seed), prompt_policy=PromptPolicy(),
        params=SamplingParams(n=n, max_new_tokens=max_new), scoring=Scoring("exact"),
        reward_errors=RewardErrorLog(None, "exact"))
    return run


def drive(run, stream: StreamingRollouts, first: int, last: int) -> list:
    """The training loop's use of the collector: take the step, (update,) send the weights."""
    out = []
    for step in range(first, last + 1):
        samples, metrics, _ = stream.take(step)
        out.append((samples, metrics))
        run.engine.sync_weights()
    return out


def versions_of(batch) -> list[list[int]]:
    """Each row's token versions, read back from the pool's marks."""
    return [[int(-v - 1) for v in row[mask.bool()].tolist()] for row, mask in zip(batch.logprobs, batch.response_mask)]


@pytest.mark.parametrize("staleness", [1, 2, 3])
def test_no_trained_token_is_staler_than_the_bound(tmp_path, staleness):
    run = scripted_run(tmp_path, staleness=staleness)
    stream = StreamingRollouts(run)
    steps = drive(run, stream, 1, run.cfg.train.steps)
    logged = [json.loads(line) for line in (tmp_path / VERSIONS_FILE).read_text().splitlines()]
    assert len(logged) == run.cfg.train.steps * 4 * 4  # every trained row, once
    spans = 0
    for step, (samples, metrics) in enumerate(steps, start=1):
        learner = step - 1
        actual = versions_of(samples.batch)
        rows = [r for r in logged if r["step"] == step]
        assert [r["policy_version"] for r in rows] == [min(v) for v in actual]  # the log says what sampled it
        assert [r["staleness"] for r in rows] == [learner - min(v) for v in actual]
        assert all(0 <= learner - v <= staleness for row in actual for v in row)  # the bound, token by token
        assert metrics["staleness_max"] == max(learner - min(v) for v in actual) <= staleness
        assert metrics["staleness_mean"] == pytest.approx(sum(learner - min(v) for v in actual) / len(actual))
        assert samples.batch.size == 16 and torch.equal(samples.batch.group_index, torch.arange(4).repeat_interleave(4))
        spans += sum(min(v) != max(v) for v in actual)
        lengths = samples.batch.response_mask.sum(-1)
        assert torch.equal(samples.batch.truncated, torch.tensor([v[-1] != run.tokenizer.eos_token_id for v in
                                                                  [r[mask.bool()].tolist() for r, mask in zip(
                                                                      samples.batch.response_ids,
                                                                      samples.batch.response_mask)]]))
        assert int(lengths.max()) <= 24
    if staleness == 1:  # one chunk is the whole response: one-step-off collection, every token one update old
        assert spans == 0 and all(m["staleness_max"] == (0 if i == 0 else 1) for i, (_, m) in enumerate(steps))
    else:  # long responses were continued across updates with the newer weights
        assert spans > 0 and any(m["staleness_max"] == staleness for _, m in steps)
        assert chunk_tokens(24, staleness) < 24


def test_a_finished_group_that_waited_too_long_is_dropped_not_trained(tmp_path):
    """More finished groups than a step takes (a pool whose responses end at once): the surplus ages, and a group
    that would train staler than the bound is dropped and counted."""
    run = scripted_run(tmp_path, staleness=2, steps=6)
    run.engine.stop = 1.0  # every response ends at its first token: all 2P groups finish in one round
    stream = StreamingRollouts(run)
    stream.capacity = 3 * run.cfg.data.prompts_per_step  # more under way than the bound lets the learner drain
    steps = drive(run, stream, 1, 6)
    assert sum(m["stale_dropped_groups"] for _, m in steps) > 0
    assert all(m["staleness_max"] <= 2 for _, m in steps)


class SilentPool(ScriptedPool):
    """Every other row's chunk comes back without tokens (an engine that stopped at once)."""

    def submit_chunks(self, prompts, prefixes, budgets, params, seed):
        pieces = super().submit_chunks(prompts, prefixes, budgets, params, seed)
        return [Piece([], [], [], False) if i % 2 else p for i, p in enumerate(pieces)]


def test_a_chunk_without_tokens_ends_its_response_instead_of_stalling_the_stream(tmp_path):
    run = scripted_run(tmp_path, staleness=2, steps=3)
    run.engine = SilentPool(run.tokenizer.eos_token_id)
    steps = drive(run, StreamingRollouts(run), 1, 3)
    for samples, metrics in steps:
        lengths = samples.batch.response_mask.sum(-1)
        assert (lengths == 0).any() and not samples.batch.truncated[lengths == 0].any()
        assert metrics["staleness_max"] <= 2


def test_resumed_from_its_checkpointed_state_the_stream_continues_identically(tmp_path):
    """The in-flight state is checkpointed: a collector rebuilt from a pickled state_dict (and the sampler's state)
    after step 5 yields the same batches, versions and metrics for steps 6-10 as the uninterrupted one."""
    whole_run = scripted_run(tmp_path / "whole", staleness=2, steps=10)
    whole = drive(whole_run, StreamingRollouts(whole_run), 1, 10)

    cut_run = scripted_run(tmp_path / "cut", staleness=2, steps=10)
    first = StreamingRollouts(cut_run)
    drive(cut_run, first, 1, 5)
    saved = pickle.dumps({"stream": first.state_dict(), "sampler": cut_run.sampler.state_dict()})
    assert any(not g.done for g in first.groups) and any(g.oldest is not None for g in first.groups)
    resumed_run = scripted_run(tmp_path / "cut", staleness=2, steps=10)
    state = pickle.loads(saved)
    resumed_run.sampler.load_state_dict(state["sampler"])
    resumed_run.engine.version = 5  # the checkpoint's weights
    resumed = StreamingRollouts(resumed_run)
    resumed.load_state_dict(state["stream"])
    rest = drive(resumed_run, resumed, 6, 10)
    for (a, ma), (b, mb) in zip(whole[5:], rest):
        assert torch.equal(a.batch.response_ids, b.batch.response_ids)
        assert torch.equal(a.batch.logprobs, b.batch.logprobs)
        assert [t.id for t in a.tasks] == [t.id for t in b.tasks] and ma == mb
    assert (tmp_path / "whole" / VERSIONS_FILE).read_text() == (tmp_path / "cut" / VERSIONS_FILE).read_text()


# --- what streaming refuses --------------------------------------------------------------------------------------

REFUSED = [
    ({"cluster": {"partial_rollouts": True}}, "cluster.partial_rollouts=true needs cluster.backend=ray"),
    ({"cluster": {"max_staleness": 2}}, "cluster.max_staleness=2 bounds partial rollouts"),
    ({"cluster": {"backend": "ray", "partial_rollouts": True, "async_rollouts": 1}}, "cluster.async_rollouts=1"),
    ({"cluster": {"backend": "ray", "partial_rollouts": True}, "algo": {"dynamic_sampling": True}},
     "algo.dynamic_sampling=True"),
    ({"cluster": {"backend": "ray", "partial_rollouts": True}, "rollout": {"agent_command": "python agent.py"}},
     "rollout.agent_command"),
    ({"cluster": {"backend": "ray", "partial_rollouts": True}, "algo": {"advantage": "remax"}},
     "algo.advantage=remax"),
    ({"cluster": {"backend": "ray", "partial_rollouts": True}, "algo": {"hint_stages": [0.5]}}, "collection stages"),
]


@pytest.mark.parametrize("overrides, message", REFUSED, ids=[m for _, m in REFUSED])
def test_combinations_streaming_cannot_run_are_one_line_errors(overrides, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace("=", "=")):
        check_streaming(config_from_dict(overrides))


def test_streaming_on_ray_is_accepted():
    check_streaming(config_from_dict({"cluster": {"backend": "ray", "partial_rollouts": True, "max_staleness": 3}}))


# --- on Ray, end to end ------------------------------------------------------------------------------------------

STEPS = 10
STREAMING = ["cluster.backend=ray", "cluster.rollout_workers=2", "cluster.partial_rollouts=true",
             "cluster.max_staleness=2", "algo.tis_cap=2.0"]
TIMING = {"time_s", "tokens_per_s", "reward_latency_p50_ms", "reward_latency_p99_ms"}


def _command(model, out):
    """One-digit sums answer in 2-3 tokens (digits, end-of-sequence): with 4 new tokens at most and K=2, a round
    advances a response by 2 tokens, so two-digit answers are continued across a weight update."""
    return [sys.executable, "-m", "rlvr.cli", "train", str(ROOT / "examples" / "arithmetic.yaml"),
            f"model.path={model}", f"train.out={out}", "data.train=arithmetic:train:digits=1",
            "data.prompts_per_step=8", "rollout.group_size=4", "rollout.max_new_tokens=4", f"train.steps={STEPS}",
            "train.save_every=2", "train.lr=1e-3", "train.progress=false", *STREAMING]


@pytest.fixture(scope="module")
def ray_env(tmp_path_factory):
    """One intra-op thread per process; Ray keeps its files and token under this module's directories (a short temp
    dir: Ray's socket paths have a length limit)."""
    home = tmp_path_factory.mktemp("home")
    ray_tmp = tempfile.mkdtemp(prefix="rlvr-ray-")
    yield {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT / "src"), "HOME": str(home),
           "RAY_TMPDIR": ray_tmp}
    subprocess.run(["rm", "-rf", ray_tmp], check=False)


@pytest.fixture(scope="module")
def streamed_run(warm_model_dir, tmp_path_factory, ray_env):
    pytest.importorskip("ray")
    out = tmp_path_factory.mktemp("streamed") / "run"
    done = subprocess.run(_command(warm_model_dir, out), env=ray_env, capture_output=True, text=True, timeout=400)
    assert done.returncode == 0, done.stderr[-3000:]
    return out


def test_partial_rollouts_train_on_ray_and_no_token_is_staler_than_two_updates(streamed_run):
    from rlvr.train.metrics import read_metrics

    rows = read_metrics(streamed_run)
    assert [r["step"] for r in rows] == list(range(1, STEPS + 1))
    assert any(r["grad_norm"] > 0 for r in rows)
    logged = [json.loads(line) for line in (streamed_run / VERSIONS_FILE).read_text().splitlines()]
    assert len(logged) == STEPS * 8 * 4  # every trained row logs its versions
    for row in rows:
        mine = [r for r in logged if r["step"] == row["step"]]
        assert all(r["learner_version"] == row["step"] - 1 for r in mine)
        assert all(0 <= r["staleness"] == r["learner_version"] - r["policy_version"] <= 2 for r in mine)
        assert all(r["policy_version"] <= r["newest_version"] <= r["learner_version"] for r in mine)
        assert row["staleness_max"] == max(r["staleness"] for r in mine) <= 2
        assert row["staleness_mean"] == pytest.approx(sum(r["staleness"] for r in mine) / len(mine))
    # responses were continued across weight updates, and the workers' log-probs were not taken as the old policy's
    assert any(r["policy_version"] < r["newest_version"] for r in logged)
    assert max(r["staleness_max"] for r in rows) == 2
    assert all(r["rollout_kl"] > 1e-6 and "tis_clip_frac" in r for r in rows[1:])


def test_partial_rollouts_resume_exactly_after_kill_9_of_the_driver(streamed_run, warm_model_dir, tmp_path, ray_env):
    """The groups under way are saved with each checkpoint: killed after checkpoint-2 and resumed, the run ends with
    the uninterrupted run's metrics, logged versions and weights."""
    from transformers import AutoModelForCausalLM

    from rlvr.train.metrics import read_metrics

    cut = tmp_path / "cut"
    driver = subprocess.Popen(_command(warm_model_dir, cut), env=ray_env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    while not (cut / "checkpoint-2").is_dir() and driver.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    driver.send_signal(signal.SIGKILL)
    driver.wait()
    assert (cut / "checkpoint-2").is_dir() and not (cut / f"checkpoint-{STEPS}").exists(), "the kill came too late"
    resumed = subprocess.run([*_command(warm_model_dir, cut), "--resume"], env=ray_env, capture_output=True,
                             text=True, timeout=400)
    assert resumed.returncode == 0, resumed.stderr[-3000:]

    def without_timing(rows):
        return [{k: v for k, v in r.items() if k not in TIMING} for r in rows]

    assert without_timing(read_metrics(cut)) == without_timing(read_metrics(streamed_run))
    assert (cut / VERSIONS_FILE).read_text() == (streamed_run / VERSIONS_FILE).read_text()
    a = AutoModelForCausalLM.from_pretrained(streamed_run / f"checkpoint-{STEPS}").state_dict()
    b = AutoModelForCausalLM.from_pretrained(cut / f"checkpoint-{STEPS}").state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)


def replaced_worker_rounds() -> dict:
    """Run in a process of its own (Ray keeps per-process state a second cluster in one process trips over): two
    rounds of chunks from a pool of two workers, undisturbed and with worker 1 killed before the first round."""
    import copy

    import ray

    from rlvr.cluster.ray_backend import RolloutPool, actor_env

    ray.init(num_cpus=2, include_dashboard=False, runtime_env={"env_vars": actor_env()}, log_to_driver=False)
    start, tokenizer = build_tiny_model(SMALL, seed=0)
    cfg = config_from_dict({"cluster": {"backend": "ray", "rollout_workers": 2, "partial_rollouts": True}})
    prompts = [encode_prompt(tokenizer, f"{i}+{j}=") for i in range(4) for j in range(2)]
    params = SamplingParams(n=1, max_new_tokens=8, temperature=1.0)

    def two_rounds(kill: bool):
        model = copy.deepcopy(start)
        pool = RolloutPool(model, tokenizer, cfg)
        try:
            if kill:
                os.kill(pool.worker_pids()[1], signal.SIGKILL)
                time.sleep(1.0)
            first = pool.submit_chunks(prompts, [[]] * 8, [4] * 8, params, seed=3)
            with torch.no_grad():
                for p in model.parameters():
                    p.add_(0.05)
            pool.sync_weights(model)  # the round was submitted before: it samples with the weights from before
            pieces = pool.gather_chunks(first)
            second = pool.submit_chunks(prompts, [p.tokens for p in pieces], [4] * 8, params, seed=4)
            after = pool.gather_chunks(second)
            return {"first": [[p.tokens, p.logprobs] for p in pieces],
                    "after": [[p.tokens, p.logprobs] for p in after], "replaced": pool.replacements}
        finally:
            pool.close()

    try:
        return {"undisturbed": two_rounds(kill=False), "killed": two_rounds(kill=True)}
    finally:
        ray.shutdown()


def test_a_rollout_worker_replaced_after_an_update_redoes_its_chunks_with_the_rounds_weights(ray_env):
    """A round is submitted, the weights are updated, then its results are gathered (what streaming does every
    step). A worker that died meanwhile is replaced holding the newest weights; the share it redoes must still be
    sampled with the round's weights, and the next round with the newest: the chunks equal an undisturbed pool's."""
    pytest.importorskip("ray")
    code = "import json, test_streaming_rollouts as t; print(json.dumps(t.replaced_worker_rounds()))"
    env = {**ray_env, "PYTHONPATH": os.pathsep.join([ray_env["PYTHONPATH"], str(ROOT / "tests")])}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=400)
    assert done.returncode == 0, done.stderr[-3000:]
    runs = json.loads(done.stdout.strip().splitlines()[-1])
    assert runs["killed"]["replaced"] >= 1 and runs["undisturbed"]["replaced"] == 0
    assert runs["killed"]["first"] == runs["undisturbed"]["first"]  # tokens and log-probs of the round
    assert runs["killed"]["after"] == runs["undisturbed"]["after"]
