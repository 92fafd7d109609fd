"""Mismatch corrections (algo.is_correction): hand-computed weights for each, their metrics, and 3 CLI steps each.

The batch below is written as token probability ratios k = pi_trainer / pi_rollout (rollout log-probs 0, trainer
log-probs ln k); padding positions hold ratios that would change every answer if they leaked in.

    row A: k = 2, 0.25, 3          S = ln 1.5    geometric mean 1.5^(1/3) = 1.1447
    row B: k = 1.5, [pad 100]      S = ln 1.5    geometric mean 1.5
    row C: k = 10, 0.6, [pad 0.01] S = ln 6      geometric mean sqrt(6) = 2.449
    row D: k = 1.0005 x 3          S = ln 1.0015 geometric mean 1.0005
"""

import json
import math

import pytest
import torch

from rlvr.algos import offpolicy
from rlvr.cli import main
from rlvr.config import config_from_dict
from rlvr.errors import UserError
from rlvr.rollout import HFEngine, register_engine, unregister_engine
from rlvr.train.mismatch import MismatchCorrection
from rlvr.train.parts import PartContext, build_parts

from conftest import one_digit_rl_config

RATIOS = [[2.0, 0.25, 3.0], [1.5, 100.0, 100.0], [10.0, 0.6, 0.01], [1.0005, 1.0005, 1.0005]]
MASK = torch.tensor([[1, 1, 1], [1, 0, 0], [1, 1, 0], [1, 1, 1]])
TRAINER = torch.tensor(RATIOS).log()
ROLLOUT = torch.zeros(4, 3)
S_D = 1.0005 ** 3

CASES = [  # (name, options, expected weights (padding 0), expected metrics)
    ("seq_tis", {}, [[1.5] * 3, [1.5, 0, 0], [2.0, 2.0, 0], [S_D] * 3], {"mismatch/truncated_seq_frac": 1 / 4}),
    ("seq_tis", {"cap": 10.0}, [[1.5] * 3, [1.5, 0, 0], [6.0, 6.0, 0], [S_D] * 3], {"mismatch/truncated_seq_frac": 0.0}),
    ("seq_mask", {}, [[1] * 3, [1, 0, 0], [0, 0, 0], [1] * 3],
     {"mismatch/masked_token_frac": 2 / 9, "mismatch/masked_seq_frac": 1 / 4}),
    ("seq_mask", {"low": 1.2, "high": 10.0}, [[1] * 3, [1, 0, 0], [1, 1, 0], [0] * 3],
     {"mismatch/masked_token_frac": 3 / 9, "mismatch/masked_seq_frac": 1 / 4}),
    ("geo_mask", {}, [[0] * 3, [0, 0, 0], [0, 0, 0], [1] * 3],
     {"mismatch/masked_token_frac": 6 / 9, "mismatch/masked_seq_frac": 3 / 4}),
    ("geo_mask", {"high": 1.2}, [[1] * 3, [0, 0, 0], [0, 0, 0], [1] * 3],
     {"mismatch/masked_token_frac": 3 / 9, "mismatch/masked_seq_frac": 2 / 4}),
    # the earlier verl geo preset's per-token veto: row 0's 0.25 < 0.3 masks it; row 2's 0.01 is padding
    ("geo_mask", {"high": 1.2, "veto": 0.3}, [[0] * 3, [0, 0, 0], [0, 0, 0], [1] * 3],
     {"mismatch/masked_token_frac": 6 / 9, "mismatch/masked_seq_frac": 3 / 4}),
    ("geo_mask", {"high": 3.0, "veto": 0.2}, [[1] * 3, [1, 0, 0], [1, 1, 0], [1] * 3],
     {"mismatch/masked_token_frac": 0.0, "mismatch/masked_seq_frac": 0.0}),
    ("geo_mask", {"high": 3.0, "veto": 0.7}, [[0] * 3, [1, 0, 0], [0, 0, 0], [1] * 3],
     {"mismatch/masked_token_frac": 5 / 9, "mismatch/masked_seq_frac": 2 / 4}),
    ("token_mask", {}, [[2.0, 0, 3.0], [1.5, 0, 0], [0, 0.6, 0], [1.0005] * 3],
     {"mismatch/masked_token_frac": 2 / 9, "mismatch/masked_seq_frac": 2 / 4}),
    ("token_mask", {"weight": "mask"}, [[1, 0, 1], [1, 0, 0], [0, 1, 0], [1] * 3],
     {"mismatch/masked_token_frac": 2 / 9, "mismatch/masked_seq_frac": 2 / 4}),
    ("token_mask", {"low": 0.2, "high": 20.0}, [[2.0, 0.25, 3.0], [1.5, 0, 0], [10.0, 0.6, 0], [1.0005] * 3],
     {"mismatch/masked_token_frac": 0.0, "mismatch/masked_seq_frac": 0.0}),
    ("tis", {"cap": 2.0}, [[2.0, 0.25, 2.0], [1.5, 0, 0], [2.0, 0.6, 0], [1.0005] * 3], {"tis_clip_frac": 2 / 9}),
]


