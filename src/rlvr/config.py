"""Typed run configuration: a YAML file plus ``dotted.key=value`` overrides, validated up front.

    cfg = load_config("examples/tiny.yaml", ["train.steps=5", "algo.agg=null"])
    save_config(cfg, "runs/x/config.yaml")          # load_config reads it back to an equal Config

Every problem raises ConfigError with one message naming where it came from (file path and line,
``override 'x.y=z'``, or the dict's source) and the dotted key. Type checks are driven by the
dataclass annotations below; ranges and choices by the ``_RULES`` table.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import os
import re
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import yaml

from rlvr.errors import UserError
from rlvr.yaml_text import MAX_YAML_CHARS, BoundedLoader


class ConfigError(UserError):
    """A bad config file, override or value; the message says where and what was expected."""


@dataclass
class ModelConfig:
    path: str | None = None  # HF model folder (AutoModelForCausalLM + AutoTokenizer)
    dtype: str = "float32"  # parameter dtype: float32, bfloat16 or float16
    device: str = "auto"  # "auto" (cuda if available, else cpu), "cpu", "cuda", "cuda:N" or "mps"
    lora: dict | None = None  # LoRA adapter {r, alpha, dropout, target_modules} trained instead of the weights (null = off)


@dataclass
class DataConfig:
    train: str | None = None  # JSONL path or built-in generator spec such as "arithmetic:train"
    eval: str | None = None  # held-out tasks: JSONL path or generator spec
    verifier: str = "exact"  # default verifier for rows that name none
    verifier_options: dict = field(default_factory=dict)  # keyword options passed to the verifier
    prompt_field: str = "prompt"  # row field holding the prompt
    reference_field: str = "reference"  # row field holding the gold reference
    prompts_per_step: int = 8  # prompts sampled per RL step
    eval_size: int = 0  # eval rows used (0 = all)
    shuffle: bool = True  # shuffle training prompts
    prompt_template: str | None = None  # build each prompt from the row's fields, e.g. "{question}\nAnswer:" (None = the prompt field)
    system_prompt: str | None = None  # a system message put before every prompt (prompts become chat messages)
    completion_field: str = "completion"  # row field holding the target response (rlvr sft)
    answer_after: str | None = None  # score only the text after the last occurrence of this marker (e.g. "</think>")
    require_answer_after: bool = True  # a response without the marker has no answer (false: it is scored whole)
    curriculum: str = "none"  # none, or rules joined by "+": filter, band, replay (docs/data.md)
    curriculum_options: dict = field(default_factory=dict)  # e.g. {skip_after: 2, band_low: 0.2, replay_frac: 0.25}
    # agents (docs/agents.md): the environment of rows that name none, and its options (tools, tool_format, max_turns)
    env: str | None = None  # a registered environment (rlvr.envs); None = single_turn
    env_options: dict = field(default_factory=dict)  # e.g. {tools: [calculator], tool_format: fenced, max_turns: 3}


@dataclass
class RolloutConfig:
    engine: str = "hf"  # generation engine, by registered name (rlvr.rollout.register_engine)
    group_size: int = 8  # responses sampled per prompt
    max_new_tokens: int = 32  # response length limit in tokens
    temperature: float = 1.0  # sampling temperature (0 = greedy)
    top_p: float = 1.0  # nucleus sampling mass (1 = off)
    top_k: int = 0  # top-k sampling (0 = off)
    batch_size: int = 0  # max sequences per generation call (0 = all at once)
    engine_options: dict = field(default_factory=dict)  # keyword options for the engine's factory
    max_prompt_tokens: int | None = None  # longest prompt in tokens (None = no limit)
    prompt_overflow: str = "error"  # a longer prompt: "error" (naming the task) or "truncate_left" (keep its end)
    stop: list = field(default_factory=list)  # stop strings: a response ends after the first one it contains
    chat_template_kwargs: dict = field(default_factory=dict)  # passed to every apply_chat_template call, e.g. {enable_thinking: false}
    temperature_schedule: dict | None = None  # EAD annealing per generated position {start, tau_max, tau_min, decay} (None = fixed temperature)
    agent_command: str | None = None  # a program run once per episode against rlvr's OpenAI-compatible endpoint (docs/agents.md)


@dataclass
class AlgoConfig:
    recipe: str | None = None  # named preset (rlvr recipes); keys set explicitly override it
    advantage: str = "grpo"  # advantage estimator name (rlvr.algos.advantages)
    advantage_options: dict = field(default_factory=dict)  # extra estimator options, e.g. {gamma: 1.0, lam: 0.95}
    loss: str = "ppo"  # policy loss name (rlvr.algos.losses)
    agg: str | None = None  # loss aggregation mode (None = the loss's own default)
    clip_low: float = 0.2  # ratio clip below: 1 - clip_low
    clip_high: float = 0.2  # ratio clip above: 1 + clip_high (> clip_low = DAPO clip-higher)
    dual_clip: float | None = None  # dual-clip constant c > 1 for negative advantages (None = off)
    kl_coef: float = 0.0  # weight of the KL penalty to the reference model (0 = no reference)
    kl_kind: str = "k3"  # KL estimator: k1, k2 or k3
    kl_placement: str = "loss"  # "loss" (a loss term) or "reward" (a per-token reward penalty)
    entropy_coef: float = 0.0  # weight of the entropy bonus
    entropy_mask_rho: float | None = None  # keep the gradient only on the top-rho highest-entropy tokens (None = off)
    tis_cap: float | None = None  # truncated importance sampling cap between trainer and rollout log-probs (None = off)
    dynamic_sampling: bool = False  # DAPO: resample until the step has prompts_per_step groups with mixed rewards
    dynamic_sampling_max_batches: int = 4  # most generation rounds per step under dynamic sampling
    dynamic_sampling_metric: str = "score"  # what must differ within a kept group: "score" (the verifier's, DAPO's) or "reward" (shaped)
    overlong_filter: bool = False  # DAPO: truncated responses carry no loss
    overlong_buffer_frac: float = 0.0  # DAPO soft overlong punishment buffer, as a fraction of max_new_tokens (0 = off)
    overlong_penalty_factor: float = 1.0  # scale of the soft overlong punishment
    value_coef: float = 0.5  # weight of the value loss (estimators that need a critic, e.g. gae)
    value_clip: float | None = 0.2  # value clipping range (None = off)
    epsilon: float = 1e-6  # added to the group std when normalising advantages
    ppo_epochs: int = 1  # passes over each rollout batch (PPO's K epochs; TRL num_iterations; verl ppo_epochs)
    mini_batches: int = 1  # optimizer steps per pass: the batch is split into this many mini-batches
    shuffle_mini_batches: bool = True  # reshuffle rows before splitting each pass into mini-batches (seeded)
    norm_length: int | None = None  # seq-mean-token-sum-norm's constant length (None = rollout.max_new_tokens)
    kl_target: float | None = None  # adaptive KL controller's target KL (Ziegler et al., 2019); None = fixed kl_coef
    kl_horizon: int = 10000  # adaptive KL controller's horizon, in samples
    ref_update_every: int = 0  # reset the reference model to the current policy every N steps (0 = never)
    critic: str = "head"  # estimators that need values: "head" (a value head on the policy's trunk) or "model" (own copy)
    critic_lr: float | None = None  # learning rate of a separate critic model (None = train.lr)
    critic_warmup_steps: int = 0  # steps at the start where only the critic is trained (separate critic model)
    loss_options: dict = field(default_factory=dict)  # extra policy-loss options, e.g. {kl_cov_ratio: 0.002} (rlvr.algos.losses)
    # collection stages (docs/algorithms.md, "Collection stages"): each is off until its keys are set
    hint_stages: list = field(default_factory=list)  # GHPO: hint ratios tried in turn on all-wrong groups, e.g. [0.25, 0.5, 0.75]
    hint_field: str = "solution"  # Task.meta key holding the reference solution hints are cut from
    hint_template: str | None = None  # the hinted prompt, with {prompt} and {hint} (None = GHPO's wording)
    hint_mode: str = "replace"  # "replace" (GHPO: train on the hinted prompt) or "guide" (Guide: train without the hint)
    expert_rows: int = 0  # LUFFY / RL-PLUS: expert traces added to each group (0 = off)
    expert_field: str = "expert"  # Task.meta key of the expert trace (else the hint_field solution)
    dars_max_extra: int = 0  # DARS: most extra rollouts given to a hard prompt (0 = off)
    dars_schedule: str = "equal"  # DARS top-up: "equal" (equal treatment) or "hardness" (hardness-weighted)
    dars_use_std: bool = True  # DARS spread: the std-normalised (paper) schedule; false = without the std (released)
    prof_filter: bool = False  # PROF: drop rollouts whose step scores disagree with the outcome (needs reward.process)
    self_verify_per_step: int = 0  # RISE: answers of each step turned into verification tasks for the policy (0 = off)
    self_verify_template: str | None = None  # the verification prompt with {prompt} and {response} (None = RISE's wording)
    self_verify_mode: str = "rise"  # "rise" (rate the own answer 1 / -0.5 / -1) or "critique" (Critique-RL's judgement)
    implicit_prm: bool = False  # PRIME: train an implicit process reward model beside the policy
    prm_beta: float = 0.05  # PRIME's beta: token reward = beta * (log pi_prm - log pi_ref)
    prm_lr: float | None = None  # the implicit PRM's learning rate (None = train.lr)
    teacher: str | None = None  # on-policy distillation: the teacher's model folder (None = off)
    teacher_coef: float = 1.0  # weight of the per-token reverse-KL reward to the teacher
    is_correction: str | None = None  # train/inference mismatch correction: tis, seq_tis, seq_mask, token_mask, geo_mask (None = tis when tis_cap is set)
    is_options: dict = field(default_factory=dict)  # options of the mismatch correction, e.g. {low: 0.5, high: 2.0}
    verifier_model: str | None = None  # RL Tango / Cooper: the co-trained verifier's starting model folder (None = off)
    verifier_lr: float | None = None  # the co-trained verifier's learning rate (None = train.lr)
    verifier_objective: str = "rl"  # how the co-trained verifier learns: "rl" (its verdicts rewarded by the rule verifier) or "contrastive"
    verifier_options: dict = field(default_factory=dict)  # options of the co-trained verifier (prompt template, rows per step, ...)
    papo_coef: float = 0.0  # PAPO: weight of the implicit perception loss, KL(image || masked image) (0 = off)
    papo_mask_ratio: float = 0.6  # PAPO: share of image patches masked in the perception forward
    papo_entropy_coef: float = 0.0  # PAPO: weight of the double-entropy regulariser (0 = off)


@dataclass
class RewardConfig:
    terms: list = field(default_factory=list)  # composed reward terms (rlvr.verifiers.compose); empty = the task verifier alone
    policy: list = field(default_factory=list)  # rewards from the policy (rlvr.rewards): [{source, weight, options}]
    process: dict | None = None  # step rewards (rlvr.rewards.process): {source: arith_steps|prm, options: {...}} (None = off)
    noise: dict | None = None  # noisy-verifier correction {kind: backward|forward, false_positive, false_negative} (None = off)


@dataclass
class TrainConfig:
    steps: int = 100  # RL steps to run
    lr: float = 1e-5  # AdamW learning rate
    weight_decay: float = 0.0  # AdamW weight decay
    max_grad_norm: float = 1.0  # gradient clipping norm
    warmup_steps: int = 0  # linear learning-rate warmup steps
    micro_batch_size: int = 0  # sequences per backward pass (0 = whole step in one backward)
    seed: int = 0  # one seed for python, numpy, torch and the data sampler
    out: str = "runs/rlvr"  # run directory (config.yaml, metrics.jsonl, checkpoint-STEP/)
    save_every: int = 0  # checkpoint every N steps (0 = only the final checkpoint)
    keep_last: int = 0  # keep only the newest N checkpoints (0 = keep all)
    max_bad_steps: int = 3  # stop after this many steps in a row with a NaN/Inf loss or gradient (each is skipped)
    eval_every: int = 0  # evaluate on data.eval every N steps and at the end (0 = never); needs data.eval
    eval_samples: int = 1  # responses per eval task (1 = greedy pass@1; more = sampled at rollout.temperature)
    tensorboard: bool = False  # also write TensorBoard event files
    threads: int = 0  # torch CPU threads (0 = leave torch's default)
    progress: bool = True  # show a progress bar
    lr_schedule: str = "constant"  # after warm-up: constant, linear (to 0 at train.steps) or cosine (to lr_min_ratio)
    lr_min_ratio: float = 0.0  # cosine schedule's final learning rate as a fraction of train.lr
    overwrite: bool = False  # start afresh in a train.out that holds an earlier run (its files are removed)
    loggers: list = field(default_factory=list)  # also log to: tensorboard, wandb, mlflow (or a registered logger)
    gradient_checkpointing: bool = False  # recompute activations in the backward pass (less memory, ~30% more time)
    max_tokens_per_micro_batch: int = 0  # token budget of one backward pass, rows grouped by length (0 = off)
    log_samples: int = 4  # rows of RUN_DIR/samples.jsonl per step: prompt, response, reward, verdict (0 = none)
    approx_kl: bool = True  # after the updates, one no-grad forward of the trained rows measures approx_kl (false: the metric is left out)
    deterministic: bool = False  # one torch thread and kernels pinned to AVX2: the same numbers on any x86-64 CPU with AVX2 and FMA (docs/performance.md)


@dataclass
class ClusterConfig:
    backend: str = "local"  # local (this machine's processes) or ray (actors placed by a Ray cluster)
    learners: int = 1  # torch.distributed learner ranks; each takes a shard of the experience batch
    learner_strategy: str = "ddp"  # how learner ranks hold the model: ddp (a full copy each) or fsdp2 (sharded)
    rollout_workers: int = 1  # rollout engine replicas (ray backend)
    reward_workers: int = 0  # reward-scoring actors (ray backend; 0 = score in the driver's reward runner)
    address: str | None = None  # address of an existing Ray cluster to join (None = start a local one)
    async_rollouts: int = 0  # 1 = collect the next batch while the learners update (one step off-policy)
    partial_rollouts: bool = False  # ray: rollout workers stream finished groups; in-flight generations continue across weight updates
    max_staleness: int = 1  # most policy updates a trained token may lag the learner (with partial_rollouts)
    cpus_per_learner: float | None = None  # CPUs a Ray learner actor reserves (None = an equal share, docs/cluster.md)
    cpus_per_rollout_worker: float | None = None  # CPUs a Ray rollout worker reserves (None = an equal share)
    cpus_per_reward_worker: float | None = None  # CPUs a Ray reward worker reserves (None = an equal share)


@dataclass
class Config:
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    algo: AlgoConfig = field(default_factory=AlgoConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    plugins: list = field(default_factory=list)  # user modules imported before validation (rlvr.plugins)

    def to_dict(self) -> dict:
        """Plain nested dict {section: {key: value}}."""
        return dataclasses.asdict(self)


_SECTIONS: dict[str, type] = {k: v for k, v in typing.get_type_hints(Config).items() if k != "plugins"}
_HINTS: dict[str, dict[str, Any]] = {s: typing.get_type_hints(cls) for s, cls in _SECTIONS.items()}
_ALL_KEYS = [f"{s}.{k}" for s, hints in _HINTS.items() for k in hints]


def _engine_names() -> list[str]:
    from rlvr.rollout import engine_names

    return engine_names()


def _env_names() -> list[str]:
    from rlvr.envs import env_names

    return env_names()


def _one_of(*choices: str) -> tuple[Callable[[Any], bool], str]:
    return choices.__contains__, "one of " + ", ".join(choices)


def _one_of_values(*choices: Any) -> tuple[Callable[[Any], bool], str]:
    return choices.__contains__, "one of " + ", ".join(map(str, choices))


# Ranges and choices: dotted key -> (check, what was expected). A None value (where allowed) skips its check.
_RULES: dict[str, tuple[Callable[[Any], bool], str | Callable[[], str]]] = {
    "model.dtype": _one_of("float32", "bfloat16", "float16"),
    "model.device": (re.compile(r"(auto|cpu|mps|cuda(:[0-9]+)?)").fullmatch, "auto, cpu, cuda, cuda:N or mps"),
    "data.prompts_per_step": (lambda v: v >= 1, ">= 1"),
    "data.eval_size": (lambda v: v >= 0, ">= 0 (0 = all eval rows)"),
    "data.curriculum": (re.compile(r"none|(filter|band|replay)(\+(filter|band|replay))*").fullmatch,
                        "none, or filter, band and replay joined by '+' (e.g. filter+replay)"),
    "data.env": (lambda v: v in _env_names(), lambda: "null or a registered environment: " + ", ".join(_env_names())),
    "rollout.engine": (lambda v: v in _engine_names(), lambda: "a registered engine: " + ", ".join(_engine_names())),
    "rollout.group_size": (lambda v: v >= 1, ">= 1"),
    "rollout.max_new_tokens": (lambda v: v >= 1, ">= 1"),
    "rollout.temperature": (lambda v: v >= 0, ">= 0"),
    "rollout.top_p": (lambda v: 0 < v <= 1, "0 < top_p <= 1"),
    "rollout.top_k": (lambda v: v >= 0, ">= 0 (0 = off)"),
    "rollout.batch_size": (lambda v: v >= 0, ">= 0 (0 = all)"),
    "rollout.max_prompt_tokens": (lambda v: v >= 1, "null or >= 1"),
    "rollout.prompt_overflow": _one_of("error", "truncate_left"),
    "rollout.stop": (lambda v: all(isinstance(x, str) and x for x in v), "a list of non-empty strings"),
    "algo.clip_low": (lambda v: v >= 0, ">= 0"),
    "algo.clip_high": (lambda v: v >= 0, ">= 0"),
    "algo.dual_clip": (lambda v: v > 1, "null or > 1"),
    "algo.kl_coef": (lambda v: v >= 0, ">= 0"),
    "algo.kl_kind": _one_of("k1", "k2", "k3"),
    "algo.kl_placement": _one_of("loss", "reward"),
    "algo.agg": _one_of("token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"),
    "algo.entropy_mask_rho": (lambda v: 0 < v <= 1, "null or 0 < rho <= 1"),
    "algo.tis_cap": (lambda v: v >= 1, "null or >= 1"),
    "algo.dynamic_sampling_max_batches": (lambda v: v >= 1, ">= 1"),
    "algo.dynamic_sampling_metric": _one_of("score", "reward"),
    "algo.overlong_buffer_frac": (lambda v: 0 <= v < 1, "0 <= frac < 1 (0 = off)"),
    "algo.overlong_penalty_factor": (lambda v: v >= 0, ">= 0"),
    "algo.value_coef": (lambda v: v >= 0, ">= 0"),
    "algo.value_clip": (lambda v: v > 0, "null or > 0"),
    "algo.ppo_epochs": (lambda v: v >= 1, ">= 1"),
    "algo.mini_batches": (lambda v: v >= 1, ">= 1"),
    "algo.norm_length": (lambda v: v >= 1, "null or >= 1"),
    "algo.kl_target": (lambda v: v > 0, "null or > 0"),
    "algo.kl_horizon": (lambda v: v >= 1, ">= 1"),
    "algo.ref_update_every": (lambda v: v >= 0, ">= 0 (0 = never)"),
    "algo.critic": _one_of("head", "model"),
    "algo.critic_lr": (lambda v: v > 0, "null or > 0"),
    "algo.critic_warmup_steps": (lambda v: v >= 0, ">= 0"),
    "algo.hint_stages": (lambda v: all(isinstance(x, (int, float)) and 0 < x <= 1 for x in v),
                         "a list of hint ratios in (0, 1], e.g. [0.25, 0.5, 0.75]"),
    "algo.hint_mode": _one_of("replace", "guide"),
    "algo.expert_rows": (lambda v: v >= 0, ">= 0 (0 = off)"),
    "algo.dars_max_extra": (lambda v: v >= 0, ">= 0 (0 = off)"),
    "algo.dars_schedule": _one_of("equal", "hardness"),
    "algo.prm_beta": (lambda v: v > 0, "> 0"),
    "algo.self_verify_per_step": (lambda v: v >= 0, ">= 0 (0 = off)"),
    "algo.self_verify_mode": _one_of("rise", "critique"),
    "algo.prm_lr": (lambda v: v > 0, "null or > 0"),
    "algo.teacher_coef": (lambda v: v >= 0, ">= 0"),
    "algo.is_correction": _one_of("tis", "seq_tis", "seq_mask", "token_mask", "geo_mask"),
    "algo.verifier_lr": (lambda v: v > 0, "null or > 0"),
    "algo.verifier_objective": _one_of("rl", "contrastive"),
    "algo.papo_coef": (lambda v: v >= 0, ">= 0 (0 = off)"),
    "algo.papo_mask_ratio": (lambda v: 0 < v < 1, "0 < ratio < 1"),
    "algo.papo_entropy_coef": (lambda v: v >= 0, ">= 0 (0 = off)"),
    "train.lr_schedule": _one_of("constant", "linear", "cosine"),
    "train.lr_min_ratio": (lambda v: 0 <= v <= 1, "0 <= ratio <= 1"),
    "train.steps": (lambda v: v >= 1, ">= 1"),
    "train.lr": (lambda v: v > 0, "> 0"),
    "train.weight_decay": (lambda v: v >= 0, ">= 0"),
    "train.warmup_steps": (lambda v: v >= 0, ">= 0"),
    "train.micro_batch_size": (lambda v: v >= 0, ">= 0 (0 = whole step in one backward)"),
    "train.save_every": (lambda v: v >= 0, ">= 0 (0 = only the final checkpoint)"),
    "train.eval_every": (lambda v: v >= 0, ">= 0 (0 = no evaluation during training)"),
    "train.keep_last": (lambda v: v >= 0, ">= 0 (0 = keep every checkpoint)"),
    "train.max_bad_steps": (lambda v: v >= 1, ">= 1"),
    "train.eval_samples": (lambda v: v >= 1, ">= 1"),
    "train.threads": (lambda v: v >= 0, ">= 0 (0 = torch's default)"),
    "train.log_samples": (lambda v: v >= 0, ">= 0 (0 = no samples.jsonl)"),
    "train.max_tokens_per_micro_batch": (lambda v: v >= 0, ">= 0 (0 = off)"),
    "cluster.backend": _one_of("local", "ray"),
    "cluster.learners": (lambda v: v >= 1, ">= 1"),
    "cluster.learner_strategy": _one_of("ddp", "fsdp2"),
    "cluster.rollout_workers": (lambda v: v >= 1, ">= 1"),
    "cluster.reward_workers": (lambda v: v >= 0, ">= 0 (0 = score in the driver)"),
    "cluster.async_rollouts": _one_of_values(0, 1),
    "cluster.max_staleness": (lambda v: v >= 1, ">= 1"),
    "cluster.cpus_per_learner": (lambda v: v > 0, "null or > 0"),
    "cluster.cpus_per_rollout_worker": (lambda v: v > 0, "null or > 0"),
    "cluster.cpus_per_reward_worker": (lambda v: v > 0, "null or > 0"),
}


def _yaml(text: str, where: str, in_file: bool) -> Any:
    if len(text) > MAX_YAML_CHARS:
        raise ConfigError(f"{where}: {len(text)} characters, over the {MAX_YAML_CHARS} a config may hold")
    try:
        return yaml.load(text, Loader=BoundedLoader)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        problem = getattr(e, "problem", None) or str(e)
        if in_file and mark is not None:
            where = f"{where}: line {mark.line + 1}, column {mark.column + 1}"
        raise ConfigError(f"{where}: invalid YAML: {problem}") from None


def read_yaml(text: str, where: str = "<yaml>") -> Any:
    """Parse YAML from an untrusted place the way configs are parsed: safe types only, bounded size and aliases;
    any problem is a ConfigError naming ``where``."""
    return _yaml(text, where, in_file=True)


# Names other frameworks give the same settings (TRL GRPOConfig, verl's ppo_trainer.yaml, OpenRLHF's flags) -> the
# rlvr key that means the same thing, so an unknown key a user brings is answered with the right one.
ALIASES: dict[str, str] = {
    "num_generations": "rollout.group_size", "n_samples_per_prompt": "rollout.group_size", "n": "rollout.group_size",
    "max_completion_length": "rollout.max_new_tokens", "generate_max_len": "rollout.max_new_tokens",
    "response_length": "rollout.max_new_tokens", "max_prompt_length": "rollout.max_prompt_tokens",
    "prompt_max_len": "rollout.max_prompt_tokens", "prompt_length": "rollout.max_prompt_tokens",
    "learning_rate": "train.lr", "actor_learning_rate": "train.lr", "beta": "algo.kl_coef",
    "kl_loss_coef": "algo.kl_coef", "init_kl_coef": "algo.kl_coef", "entropy_coeff": "algo.entropy_coef",
    "epsilon_high": "algo.clip_high", "clip_ratio_high": "algo.clip_high", "clip_ratio_low": "algo.clip_low",
    "clip_ratio": "algo.clip_low", "eps_clip": "algo.clip_low", "num_iterations": "algo.ppo_epochs",
    "max_epochs": "algo.ppo_epochs", "steps_per_generation": "algo.mini_batches",
    "total_training_steps": "train.steps", "max_steps": "train.steps", "num_episodes": "train.steps",
    "train_files": "data.train", "prompt_data": "data.train", "train_dataset": "data.train",
    "val_files": "data.eval", "eval_dataset": "data.eval", "model_name_or_path": "model.path",
    "pretrain": "model.path", "output_dir": "train.out", "save_path": "train.out", "save_steps": "train.save_every",
    "save_freq": "train.save_every", "max_grad_norm": "train.max_grad_norm", "grad_clip": "train.max_grad_norm",
    "micro_train_batch_size": "train.micro_batch_size", "ppo_micro_batch_size_per_gpu": "train.micro_batch_size",
    "per_device_train_batch_size": "train.micro_batch_size", "warmup_steps": "train.warmup_steps",
    "lr_scheduler_type": "train.lr_schedule", "gradient_checkpointing": "train.gradient_checkpointing",
    "reward_funcs": "data.verifier", "use_vllm": "rollout.engine", "bf16": "model.dtype",
    "kl_estimator": "algo.kl_kind", "kl_loss_type": "algo.kl_kind", "loss_agg_mode": "algo.agg",
    "adv_estimator": "algo.advantage", "advantage_estimator": "algo.advantage",
}


def _suggest(name: str, candidates: Sequence[str]) -> str:
    leaf = name.split(".")[-1]
    alias = ALIASES.get(leaf)
    if alias is not None and alias != name:
        return f" (did you mean '{alias}'? the rlvr key for what other trainers call {leaf})"
    same_leaf = [c for c in candidates if c.split(".")[-1] == leaf and c != name]
    close = same_leaf or difflib.get_close_matches(name, candidates, n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""


def _describe(value: Any) -> str:
    kind = "null" if value is None else type(value).__name__
    text = repr(value)
    return kind if value is None else f"{kind} {text if len(text) <= 60 else text[:57] + '...'}"


def _type_name(tp: Any) -> str:
    args = typing.get_args(tp) if isinstance(tp, types.UnionType) else (tp,)
    return " or ".join("null" if a is type(None) else getattr(a, "__name__", str(a)) for a in args)


def _check_type(value: Any, tp: Any, key: str, where: str) -> Any:
    """Return value converted to annotation tp (int -> float only), or raise ConfigError."""
    args = typing.get_args(tp) if isinstance(tp, types.UnionType) else (tp,)
    for t in args:
        if value is None and t is type(None):
            return None
        if isinstance(value, bool) and t is not bool:
            continue  # bool is an int subclass in Python; never accept it as a number
        if t is float and isinstance(value, int):
            return float(value)
        if t is not type(None) and isinstance(value, typing.get_origin(t) or t):
            return copy.deepcopy(value)
    raise ConfigError(f"{where}: {key}: expected {_type_name(tp)}, got {_describe(value)}")


def _assign(values: dict, sources: dict, parts: list[str], value: Any, where: str) -> None:
    """Set values[section][key] (or a whole section, or a key inside a dict field) from one source."""
    section = parts[0]
    if section not in _SECTIONS:
        if len(parts) > 1:  # an override such as trian.steps=5: suggest the whole dotted key
            name = ".".join(parts)
            raise ConfigError(f"{where}: unknown key '{name}'{_suggest(name, _ALL_KEYS)}")
        raise ConfigError(f"{where}: unknown section '{section}'{_suggest(section, list(_SECTIONS))}")
    if len(parts) == 1:
        if value is None:
            return  # an empty section ("train:") keeps the defaults
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: section '{section}' must be a mapping of keys, got {_describe(value)}")
        for key, sub in value.items():
            _assign(values, sources, [section, str(key)], sub, where)
        return
    key = ".".join(parts[:2])
    tp = _HINTS[section].get(parts[1])
    if tp is None or (len(parts) > 2 and dict not in (typing.get_args(tp) or (tp,))):
        name = ".".join(parts)
        raise ConfigError(f"{where}: unknown key '{name}'{_suggest(name, _ALL_KEYS)}")
    if len(parts) == 2:
        values[section][parts[1]] = _check_type(value, tp, key, where)
    else:  # data.verifier_options.tol=0.1 sets one entry of a dict field
        if values[section].get(parts[1]) is None:  # model.lora.r=8 on a null model.lora starts the mapping
            values[section][parts[1]] = {}
        node = values[section][parts[1]]
        for i, p in enumerate(parts[2:-1], start=2):
            if not isinstance(node.setdefault(p, {}), dict):
                raise ConfigError(f"{where}: {'.'.join(parts[: i + 1])} is {_describe(node[p])}, not a mapping")
            node = node[p]
        node[parts[-1]] = copy.deepcopy(value)
    sources[key] = where


def _key_lines(text: str) -> dict[str, int]:
    """Line number of each "section" and "section.key" in a YAML config text (best effort; {} if unparsable)."""
    try:
        root = yaml.compose(text, Loader=BoundedLoader)
    except yaml.YAMLError:
        return {}
    lines: dict[str, int] = {}
    if isinstance(root, yaml.MappingNode):
        for key, body in root.value:
            lines[str(key.value)] = key.start_mark.line + 1
            if isinstance(body, yaml.MappingNode):
                for sub, _ in body.value:
                    lines[f"{key.value}.{sub.value}"] = sub.start_mark.line + 1
    return lines


def _assign_tree(values: dict, sources: dict, tree: Any, where: str, lines: dict[str, int] | None = None) -> None:
    if tree is None:
        return  # an empty file means all defaults
    if not isinstance(tree, dict):
        raise ConfigError(f"{where}: expected a mapping of sections ({', '.join(_SECTIONS)}), got {_describe(tree)}")
    lines = lines or {}

    def at(name: str) -> str:
        return f"{where}: line {lines[name]}" if name in lines else where

    for section, body in tree.items():
        if section == "plugins":
            _plugins(values, body, at("plugins"), base_dir=os.path.dirname(os.path.abspath(where)) if lines else None)
            continue
        if isinstance(body, dict) and str(section) in _SECTIONS:
            for key, sub in body.items():
                _assign(values, sources, [str(section), str(key)], sub, at(f"{section}.{key}"))
            continue
        _assign(values, sources, [str(section)], body, at(str(section)))


def _plugins(values: dict, specs: Any, where: str, base_dir: str | None = None) -> None:
    """Import the plugins now, before anything is validated against the registries."""
    from rlvr.plugins import PluginError, load_plugins

    try:
        modules = load_plugins(specs, base_dir)
    except PluginError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    specs = [specs] if isinstance(specs, str) else list(specs)
    # a file plugin is recorded by its absolute path, so a saved config.yaml loads it from anywhere
    recorded = [m.__file__ if s.endswith(".py") and getattr(m, "__file__", None) else s for s, m in zip(specs, modules)]
    values.setdefault("__plugins__", []).extend(recorded)


def _apply_recipe(values: dict, sources: dict) -> None:
    """Fill the keys the user did not set from the named recipe (explicit keys win); a recipe names algo keys bare
    and other sections' keys dotted (``reward.process``)."""
    name = values["algo"].get("recipe")
    if name is None:
        return
    from rlvr.algos import recipes

    if name not in recipes.RECIPES:
        where = sources.get("algo.recipe", "<config>")
        known = recipes.names()
        raise ConfigError(f"{where}: algo.recipe: unknown recipe '{name}'{_suggest(name, known)}; known: {', '.join(known)}")
    for key, value in recipes.get(name).settings.items():
        section, _, leaf = key.rpartition(".")
        section = section or "algo"  # a recipe writes algo keys bare and other sections' keys dotted
        if leaf not in values[section]:
            values[section][leaf] = copy.deepcopy(value)
            sources[f"{section}.{leaf}"] = f"recipe '{name}'"


