"""The old log-probs' source (rlvr.train.old_logprobs): the first update's own forward is a shortcut that must give
the same update as a separate forward of the behaviour prompts, for every recipe; Guide's hinted rows (behaviour
prompt != training prompt) take pi_old(o | q, h) from a forward of the hinted prompt, whatever the engine returned."""

from __future__ import annotations

import copy

import pytest
import torch

from rlvr.algos import recipes
from rlvr.config import config_from_dict, load_config
from rlvr.models import encode_prompt
from rlvr.models.tiny import build_tiny_model
from rlvr.rollout import SamplingParams, make_engine
from rlvr.rollout.base import concat_batches
from rlvr.train import learner, loop, run
from rlvr.train.learner import learn, prepare_experience
from rlvr.train.metrics import read_metrics
from rlvr.train.old_logprobs import BatchFacts, Source, behaviour_differs, decide
from rlvr.train.policy import policy_forward

from conftest import SMALL

VERIFYING = {"rise", "critique_rl"}  # their verification prompt needs the 512-position model
HINTING = {"ghpo", "guide"}  # tasks with a worked solution to hint from; the hinted prompt needs 512 positions
HINTED_DATA = ["data.train=arithmetic:chain:terms=2", "algo.overlong_buffer_frac=0.8"]
FACTS = dict(engine_logprobs_serve=False, updates=2, read_while_shaping=False, all_sampled=True,
             behaviour_differs=False, same_in_training=True, single_learner=True)


@pytest.mark.parametrize("changed, source", [
    ({}, Source.FIRST_UPDATE),
    ({"behaviour_differs": True}, Source.SEPARATE_FORWARD),
    ({"same_in_training": False}, Source.SEPARATE_FORWARD),
    ({"single_learner": False}, Source.SEPARATE_FORWARD),
    ({"engine_logprobs_serve": True, "updates": 1}, Source.ENGINE),
    ({"engine_logprobs_serve": True, "updates": 1, "behaviour_differs": True}, Source.ENGINE),  # sampled with h
    ({"engine_logprobs_serve": True, "updates": 1, "all_sampled": False}, Source.FIRST_UPDATE),
    ({"engine_logprobs_serve": True, "updates": 1, "read_while_shaping": True, "behaviour_differs": True},
     Source.SEPARATE_FORWARD),
    ({"engine_logprobs_serve": True, "updates": 3, "behaviour_differs": True, "single_learner": False},
     Source.SEPARATE_FORWARD),
])
def test_the_decision_table(changed, source):
    assert decide(BatchFacts(**{**FACTS, **changed})) == source


@pytest.mark.parametrize("prompts, behaviour, differs", [
    (["1+2="], None, False),
    (["1+2=", "3+4="], ["1+2=", "3+4="], False),
    (["1+2=", "3+4="], ["1+2=", "3+5="], True),  # same length, one token differs
    (["1+2="], ["1+2=hint"], True),  # longer: another width
    (["1+2=", "33+4="], ["1+2=", "3+44="], True),  # same width, the padding moved
])
def test_behaviour_differs_token_for_token(prompts, behaviour, differs):
    _, tokenizer = build_tiny_model(SMALL, seed=0)

    def padded(texts):
        ids = [encode_prompt(tokenizer, t) for t in texts]
        width = max(len(i) for i in ids)
        out = torch.zeros(len(ids), width, dtype=torch.long)
        mask = torch.zeros(len(ids), width, dtype=torch.long)
        for k, i in enumerate(ids):
            out[k, width - len(i):] = torch.tensor(i)
            mask[k, width - len(i):] = 1
        return out, mask

    ids, mask = padded(prompts)
    b_ids, b_mask = padded(behaviour) if behaviour is not None else (None, None)
    assert behaviour_differs(ids, mask, b_ids, b_mask) == differs


def _capture_updates(monkeypatch) -> list[dict[str, torch.Tensor]]:
    """Each step's parameter update (after - before learn) and its metrics, in step order."""
    updates: list = []
    original = loop.learn

    def spy(model, optimizer, exp, *args, **kwargs):
        before = {n: p.detach().clone() for n, p in model.named_parameters()}
        metrics = original(model, optimizer, exp, *args, **kwargs)
        updates.append(({n: p.detach() - before[n] for n, p in model.named_parameters()}, metrics))
        return metrics

    monkeypatch.setattr(loop, "learn", spy)
    return updates