@pytest.mark.parametrize("name, options, expected, expected_metrics", CASES,
                         ids=[f"{c[0]}-{'-'.join(map(str, c[1].values())) or 'defaults'}" for c in CASES])
def test_hand_computed_weights(name, options, expected, expected_metrics):
    weights, metrics = offpolicy.correction_weights(name, TRAINER, ROLLOUT, MASK, **options)
    assert weights.dtype == TRAINER.dtype
    torch.testing.assert_close(weights, torch.tensor(expected, dtype=torch.float32), rtol=1e-5, atol=1e-6)
    for key, value in expected_metrics.items():
        assert metrics[key] == pytest.approx(value), key


def test_log_ratio_statistics_by_hand():
    m = offpolicy.log_ratio_metrics(TRAINER, ROLLOUT, MASK)
    tokens = [math.log(k) for row, mask in zip(RATIOS, MASK.tolist()) for k, v in zip(row, mask) if v]
    mean = sum(tokens) / len(tokens)
    assert m["mismatch/token_log_ratio_mean"] == pytest.approx(mean, rel=1e-6)
    assert m["mismatch/token_log_ratio_std"] == pytest.approx(math.sqrt(sum((t - mean) ** 2 for t in tokens) / len(tokens)), rel=1e-6)
    assert m["mismatch/token_log_ratio_abs_max"] == pytest.approx(math.log(10), rel=1e-6)
    seq = [math.log(1.5), math.log(1.5), math.log(6), math.log(S_D)]
    assert m["mismatch/seq_log_ratio_mean"] == pytest.approx(sum(seq) / 4, rel=1e-6)
    assert (m["mismatch/seq_log_ratio_min"], m["mismatch/seq_log_ratio_max"]) == pytest.approx((math.log(S_D), math.log(6)), rel=1e-4)
    geo = [math.log(1.5) / 3, math.log(1.5), math.log(6) / 2, math.log(1.0005)]
    assert m["mismatch/geo_log_ratio_mean"] == pytest.approx(sum(geo) / 4, rel=1e-5)
    assert m["mismatch/geo_log_ratio_abs_max"] == pytest.approx(math.log(6) / 2, rel=1e-6)


@pytest.mark.parametrize("name", ["seq_tis", "seq_mask", "geo_mask", "token_mask"])
def test_no_overflow_no_gradient_no_valid_token(name):
    """A sequence ratio of e^3000 is a number, not inf; weights carry no gradient; an empty mask gives zeros."""
    trainer = torch.full((2, 3), 1000.0, requires_grad=True)
    weights, _ = offpolicy.correction_weights(name, trainer, torch.zeros(2, 3), torch.ones(2, 3))
    assert torch.isfinite(weights).all() and not weights.requires_grad
    assert (weights == (2.0 if name == "seq_tis" else 0.0)).all()  # truncated at the cap, or masked
    empty, metrics = offpolicy.correction_weights(name, trainer, torch.zeros(2, 3), torch.zeros(2, 3))
    assert (empty == 0).all() and all(v == 0.0 for v in metrics.values())
    assert all(v == 0.0 for v in offpolicy.log_ratio_metrics(trainer, torch.zeros(2, 3), torch.zeros(2, 3)).values())