def _build(values: dict, sources: dict) -> Config:
    _apply_recipe(values, sources)
    cfg = Config(**{s: cls(**values[s]) for s, cls in _SECTIONS.items()}, plugins=list(values.get("__plugins__", [])))
    for key, (check, expected) in _RULES.items():
        section, name = key.split(".")
        value = getattr(getattr(cfg, section), name)
        if value is not None and not check(value):
            where = sources.get(key, "<defaults>")
            expected = expected() if callable(expected) else expected
            raise ConfigError(f"{where}: {key}: expected {expected}, got {value!r}")
    validate_algo_names(cfg, sources)
    if cfg.train.eval_every and not cfg.data.eval:
        where = sources.get("train.eval_every", "<config>")
        raise ConfigError(f"{where}: train.eval_every: needs data.eval (the held-out tasks to evaluate on)")
    if cfg.algo.overlong_buffer_frac and any(isinstance(t, dict) and t.get("kind") == "overlong" for t in cfg.reward.terms):
        where = sources.get("algo.overlong_buffer_frac", "<config>")
        raise ConfigError(f"{where}: algo.overlong_buffer_frac: the reward terms already have an overlong term; "
                          "use one of the two, not both (they would penalise length twice)")
    if cfg.model.lora is not None:
        _check_lora(cfg, sources)
    if cfg.reward.noise is not None:
        _check_noise(cfg, sources.get("reward.noise", "<config>"))
    if cfg.rollout.temperature_schedule is not None:
        from rlvr.rollout.temperature import temperature_schedule_problem

        problem = temperature_schedule_problem(cfg.rollout.temperature_schedule, engine=cfg.rollout.engine,
                                               tis_cap=cfg.algo.tis_cap)
        if problem:
            raise ConfigError(f"{sources.get('rollout.temperature_schedule', '<config>')}: {problem}")
    if cfg.reward.process is not None:
        _check_process_rewards(cfg.reward.process, sources.get("reward.process", "<config>"))
    if cfg.reward.policy:
        _check_policy_rewards(cfg.reward.policy, sources.get("reward.policy", "<config>"))
    if cfg.reward.terms:
        from rlvr.verifiers.compose import RewardSpecError, parse_spec

        try:
            parse_spec(cfg.reward.terms)
        except RewardSpecError as exc:
            raise ConfigError(f"{sources.get('reward.terms', '<config>')}: {exc}") from None
    return cfg