def _two_steps(name, model_dir, out, monkeypatch, *, shortcut: bool, engine_serves: bool, overrides=()):
    with monkeypatch.context() as m:
        updates = _capture_updates(m)
        if not shortcut:  # a model with dropout never takes the first update's forward: a separate one instead
            m.setattr(learner, "computes_the_same_in_training", lambda model: False)
        if not engine_serves:  # as vLLM: its log-probs are never the trainer's
            m.setattr(run, "logprobs_serve_as_old_policy", lambda engine: False)
        cfg = load_config("examples/arithmetic.yaml", [
            f"algo.recipe={name}", f"model.path={model_dir}", f"train.out={out}", "train.steps=2",
            "data.prompts_per_step=4", "rollout.group_size=4", "rollout.max_new_tokens=5", "train.progress=false",
            *overrides,
        ])
        loop.train(cfg)
    return updates, read_metrics(out)


def _assert_same_updates(a, b, rtol=1e-6):
    assert len(a) == len(b)
    for step, ((da, _), (db, _)) in enumerate(zip(a, b), 1):
        size = torch.sqrt(sum((d.double() ** 2).sum() for d in da.values()))
        gap = torch.sqrt(sum(((da[n] - db[n]).double() ** 2).sum() for n in da))
        assert gap <= rtol * size + 1e-12, f"step {step}: update differs by {float(gap):.3g} of {float(size):.3g}"


@pytest.mark.parametrize("name", recipes.names())
def test_every_recipe_updates_the_same_with_the_first_update_shortcut(name, request, tmp_path, monkeypatch):
    """The engine's log-probs never serve (as with vLLM), so the old log-probs come from the trainer: with the
    shortcut, the first update's forward gives its rows' (the tiny model has no dropout); without it, a separate
    forward of the behaviour prompts. Both runs make the same parameter updates, two steps in a row."""
    model_dir = request.getfixturevalue("long_tiny_model_dir" if name in VERIFYING | HINTING else "tiny_model_dir")
    extra = HINTED_DATA if name in HINTING else []
    fast, fast_rows = _two_steps(name, model_dir, tmp_path / "fast", monkeypatch, shortcut=True, engine_serves=False,
                                 overrides=extra)
    slow, slow_rows = _two_steps(name, model_dir, tmp_path / "slow", monkeypatch, shortcut=False,
                                 engine_serves=False, overrides=extra)
    if name in HINTING:
        assert all(r["hint_frac"] > 0 for r in fast_rows)
    assert [r["old_logp_source"] for r in slow_rows] == [float(Source.SEPARATE_FORWARD)] * 2
    assert all(r["old_logp_source"] in (Source.FIRST_UPDATE, Source.SEPARATE_FORWARD) for r in fast_rows)
    _assert_same_updates(fast, slow)


def test_guide_with_two_mini_batches_on_the_trainers_engine(long_tiny_model_dir, tmp_path, monkeypatch):
    """More than one update per batch: the first mini-batch's hinted rows would take the ratio against the plain
    prompt (exactly 1) from the shortcut; they take it against the hinted one."""
    extra = ["algo.mini_batches=2", *HINTED_DATA]
    fast, fast_rows = _two_steps("guide", long_tiny_model_dir, tmp_path / "fast", monkeypatch, shortcut=True,
                                 engine_serves=True, overrides=extra)
    slow, _ = _two_steps("guide", long_tiny_model_dir, tmp_path / "slow", monkeypatch, shortcut=False,
                         engine_serves=True, overrides=extra)
    assert all(r["hint_frac"] > 0 for r in fast_rows)  # the untrained model fails the chains: rows were hinted
    assert [r["old_logp_source"] for r in fast_rows] == [float(Source.SEPARATE_FORWARD)] * 2
    _assert_same_updates(fast, slow)


@pytest.fixture(scope="module")
def long_tiny_model_dir(tmp_path_factory):
    from rlvr.models.tiny import TinySpec, save_tiny_model

    spec = TinySpec(SMALL.hidden_size, SMALL.num_layers, SMALL.num_heads, SMALL.intermediate_size, max_positions=512)
    return save_tiny_model(tmp_path_factory.mktemp("tiny512") / "model", spec, seed=0)


# --- Guide under a vLLM-like engine, spelled out -----------------------------------------------------------------

TEMPERATURE = 0.8


class PerturbingEngine:
    """A stand-in for vLLM: samples with the hf engine, but returns log-probs that differ from the trainer's (as a
    different kernel and precision make them), so they never serve as the old policy's."""

    logprobs_serve_as_old_policy = False

    def __init__(self, engine):
        self.engine = engine

    def generate(self, prompts, params):
        batch = self.engine.generate(prompts, params)
        noise = torch.linspace(-0.3, 0.3, batch.logprobs.numel()).reshape(batch.logprobs.shape)
        batch.logprobs = (batch.logprobs + noise) * batch.response_mask
        return batch


