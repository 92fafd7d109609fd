"""Tests for rlvr.config: defaults, YAML + overrides, and one clear error message per problem."""

import dataclasses

import pytest

from rlvr.config import (
    AlgoConfig,
    Config,
    ConfigError,
    DataConfig,
    ModelConfig,
    RolloutConfig,
    TrainConfig,
    config_from_dict,
    load_config,
    save_config,
    validate_algo_names,
)


def write(tmp_path, text, name="run.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return path


def error(*args, **kwargs) -> str:
    with pytest.raises(ConfigError) as info:
        load_config(*args, **kwargs)
    return str(info.value)


# ---------------------------------------------------------------- defaults


def test_defaults_load():
    cfg = load_config(None)
    assert cfg == Config()
    assert cfg.model == ModelConfig(path=None, dtype="float32", device="auto")
    assert cfg.data.verifier == "exact" and cfg.data.verifier_options == {} and cfg.data.prompts_per_step == 8
    assert cfg.data.prompt_field == "prompt" and cfg.data.reference_field == "reference"
    assert cfg.rollout == RolloutConfig("hf", 8, 32, 1.0, 1.0, 0, 0)
    assert cfg.algo.advantage == "grpo" and cfg.algo.loss == "ppo" and cfg.algo.agg is None
    assert cfg.algo.dual_clip is None and cfg.algo.kl_kind == "k3" and cfg.algo.epsilon == 1e-6
    assert cfg.train.steps == 100 and cfg.train.lr == 1e-5 and cfg.train.out == "runs/rlvr"
    assert cfg.train.tensorboard is False and cfg.train.progress is True


def test_defaults_are_not_shared_between_configs():
    a, b = load_config(None), load_config(None)
    a.data.verifier_options["tol"] = 1
    assert b.data.verifier_options == {} and DataConfig().verifier_options == {}


def test_empty_file_and_empty_section_mean_defaults(tmp_path):
    assert load_config(write(tmp_path, "")) == Config()
    assert load_config(write(tmp_path, "train:\nalgo: {}\n")) == Config()


# ---------------------------------------------------------------- file + overrides


def test_yaml_file_and_overrides(tmp_path):
    path = write(
        tmp_path,
        """
model: {path: models/tiny, dtype: bfloat16}
data:
  train: arithmetic:train
  verifier: numeric
train:
  steps: 50
  lr: 1e-4          # YAML 1.1 would read this as a string; accepted as a float
algo: {agg: token-mean, clip_high: 0.28}
""",
    )
    cfg = load_config(path, ["train.steps=5", "algo.agg=null", "data.eval=foo.jsonl", "rollout.temperature=0"])
    assert cfg.model.path == "models/tiny" and cfg.model.dtype == "bfloat16"
    assert cfg.data.train == "arithmetic:train" and cfg.data.verifier == "numeric"
    assert cfg.train.steps == 5  # override wins over the file
    assert cfg.train.lr == 1e-4 and isinstance(cfg.train.lr, float)
    assert cfg.algo.agg is None and cfg.algo.clip_high == 0.28
    assert cfg.data.eval == "foo.jsonl"
    assert cfg.rollout.temperature == 0.0 and isinstance(cfg.rollout.temperature, float)


@pytest.mark.parametrize(
    "override, key, expected",
    [
        ("train.steps=5", "train.steps", 5),
        ("train.lr=3e-6", "train.lr", 3e-6),
        ("algo.agg=null", "algo.agg", None),
        ("algo.agg=seq-mean-token-sum-norm", "algo.agg", "seq-mean-token-sum-norm"),
        ("data.train=foo.jsonl", "data.train", "foo.jsonl"),
        ("data.train=arithmetic:train", "data.train", "arithmetic:train"),
        ("model.device=cuda:1", "model.device", "cuda:1"),
        ("algo.dual_clip=3", "algo.dual_clip", 3.0),
        ("train.tensorboard=true", "train.tensorboard", True),
        ("data.verifier_options={tol: 0.1}", "data.verifier_options", {"tol": 0.1}),
        ("data.verifier_options.tol=0.5", "data.verifier_options", {"tol": 0.5}),
        ("train={steps: 7}", "train.steps", 7),
        (" train.seed = 3", "train.seed", 3),
    ],
)
def test_override_values(override, key, expected):
    section, name = key.split(".")
    value = getattr(getattr(load_config(None, [override]), section), name)
    assert value == expected and type(value) is type(expected)


def test_later_override_wins_and_dict_entries_merge(tmp_path):
    path = write(tmp_path, "data:\n  verifier_options: {tol: 0.1, rel: true}\n")
    cfg = load_config(path, ["train.steps=5", "train.steps=6", "data.verifier_options.tol=0.2"])
    assert cfg.train.steps == 6
    assert cfg.data.verifier_options == {"tol": 0.2, "rel": True}


def test_config_from_dict():
    cfg = config_from_dict({"rollout": {"group_size": 4}, "algo": {"advantage": "rloo"}})
    assert cfg.rollout.group_size == 4 and cfg.algo.advantage == "rloo"
    with pytest.raises(ConfigError, match=r"^my-source: rollout.group_size: expected >= 1, got 0$"):
        config_from_dict({"rollout": {"group_size": 0}}, source="my-source")
    with pytest.raises(ConfigError, match=r"^<dict>: unknown key 'rollout.group'"):
        config_from_dict({"rollout": {"group": 4}})


# ---------------------------------------------------------------- unknown keys and sections


@pytest.mark.parametrize(
    "yaml_text, message",
    [
        ("train:\n  step: 5\n", "line 2: unknown key 'train.step' (did you mean 'train.steps'?)"),
        ("rollout:\n  temprature: 0.7\n", "line 2: unknown key 'rollout.temprature' (did you mean 'rollout.temperature'?)"),
        ("train:\n  steps: 3\n  group_size: 4\n", "line 3: unknown key 'train.group_size' (did you mean 'rollout.group_size'?)"),
        ("trian:\n  steps: 5\n", "line 1: unknown section 'trian' (did you mean 'train'?)"),
        ("train:\n  steps: 1\noptimizer:\n  lr: 1\n", "line 3: unknown section 'optimizer'"),
    ],
)
def test_unknown_key_in_file_suggests_closest(tmp_path, yaml_text, message):
    path = write(tmp_path, yaml_text)
    assert error(path) == f"{path}: {message}"


@pytest.mark.parametrize(
    "override, message",
    [
        ("train.step=5", "override 'train.step=5': unknown key 'train.step' (did you mean 'train.steps'?)"),
        ("trian.steps=5", "override 'trian.steps=5': unknown key 'trian.steps' (did you mean 'train.steps'?)"),
        ("algo.kl=0.1", "override 'algo.kl=0.1': unknown key 'algo.kl'"),
        ("train.steps.x=1", "override 'train.steps.x=1': unknown key 'train.steps.x' (did you mean 'train.steps'?)"),
    ],
)
def test_unknown_key_in_override(override, message):
    assert error(None, [override]).startswith(message)


@pytest.mark.parametrize("override", ["train.steps", "train.steps5", "=5", "train..steps=5"])
def test_malformed_override_shows_expected_form(override):
    assert error(None, [override]) == (
        f"override '{override}': expected the form section.key=value, e.g. train.steps=10"
    )


# ---------------------------------------------------------------- types


@pytest.mark.parametrize(
    "override, message",
    [
        ("train.steps=abc", "train.steps: expected int, got str 'abc'"),
        ("train.steps=2.5", "train.steps: expected int, got float 2.5"),
        ("train.steps=true", "train.steps: expected int, got bool True"),  # bool is not an int
        ("train.lr=false", "train.lr: expected float, got bool False"),
        ("train.lr=fast", "train.lr: expected float, got str 'fast'"),
        ("train.tensorboard=1", "train.tensorboard: expected bool, got int 1"),
        ("data.shuffle=yes please", "data.shuffle: expected bool, got str 'yes please'"),
        ("model.path=3", "model.path: expected str or null, got int 3"),
        ("data.verifier_options=[1, 2]", "data.verifier_options: expected dict, got list [1, 2]"),
        ("data.verifier_options=null", "data.verifier_options: expected dict, got null"),
        ("train.steps=null", "train.steps: expected int, got null"),
        ("algo.loss=null", "algo.loss: expected str, got null"),
        ("train.out=", "train.out: expected str, got null"),
        ("algo.clip_low=[0.2]", "algo.clip_low: expected float, got list [0.2]"),
    ],
)
def test_wrong_type_message(override, message):
    assert error(None, [override]) == f"override '{override}': {message}"


def test_wrong_type_in_file_names_file(tmp_path):
    path = write(tmp_path, "train:\n  steps: abc\n")
    assert error(path) == f"{path}: line 2: train.steps: expected int, got str 'abc'"


@pytest.mark.parametrize(
    "override, key, expected",
    [
        ("train.lr=1", "train.lr", 1.0),
        ("algo.kl_coef=0", "algo.kl_coef", 0.0),
        ("rollout.top_p=1", "rollout.top_p", 1.0),
        ("algo.dual_clip=2", "algo.dual_clip", 2.0),
    ],
)
def test_int_accepted_as_float(override, key, expected):
    section, name = key.split(".")
    value = getattr(getattr(load_config(None, [override]), section), name)
    assert value == expected and isinstance(value, float)


@pytest.mark.parametrize(
    "override, key",
    [("model.path=null", "model.path"), ("data.train=null", "data.train"), ("data.eval=null", "data.eval"),
     ("algo.agg=null", "algo.agg"), ("algo.dual_clip=null", "algo.dual_clip")],
)
def test_none_where_allowed(override, key):
    section, name = key.split(".")
    assert getattr(getattr(load_config(None, [override]), section), name) is None


@pytest.mark.parametrize(
    "yaml_text, message",
    [
        ("train: 5\n", "line 1: section 'train' must be a mapping of keys, got int 5"),
        ("algo:\n  - grpo\n", "line 1: section 'algo' must be a mapping of keys, got list ['grpo']"),
        ("- train\n", "expected a mapping of sections (model, data, rollout, algo, reward, train, cluster), got list ['train']"),
        ("just text\n", "expected a mapping of sections (model, data, rollout, algo, reward, train, cluster), got str 'just text'"),
    ],
)
def test_section_not_a_mapping(tmp_path, yaml_text, message):
    path = write(tmp_path, yaml_text)
    assert error(path) == f"{path}: {message}"


# ---------------------------------------------------------------- ranges and choices


@pytest.mark.parametrize(
    "override, message",
    [
        ("train.steps=0", "train.steps: expected >= 1, got 0"),
        ("data.prompts_per_step=0", "data.prompts_per_step: expected >= 1, got 0"),
        ("rollout.group_size=0", "rollout.group_size: expected >= 1, got 0"),
        ("rollout.max_new_tokens=0", "rollout.max_new_tokens: expected >= 1, got 0"),
        ("rollout.temperature=-0.1", "rollout.temperature: expected >= 0, got -0.1"),
        ("rollout.top_p=0", "rollout.top_p: expected 0 < top_p <= 1, got 0.0"),
        ("rollout.top_p=1.5", "rollout.top_p: expected 0 < top_p <= 1, got 1.5"),
        ("rollout.top_k=-1", "rollout.top_k: expected >= 0 (0 = off), got -1"),
        ("rollout.batch_size=-1", "rollout.batch_size: expected >= 0 (0 = all), got -1"),
        ("rollout.engine=sglang", "rollout.engine: expected a registered engine: hf, vllm, got 'sglang'"),
        ("train.lr=0", "train.lr: expected > 0, got 0.0"),
        ("train.lr=-1e-5", "train.lr: expected > 0, got -1e-05"),
        ("algo.clip_low=-0.1", "algo.clip_low: expected >= 0, got -0.1"),
        ("algo.clip_high=-0.1", "algo.clip_high: expected >= 0, got -0.1"),
        ("algo.dual_clip=1", "algo.dual_clip: expected null or > 1, got 1.0"),
        ("algo.dual_clip=0.5", "algo.dual_clip: expected null or > 1, got 0.5"),
        ("algo.kl_coef=-0.01", "algo.kl_coef: expected >= 0, got -0.01"),
        ("algo.kl_kind=k4", "algo.kl_kind: expected one of k1, k2, k3, got 'k4'"),
        ("model.dtype=fp16", "model.dtype: expected one of float32, bfloat16, float16, got 'fp16'"),
        ("model.device=gpu", "model.device: expected auto, cpu, cuda, cuda:N or mps, got 'gpu'"),
        ("train.save_every=-1", "train.save_every: expected >= 0 (0 = only the final checkpoint), got -1"),
        ("train.micro_batch_size=-2", "train.micro_batch_size: expected >= 0 (0 = whole step in one backward), got -2"),
        ("train.threads=-1", "train.threads: expected >= 0 (0 = torch's default), got -1"),
        ("train.warmup_steps=-1", "train.warmup_steps: expected >= 0, got -1"),
        ("train.weight_decay=-0.1", "train.weight_decay: expected >= 0, got -0.1"),
        ("data.eval_size=-1", "data.eval_size: expected >= 0 (0 = all eval rows), got -1"),
    ],
)
def test_range_rules(override, message):
    assert error(None, [override]) == f"override '{override}': {message}"


@pytest.mark.parametrize(
    "override",
    ["train.steps=1", "rollout.temperature=0", "rollout.top_p=0.01", "algo.dual_clip=1.01", "algo.kl_kind=k1",
     "model.dtype=float16", "model.device=cpu", "model.device=mps", "model.device=cuda", "train.save_every=0"],
)
def test_range_edges_accepted(override):
    load_config(None, [override])


def test_range_error_names_the_file_the_value_came_from(tmp_path):
    path = write(tmp_path, "rollout:\n  top_p: 2\n")
    assert error(path) == f"{path}: line 2: rollout.top_p: expected 0 < top_p <= 1, got 2.0"
    assert load_config(path, ["rollout.top_p=0.9"]).rollout.top_p == 0.9  # a fixing override wins


# ---------------------------------------------------------------- algorithm names (registries in rlvr.algos)


def test_unknown_advantage_lists_known_names():
    message = error(None, ["algo.advantage=nope"])
    assert message.startswith("override 'algo.advantage=nope': algo.advantage: unknown advantage estimator 'nope'")
    for name in ("grpo", "dr_grpo", "rloo"):
        assert name in message


def test_unknown_loss_lists_known_names(tmp_path):
    path = write(tmp_path, "algo:\n  loss: ppo2\n")
    message = error(path)
    assert message.startswith(f"{path}: line 2: algo.loss: unknown loss 'ppo2'")
    assert "ppo" in message.split("known:")[1]


def test_validate_algo_names_directly():
    validate_algo_names(Config(algo=AlgoConfig(advantage="dr_grpo", loss="ppo")))
    with pytest.raises(ConfigError, match="unknown advantage estimator 'x'.*grpo"):
        validate_algo_names(Config(algo=AlgoConfig(advantage="x")))


def test_data_verifier_name_is_not_validated_here():
    assert load_config(None, ["data.verifier=anything.goes"]).data.verifier == "anything.goes"


# ---------------------------------------------------------------- malformed YAML and missing files


@pytest.mark.parametrize(
    "yaml_text, line",
    [
        ("train:\n  steps: 5\n  lr: [1e-5\n", 4),
        ("train:\n  steps: 5\n bad: indent\n", 3),
        ("model:\n  path: a: b\n", 2),
    ],
)
def test_malformed_yaml_names_file_and_line(tmp_path, yaml_text, line):
    path = write(tmp_path, yaml_text)
    message = error(path)
    assert message.startswith(f"{path}: line {line}, column ")
    assert "invalid YAML" in message


def test_malformed_override_value():
    message = error(None, ["data.verifier_options={tol: 0.1"])
    assert message.startswith("override 'data.verifier_options={tol: 0.1': invalid YAML")


def test_missing_file(tmp_path):
    path = tmp_path / "nope.yaml"
    message = error(path)
    assert message.startswith(f"{path}: cannot read config file")


# ---------------------------------------------------------------- round trip


def test_to_dict_is_plain_nested_dict():
    d = load_config(None, ["data.verifier_options={tol: 0.1}"]).to_dict()
    assert list(d) == ["model", "data", "rollout", "algo", "reward", "train", "cluster", "plugins"]
    assert d["train"]["steps"] == 100 and d["data"]["verifier_options"] == {"tol": 0.1} and d["plugins"] == []
    assert all(type(section) is dict for name, section in d.items() if name != "plugins")
    assert set(d["algo"]) == {f.name for f in dataclasses.fields(AlgoConfig)}
    assert set(d["train"]) == {f.name for f in dataclasses.fields(TrainConfig)}


def test_save_config_round_trip(tmp_path):
    cfg = load_config(
        None,
        ["model.path=models/tiny", "data.train=arithmetic:train", "data.verifier_options={tol: 1e-6, nested: {a: [1, 2]}}",
         "algo.dual_clip=3", "algo.agg=token-mean", "train.lr=3e-7", "train.tensorboard=true", "rollout.top_p=0.95"],
    )
    path = tmp_path / "run" / "config.yaml"
    save_config(cfg, path)
    again = load_config(path)
    assert again == cfg
    assert config_from_dict(cfg.to_dict()) == cfg
    assert isinstance(again.train.lr, float) and again.train.lr == 3e-7


def test_data_env_names_a_registered_environment():
    cfg = load_config(None, ["data.env=tools", "data.env_options={tools: [calculator], max_turns: 2}"])
    assert cfg.data.env == "tools" and cfg.data.env_options == {"tools": ["calculator"], "max_turns": 2}
    assert load_config(None).data.env is None and load_config(None).data.env_options == {}
    with pytest.raises(ConfigError, match=r"data.env: expected null or a registered environment: .*tools"):
        load_config(None, ["data.env=toolz"])
