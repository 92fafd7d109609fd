"""PRIME's implicit PRM as a step part (rlvr.train.parts_process): the direction of its cross-entropy update, where
its token rewards land, exact resume of its weights and optimizer, the recipe's order of the whole step against a
spelled-out float64 computation, and `rlvr train` with it from the command line."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

from rlvr.config import config_from_dict
from rlvr.models import TinySpec, build_tiny_model
from rlvr.rollout.base import RolloutBatch
from rlvr.train.learner import prepare_experience
from rlvr.train.parts import PartContext, build_parts
from rlvr.train.parts_process import ImplicitPRM, all_but_last_token

ROOT = Path(__file__).resolve().parents[1]
SPEC = TinySpec(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64)
BETA = 0.05
REWARDS = [1.0, 0.0, 1.0, 0.0, 0.0, 1.0]  # two groups of three; both have mixed outcomes


def _batch(seed: int = 0, vocab: int = 100) -> RolloutBatch:
    """Two groups of three responses of unequal lengths (right-padded) to left-padded prompts."""
    g = torch.Generator().manual_seed(seed)
    n, p, t = 6, 4, 5
    prompt_ids = torch.randint(4, vocab, (n, p), generator=g)
    prompt_mask = torch.ones(n, p, dtype=torch.long)
    prompt_mask[3:, 0] = 0  # the second group's prompt is one token shorter
    prompt_ids = prompt_ids * prompt_mask
    lengths = torch.tensor([5, 3, 4, 2, 5, 1])
    response_mask = (torch.arange(t) < lengths.unsqueeze(-1)).long()
    response_ids = torch.randint(4, vocab, (n, t), generator=g) * response_mask
    return RolloutBatch(prompt_ids=prompt_ids, prompt_mask=prompt_mask, response_ids=response_ids,
                        response_mask=response_mask, logprobs=-torch.rand(n, t, generator=g) * response_mask,
                        truncated=torch.zeros(n, dtype=torch.bool), group_index=torch.tensor([0, 0, 0, 1, 1, 1]))


def _cfg(**algo):
    return config_from_dict({
        "rollout": {"temperature": 1.0},
        "algo": {"advantage": "prime", "implicit_prm": True, "prm_beta": BETA, "prm_lr": 1e-2, **algo},
        "train": {"lr": 1e-3},
    })


def _setup(**algo):
    """(cfg, policy, reference, parts) with the implicit PRM built the way a run builds it."""
    model, _ = build_tiny_model(SPEC, seed=0)
    reference = copy.deepcopy(model).eval().requires_grad_(False)
    cfg = _cfg(**algo)
    parts = build_parts(cfg, PartContext(model, lambda: reference))
    assert isinstance(parts["implicit_prm"], ImplicitPRM)
    return cfg, model, reference, parts


def _experience(cfg, model, reference, parts, batch=None, rewards=REWARDS):
    batch = batch if batch is not None else _batch()
    return prepare_experience(model, batch, torch.tensor(rewards), parts, cfg, engine_logprobs_serve=True,
                              reference=reference)


# ------------------------------------------------------------------- the spelled-out float64 computation


def _logp64(model, batch: RolloutBatch) -> torch.Tensor:
    """log pi(y_t | x, y_<t) [N, T] in float64, 0 on padding: the prompt left-padded, the response right-padded,
    positions counted over the attention mask."""
    ids = torch.cat([batch.prompt_ids, batch.response_ids], 1)
    attention = torch.cat([batch.prompt_mask, batch.response_mask], 1)
    positions = (attention.cumsum(-1) - 1).clamp(min=0)
    logits = model(input_ids=ids, attention_mask=attention, position_ids=positions).logits.double()
    t = batch.response_ids.shape[1]
    logp = torch.log_softmax(logits[:, -t - 1:-1], -1).gather(-1, batch.response_ids.unsqueeze(-1)).squeeze(-1)
    return logp * batch.response_mask


def _reverse_cumsum(x):
    return x.flip(-1).cumsum(-1).flip(-1)


def _masked_rloo(r, mask, n):
    """verl recipe/prime compute_rloo_advantage_return.masked_rloo: per group of n, r * n / (n - 1) minus the sum
    of the rows' masked means over n - 1, on the mask."""
    out = torch.zeros_like(r)
    for start in range(0, r.shape[0], n):
        rows = slice(start, start + n)
        means = (r[rows] * mask[rows]).sum(-1) / mask[rows].sum(-1)
        out[rows] = (r[rows] * n / (n - 1) - means.sum() / (n - 1)) * mask[rows]
    return out


