"""The mechanisms that open the step to the seed papers' methods: row provenance, collection stages with
checkpointed state, loss inputs by name, estimator needs, the behaviour context of the old policy, second models
saved as their own folders."""

from __future__ import annotations

import pytest
import torch

from rlvr.algos import advantages, losses
from rlvr.config import config_from_dict
from rlvr.rollout import provenance
from rlvr.rollout import stages as stages_mod
from rlvr.rollout.base import RolloutBatch, concat_batches, select_rows
from rlvr.rollout.episodes import ScoredSamples
from rlvr.train import train
from rlvr.train.checkpoint import load_trainer_state
from rlvr.train.metrics import read_metrics

from conftest import one_digit_rl_config

TIMING = {"time_s", "tokens_per_s", "reward_latency_p50_ms", "reward_latency_p99_ms"}


def _batch(n: int, *, kind: int = 0, prompt_len: int = 3, width: int = 4, groups: list[int] | None = None,
           behaviour: bool = False, steps: bool = False) -> RolloutBatch:
    prompt = torch.arange(n * prompt_len).view(n, prompt_len) + 10
    lengths = torch.tensor([width - (i % 2) for i in range(n)])
    response_mask = (torch.arange(width) < lengths.unsqueeze(-1)).long()
    return RolloutBatch(
        prompt_ids=prompt, prompt_mask=torch.ones_like(prompt), response_ids=torch.arange(n * width).view(n, width) + 100,
        response_mask=response_mask, logprobs=-torch.rand(n, width) * response_mask, truncated=torch.zeros(n, dtype=torch.bool),
        group_index=torch.tensor(groups if groups is not None else [i // 2 for i in range(n)]),
        row_kind=torch.full((n,), kind, dtype=torch.long),
        behaviour_prompt_ids=torch.cat([prompt, prompt[:, :2]], dim=1) if behaviour else None,
        behaviour_prompt_mask=torch.ones(n, prompt_len + 2, dtype=torch.long) if behaviour else None,
        step_rewards=torch.ones(n, width) * response_mask if steps else None,
        step_end=response_mask.bool() if steps else None,
    )


def test_row_kind_defaults_to_on_policy_and_survives_selection_and_concatenation():
    plain, hinted = _batch(4), _batch(2, kind=provenance.HINTED, width=6, behaviour=True, steps=True)
    assert plain.row_kind.tolist() == [0, 0, 0, 0]
    joined = concat_batches([plain, hinted], pad_id=0)
    assert joined.row_kind.tolist() == [0, 0, 0, 0, 2, 2]
    assert joined.group_index.tolist() == [0, 0, 1, 1, 2, 2]  # new groups stay distinct
    # rows without a behaviour prompt are sampled in their training context: their own prompt, left-padded
    assert joined.behaviour_prompt_ids.shape == (6, 5)
    assert joined.behaviour_prompt_mask[:4].tolist() == [[0, 0, 1, 1, 1]] * 4
    assert torch.equal(joined.behaviour_prompt_ids[:4, 2:], plain.prompt_ids)
    assert torch.equal(joined.behaviour_prompt_ids[4:], hinted.behaviour_prompt_ids)
    # step rewards: zeros (no step) for the rows that had none
    assert joined.step_rewards.shape == (6, 6) and float(joined.step_rewards[:4].abs().sum()) == 0.0
    assert joined.step_end[4:].sum() == hinted.step_end.sum()
    picked = select_rows(joined, torch.tensor([1, 5]))
    assert picked.row_kind.tolist() == [0, 2]
    assert torch.equal(picked.behaviour_prompt_ids[1], hinted.behaviour_prompt_ids[1])
    assert picked.step_end[1].sum() == hinted.step_end[1].sum()


def test_rows_can_join_their_groups():
    extra = _batch(2, kind=provenance.EXPERT, groups=[1, 0])
    joined = concat_batches([_batch(4), extra], pad_id=0, keep_groups=True)
    assert joined.group_index.tolist() == [0, 0, 1, 1, 1, 0]
    assert advantages.group_stats(torch.ones(6), joined.group_index)[0].tolist() == [3.0] * 6


def test_scored_samples_concatenate_with_their_components():
    a = ScoredSamples(_batch(2), ["t0", "t0"], ["x", "y"], [None, None], [1.0, 0.0], {"correct": [1.0, 0.0]})
    b = ScoredSamples(_batch(2, kind=1), ["t1", "t1"], ["z", "w"], [None, None], [0.5, 0.5], {})
    joined = ScoredSamples.concat([a, b], pad_id=0)
    assert joined.rewards == [1.0, 0.0, 0.5, 0.5] and joined.components == {"correct": [1.0, 0.0, 0.0, 0.0]}
    assert joined.select([3, 0]).responses == ["w", "x"]


def test_kind_flags_and_metrics():
    codes = torch.tensor([0, 1, 1, 2])
    flags = provenance.kind_flags(codes)
    assert flags["is_expert"].tolist() == [False, True, True, False] and flags["row_kind"] is codes
    assert provenance.kind_metrics(codes, torch.tensor([1.0, 0.0, 1.0, 0.5])) == {
        "rows/on_policy": 1, "reward_mean/on_policy": 1.0, "rows/expert": 2, "reward_mean/expert": 0.5,
        "rows/hinted": 1, "reward_mean/hinted": 0.5}
    assert provenance.all_sampled(torch.tensor([0, 2, 3])) and not provenance.all_sampled(codes)
    with pytest.raises(KeyError, match="unknown row kind 'nope'"):
        provenance.row_kind("nope")


# ---------------------------------------------------------------------------------------------- through the loop


class DuplicateFirstRowsStage(stages_mod.CollectionStage):
    """A test stage: each group gets a copy of its first row as a "hinted" row joining the group; it counts its
    calls (state that must survive a resume)."""

    def __init__(self):
        self.calls = 0

    def run(self, samples, ctx, step):
        self.calls += 1
        firsts = [rows[0] for rows in stages_mod.group_rows(samples).values()]
        copies = samples.select(firsts)
        copies.batch.row_kind[:] = provenance.HINTED
        joined = ScoredSamples.concat([samples, copies], ctx.pad_id, keep_groups=True)
        return joined, {"test_stage/calls": self.calls}

    def state_dict(self):
        return {"calls": self.calls}

    def load_state_dict(self, state):
        self.calls = state.get("calls", 0)


RECORDED: dict[str, list] = {"loss": [], "estimator": []}


@losses.register("test_recording_ppo", default_agg="token-mean", zero_at_zero_advantage=True)
def _recording_loss(logp, old_logp, adv, mask, **kw):
    RECORDED["loss"].append({k: v for k, v in kw.items() if k.startswith("is_") or k in ("row_kind", "marker")})
    return losses._REGISTRY.get("ppo")(logp, old_logp, adv, mask, **kw)


@advantages.register("test_needs_grpo", needs=("old_logp", "ref_logp", "entropy", "step_state"))
def _recording_estimator(rewards, index, mask, *, old_logp, ref_logp, entropy, step_state, task_ids, **kw):
    step_state["calls"] = step_state.get("calls", 0) + 1
    RECORDED["estimator"].append({"old": old_logp, "ref": ref_logp, "entropy": entropy, "ids": task_ids,
                                  "calls": step_state["calls"]})
    # a constant offset so every row is trained even when the untrained model's groups are all wrong
    return advantages.compute("grpo", rewards, index, mask, **kw) + 0.1 * mask


def _config(model_dir, out, steps=3, **algo):
    cfg = config_from_dict(one_digit_rl_config(model_dir, out, algo={"loss": "test_recording_ppo",
                                                                      "advantage": "test_needs_grpo",
                                                                      "loss_options": {"marker": 7}, **algo},
                                               steps=steps, save_every=1))
    cfg.data.prompts_per_step, cfg.rollout.group_size = 4, 4
    return cfg


@pytest.fixture
def test_stage(monkeypatch):
    monkeypatch.setitem(stages_mod._BUILDERS, "test_duplicate_first_rows", lambda cfg: DuplicateFirstRowsStage())
    RECORDED["loss"].clear()
    RECORDED["estimator"].clear()


def test_stages_losses_and_estimators_get_what_they_declare(test_stage, tiny_model_dir, tmp_path):
    run_dir = train(_config(tiny_model_dir, tmp_path / "run", steps=2))
    rows = read_metrics(run_dir)
    # the stage added one hinted row per group (4 groups of 4): per-kind metrics and its own
    assert [(r["rows/on_policy"], r["rows/hinted"], r["test_stage/calls"]) for r in rows] == [(16, 4, 1), (16, 4, 2)]
    assert all("reward_mean/hinted" in r for r in rows)
    # the loss saw the provenance flags and the loss options, sliced to its rows
    seen = RECORDED["loss"][0]
    assert seen["marker"] == 7 and seen["row_kind"].shape == seen["is_hinted"].shape
    assert set(seen["row_kind"].tolist()) <= {0, 2} and "is_expert" in seen
    # the estimator got the trainer's old and reference log-probs, the sampler's entropy and its own state
    first = RECORDED["estimator"][0]
    assert first["old"].shape == first["ref"].shape == first["entropy"].shape
    assert torch.allclose(first["old"], first["ref"], atol=1e-5)  # step 1: the policy is still the reference
    assert len(first["ids"]) == 20 and [e["calls"] for e in RECORDED["estimator"]] == [1, 2]
    state = load_trainer_state(run_dir / "checkpoint-2")
    assert state["stages"]["test_duplicate_first_rows"] == {"calls": 2}
    assert state["parts"]["estimator_inputs"] == {"step_state": {"calls": 2}}


def test_stage_and_estimator_state_resume_exactly(test_stage, tiny_model_dir, tmp_path):
    whole = read_metrics(train(_config(tiny_model_dir, tmp_path / "whole", steps=3)))
    cut = tmp_path / "cut"
    train(_config(tiny_model_dir, cut, steps=2))
    resumed = read_metrics(train(_config(tiny_model_dir, cut, steps=3), resume=True))
    strip = lambda rows: [{k: v for k, v in r.items() if k not in TIMING} for r in rows]  # noqa: E731
    assert strip(resumed) == strip(whole)
    assert resumed[-1]["test_stage/calls"] == 3 and RECORDED["estimator"][-1]["calls"] == 3


def test_the_old_policy_is_taken_in_the_context_rows_were_sampled_in(tiny_model_dir):
    from rlvr.models import load_model
    from rlvr.train.learner import behaviour_view, forward_rows, prepare_experience
    from rlvr.train.parts import build_parts, PartContext

    model, _ = load_model(str(tiny_model_dir))
    cfg = config_from_dict(one_digit_rl_config(tiny_model_dir, "unused"))
    batch = _batch(4, kind=provenance.HINTED, behaviour=True)
    batch.response_ids %= 50
    batch.prompt_ids %= 50
    batch.behaviour_prompt_ids %= 50
    parts = build_parts(cfg, PartContext(model, lambda: model))
    rewards = torch.tensor([1.0, 0.0, 1.0, 0.0])
    exp = prepare_experience(model, batch, rewards, parts, cfg, engine_logprobs_serve=False)
    every = torch.arange(4)
    in_context = forward_rows(model, behaviour_view(batch), every, cfg).logp
    trained_context = forward_rows(model, batch, every, cfg).logp
    assert torch.equal(exp.old_logp, in_context)
    assert not torch.allclose(in_context, trained_context)
    # rows the engine did not sample never let its log-probs stand in for the old policy's
    expert = _batch(4, kind=provenance.EXPERT)
    expert.response_ids %= 50
    expert.prompt_ids %= 50
    assert not prepare_experience(model, expert, rewards, parts, cfg, engine_logprobs_serve=True).old_from_rollout
    assert prepare_experience(model, _with_codes(expert, 0), rewards, parts, cfg, engine_logprobs_serve=True).old_from_rollout


def _with_codes(batch: RolloutBatch, code: int) -> RolloutBatch:
    import dataclasses

    return dataclasses.replace(batch, row_kind=torch.full_like(batch.row_kind, code))


@advantages.register("test_needs_steps", needs=("process_rewards",))
def _steps(rewards, index, mask, **kw):
    return advantages.compute("grpo", rewards, index, mask, **kw)


def test_an_estimator_that_needs_step_rewards_says_which_key_provides_them(tiny_model_dir, tmp_path):
    from rlvr.train.learner import Experience, estimator_inputs

    cfg = config_from_dict(one_digit_rl_config(tiny_model_dir, tmp_path, algo={"advantage": "test_needs_steps"}))
    batch = _batch(2)
    exp = Experience(batch, torch.zeros(2), batch.loss_mask, batch.logprobs, True, torch.zeros(2, 4), 4)
    with pytest.raises(ValueError, match="reward.process"):
        estimator_inputs(exp, {}, cfg, None, None)
    exp.process_rewards, exp.step_end = torch.ones(2, 4), torch.ones(2, 4, dtype=torch.bool)
    _, kwargs = estimator_inputs(exp, {}, cfg, None, None)
    assert kwargs["process_rewards"] is exp.process_rewards and kwargs["step_end"] is exp.step_end


def test_step_rewards_are_scored_on_every_row_when_reward_process_is_set(tiny_model_dir, tmp_path):
    from rlvr.config import ConfigError

    cfg = config_from_dict({**one_digit_rl_config(tiny_model_dir, tmp_path / "run", steps=2),
                            "data": {"train": "arithmetic:chain:terms=2", "prompts_per_step": 4},
                            "reward": {"process": {"source": "arith_steps"}}})
    rows = read_metrics(train(cfg))
    assert all(r["process/steps_mean"] >= 1.0 for r in rows)
    with pytest.raises(ConfigError, match=r"reward.process.source: unknown process-reward source 'arith'.*arith_steps"):
        config_from_dict({"reward": {"process": {"source": "arith"}}})
