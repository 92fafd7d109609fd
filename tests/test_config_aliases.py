"""Names users bring from TRL, verl and OpenRLHF: the error for an unknown key names the rlvr key that means it."""

import pytest

from rlvr.config import _ALL_KEYS, ALIASES, ConfigError, load_config


@pytest.mark.parametrize("override, key", [
    ("num_generations=8", "rollout.group_size"),  # TRL, at the top level
    ("rollout.num_generations=8", "rollout.group_size"),
    ("algo.beta=0.04", "algo.kl_coef"),  # TRL
    ("rollout.max_completion_length=256", "rollout.max_new_tokens"),  # TRL
    ("train.learning_rate=1e-6", "train.lr"),  # TRL / HF Trainer
    ("data.train_files=x.parquet", "data.train"),  # verl
    ("trainer.total_training_steps=10", "train.steps"),  # verl, in its own section
    ("actor.kl_loss_coef=0.001", "algo.kl_coef"),  # verl
    ("algo.clip_ratio_high=0.28", "algo.clip_high"),  # verl
    ("rollout.n_samples_per_prompt=4", "rollout.group_size"),  # OpenRLHF
    ("train.micro_train_batch_size=2", "train.micro_batch_size"),  # OpenRLHF
    ("algo.num_iterations=2", "algo.ppo_epochs"),  # TRL
])
def test_an_other_frameworks_name_suggests_rlvrs_key(override, key):
    with pytest.raises(ConfigError) as exc:
        load_config("examples/arithmetic.yaml", [override])
    assert f"did you mean '{key}'?" in str(exc.value)


def test_the_same_names_in_a_config_file(tmp_path):
    path = tmp_path / "trl.yaml"
    path.write_text("model:\n  path: m\nrollout:\n  num_generations: 8\n")
    with pytest.raises(ConfigError, match=r"trl.yaml: line 4.*did you mean 'rollout.group_size'"):
        load_config(path)


def test_every_alias_names_a_real_key():
    assert sorted(set(ALIASES.values()) - set(_ALL_KEYS)) == []
