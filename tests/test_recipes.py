"""Recipes: every named preset runs, the headline ones learn, and config-time errors list the known names."""

import json

import pytest
import torch
import yaml

from rlvr.algos import advantages, losses, recipes
from rlvr.cli import main
from rlvr.config import ConfigError, config_from_dict, load_config
from rlvr.train import train
from rlvr.train.metrics import read_metrics

from conftest import assert_reward_went_up, one_digit_rl_config

ALL = ["grpo", "dr_grpo", "dapo", "gspo", "cispo", "rloo", "reinforce_pp", "reinforce_pp_baseline", "remax", "ppo", "nsr", "w_reinforce", "forking_tokens",
       "ghpo", "guide", "luffy", "rl_plus", "pure", "prime", "prof", "dars",
       "clip_cov", "kl_cov", "lp_reg", "dcpo", "ace", "sapo", "ead", "rlcr", "opd",
       "rise", "critique_rl", "tango", "cooper"]
# recipes whose policy also rates its own answers: their default verification prompt is about 330 tokens
VERIFYING = {"rise", "critique_rl"}


@pytest.fixture(scope="module")
def long_tiny_model_dir(tmp_path_factory):
    """The tests' tiny model with 512 positions, room for a verification prompt that holds a question and an answer."""
    from conftest import SMALL
    from rlvr.models.tiny import TinySpec, save_tiny_model

    spec = TinySpec(SMALL.hidden_size, SMALL.num_layers, SMALL.num_heads, SMALL.intermediate_size, max_positions=512)
    return save_tiny_model(tmp_path_factory.mktemp("tiny512") / "model", spec, seed=0)


def test_every_recipe_the_issue_names_exists():
    assert sorted(ALL) == recipes.names()


@pytest.mark.parametrize("name", ALL)
def test_recipe_runs_three_steps_of_the_example_config(name, request, tmp_path):
    model_dir = request.getfixturevalue("long_tiny_model_dir" if name in VERIFYING else "tiny_model_dir")
    cfg = load_config("examples/arithmetic.yaml", [
        f"algo.recipe={name}", f"model.path={model_dir}", f"train.out={tmp_path}", "train.steps=3",
        "data.prompts_per_step=4", "rollout.group_size=4", "rollout.max_new_tokens=5", "train.progress=false",
    ])
    with open("examples/arithmetic.yaml") as f:
        explicit = yaml.safe_load(f)  # keys the file sets itself win over the recipe
    for key, value in recipes.get(name).settings.items():
        section, _, leaf = key.rpartition(".")
        section = section or "algo"  # other sections' keys are written dotted
        assert getattr(getattr(cfg, section), leaf) == (explicit.get(section) or {}).get(leaf, value), key
    rows = read_metrics(train(cfg))
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert all(torch.isfinite(torch.tensor(r["loss"])) for r in rows)


@pytest.mark.parametrize("name, per_step, opening", [("rise", 4, "Rate the response"),
                                                     ("critique_rl", 8, "Judge whether")])
def test_verification_recipes_train_three_steps_from_the_command_line(name, per_step, opening, long_tiny_model_dir,
                                                                      tmp_path):
    """The recipe alone turns on self-verification with its paper's scheme and default (boxed) template; every step
    logs the verification metrics, and the verification rows are in the batch beside the answers."""
    out = tmp_path / "run"
    assert main(["train", "examples/arithmetic.yaml", f"algo.recipe={name}", f"model.path={long_tiny_model_dir}",
                 f"train.out={out}", "train.steps=3", "data.prompts_per_step=8", "rollout.group_size=2",
                 "rollout.max_new_tokens=5", "train.progress=false", "train.log_samples=64"]) == 0
    rows = read_metrics(out)
    assert [r["step"] for r in rows] == [1, 2, 3]
    for row in rows:
        assert row["verify/rows"] == row["rows/verification"] == per_step * 2
        assert row["rows/on_policy"] == 8 * 2
        assert 0.0 <= row["verify/accuracy"] <= 1.0 and torch.isfinite(torch.tensor(row["loss"]))
    samples = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    rated = [s for s in samples if s["task_id"].endswith("/verify")]
    assert rated and all(s["prompt"].startswith(opening) for s in rated)
    assert {s["reason"] for s in rated} <= {"rating_match", "rating_mismatch", "no_rating"}


def test_explicit_keys_override_the_recipe():
    cfg = load_config(None, ["algo.recipe=dapo", "algo.clip_high=0.3"])
    assert cfg.algo.clip_high == 0.3 and cfg.algo.dynamic_sampling is True and cfg.algo.clip_low == 0.2


def test_nsr_is_one_line():
    cfg = load_config(None, ["algo.recipe=nsr"])
    assert cfg.algo.advantage == "nsr"


