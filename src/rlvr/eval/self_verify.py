"""``rlvr eval --self-verify``: how well a model checks its own answers on held-out tasks.

The model answers the tasks (the evaluation's own samples); each answer whose verdict decided the question comes back
to the same model as a verification task, built as training builds them (rlvr.rollout.stage_self_verify: the template
with ``{prompt}`` and ``{response}``, reference = the outcome verifier's verdict as a rating or a judgement, scored by
the ``self_verify`` verifier), and the model rates it once through the same generate-and-score path.

Reported (``summary["self_verify"]``; values with 95% bootstrap intervals over the rated answers):

- ``accuracy``: share of ratings equal to the reference (RISE: the rating; Critique-RL: the judgement);
- ``accuracy_on_correct`` / ``accuracy_on_wrong``: the same over the ratings of correct and of other answers;
- ``said_correct``: the verdict balance, the share of ratings that call the answer correct. A checker that says
  "correct" to everything has ``said_correct`` 1, ``accuracy_on_wrong`` 0 and ``accuracy`` equal to
  ``answers_correct``, the share of rated answers that were correct (the accuracy of always saying "correct");
- ``no_rating``: share of verification responses with no rating in them;
- ``rated`` / ``skipped``: answers rated, and answers not rated because their verdict did not decide (timeout, error,
  an answer the verifier could not judge), as training skips them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlvr.eval.intervals import stat
from rlvr.rollout.episodes import PromptPolicy, Scoring
from rlvr.rollout.stage_self_verify import DEFAULT_TEMPLATES, check_template, rating_of_verdict, reference_text, \
    verification_prompt
from rlvr.tasks import Task
from rlvr.verifiers import Status, Verdict
from rlvr.verifiers.self_verify import rating_of

MODES = tuple(DEFAULT_TEMPLATES)


@dataclass(frozen=True)
class SelfVerifySetup:
    """The verification prompt and scheme: ``template`` (None = the mode's default, rating in ``\\boxed{}``) and
    ``mode`` (``rise`` or ``critique``), with where each came from (a flag, the run config, or the default)."""

    template: str | None = None
    mode: str = "rise"
    source: str = "default"

    @property
    def text(self) -> str:
        return self.template if self.template is not None else DEFAULT_TEMPLATES[self.mode]

    @property
    def options(self) -> dict[str, str]:
        """The ``self_verify`` verifier's options, as the training stage sets them."""
        return {"scheme": self.mode, "format": "boxed" if "\\boxed" in self.text else "plain"}

    def describe(self) -> str:
        shown = "default (rating in \\boxed{})" if self.template is None else repr(self.template)
        return f"self-verify: mode {self.mode}, template {shown} ({self.source})"


def setup_of(config: str | Path | None, *, template: str | None = None, mode: str | None = None) -> SelfVerifySetup:
    """The setup from the flags, else from the run config's ``algo.self_verify_template`` / ``algo.self_verify_mode``
    (the prompt the model was trained to verify with), else the defaults; a bad mode or template is a UserError."""
    from rlvr.config import load_config
    from rlvr.errors import UserError

    run_template, run_mode, source = None, "rise", "default"
    if config is not None:
        algo = load_config(str(config)).algo
        run_template, run_mode = algo.self_verify_template, algo.self_verify_mode
        source = f"run config {config}"
    if mode is not None and mode not in MODES:
        raise UserError(f"--self-verify-mode: expected one of {', '.join(MODES)}, got {mode!r}")
    chosen = SelfVerifySetup(template if template is not None else run_template, mode or run_mode,
                             "--self-verify-template/--self-verify-mode" if template is not None or mode else source)
    if chosen.template is not None:
        try:
            check_template(chosen.template)
        except UserError as e:
            raise UserError(f"--self-verify-template ({chosen.source}): {e}") from None
    return chosen


def verification_tasks(answers: list[tuple[Task, str, Verdict]], setup: SelfVerifySetup) -> tuple[list[Task], int]:
    """One verification task per answer whose verdict decided the question, and how many answers were skipped."""
    tasks, skipped = [], 0
    for k, (task, response, verdict) in enumerate(answers):
        rating = rating_of_verdict(verdict)
        if rating is None:
            skipped += 1
            continue
        tasks.append(Task(prompt=verification_prompt(setup.text, task.prompt, response),
                          reference=reference_text(rating, setup.mode), id=f"{task.id}/verify/{k}",
                          verifier="self_verify", verifier_options=setup.options,
                          meta={"verified_task": task.id, "verified_rating": rating}))
    return tasks, skipped


def says_correct(verdict: Verdict, options: dict[str, str]) -> bool | None:
    """Whether a rating calls the answer correct (a rating above 0); None when the response gave no rating."""
    if verdict.reason == "no_rating" or verdict.extracted is None:
        return None
    words = options.get("format") == "plain" or options.get("scheme") == "critique"
    value = rating_of(str(verdict.extracted), words=words)
    if value is None:  # RISE reads a box that holds no number as a rating that does not match: not "correct"
        return False
    return value > 0


def verification_summary(tasks: list[Task], verdicts: list[Verdict], *, skipped: int, seed: int = 0) -> dict[str, Any]:
    """accuracy (overall and per class of answer), the verdict balance and the base rate (module docstring)."""
    hits = [1.0 if v.status == Status.CORRECT else 0.0 for v in verdicts]
    correct = [t.meta["verified_rating"] > 0 for t in tasks]
    said = [says_correct(v, t.verifier_options) for t, v in zip(tasks, verdicts)]
    out: dict[str, Any] = {"rated": len(tasks), "skipped": skipped}
    if not tasks:
        return out
    out["accuracy"] = stat(hits, seed)
    for name, side in (("correct", True), ("wrong", False)):
        rows = [hit for hit, c in zip(hits, correct) if c == side]
        if rows:
            out[f"accuracy_on_{name}"] = stat(rows, seed)
    out["said_correct"] = stat([1.0 if s else 0.0 for s in said], seed)
    out["no_rating"] = stat([1.0 if s is None else 0.0 for s in said], seed)
    out["answers_correct"] = stat([1.0 if c else 0.0 for c in correct], seed)
    return out


def self_verify_answers(engine, tokenizer, answers: list[tuple[Task, str, Verdict]], setup: SelfVerifySetup,
                        scoring: Scoring, *, temperature: float, max_new_tokens: int, seed: int = 0,
                        prompts: PromptPolicy | None = None) -> dict[str, Any]:
    """The model behind ``engine`` rates each (task, its answer, the answer's verdict) once; the summary."""
    from rlvr.eval.sampling import sample_tasks

    tasks, skipped = verification_tasks(answers, setup)
    results = sample_tasks(engine, tokenizer, tasks, scoring, samples=1, temperature=temperature,
                           max_new_tokens=max_new_tokens, prompts=prompts) if tasks else []
    summary = verification_summary(tasks, [r.verdicts[0] for r in results], skipped=skipped, seed=seed)
    return {"mode": setup.mode, "template": setup.text, "source": setup.source, **summary}


def report_lines(summary: dict[str, Any]) -> list[str]:
    """The summary as the command prints it."""
    lines = [f"self-verification ({summary['mode']}): {summary['rated']} answers rated, "
             f"{summary['skipped']} skipped (their verdict did not decide)"]
    names = {"accuracy": "accuracy", "accuracy_on_correct": "accuracy on correct answers",
             "accuracy_on_wrong": "accuracy on wrong answers", "said_correct": "verdict balance (said correct)",
             "answers_correct": "correct answers among those rated", "no_rating": "no rating given"}
    for key, name in names.items():
        if key in summary:
            value, (low, high) = summary[key]["value"], summary[key]["ci95"]
            lines.append(f"  {name}: {100 * value:.1f}% (95% CI {100 * low:.1f}-{100 * high:.1f})")
    return lines