def _spelled_logp(model, prompt_ids, prompt_mask, batch):
    was = model.training
    model.eval()
    with torch.no_grad():
        out = policy_forward(model, prompt_ids, prompt_mask, batch.response_ids, batch.response_mask,
                             temperature=TEMPERATURE).logp
    model.train(was)
    return out


@pytest.mark.parametrize("mini_batches", [1, 2])
def test_guide_old_logp_is_the_hinted_forward_under_a_vllm_like_engine(mini_batches):
    """Rows 0-3 were sampled with a hint h appended to the prompt q and are trained on q (Guide); rows 4-7 are plain.
    The old log-probs are log pi_old(o | q, h) from the trainer's forward of the hinted prompt (Guide, Algorithm 1:
    the behaviour policy is the one that produced o, in the context it was produced in), not the engine's perturbed
    ones and not the plain prompt's; the update equals a spelled-out PPO step with those old log-probs."""
    model, tokenizer = build_tiny_model(SMALL, seed=3)
    torch.manual_seed(0)
    engine = PerturbingEngine(make_engine("hf", model, tokenizer))
    params = SamplingParams(n=4, max_new_tokens=6, temperature=TEMPERATURE)
    plain = [encode_prompt(tokenizer, "3+4*2=")]
    hinted_batch = engine.generate([encode_prompt(tokenizer, "3+4*2= hint: 4*2=8")], params)
    plain_batch = engine.generate([encode_prompt(tokenizer, "5+1=")], params)
    # Guide's rows: trained on the plain prompt, the hinted one kept as their behaviour prompt
    trained_on = engine.engine.generate(plain, SamplingParams(n=4, max_new_tokens=1, temperature=TEMPERATURE))
    guided = copy.copy(hinted_batch)
    guided.behaviour_prompt_ids, guided.behaviour_prompt_mask = hinted_batch.prompt_ids, hinted_batch.prompt_mask
    guided.prompt_ids, guided.prompt_mask = trained_on.prompt_ids, trained_on.prompt_mask
    batch = concat_batches([guided, plain_batch], pad_id=tokenizer.pad_token_id)
    batch.group_index = torch.tensor([0] * 4 + [1] * 4)
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 0.0, 1.0, 1.0, 0.0])
    cfg = config_from_dict({
        "model": {"path": "unused"}, "data": {"train": "arithmetic:train"}, "rollout": {"temperature": TEMPERATURE},
        "algo": {"loss": "ppo", "kl_coef": 0.0, "mini_batches": mini_batches, "shuffle_mini_batches": False,
                 "clip_low": 0.05, "clip_high": 0.05},
    })
    behaviour = (batch.behaviour_prompt_ids, batch.behaviour_prompt_mask)
    want_old = _spelled_logp(model, *behaviour, batch)
    on_plain = _spelled_logp(model, batch.prompt_ids, batch.prompt_mask, batch)
    m = batch.response_mask.bool()
    assert (want_old - on_plain)[:4][m[:4]].abs().max() > 0.05  # the hint changes pi_old: the test can tell
    twin = copy.deepcopy(model)

    exp = prepare_experience(model, batch, rewards, {}, cfg, engine_logprobs_serve=False)
    metrics = learn(model, torch.optim.SGD(model.parameters(), lr=0.5), exp, {}, cfg)
    assert metrics["old_logp_source"] == Source.SEPARATE_FORWARD
    torch.testing.assert_close(exp.old_logp[m], want_old[m], rtol=1e-5, atol=1e-6)

    # spelled out: GRPO advantages, the clipped PPO loss (token-mean over each mini-batch), one SGD step each
    mean = torch.stack([rewards[:4].mean()] * 4 + [rewards[4:].mean()] * 4)
    std = torch.stack([rewards[:4].std()] * 4 + [rewards[4:].std()] * 4)
    adv = ((rewards - mean) / (std + cfg.algo.epsilon))[:, None].expand_as(want_old)
    optimizer = torch.optim.SGD(twin.parameters(), lr=0.5)
    for rows in torch.tensor_split(torch.arange(8), mini_batches):
        logp = policy_forward(twin, batch.prompt_ids[rows], batch.prompt_mask[rows], batch.response_ids[rows],
                              batch.response_mask[rows], temperature=TEMPERATURE).logp
        ratio = torch.exp(logp - want_old[rows])
        per_token = -torch.min(ratio * adv[rows], ratio.clamp(1 - 0.05, 1 + 0.05) * adv[rows])
        mask = batch.response_mask[rows].float()
        loss = (per_token * mask).sum() / mask.sum()
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(twin.parameters(), cfg.train.max_grad_norm)
        optimizer.step()
    for (name, a), b in zip(model.named_parameters(), twin.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=name)
