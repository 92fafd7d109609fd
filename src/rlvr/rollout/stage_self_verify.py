"""Self-verification tasks (RISE, Critique-RL): a share of the step's own answers come back to the policy as
"rate this answer" tasks, scored against what the outcome verifier said about the answer.

RISE (Liu et al., 2025, "Trust, But Verify", arXiv:2505.13445; released trainer xyliu-cs/verl
``verl/trainer/ppo/ray_trainer.py`` with ``trainer.online_critique``, ``verl/utils/critique_utils.py``):

1. the step's answers are scored as usual; each answer's verdict maps to a rating: 1 (correct), -0.5 (answered,
   wrong), -1 (no answer) -- ``rating_of_verdict``;
2. ``algo.self_verify_per_step`` = K answers are picked spread over the groups (``DataProto.downsampling``: each of
   the G groups keeps floor(K/G), the first K mod G groups one more, chosen uniformly within the group) --
   ``downsample_counts``; the pick is drawn from a generator seeded by the run seed and the step, so a resumed run
   picks the same rows;
3. each picked answer becomes a task: the template (``algo.self_verify_template``, with ``{prompt}`` and
   ``{response}``) filled with the question and the answer, reference = the rating as text (``"1.0"``, ``"-0.5"``,
   ``"-1.0"``), verifier ``self_verify`` (rlvr.verifiers.self_verify);
4. the policy samples ``rollout.group_size`` verifications of each, scored through the one generate-and-score path;
   they are rows of kind ``verification`` in groups of their own, concatenated to the step's batch for one update.

``algo.self_verify_mode=critique`` is Critique-RL's stage I (Xi et al., 2025, arXiv:2510.24320): the reference is the
binary judgement ``"correct"`` / ``"wrong"`` and the reward 1 for the right judgement, -1 otherwise.

Only on-policy answers whose verdict decided the question are verified: rows other stages added (expert traces,
hinted re-attempts) and answers whose verifier timed out, failed or could not decide are never picked, so a
reference is always the outcome verifier's own verdict. A group with fewer such answers than its share gives the
ones it has. The rating is read from ``\\boxed{}`` when the template asks for it (contains ``\\boxed``), else from
the response's leading word or number (``format=plain``, for short templates a small model can follow).

``SelfVerify(balance=True)`` (not in RISE; no config key yet) picks half of the answers from correct ones and half
from the others. RISE's pick follows the policy's accuracy, so most tasks share one verdict, and a policy that gives
that verdict to everything scores well above chance (benchmarks/self_verify_tiny.py measures this on the tiny model).

Metrics (``verification_metrics``): ``verify/rows`` (verification responses), ``verify/accuracy`` (share whose
rating equals the reference), ``verify/accuracy_on_correct`` / ``verify/accuracy_on_wrong`` (the same over the
verifications of correct and of other answers: a checker that always says "correct" scores 1 and 0, whatever its
overall accuracy), ``verify/answers_correct`` (share of the verified answers that were correct).
"""

from __future__ import annotations

import re
from typing import Any

import torch

from rlvr.errors import UserError
from rlvr.rollout.episodes import ScoredSamples
from rlvr.rollout.provenance import ON_POLICY, VERIFICATION
from rlvr.rollout.stages import CollectionStage, StageContext, group_rows, register_stage
from rlvr.tasks import Task
from rlvr.verifiers import self_verify as _self_verify  # noqa: F401  (registers "self_verify", the tasks' verifier)
from rlvr.verifiers.base import Status, Verdict

