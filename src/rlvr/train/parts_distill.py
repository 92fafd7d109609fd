"""On-policy distillation's teacher (``algo.teacher``): a frozen model that scores the student's own samples.

Lu et al., 2025 (Thinking Machines, "On-Policy Distillation"): the student samples, the teacher computes the
log-probability of every sampled token in one no-grad forward pass, and the per-token reward is the negative reverse
KL on that token, -(log pi_student(y_t) - log pi_teacher(y_t)), a single-sample estimate of -KL(pi_student ||
pi_teacher) at each state the student visits (the released tinker-cookbook ``incorporate_kl_penalty`` computes it
from the sampler's log-probs; here the trainer's own old log-probs, so the engine's numerics do not enter the
reward). ``algo.teacher_coef`` weights it. The reward goes into the batch's per-token rewards, which an estimator
that reads them turns into advantages (``algo.advantage=opd``: discount 0, rlvr.algos.distill); the verifier's
reward stays the outcome reward.

The teacher must share the student's tokenizer (the same token ids mean the same strings): a different vocabulary
is an error naming ``algo.teacher`` when the run starts. Its log-probs always come from this Hugging Face forward
pass on the learner, whatever ``rollout.engine`` samples the student (a vLLM engine serving the teacher is not used).
"""

from __future__ import annotations

import warnings
from pathlib import Path

import torch

from rlvr.config import Config, ConfigError
from rlvr.train.group import SINGLE, LearnerGroup
from rlvr.train import learner  # learner imports parts, which imports this module: read learner.* at call time
from rlvr.train.parts import PartContext, StepPart, register_part


def reverse_kl_rewards(student_logp: torch.Tensor, teacher_logp: torch.Tensor, mask: torch.Tensor,
                       coef: float = 1.0) -> torch.Tensor:
    """-coef (log pi_student - log pi_teacher) on the sampled tokens where ``mask`` is set, 0 elsewhere; [N, T]."""
    m = mask.to(student_logp.dtype)
    return -coef * (student_logp - teacher_logp.to(student_logp.dtype)) * m


def vocabulary_problem(student_vocab: dict[str, int], teacher_vocab: dict[str, int]) -> str | None:
    """Why a teacher's tokenizer cannot score the student's token ids, or None when both map every token alike."""
    if student_vocab == teacher_vocab:
        return None
    only_student = sorted(set(student_vocab) - set(teacher_vocab))
    only_teacher = sorted(set(teacher_vocab) - set(student_vocab))
    moved = sorted(t for t in set(student_vocab) & set(teacher_vocab) if student_vocab[t] != teacher_vocab[t])
    parts = [f"{len(student_vocab)} student tokens vs {len(teacher_vocab)} teacher tokens"]
    for what, tokens in (("only the student's", only_student), ("only the teacher's", only_teacher),
                         ("with other ids", moved)):
        if tokens:
            parts.append(f"{len(tokens)} {what} (e.g. {', '.join(map(repr, tokens[:3]))})")
    return "; ".join(parts)


@register_part("teacher_distill")
def _teacher_distill(cfg: Config, ctx: PartContext):
    if cfg.algo.teacher is None:
        if cfg.algo.advantage == "opd" and not cfg.algo.advantage_options.get("outcome_coef"):
            warnings.warn("algo.advantage=opd without algo.teacher: no part gives token rewards and outcome_coef is "
                          "0, so every advantage is 0 and the policy does not change; set algo.teacher=<model folder>",
                          RuntimeWarning, stacklevel=2)
        return None
    return TeacherDistill(load_teacher(cfg), cfg, ctx.group)


def load_teacher(cfg: Config) -> torch.nn.Module:
    """The teacher at ``algo.teacher``, frozen and in eval mode, on the policy's device and dtype; an error naming
    algo.teacher when the folder is missing or its tokenizer differs from the student's (model.path)."""
    from rlvr.models import load_model
    from rlvr.models.loading import load_tokenizer

    folder = Path(cfg.algo.teacher)
    if not (folder / "config.json").is_file() and not (folder / "adapter_config.json").is_file():
        raise ConfigError(f"algo.teacher: {folder} is not a Hugging Face model folder (expected a directory with "
                          "config.json, the teacher the student is distilled from)")
    problem = vocabulary_problem(load_tokenizer(cfg.model.path).get_vocab(), load_tokenizer(folder).get_vocab())
    if problem:
        raise ConfigError(f"algo.teacher: {folder} has another vocabulary than the student (model.path="
                          f"{cfg.model.path}): {problem}; on-policy distillation scores the student's token ids with "
                          "the teacher, so both need the same tokenizer")
    teacher, _ = load_model(folder, dtype=cfg.model.dtype, device=cfg.model.device)
    return teacher.eval().requires_grad_(False)


class TeacherDistill(StepPart):
    """Per-token reward -teacher_coef (old_logp - teacher_logp) on the student's sampled tokens (module docstring);
    logs ``opd/reverse_kl`` (the mean of old_logp - teacher_logp per token) and ``opd/teacher_logp_mean``."""

    needs = frozenset({"old_logp"})

    def __init__(self, teacher: torch.nn.Module, cfg: Config, group: LearnerGroup = SINGLE):
        self.teacher, self.cfg, self.group, self.coef = teacher, cfg, group, cfg.algo.teacher_coef

    def teacher_logp(self, batch) -> torch.Tensor:
        rows = torch.arange(batch.size, device=batch.response_ids.device)
        return learner.forward_rows(self.teacher, batch, rows, self.cfg, self.group).logp

    def shape(self, exp) -> dict[str, float]:
        batch = exp.batch
        mask = batch.loss_mask  # the tokens the student sampled (tool and environment tokens are not its actions)
        teacher_logp = self.teacher_logp(batch)
        exp.token_rewards = exp.token_rewards + reverse_kl_rewards(exp.old_logp, teacher_logp, mask, self.coef)
        valid = mask.bool()
        n = int(valid.sum())
        if n == 0:
            return {"opd/reverse_kl": 0.0, "opd/teacher_logp_mean": 0.0}
        return {"opd/reverse_kl": float((exp.old_logp - teacher_logp)[valid].mean()),
                "opd/teacher_logp_mean": float(teacher_logp[valid].mean())}