def _masked_whiten(x, mask):
    """verl.utils.torch_functional.masked_whiten (unbiased variance, rsqrt(var + 1e-8))."""
    count = mask.sum()
    mean = (x * mask).sum() / (count + 1e-8)
    var = ((x - mean) ** 2 * mask).sum() / (count + 1e-8) * count / (count - 1)
    return (x - mean) * torch.rsqrt(var + 1e-8)


def _prm_update64(prm, ref_logp, batch, acc, *, lr, mini_batches=1):
    """The CE update of recipe/prime (compute_ce_dpo_loss_rm; update_rm: one AdamW step per mini-batch, rows in
    order, gradient norm clipped at 1.0) in float64. Returns the token scores its forwards saw."""
    mask = batch.response_mask.double()
    rewarded = all_but_last_token(batch.response_mask).double()
    optimizer = torch.optim.AdamW(prm.parameters(), lr=lr, weight_decay=0.0)
    scores = torch.zeros_like(mask)
    for rows in torch.tensor_split(torch.arange(batch.size), mini_batches):
        sub = _rows(batch, rows)
        q = (_logp64(prm, sub) - ref_logp[rows]) * mask[rows]
        loss = torch.nn.functional.binary_cross_entropy(torch.sigmoid(BETA * q.sum(-1)), acc[rows])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(prm.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad()
        scores[rows] = BETA * q.detach() * rewarded[rows]
    return scores


def _rows(batch, rows):
    return RolloutBatch(batch.prompt_ids[rows], batch.prompt_mask[rows], batch.response_ids[rows],
                        batch.response_mask[rows], batch.logprobs[rows], batch.truncated[rows], batch.group_index[rows])


def _recipe_advantages64(initial, batch, rewards, *, lr, mini_batches=1, update_first=True, norm_first=True):
    """PRIME's step as recipe/prime runs it with update: before, granularity token, prime_norm batch_norm,
    reward_gt_coef = reward_dpo_coef = 5: PRM update -> token rewards -> prime_norm -> masked RLOO x5 and outcome
    RLOO x5 -> sum -> reverse cumsum -> masked whitening. ``update_first`` / ``norm_first`` = False give the
    orders the recipe does not use (scores from the PRM before its update; normalising after the RLOO)."""
    prm, ref = copy.deepcopy(initial).double().train(), copy.deepcopy(initial).double().eval()
    mask = batch.response_mask.double()
    acc = (torch.tensor(rewards, dtype=torch.float64) >= 1 - 1e-9).double()
    with torch.no_grad():
        ref_logp = _logp64(ref, batch)
        before = (_logp64(prm, batch) - ref_logp) * mask
    _prm_update64(prm, ref_logp, batch, acc, lr=lr, mini_batches=mini_batches)
    with torch.no_grad():
        q = (_logp64(prm.eval(), batch) - ref_logp) * mask if update_first else before
    r = BETA * q * all_but_last_token(batch.response_mask).double()
    normalise = lambda x: x / (_reverse_cumsum(x).abs().max() + 1e-6)  # noqa: E731
    process = _masked_rloo(normalise(r) if norm_first else r, mask, 3) * 5
    if not norm_first:
        process = normalise(process)
    last = torch.zeros_like(mask)
    last[torch.arange(batch.size), batch.response_mask.sum(-1) - 1] = 1.0
    outcome = _masked_rloo(acc.unsqueeze(-1) * last, last, 3) * 5
    returns = _reverse_cumsum((process + outcome) * mask)
    return _masked_whiten(returns, mask), r


# ------------------------------------------------------------------------------------------------- tests


def test_ce_update_raises_the_implicit_q_of_solved_responses_over_failed_ones():
    cfg, model, reference, parts = _setup()
    prm = parts["implicit_prm"]
    batch, acc = _batch(), torch.tensor(REWARDS)
    exp = _experience(cfg, model, reference, parts, batch)  # one shape(): the update and the rewards
    q = (prm.logprobs(exp) - exp.ref_logp) * batch.response_mask
    solved, failed = q[acc == 1].sum(-1), q[acc == 0].sum(-1)
    assert solved.min() > 0 > failed.max()  # BCE(sigmoid(beta Q), acc) pushes Q up for acc 1, down for acc 0
    # the loss it logged is at the initial PRM (= the reference, Q = 0): BCE(1/2, acc) = log 2
    assert exp.metrics["prm/loss"] == pytest.approx(0.693147, abs=1e-6)
    q_sum = q.sum(-1)
    after = torch.nn.functional.binary_cross_entropy(torch.sigmoid(BETA * q_sum), acc)
    assert after < 0.693147
    # all solved: every response's Q goes up
    cfg, model, reference, parts = _setup()
    exp = _experience(cfg, model, reference, parts, batch, rewards=[1.0] * 6)
    assert ((parts["implicit_prm"].logprobs(exp) - exp.ref_logp) * batch.response_mask).sum(-1).min() > 0


@pytest.mark.parametrize("rewards, solved", [
    ([1.0, 0.0, 1.0, 0.0, 0.0, 1.0], [1, 0, 1, 0, 0, 1]),
    ([0.999999999999, 0.99, 1.5, -1.0, 0.0, 1.0], [1, 0, 1, 0, 0, 1]),  # at least 1 - 1e-9 counts as solved
])
def test_labels_are_solved_where_the_reward_reaches_one(rewards, solved):
    from rlvr.train.parts_process import acc_labels

    assert acc_labels(torch.tensor(rewards, dtype=torch.float64)).tolist() == solved


def test_token_rewards_sit_on_every_response_token_but_the_last():
    cfg, model, reference, parts = _setup()
    batch = _batch()
    exp = _experience(cfg, model, reference, parts, batch)
    prm = parts["implicit_prm"].model
    with torch.no_grad():
        expected = BETA * (_logp64(prm.eval(), batch) - _logp64(reference, batch))
    lengths = batch.response_mask.sum(-1)
    for i, length in enumerate(lengths.tolist()):
        assert exp.process_rewards[i, length - 1:].abs().sum() == 0  # the last token and the padding carry nothing
        assert torch.allclose(exp.process_rewards[i, :length - 1].double(), expected[i, :length - 1], atol=1e-6)
        if length > 1:
            assert exp.process_rewards[i, :length - 1].abs().min() > 0
    assert torch.equal(exp.step_end, batch.response_mask.bool())
    assert all_but_last_token(torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0], [0, 0, 0, 0]])).tolist() == [
        [1, 1, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0]]
    rewarded = all_but_last_token(batch.response_mask)
    assert exp.metrics["prm/token_reward_mean"] == pytest.approx(float(exp.process_rewards.sum() / rewarded.sum()))