# In rlvr's words, the criteria of RISE's CRITIQUE_PROMPT (ratings 1 / -0.5 / -1 in \boxed{}).
RISE_TEMPLATE = (
    "Rate the response to the question below.\n"
    "Rating rules:\n"
    "- the response has no final answer in \\boxed{}: rating -1\n"
    "- the final answer in \\boxed{} is correct: rating 1\n"
    "- the final answer in \\boxed{} is incorrect: rating -0.5\n\n"
    "Question:\n{prompt}\n\n"
    "Response:\n{response}\n\n"
    "Check the response briefly, then give the rating in \\boxed{} at the end."
)
CRITIQUE_TEMPLATE = (
    "Judge whether the final answer of the response to the question below is correct.\n\n"
    "Question:\n{prompt}\n\n"
    "Response:\n{response}\n\n"
    "Check the response briefly, then write \\boxed{correct} or \\boxed{wrong} at the end."
)
DEFAULT_TEMPLATES = {"rise": RISE_TEMPLATE, "critique": CRITIQUE_TEMPLATE}
_SEED_SALT = 0x5E1F  # keeps this stage's draws apart from other per-step generators seeded the same way


def downsample_counts(k: int, groups: int) -> list[int]:
    """How many answers each of ``groups`` groups gives to K verification tasks: floor(K/G) each, the first
    K mod G groups one more (RISE's ``DataProto.downsampling``). 3 groups, K = 5 -> [2, 2, 1]."""
    if groups <= 0:
        return []
    base, extra = divmod(k, groups)
    return [base + (1 if i < extra else 0) for i in range(groups)]


def rating_of_verdict(verdict: Verdict) -> float | None:
    """RISE's generation reward of an answer from its verdict: 1.0 correct, -0.5 an answer that is wrong, -1.0 no
    answer (nothing extracted); None when the verifier did not decide (timeout, error, undecidable answer)."""
    if verdict.status == Status.CORRECT:
        return 1.0
    if verdict.status in (Status.INCORRECT, Status.PARTIAL, Status.UNDECIDABLE) and not verdict.extracted:
        return -1.0
    if verdict.status in (Status.INCORRECT, Status.PARTIAL):
        return -0.5
    return None


def reference_text(rating: float, mode: str) -> str:
    """The verification task's reference: the rating as text (``rise``) or the binary judgement (``critique``)."""
    if mode == "critique":
        return "correct" if rating > 0 else "wrong"
    return f"{rating:.1f}"


def prompt_text(prompt: Any) -> str:
    """The question as text: a string prompt itself, a conversation's last user message."""
    if isinstance(prompt, str):
        return prompt
    users = [m.get("content", "") for m in prompt if isinstance(m, dict) and m.get("role") == "user"]
    return str(users[-1]) if users else ""


_FIELD = re.compile(r"\{(prompt|response)\}")


def verification_prompt(template: str, prompt: Any, response: str) -> Any:
    """The template with ``{prompt}`` and ``{response}`` replaced (in one pass, so neither text is read as a field;
    every other brace stays as written); a conversation keeps its system messages and asks in one user message."""
    fields = {"prompt": prompt_text(prompt), "response": response}
    text = _FIELD.sub(lambda m: fields[m.group(1)], template)
    if isinstance(prompt, str):
        return text
    system = [dict(m) for m in prompt if isinstance(m, dict) and m.get("role") == "system"]
    return [*system, {"role": "user", "content": text}]


def check_template(template: str) -> None:
    missing = [f for f in ("{prompt}", "{response}") if f not in template]
    if missing:
        raise UserError(f"algo.self_verify_template: expected the fields {{prompt}} and {{response}}, "
                         f"missing {', '.join(missing)}")


def spread(candidates: dict[int, list[int]], k: int, generator: torch.Generator) -> list[int]:
    """K of the candidate rows, spread over the groups that have any (downsample_counts, in group order), drawn
    uniformly within each group; a group with fewer candidates than its share gives all it has."""
    candidates = {g: rows for g, rows in candidates.items() if rows}
    picked: list[int] = []
    for rows, count in zip(candidates.values(), downsample_counts(k, len(candidates))):
        order = torch.randperm(len(rows), generator=generator).tolist()
        picked.extend(sorted(rows[j] for j in order[:count]))
    return picked