@pytest.mark.parametrize(
    "override, known",
    [("algo.recipe=dappo", "dapo"), ("algo.advantage=gpro", "grpo"), ("algo.loss=ppp", "cispo")],
)
def test_unknown_names_fail_at_config_time_listing_known_ones(override, known):
    with pytest.raises(ConfigError, match=f"known: .*{known}"):
        load_config(None, [override])


@pytest.mark.parametrize("name", ["grpo", "dapo", "nsr"])
def test_recipe_raises_the_reward(name, warm_model_dir, tmp_path):
    rows = read_metrics(train(config_from_dict(one_digit_rl_config(warm_model_dir, tmp_path, algo={"recipe": name}))))
    assert_reward_went_up(rows)


def test_registered_estimator_and_loss_are_reachable_from_config(tiny_model_dir, tmp_path):
    calls = {"adv": 0, "loss": 0}

    @advantages.register("test_from_config_adv")
    def half_reward(rewards, index, response_mask, **_):
        calls["adv"] += 1
        return advantages.broadcast(rewards * 0.5, response_mask)

    @losses.register("test_from_config_loss", default_agg="seq-mean-token-sum")
    def plain_reinforce(logp, old_logp, adv, response_mask, **_):
        calls["loss"] += 1
        return -adv * logp, {"clip_frac": 0.0}

    cfg = config_from_dict(one_digit_rl_config(tiny_model_dir, tmp_path, steps=2,
                                               algo={"advantage": "test_from_config_adv", "loss": "test_from_config_loss"}))
    train(cfg)
    assert calls == {"adv": 2, "loss": 2}


def test_recipes_command_lists_papers(capsys):
    assert main(["recipes"]) == 0
    out = capsys.readouterr().out
    for name in ALL:
        assert f"\n{name}\n" in f"\n{out}"
    assert "arXiv:2503.14476" in out  # DAPO


def test_docs_table_is_in_step_with_the_recipes():
    with open("docs/algorithms.md") as f:
        assert recipes.markdown_table() in f.read()


def test_docs_example_registers_and_runs():
    import re

    with open("docs/algorithms.md") as f:
        code = re.findall(r"```python\n(.*?)```", f.read(), re.S)[0]
    exec(code, {})
    adv = advantages.compute("median_baseline", torch.tensor([1.0, 0.0, 0.0, 1.0]), torch.tensor([0, 0, 0, 1]), torch.ones(4, 2))
    assert adv[:, 0].tolist() == [1.0, 0.0, 0.0, 0.0]
    loss, _ = losses.compute("reinforce", -torch.ones(4, 2), torch.zeros(4, 2), adv, torch.ones(4, 2))
    assert loss.item() == 0.5


def test_dapo_update_structure_from_the_command_line(warm_model_dir, tmp_path):
    """algo.mini_batches x algo.ppo_epochs optimizer steps per rollout batch; the ratio moves off 1, so clipping acts
    on steps whose groups have mixed rewards; 1 x 1 is a single update."""
    common = ["examples/arithmetic.yaml", f"model.path={warm_model_dir}", "algo.recipe=dapo", "train.steps=3",
              "data.train=arithmetic:train:digits=1", "data.prompts_per_step=8", "rollout.group_size=8",
              "rollout.max_new_tokens=4", "train.lr=1e-3", "train.progress=false"]
    assert main(["train", *common, "algo.mini_batches=4", "algo.ppo_epochs=2", f"train.out={tmp_path / 'a'}"]) == 0
    rows = read_metrics(tmp_path / "a")
    assert [r["updates"] for r in rows] == [8, 8, 8]
    mixed = [r for r in rows if r["informative_groups"] > 0]
    assert mixed and all(r["clip_frac"] > 0 and r["approx_kl"] > 0 for r in mixed)
    assert main(["train", *common, "algo.mini_batches=1", "algo.ppo_epochs=1", f"train.out={tmp_path / 'b'}"]) == 0
    assert [r["updates"] for r in read_metrics(tmp_path / "b")] == [1, 1, 1]


@pytest.mark.parametrize("name, updates, clip", [
    ("dr_grpo", 8, (0.2, 0.2)),  # sail-sg/understand-r1-zero: 128 prompts x 8 samples, train_batch_size 128
    ("reinforce_pp", 8, (0.2, 0.2)),  # OpenRLHF: rollout_batch_size 1024, train_batch_size 128, eps_clip 0.2
    ("reinforce_pp_baseline", 8, (0.2, 0.2)),  # OpenRLHF: 128 prompts x 8 samples, train_batch_size 128
    ("dapo", 16, (0.2, 0.28)), ("gspo", 4, (3e-4, 4e-4)), ("grpo", 1, (0.2, 0.2)),
])
def test_recipes_state_their_authors_update_structure(name, updates, clip):
    """Optimizer steps per rollout batch and PPO clip range as the authors' scripts set them (algos/recipes.py)."""
    settings = recipes.get(name).settings
    assert settings["ppo_epochs"] * settings["mini_batches"] == updates
    assert (settings["clip_low"], settings["clip_high"]) == clip
