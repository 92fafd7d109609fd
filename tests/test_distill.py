"""On-policy distillation: the teacher's per-token reward, the opd estimator (discount 0), the teacher's checks, and
`rlvr train examples/arithmetic.yaml algo.recipe=opd algo.teacher=...` for 3 steps."""

import warnings

import pytest
import torch

from rlvr.algos import advantages, recipes
from rlvr.algos.distill import opd_advantages
from rlvr.cli import main
from rlvr.config import ConfigError, load_config
from rlvr.models import save_tiny_model
from rlvr.models.loading import load_tokenizer
from rlvr.train import train
from rlvr.train.metrics import read_metrics
from rlvr.train.parts_distill import reverse_kl_rewards, vocabulary_problem

from conftest import SMALL

F64 = torch.float64


def cli_args(model, out, *extra):
    return ["train", "examples/arithmetic.yaml", "algo.recipe=opd", f"model.path={model}", f"train.out={out}",
            "train.steps=3", "data.prompts_per_step=4", "rollout.group_size=4", "rollout.max_new_tokens=5",
            "train.progress=false", *extra]


# ------------------------------------------------------------------------------------------ hand-computed numbers


def test_reverse_kl_reward_by_hand():
    student = torch.tensor([[-1.0, -2.0, -0.5], [-0.25, -3.0, -1.0]], dtype=F64)
    teacher = torch.tensor([[-1.5, -1.0, -9.0], [-0.25, -0.5, -2.0]], dtype=F64)
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    # -0.5 * (s - t): row 0: -0.5 * 0.5, -0.5 * -1.0, masked; row 1: 0, -0.5 * -2.5, -0.5 * 1.0
    expected = torch.tensor([[-0.25, 0.5, 0.0], [0.0, 1.25, -0.5]], dtype=F64)
    got = reverse_kl_rewards(student, teacher, mask, coef=0.5)
    assert got.dtype == F64
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-12)


def test_a_teacher_equal_to_the_student_gives_exactly_zero():
    logp = torch.tensor([[-0.1, -2.3, -7.7]], dtype=F64)
    assert torch.equal(reverse_kl_rewards(logp, logp.clone(), torch.ones(1, 3)), torch.zeros(1, 3, dtype=F64))


def test_opd_advantage_is_the_token_reward_at_discount_zero():
    token_rewards = torch.tensor([[-0.25, 0.5, 0.0, 0.0], [0.125, -1.0, 2.0, 0.0]], dtype=F64)
    mask = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 0]])
    rewards = torch.tensor([1.0, 0.0], dtype=F64)
    index = torch.tensor([0, 0])
    adv = advantages.compute("opd", rewards, index, mask, token_rewards=token_rewards)
    # no return-to-go: each token keeps its own reward; padding is 0
    torch.testing.assert_close(adv, token_rewards * mask, rtol=0, atol=0)
    assert advantages.needs("opd") == ("token_rewards",)


def test_opd_advantage_with_the_outcome_term_by_hand():
    token_rewards = torch.tensor([[-0.25, 0.5, 0.0], [0.125, -1.0, 2.0], [1.0, 0.0, 0.0]], dtype=F64)
    mask = torch.tensor([[1, 1, 0], [1, 1, 1], [1, 0, 0]])
    rewards = torch.tensor([1.0, 0.0, 0.5], dtype=F64)
    index = torch.tensor([0, 0, 1])
    # group 0 mean 0.5: outcome terms +0.5 and -0.5, times 0.4 = +0.2 / -0.2; group 1 (one row): 0
    expected = torch.tensor([[-0.05, 0.7, 0.0], [-0.075, -1.2, 1.8], [1.0, 0.0, 0.0]], dtype=F64)
    got = advantages.compute("opd", rewards, index, mask, token_rewards=token_rewards, outcome_coef=0.4)
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-12)
    torch.testing.assert_close(opd_advantages(token_rewards, mask, rewards, index, 0.4), expected, rtol=0, atol=1e-12)


def test_opd_outcome_coef_must_be_a_number():
    with pytest.raises(ValueError, match="outcome_coef"):
        advantages.compute("opd", torch.zeros(2), torch.tensor([0, 0]), torch.ones(2, 2),
                           token_rewards=torch.zeros(2, 2), outcome_coef="1")


def test_vocabulary_problem_names_what_differs():
    student = {"a": 0, "b": 1, "c": 2}
    assert vocabulary_problem(student, dict(student)) is None
    problem = vocabulary_problem(student, {"a": 0, "b": 2, "d": 1})
    assert "3 student tokens vs 3 teacher tokens" in problem
    assert "1 only the student's (e.g. 'c')" in problem and "1 only the teacher's (e.g. 'd')" in problem
    assert "1 with other ids (e.g. 'b')" in problem