def verification_metrics(verifications: ScoredSamples) -> dict[str, float]:
    """``verify/rows``; ``verify/accuracy``, the share of verification responses whose rating equals the reference;
    ``verify/accuracy_on_correct`` and ``verify/accuracy_on_wrong``, the same over the verifications of correct and
    of other answers (each logged when the step has such answers: a checker that calls everything correct scores 1
    and 0); ``verify/answers_correct``, the share of verified answers that were correct."""
    hits = [v.status == Status.CORRECT for v in verifications.verdicts]
    correct = [t.meta["verified_rating"] > 0 for t in verifications.tasks]
    metrics = {"verify/rows": len(hits), "verify/accuracy": sum(hits) / max(len(hits), 1),
               "verify/answers_correct": sum(correct) / max(len(correct), 1)}
    for name, side in (("correct", True), ("wrong", False)):
        rows = [hit for hit, c in zip(hits, correct) if c == side]
        if rows:
            metrics[f"verify/accuracy_on_{name}"] = sum(rows) / len(rows)
    return metrics


class SelfVerify(CollectionStage):
    """Turns ``per_step`` of the step's scored answers into verification tasks for the policy (module docstring)."""

    def __init__(self, per_step: int, template: str | None = None, mode: str = "rise", seed: int = 0, *,
                 balance: bool = False):
        self.per_step, self.mode, self.seed, self.balance = per_step, mode, seed, balance
        self.template = template if template is not None else DEFAULT_TEMPLATES[mode]
        check_template(self.template)
        self.options = {"scheme": mode, "format": "boxed" if "\\boxed" in self.template else "plain"}

    def pick(self, samples: ScoredSamples, step: int) -> list[int]:
        """The rows to verify: on-policy rows with a decided verdict, spread over the groups (downsample_counts),
        uniformly at random within each group. With ``balance``, half of them (K/2, the odd one to correct answers)
        from correct answers and half from the others, each half spread over the groups that have such answers; a
        class with fewer answers gives what it has, so the step's checking tasks never lean to one verdict."""
        kinds = samples.batch.row_kind.tolist()
        ratings = [rating_of_verdict(v) if kinds[i] == ON_POLICY else None for i, v in enumerate(samples.verdicts)]
        generator = torch.Generator().manual_seed((self.seed * 1_000_003 + step) ^ _SEED_SALT)
        groups = group_rows(samples)

        def rows_where(keep) -> dict[int, list[int]]:
            return {g: [i for i in rows if ratings[i] is not None and keep(ratings[i])] for g, rows in groups.items()}

        if not self.balance:
            return spread(rows_where(lambda r: True), self.per_step, generator)
        correct = spread(rows_where(lambda r: r > 0), (self.per_step + 1) // 2, generator)
        return sorted(correct + spread(rows_where(lambda r: r <= 0), self.per_step // 2, generator))

    def tasks(self, samples: ScoredSamples, rows: list[int]) -> list[Task]:
        out = []
        for i in rows:
            task = samples.tasks[i]
            rating = rating_of_verdict(samples.verdicts[i])
            out.append(Task(prompt=verification_prompt(self.template, task.prompt, samples.responses[i]),
                            reference=reference_text(rating, self.mode), id=f"{task.id}/verify",
                            verifier="self_verify", verifier_options=dict(self.options),
                            meta={"verified_task": task.id, "verified_rating": rating}))
        return out

    def run(self, samples: ScoredSamples, ctx: StageContext, step: int) -> tuple[ScoredSamples, dict[str, float]]:
        rows = self.pick(samples, step)
        if not rows:
            return samples, {"verify/rows": 0}
        tasks = self.tasks(samples, rows)
        verifications = ctx.generate(tasks, step)
        verifications.batch.row_kind = torch.full_like(verifications.batch.row_kind, VERIFICATION)
        return ScoredSamples.concat([samples, verifications], ctx.pad_id), verification_metrics(verifications)


@register_stage("self_verify")
def _self_verify_stage(cfg) -> SelfVerify | None:
    algo = cfg.algo
    if not algo.self_verify_per_step:
        return None
    return SelfVerify(algo.self_verify_per_step, algo.self_verify_template, algo.self_verify_mode, cfg.train.seed)