def test_bounds_are_checked():
    for options in ({"low": 2.0, "high": 1.5}, {"low": -1.0}):
        with pytest.raises(ValueError, match="low"):
            offpolicy.correction_weights("seq_mask", TRAINER, ROLLOUT, MASK, **options)
    with pytest.raises(ValueError, match="cap"):
        offpolicy.correction_weights("seq_tis", TRAINER, ROLLOUT, MASK, cap=0.0)
    with pytest.raises(ValueError, match="unknown mismatch correction 'seq_tiss'"):
        offpolicy.correction_weights("seq_tiss", TRAINER, ROLLOUT, MASK)


def _parts(tmp_path, **algo):
    cfg = config_from_dict(one_digit_rl_config(tmp_path, tmp_path / "run", algo=algo))
    return build_parts(cfg, PartContext(model=torch.nn.Linear(1, 1), load_reference=lambda: None))


def test_each_option_is_one_part_and_tis_keeps_its_own(tmp_path):
    for name in ("seq_tis", "seq_mask", "token_mask", "geo_mask"):
        parts = _parts(tmp_path, is_correction=name, tis_cap=2.0)
        assert "tis" not in parts and parts["mismatch_correction"].name == name and parts["mismatch_correction"].apply
    parts = _parts(tmp_path, tis_cap=2.0)  # today's TIS: the tis part weights, this one only logs
    assert "tis" in parts and not parts["mismatch_correction"].apply
    parts = _parts(tmp_path, is_correction="tis", is_options={"cap": 3.0})  # tis without tis_cap: the cap of is_options
    assert "tis" not in parts and parts["mismatch_correction"].apply and parts["mismatch_correction"].options == {"cap": 3.0}
    assert "mismatch_correction" not in _parts(tmp_path)


@pytest.mark.parametrize("algo, message", [
    ({"is_correction": "geo_mask", "is_options": {"cap": 2.0}}, "cap is not an option of algo.is_correction=geo_mask"),
    ({"is_correction": "seq_mask", "is_options": {"low": 3.0, "high": 2.0}}, "need 0 <= low < high"),
    ({"is_correction": "token_mask", "is_options": {"weight": "both"}}, "weight must be 'ratio' or 'mask'"),
    ({"is_correction": "geo_mask", "is_options": {"veto": 0.0}}, "veto must be > 0"),
    ({"is_correction": "geo_mask", "is_options": {"veto": None}}, "algo.is_options.veto=None: expected a number"),
    ({"is_correction": "seq_tis", "is_options": {"cap": "two"}}, "algo.is_options.cap='two': expected a number"),
    ({"is_options": {"high": 2.0}}, "algo.is_options is set but algo.is_correction is not"),
    ({"is_correction": "tis", "tis_cap": 2.0, "is_options": {"cap": 5.0}}, "disagrees with algo.tis_cap"),
])
def test_bad_options_name_the_key(tmp_path, algo, message):
    with pytest.raises(UserError, match=message.replace("(", r"\(").replace("'", ".")):
        _parts(tmp_path, **algo)


class _Exp:
    def __init__(self):
        self.batch = type("B", (), {"logprobs": ROLLOUT})()
        self.old_logp, self.loss_mask = TRAINER, MASK


def test_part_weights_rows_of_the_batch_it_shaped():
    part, exp = MismatchCorrection("seq_mask", {}), _Exp()
    metrics = part.shape(exp)
    assert metrics["mismatch/masked_seq_frac"] == pytest.approx(1 / 4)
    assert metrics["mismatch/weight_mean"] == pytest.approx(7 / 9)
    assert "mismatch/seq_log_ratio_max" in metrics
    out = type("O", (), {"logp": torch.zeros(2, 3)})()
    weights, _ = part.token_weights(exp, torch.tensor([2, 0]), out)
    assert weights.tolist() == [[0, 0, 0], [1, 1, 1]]