def _check_noise(cfg: Config, where: str) -> None:
    """reward.noise is {kind: backward|forward, false_positive, false_negative}, refused where the estimator cancels
    or erases the correction (rlvr.algos.noise.noise_correction_problem)."""
    from rlvr.algos.noise import noise_correction_problem

    spec = cfg.reward.noise
    if not isinstance(spec, dict) or spec.get("kind") not in ("backward", "forward") or \
            set(spec) - {"kind", "false_positive", "false_negative"}:
        raise ConfigError(f"{where}: reward.noise: expected {{kind: backward|forward, false_positive: RHO0, "
                          f"false_negative: RHO1}}, got {spec!r}")
    try:
        problem = noise_correction_problem(spec["kind"], cfg.algo.advantage,
                                           false_positive=float(spec.get("false_positive", 0.0)),
                                           false_negative=float(spec.get("false_negative", 0.0)),
                                           options=cfg.algo.advantage_options)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{where}: reward.noise: {exc}") from None
    if problem:
        raise ConfigError(f"{where}: {problem}")


def _check_process_rewards(spec: Any, where: str) -> None:
    """reward.process is {source: <registered process-reward source>, options: {...}}."""
    from rlvr.rewards.process import process_source_names

    known = process_source_names()
    if not isinstance(spec, dict) or set(spec) - {"source", "options"} or "source" not in spec:
        raise ConfigError(f"{where}: reward.process: expected {{source: NAME, options: {{...}}}} with source one of "
                          f"{', '.join(known)}, got {spec!r}")
    if spec["source"] not in known:
        raise ConfigError(f"{where}: reward.process.source: unknown process-reward source {spec['source']!r}"
                          f"{_suggest(str(spec['source']), known)}; known: {', '.join(known)}")
    if not isinstance(spec.get("options") or {}, dict):
        raise ConfigError(f"{where}: reward.process.options: expected a mapping, got {spec['options']!r}")
    from rlvr.rewards.process import check_process_options

    try:
        check_process_options(spec["source"], dict(spec.get("options") or {}))
    except UserError as exc:
        raise ConfigError(f"{where}: reward.process.options: {exc}") from None