def test_state_dict_round_trip_gives_a_bit_identical_next_update():
    cfg, model, reference, parts = _setup()
    prm = parts["implicit_prm"]
    _experience(cfg, model, reference, parts, _batch(seed=0))
    saved = copy.deepcopy(prm.state_dict())
    _experience(cfg, model, reference, parts, _batch(seed=1), rewards=[0.0, 1.0, 1.0, 1.0, 0.0, 0.0])
    continued = {k: v.clone() for k, v in prm.model.state_dict().items()}

    def resumed(with_optimizer: bool):
        cfg2, model2, reference2, parts2 = _setup()
        state = copy.deepcopy(saved)
        if not with_optimizer:
            state["optimizer"] = parts2["implicit_prm"].optimizer.state_dict()
        parts2["implicit_prm"].load_state_dict(state)
        _experience(cfg2, model2, reference2, parts2, _batch(seed=1), rewards=[0.0, 1.0, 1.0, 1.0, 0.0, 0.0])
        return parts2["implicit_prm"].model.state_dict()

    again = resumed(with_optimizer=True)
    assert all(torch.equal(continued[k], again[k]) for k in continued)
    without = resumed(with_optimizer=False)  # Adam's moments are part of the state: without them it differs
    assert not all(torch.equal(continued[k], without[k]) for k in continued)
    assert set(prm.checkpoint_folders()) == {"prm"} and prm.checkpoint_folders()["prm"] is prm.model


@pytest.mark.parametrize("mini_batches, micro_batch_size", [(1, 0), (2, 1), (3, 4)])
def test_the_step_follows_the_recipe_order(mini_batches, micro_batch_size):
    """PRM update -> token rewards -> prime_norm -> masked RLOO x5 + outcome RLOO x5 -> sum -> reverse cumsum ->
    masked whitening, against the float64 computation spelled out above."""
    cfg, model, reference, parts = _setup(mini_batches=mini_batches)
    cfg.train.micro_batch_size = micro_batch_size
    initial = copy.deepcopy(model)
    batch = _batch()
    exp = _experience(cfg, model, reference, parts, batch)
    expected, r = _recipe_advantages64(initial, batch, REWARDS, lr=1e-2, mini_batches=mini_batches)
    mask = batch.response_mask.bool()
    assert torch.allclose(exp.process_rewards.double(), r, atol=1e-7, rtol=0)
    assert torch.allclose(exp.advantages.double()[mask], expected[mask], atol=1e-6, rtol=0)
    # the orders the recipe does not use give other numbers: the test tells them apart
    for wrong in ({"update_first": False}, {"norm_first": False}):
        other, _ = _recipe_advantages64(initial, batch, REWARDS, lr=1e-2, mini_batches=mini_batches, **wrong)
        assert (other[mask] - expected[mask]).abs().max() > 1e-2