# ------------------------------------------------------------------------------------------ the recipe, end to end


def test_opd_recipe_states_pure_distillation():
    settings = recipes.get("opd").settings
    assert settings["advantage"] == "opd" and settings["advantage_options"] == {"outcome_coef": 0.0}
    assert settings["teacher_coef"] == 1.0 and settings["ppo_epochs"] * settings["mini_batches"] == 1


@pytest.fixture(scope="module")
def teacher_dir(tmp_path_factory):
    """Another tiny model with the student's tokenizer (a different seed: it disagrees with the student)."""
    return save_tiny_model(tmp_path_factory.mktemp("teacher") / "model", SMALL, seed=7)


def test_opd_trains_three_steps_from_the_cli(tiny_model_dir, teacher_dir, tmp_path):
    assert main(cli_args(tiny_model_dir, tmp_path, f"algo.teacher={teacher_dir}")) == 0
    rows = read_metrics(tmp_path)
    assert [r["step"] for r in rows] == [1, 2, 3]
    for r in rows:
        assert r["opd/reverse_kl"] != 0.0 and torch.isfinite(torch.tensor(r["opd/reverse_kl"]))
        assert r["opd/teacher_logp_mean"] < 0.0
        assert r["nonzero_adv_frac"] > 0.0  # the token rewards reach the advantages


def test_a_teacher_equal_to_the_student_leaves_it_unchanged(tiny_model_dir, tmp_path):
    """The student's own folder as the teacher: every token reward is exactly 0, so every advantage is 0."""
    assert main(cli_args(tiny_model_dir, tmp_path, f"algo.teacher={tiny_model_dir}")) == 0
    rows = read_metrics(tmp_path)
    assert [r["opd/reverse_kl"] for r in rows] == [0.0, 0.0, 0.0]
    assert [r["nonzero_adv_frac"] for r in rows] == [0.0, 0.0, 0.0]


def test_distillation_moves_the_student_towards_the_teacher(tiny_model_dir, warm_model_dir, tmp_path):
    """A random student distilled from a model fine-tuned on one-digit addition (same tokenizer)."""
    cfg = load_config("examples/arithmetic.yaml", [
        "algo.recipe=opd", f"algo.teacher={warm_model_dir}", f"model.path={tiny_model_dir}", f"train.out={tmp_path}",
        "data.train=arithmetic:train:digits=1",
        "train.steps=20", "data.prompts_per_step=16", "rollout.group_size=4", "rollout.max_new_tokens=5",
        "train.progress=false", "train.lr=1e-2", "train.save_every=0",
    ])
    kl = [r["opd/reverse_kl"] for r in read_metrics(train(cfg))]
    first, last = sum(kl[:3]) / 3, sum(kl[-3:]) / 3
    assert first > 3.0  # a random student is far from the fine-tuned teacher
    assert last < 0.7 * first, f"reverse KL to the teacher did not fall: first 3 steps {first:.3f}, last 3 {last:.3f}"


def test_a_teacher_with_another_vocabulary_is_an_error_naming_algo_teacher(tiny_model_dir, tmp_path):
    other = save_tiny_model(tmp_path / "other", SMALL, seed=1)
    tokenizer = load_tokenizer(other)
    tokenizer.add_tokens(["<extra>"])
    tokenizer.save_pretrained(other)
    cfg = load_config("examples/arithmetic.yaml", [
        "algo.recipe=opd", f"algo.teacher={other}", f"model.path={tiny_model_dir}", f"train.out={tmp_path / 'run'}",
        "train.steps=1", "train.progress=false"])
    with pytest.raises(ConfigError, match=r"algo.teacher: .*another vocabulary.*1 only the teacher's"):
        train(cfg)


def test_a_missing_teacher_folder_is_an_error_naming_algo_teacher(tiny_model_dir, tmp_path):
    cfg = load_config("examples/arithmetic.yaml", [
        "algo.recipe=opd", f"algo.teacher={tmp_path / 'nowhere'}", f"model.path={tiny_model_dir}",
        f"train.out={tmp_path / 'run'}", "train.steps=1", "train.progress=false"])
    with pytest.raises(ConfigError, match="algo.teacher: .*nowhere is not a Hugging Face model folder"):
        train(cfg)


def test_opd_without_a_teacher_warns_that_nothing_is_learned(tiny_model_dir, tmp_path):
    cfg = load_config("examples/arithmetic.yaml", [
        "algo.recipe=opd", f"model.path={tiny_model_dir}", f"train.out={tmp_path}", "train.steps=1",
        "data.prompts_per_step=2", "rollout.group_size=2", "rollout.max_new_tokens=3", "train.progress=false"])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        train(cfg)
    assert any("without algo.teacher" in str(w.message) for w in caught)