def _check_lora(cfg: Config, sources: Mapping[str, str]) -> None:
    from rlvr.models.lora import lora_problem

    where = sources.get("model.lora", "<config>")
    problem = lora_problem(cfg.model.lora)
    if problem:
        raise ConfigError(f"{where}: model.lora: {problem}")
    if cfg.algo.ref_update_every:
        raise ConfigError(f"{sources.get('algo.ref_update_every', '<config>')}: algo.ref_update_every: not available "
                          "with model.lora (the reference is the base model, the policy with its adapter disabled)")


def _check_policy_rewards(terms: list, where: str) -> None:
    from rlvr.rewards import reward_source_names

    for i, term in enumerate(terms):
        if not isinstance(term, dict) or "source" not in term:
            raise ConfigError(f"{where}: reward.policy[{i}]: expected {{source: NAME, weight: W, options: {{...}}}}")
        unknown = set(term) - {"source", "weight", "options", "name"}
        if unknown:
            raise ConfigError(f"{where}: reward.policy[{i}]: unknown key(s) {', '.join(sorted(unknown))}")
        if term["source"] not in reward_source_names():
            raise ConfigError(f"{where}: reward.policy[{i}]: unknown reward source {term['source']!r}; known: "
                              f"{', '.join(reward_source_names())}")