def test_pairwise_accuracy_is_taken_before_the_update():
    """recipe/prime logs dpo_acc_before: compute_dpo_accuracy on the scores the update's forward saw."""
    cfg, model, reference, parts = _setup()
    initial = copy.deepcopy(model)
    first = _batch(seed=0)
    _experience(cfg, model, reference, parts, first)
    second, rewards = _batch(seed=1), [0.0, 1.0, 1.0, 1.0, 0.0, 0.0]
    exp = _experience(cfg, model, reference, parts, second, rewards=rewards)
    # the PRM after one update (float64), then the scores of the second batch before the second update
    prm, ref = copy.deepcopy(initial).double().train(), copy.deepcopy(initial).double().eval()
    acc1 = (torch.tensor(REWARDS, dtype=torch.float64) >= 1).double()
    with torch.no_grad():
        ref1 = _logp64(ref, first)
    _prm_update64(prm, ref1, first, acc1, lr=1e-2)
    with torch.no_grad():
        q = _logp64(prm, second) - _logp64(ref, second)
        scores = (BETA * q * all_but_last_token(second.response_mask)).sum(-1)
    acc = torch.tensor(rewards, dtype=torch.float64)
    expected = []
    for rows in (slice(0, 3), slice(3, 6)):
        pairs = [(i, j) for i in range(3) for j in range(i + 1, 3)]
        ds = [scores[rows][i] - scores[rows][j] for i, j in pairs]
        da = [acc[rows][i] - acc[rows][j] for i, j in pairs]
        expected.append(sum(abs(a) for s, a in zip(ds, da) if (s > 0) == (a > 0)) / sum(abs(a) for a in da))
    assert exp.metrics["prm/pairwise_acc"] == pytest.approx(float(sum(expected) / 2), abs=1e-6)


def test_prime_trains_from_the_command_line_and_saves_the_prm(warm_model_dir, tmp_path):
    out = tmp_path / "run"
    command = [sys.executable, "-m", "rlvr.cli", "train", str(ROOT / "examples" / "arithmetic.yaml"),
               f"model.path={warm_model_dir}", f"train.out={out}", "data.train=arithmetic:chain",
               "data.prompts_per_step=4", "rollout.group_size=4", "rollout.max_new_tokens=8", "train.steps=3",
               "train.save_every=0", "train.progress=false", "algo.recipe=prime", "algo.prm_lr=1e-3"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT / "src")}
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3]
    config = (out / "config.yaml").read_text()
    assert "implicit_prm: true" in config and "advantage: prime" in config  # what the recipe sets
    assert all(0.0 <= r["prm/pairwise_acc"] <= 1.0 and r["prm/loss"] > 0 for r in rows)
    assert rows[0]["prm/loss"] == pytest.approx(0.693147, abs=1e-5)  # the PRM starts as the reference: Q = 0
    prm = AutoModelForCausalLM.from_pretrained(out / "checkpoint-3" / "prm").state_dict()
    policy = AutoModelForCausalLM.from_pretrained(out / "checkpoint-3").state_dict()
    initial = AutoModelForCausalLM.from_pretrained(warm_model_dir).state_dict()
    assert any(not torch.equal(prm[k], initial[k]) for k in prm)  # the PRM was trained
    assert any(not torch.equal(prm[k], policy[k]) for k in prm)  # ... as a model of its own


def test_an_estimator_that_ignores_process_rewards_is_a_config_error():
    """The PRM would train and its rewards reach nothing: a silent misconfiguration becomes an error naming the key."""
    from rlvr.config import ConfigError

    model, _ = build_tiny_model(SPEC, seed=0)
    cfg = _cfg(advantage="grpo")
    with pytest.raises(ConfigError, match="algo.advantage=grpo"):
        build_parts(cfg, PartContext(model, lambda: copy.deepcopy(model)))


def test_with_lora_the_prm_is_a_whole_trainable_copy_of_the_base_model(tiny_model_dir):
    """A LoRA run's reference is the policy with its adapter off; the PRM is then the base model loaded afresh, every
    weight trainable (the recipe trains the whole PRM)."""
    from rlvr.models import load_model
    from rlvr.models.lora import AdapterDisabled, apply_lora

    base, _ = load_model(tiny_model_dir)
    policy = apply_lora(load_model(tiny_model_dir)[0], {"r": 4}, str(tiny_model_dir))
    cfg = config_from_dict({"model": {"path": str(tiny_model_dir), "lora": {"r": 4}},
                            "algo": {"advantage": "prime", "implicit_prm": True}})
    prm = build_parts(cfg, PartContext(policy, lambda: AdapterDisabled(policy)))["implicit_prm"]
    assert not hasattr(prm.model, "peft_config")
    expected = base.state_dict()
    assert all(torch.equal(v, expected[k]) for k, v in prm.model.state_dict().items())
    assert len(prm.params) == len(list(base.parameters())) and all(p.requires_grad for p in prm.params)
