"""Each seed-paper recipe that changes the step trains 3 steps from the command line on multi-term arithmetic chains
and logs its own metrics: `rlvr train examples/arithmetic.yaml data.train=arithmetic:chain algo.recipe=NAME`."""

import pytest

from rlvr.cli import main
from rlvr.models.tiny import TinySpec, save_tiny_model
from rlvr.train.metrics import read_metrics

# recipe -> metrics its method logs every step
OWN_METRICS = {
    "ghpo": ["hint_frac", "hint/stage_1_groups", "rows/hinted"],
    "guide": ["hint_frac", "rows/hinted"],
    "luffy": ["rows/expert", "reward_mean/expert", "expert_token_frac"],
    "rl_plus": ["rows/expert", "expert_ratio_mean"],
    "pure": ["process/steps_mean", "process/reward_mean", "kl"],
    "prime": ["prm/pairwise_acc", "prm/loss", "prm/token_reward_mean"],
    "prof": ["prof/dropped_frac", "process/false_step_frac"],
    "dars": ["dars/extra_rollouts", "dars/hard_prompts"],
}


@pytest.fixture(scope="module")
def chain_model(tmp_path_factory):
    """A tiny model whose context holds GHPO's hinted prompts (its wording alone is about 100 characters)."""
    spec = TinySpec(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64, max_positions=256)
    return save_tiny_model(tmp_path_factory.mktemp("chain") / "model", spec, seed=0)


@pytest.mark.parametrize("name", sorted(OWN_METRICS))
def test_seed_recipe_trains_three_steps_on_chains(name, chain_model, tmp_path):
    assert main(["train", "examples/arithmetic.yaml", "data.train=arithmetic:chain", f"algo.recipe={name}",
                 f"model.path={chain_model}", f"train.out={tmp_path}", "train.steps=3", "data.prompts_per_step=4",
                 "rollout.group_size=4", "rollout.max_new_tokens=24", "train.progress=false"]) == 0
    rows = read_metrics(tmp_path)
    assert [r["step"] for r in rows] == [1, 2, 3]
    missing = {r["step"]: [k for k in OWN_METRICS[name] if k not in r] for r in rows}
    assert missing == {1: [], 2: [], 3: []}