def validate_algo_names(cfg: Config, sources: Mapping[str, str] | None = None) -> None:
    """Check algo.advantage and algo.loss against the registries in rlvr.algos (imported lazily)."""
    from rlvr.algos import advantages, losses

    for key, registry, what in [("algo.advantage", advantages, "advantage estimator"), ("algo.loss", losses, "loss")]:
        name = getattr(cfg.algo, key.split(".")[1])
        known = sorted(registry.names())
        if name not in known:
            where = (sources or {}).get(key, "<config>")
            raise ConfigError(
                f"{where}: {key}: unknown {what} '{name}'{_suggest(name, known)}; known: {', '.join(known)}"
            )


def config_from_dict(d: dict, source: str = "<dict>") -> Config:
    """Validate a nested {section: {key: value}} dict (missing keys take defaults) into a Config."""
    values: dict = {s: {} for s in _SECTIONS}
    sources: dict[str, str] = {}
    _assign_tree(values, sources, d, source)
    return _build(values, sources)


def load_config(path: str | os.PathLike | None, overrides: Sequence[str] = ()) -> Config:
    """Read a YAML file (None = defaults only), apply ``dotted.key=value`` overrides, validate."""
    values: dict = {s: {} for s in _SECTIONS}
    sources: dict[str, str] = {}
    if path is not None:
        where = os.fspath(path)
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except OSError as e:
            raise ConfigError(f"{where}: cannot read config file: {e.strerror or e}") from None
        _assign_tree(values, sources, _yaml(text, where, in_file=True), where, _key_lines(text))
    if isinstance(overrides, str):
        overrides = [overrides]  # a lone string is one override, not a sequence of characters
    for text in overrides:
        where = f"override '{text}'"
        key, eq, raw = text.partition("=")
        key = key.strip()
        if not eq or "" in key.split("."):
            raise ConfigError(f"{where}: expected the form section.key=value, e.g. train.steps=10")
        if key == "plugins":
            _plugins(values, _yaml(raw, where, in_file=False), where, base_dir=os.getcwd())
            continue
        _assign(values, sources, key.split("."), _yaml(raw, where, in_file=False), where)
    return _build(values, sources)


def save_config(cfg: Config, path: str | os.PathLike) -> None:
    """Write cfg as YAML that load_config reads back to an equal Config."""
    os.makedirs(os.path.dirname(os.fspath(path)) or ".", exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        yaml.safe_dump(cfg.to_dict(), f, sort_keys=False, default_flow_style=False)