# ---------------------------------------------------------------------------------------------- from the CLI

class _SkewedEngine(HFEngine):
    """The hf engine whose reported log-probs are too high, as a different kernel's may be."""

    def generate(self, prompts, params):
        batch = super().generate(prompts, params)
        skew = torch.full_like(batch.logprobs, 0.3)
        skew[:, 0] = 1.0  # a first token whose ratio e^-1 is outside IcePop's band
        batch.logprobs = torch.where(batch.response_mask.bool(), batch.logprobs + skew, batch.logprobs)
        return batch


@pytest.fixture
def skewed_engine():
    @register_engine("skewed_hf_test")
    def build(model, tokenizer, **options):
        return _SkewedEngine(model, pad_id=tokenizer.pad_token_id, eos_ids=tokenizer.eos_token_id)

    yield "skewed_hf_test"
    unregister_engine("skewed_hf_test")


@pytest.mark.parametrize("name, own_metric", [("tis", "tis_clip_frac"), ("seq_tis", "mismatch/truncated_seq_frac"),
                                              ("seq_mask", "mismatch/masked_seq_frac"),
                                              ("token_mask", "mismatch/masked_token_frac"),
                                              ("geo_mask", "mismatch/masked_seq_frac")])
def test_three_steps_from_the_cli(tmp_path, tiny_model_dir, skewed_engine, name, own_metric):
    out = tmp_path / "run"
    extra = ["algo.is_options={cap: 1.05}"] if name == "tis" else []
    assert main(["train", "examples/arithmetic.yaml", f"model.path={tiny_model_dir}", f"train.out={out}",
                 "train.steps=3", "data.prompts_per_step=2", "rollout.group_size=2", "rollout.max_new_tokens=6",
                 "train.progress=false", f"rollout.engine={skewed_engine}", f"algo.is_correction={name}", *extra]) == 0
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3]
    for row in rows:
        for key in ("mismatch/token_log_ratio_mean", "mismatch/seq_log_ratio_max", "mismatch/geo_log_ratio_abs_max",
                    own_metric):
            assert math.isfinite(row[key]), (key, row)
        assert row["mismatch/token_log_ratio_abs_max"] > 0.05  # the engine's skew reached the statistics
    if name in ("seq_mask", "geo_mask", "token_mask"):
        assert sum(r[own_metric] for r in rows) > 0  # ratios of e^-1 (first token), e^-0.3 (others): outside the default bands


def test_masked_tokens_carry_no_gradient_through_the_cli(tmp_path, warm_model_dir, skewed_engine):
    """geo_mask on the skewed engine masks every response (geometric ratios between e^-1 and e^-0.3), so three steps
    leave the weights as they were; seq_tis on the same rollouts does move them."""
    from transformers import AutoModelForCausalLM

    def final_weights(name):
        out = tmp_path / name
        assert main(["train", "examples/arithmetic.yaml", f"model.path={warm_model_dir}", f"train.out={out}",
                     "data.train=arithmetic:train:digits=1", "train.steps=3", "data.prompts_per_step=8", "rollout.group_size=4", "rollout.max_new_tokens=4",
                     "train.progress=false", f"rollout.engine={skewed_engine}", f"algo.is_correction={name}"]) == 0
        rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
        assert any(r["reward_std"] > 0 for r in rows)  # rewards differed: there is a gradient to mask
        return rows, AutoModelForCausalLM.from_pretrained(out / "checkpoint-3").state_dict()

    start = AutoModelForCausalLM.from_pretrained(warm_model_dir).state_dict()
    rows, masked = final_weights("geo_mask")
    assert all(r["mismatch/masked_seq_frac"] == 1.0 for r in rows)
    assert all(torch.equal(start[k], masked[k]) for k in start)
    _, weighted = final_weights("seq_tis")
    assert any(not torch.equal(start[k], weighted[k]) for k in start)
