"""A co-trained verifier: a second model trained beside the policy from the outcome verifier's labels, whose score of
each answer reaches the policy through the ``model_verifier`` reward term (rlvr.verifiers.model_verifier).

Switched on by ``algo.verifier_model`` (the verifier's starting folder; ``policy`` = the policy's own starting folder,
``model.path``). It has its own AdamW (``algo.verifier_lr``, default train.lr; gradient norm clipped at
``verifier_options.grad_clip``), its own learning-rate schedule (train.lr_schedule's shape over train.steps), and its
own Hugging Face folder ``verifier/`` in every checkpoint. Each step, after the policy's answers are scored by the
rule verifier (the step's collection stages run first), the verifier

1. reads every answer: the prompt ``verifier_options.template`` filled with ``{prompt}``, ``{response}`` and
   ``{reference}`` (the task's), ending where the verdict word ``yes`` or ``no`` follows;
2. gives each answer a score in [0, 1] (the objective's): the ``model_verifier`` terms of ``reward.terms`` get it
   and the step's reward is composed again (rlvr.verifiers.model_verifier.compose_with_model_scores);
3. learns from the rule verifier's verdicts on the same answers (label 1 where the answer was judged correct,
   0 where judged wrong; an answer whose verifier timed out, failed or could not decide is no label), with one
   optimizer step, and its scheduler steps once.

Its scores in step 2 come from the weights before step 3: the reward never uses a label's own update.

Objectives (``algo.verifier_objective``, registry ``OBJECTIVES``):

- ``rl`` -- RL Tango (Zha et al., 2025, "RL Tango: Reinforcing Generator and Verifier Together for Language
  Reasoning", arXiv:2505.15034): a generative verifier trained by RL with an outcome-level verification-correctness
  reward alone. It samples ``samples`` verdicts per answer (temperature ``temperature``, at most ``max_new_tokens``
  tokens); a verdict is the word the response starts with (``yes``/``no``, else none); its reward is 1 when it equals
  the label, else 0; GRPO advantages over the answer's verdicts and the policy-gradient loss on the verdict tokens
  (one on-policy update: PPO's ratio is 1). The answer's score is its share of ``yes`` verdicts. Tango's verifier
  writes step-by-step judgements before its final one; here the verdict is one word (a tiny model's format).
- ``contrastive`` -- Cooper (Hong et al., 2025, "Cooper: Co-Optimizing Policy and Reward Models in Reinforcement
  Learning for Large Language Models", arXiv:2508.05613; the released ZJU-REAL/Cooper
  ``recipe/cooper/dp_reward.py``, ``update_reward`` and ``compute_rewards``): the score of an answer is
  s = log P(yes | prompt) - log P(no | prompt) (teacher-forced verdict words), its reward sigmoid(s) in [0, 1]; the
  loss is the mean over pairs of -log sigmoid(s_pos - s_neg). Pairs are drawn within each prompt's group: the
  released ``collaborate.py`` takes the first rule-correct response of each prompt as the positive and an incorrect
  one an assistant LLM rewrites from it as the negative; here the negative is the group's first rule-wrong
  response (``pairs: first``), or every correct x wrong pair of the group (``pairs: all``). Cooper's reward model
  reads the reference answer (``train_VerifyRM/train.py``'s template holds question, reference and completion), so
  this objective's default template shows ``{reference}``.

Metrics (``verifier/...``): ``agreement`` (over the labelled answers, the share of the verifier's verdicts equal to
the rule's, taken before its update, so on answers it has not trained on), ``agreement_on_correct`` /
``agreement_on_wrong``, ``false_positive_rate`` (rule-wrong answers it calls correct: what a colluding verifier
raises), ``score_mean`` (the mean score the policy is paid), ``true_accuracy`` (the rule verifier's accuracy of the
same answers; with ``score_mean``, the hacking gap ``score_mean - true_accuracy``), ``loss``, ``grad_norm``, ``lr``,
``labelled`` and, by objective, ``reward_mean`` (rl: its verdicts' mean reward) or ``pairs`` (contrastive).

The verifier must share the policy's tokenizer (a checkpoint writes the policy's tokenizer files into every second
model's folder). It is read and trained on the main learner (it never joins the policy's data-parallel group); the
collection runs it, so ``cluster.async_rollouts`` (collecting the next batch during an update) is refused.
"""

from __future__ import annotations

import dataclasses
import math
import weakref
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch

from rlvr.config import Config, ConfigError
from rlvr.rollout.episodes import ScoredSamples, score
from rlvr.rollout.stages import CollectionStage, StageContext, register_stage
from rlvr.train.parts import PartContext, StepPart, register_part
from rlvr.verifiers import model_verifier as term
from rlvr.verifiers.base import Status

POLICY = "policy"  # algo.verifier_model=policy: the verifier starts from model.path
DECIDED = frozenset({Status.CORRECT, Status.INCORRECT, Status.PARTIAL})
SOLVED = 1.0 - 1e-9
_SEED_SALT = 0x7A460  # keeps the verdict sampling's generator apart from other per-step generators

RL_TEMPLATE = "{prompt}{response} ok? "
CONTRASTIVE_TEMPLATE = "{prompt}{response} ref {reference} ok? "


@dataclass(frozen=True)
class VerifierOptions:
    """``algo.verifier_options`` (module docstring). ``rows_per_step`` 0 trains on every labelled answer, else on at
    most that many (drawn with a generator seeded by the run seed and the step); ``max_prompt_tokens`` keeps the last
    tokens of a longer verifier prompt (its verdict cue), fewer where the model's context has less room."""

    template: str
    yes: str = "y"
    no: str = "n"
    samples: int = 4
    max_new_tokens: int = 2
    temperature: float = 1.0
    grad_clip: float = 1.0
    rows_per_step: int = 0
    max_prompt_tokens: int = 256
    pairs: str = "first"

    def prompt(self, prompt: Any, response: str, reference: Any) -> str:
        return self.template.replace("{prompt}", _text(prompt)).replace("{response}", response) \
            .replace("{reference}", str(reference))


def _text(prompt: Any) -> str:
    """A task prompt as text: a chat prompt's message contents joined by new lines."""
    if isinstance(prompt, str):
        return prompt
    return "\n".join(str(m.get("content", "")) for m in prompt if isinstance(m, dict))


_CHECKS: dict[str, tuple[type, Callable[[Any], bool], str]] = {
    "template": (str, lambda v: "{response}" in v, "a string holding {response} (and optionally {prompt}, {reference})"),
    "yes": (str, lambda v: bool(v.strip()), "a non-empty verdict word"),
    "no": (str, lambda v: bool(v.strip()), "a non-empty verdict word"),
    "samples": (int, lambda v: v >= 2, "an int >= 2 (GRPO needs a group of verdicts per answer)"),
    "max_new_tokens": (int, lambda v: v >= 1, "an int >= 1"),
    "temperature": (float, lambda v: v > 0, "a number > 0"),
    "grad_clip": (float, lambda v: v > 0, "a number > 0"),
    "rows_per_step": (int, lambda v: v >= 0, "an int >= 0 (0 = every labelled answer)"),
    "max_prompt_tokens": (int, lambda v: v >= 8, "an int >= 8"),
    "pairs": (str, lambda v: v in ("first", "all"), "first or all"),
}


def parse_options(raw: Any, objective: str) -> VerifierOptions:
    """Validate ``algo.verifier_options``; every error names the key and what was expected."""
    if not isinstance(raw, dict):
        raise ConfigError(f"algo.verifier_options: expected a mapping of options, got {type(raw).__name__}")
    values: dict[str, Any] = {"template": CONTRASTIVE_TEMPLATE if objective == "contrastive" else RL_TEMPLATE}
    for key, value in raw.items():
        where = f"algo.verifier_options.{key}"
        if key not in _CHECKS:
            raise ConfigError(f"{where}: unknown option; known: {', '.join(_CHECKS)}")
        kind, ok, expected = _CHECKS[key]
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if key in ("yes", "no") and isinstance(value, int) and not isinstance(value, bool):
            value = str(value)  # a digit given on the command line (algo.verifier_options.yes=1) is read as a number
        if not isinstance(value, kind) or isinstance(value, bool) or not ok(value):
            raise ConfigError(f"{where}: expected {expected}, got {value!r}")
        values[key] = value
    options = VerifierOptions(**values)
    yes, no = options.yes.strip(), options.no.strip()
    if yes.startswith(no) or no.startswith(yes):
        raise ConfigError(f"algo.verifier_options.yes/no: the verdict words {yes!r} and {no!r} must not start one "
                          "another (a verdict is read from the first word)")
    return options


def read_verdict(text: str, options: VerifierOptions) -> bool | None:
    """True for a verdict that starts with the ``yes`` word, False for ``no``, None for anything else."""
    head = text.lstrip()
    if head.startswith(options.yes.strip()):
        return True
    if head.startswith(options.no.strip()):
        return False
    return None


# ---------------------------------------------------------------- the objectives (pure tensor math first)

def verdict_log_odds(logp_yes: torch.Tensor, logp_no: torch.Tensor) -> torch.Tensor:
    """s = log P(yes) - log P(no) per answer, from the summed log-probs of each verdict word's tokens."""
    return logp_yes - logp_no


def pairwise_loss(scores: torch.Tensor, pairs: list[tuple[int, int]]) -> torch.Tensor:
    """Cooper's reward-model loss (ZJU-REAL/Cooper dp_reward.py ``update_reward``): the mean over (positive,
    negative) pairs of -log sigmoid(s_pos - s_neg). No pair: a zero that keeps the graph."""
    if not pairs:
        return scores.sum() * 0.0
    pos = torch.tensor([p for p, _ in pairs], device=scores.device)
    neg = torch.tensor([n for _, n in pairs], device=scores.device)
    return -torch.nn.functional.logsigmoid(scores[pos] - scores[neg]).mean()


def contrastive_pairs(labels: Sequence[float | None], groups: Sequence[int], rows: Sequence[int],
                      mode: str) -> list[tuple[int, int]]:
    """(positive, negative) row pairs within each group among ``rows``: ``first`` pairs each group's first
    correct row with its first wrong row (Cooper's one positive per prompt); ``all`` pairs every correct row with
    every wrong row of the group."""
    correct: dict[int, list[int]] = {}
    wrong: dict[int, list[int]] = {}
    for i in rows:
        if labels[i] is not None:
            (correct if labels[i] >= SOLVED else wrong).setdefault(int(groups[i]), []).append(i)
    pairs = []
    for g, pos in correct.items():
        neg = wrong.get(g, [])
        if neg:
            pairs += [(pos[0], neg[0])] if mode == "first" else [(p, n) for p in pos for n in neg]
    return pairs


def yes_log_odds(model: torch.nn.Module, pad_id: int, prompts: list[list[int]], yes_ids: list[int],
                 no_ids: list[int]) -> torch.Tensor:
    """s = log P(yes | prompt) - log P(no | prompt) per prompt [N], each verdict word teacher-forced after its prompt
    (left-padded); with gradient when grad mode is on. Also the held-out readout of either objective's verifier."""
    from rlvr.rollout.hf import left_pad
    from rlvr.train.policy import policy_forward

    device = next(model.parameters()).device
    ids, mask = left_pad(prompts, pad_id, device)
    out = []
    for word in (yes_ids, no_ids):
        response = torch.tensor([word] * len(prompts), dtype=torch.long, device=device)
        out.append(policy_forward(model, ids, mask, response, torch.ones_like(response)).logp.sum(-1))
    return verdict_log_odds(*out)


@dataclass
class Judgement:
    """The verifier's reading of a step's answers: ``scores`` [N] in [0, 1] (the term's), ``agree(label)`` per row the
    share of its verdicts equal to a label, and what the objective's update needs (``state``)."""

    scores: list[float]
    said_yes: list[float]  # per row, the share of its verdicts that are "yes"
    said_no: list[float]  # ... "no" (rl: a verdict may be neither)
    state: dict[str, Any]

    def agreement(self, i: int, label: bool) -> float:
        return self.said_yes[i] if label else self.said_no[i]


OBJECTIVES: dict[str, type] = {}


def register_objective(name: str):
    def decorator(cls):
        OBJECTIVES[name] = cls
        return cls
    return decorator


@register_objective("rl")
class VerdictRL:
    """RL Tango's objective (module docstring)."""

    def __init__(self, verifier: "CotrainedVerifier"):
        self.v = verifier

    def judge(self, prompts: list[list[int]], step: int) -> Judgement:
        from rlvr.rollout import SamplingParams

        v, o = self.v, self.v.options
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(v.seed * 1_000_003 + step + _SEED_SALT)
            batch = v.engine().generate(prompts, SamplingParams(n=o.samples, max_new_tokens=o.max_new_tokens,
                                                                temperature=o.temperature))
        texts = v.tokenizer.batch_decode(batch.response_ids, skip_special_tokens=True)
        verdicts = [read_verdict(t, o) for t in texts]
        n = len(prompts)
        yes = [sum(verdicts[i * o.samples + k] is True for k in range(o.samples)) / o.samples for i in range(n)]
        no = [sum(verdicts[i * o.samples + k] is False for k in range(o.samples)) / o.samples for i in range(n)]
        return Judgement(list(yes), yes, no, {"batch": batch, "verdicts": verdicts})

    def loss(self, judgement: Judgement, labels: list[float | None], rows: list[int],
             groups: Sequence[int]) -> tuple[torch.Tensor, dict[str, float]]:
        from rlvr.algos import advantages, losses
        from rlvr.train.policy import policy_forward

        o, batch, verdicts = self.v.options, judgement.state["batch"], judgement.state["verdicts"]
        sample_rows = [i * o.samples + k for i in rows for k in range(o.samples)]
        reward = torch.tensor([float(verdicts[j] is not None and verdicts[j] == (labels[j // o.samples] >= SOLVED))
                               for j in sample_rows], dtype=torch.float32)
        index = torch.tensor(sample_rows, device=batch.response_ids.device)
        mask = batch.response_mask[index]
        adv = advantages.compute("grpo", reward.to(mask.device), batch.group_index[index], mask)
        logp = policy_forward(self.v.model, batch.prompt_ids[index], batch.prompt_mask[index],
                              batch.response_ids[index], mask, temperature=o.temperature).logp
        loss, _ = losses.compute("ppo", logp, logp.detach(), adv, mask, agg="token-mean")
        return loss, {"verifier/reward_mean": float(reward.mean())}


@register_objective("contrastive")
class PairwiseYes:
    """Cooper's objective (module docstring)."""

    def __init__(self, verifier: "CotrainedVerifier"):
        self.v = verifier

    def log_odds(self, prompts: list[list[int]]) -> torch.Tensor:
        """s per prompt [N] (with gradient when grad mode is on)."""
        v = self.v
        return yes_log_odds(v.model, v.tokenizer.pad_token_id, prompts, v.yes_ids, v.no_ids)

    def judge(self, prompts: list[list[int]], step: int) -> Judgement:
        model = self.v.model
        was_training = model.training
        model.eval()
        with torch.no_grad():
            s = self.log_odds(prompts).double()
        model.train(was_training)
        p = torch.sigmoid(s)
        yes = (p > 0.5).double().tolist()
        return Judgement(p.tolist(), yes, [1.0 - y for y in yes], {"prompts": prompts})

    def loss(self, judgement: Judgement, labels: list[float | None], rows: list[int],
             groups: Sequence[int]) -> tuple[torch.Tensor, dict[str, float]]:
        pairs = contrastive_pairs(labels, groups, rows, self.v.options.pairs)
        used = sorted({i for pair in pairs for i in pair})
        at = {row: k for k, row in enumerate(used)}
        prompts = judgement.state["prompts"]
        scores = self.log_odds([prompts[i] for i in used]) if used else \
            torch.zeros(0, device=next(self.v.model.parameters()).device, requires_grad=True)
        loss = pairwise_loss(scores, [(at[p], at[n]) for p, n in pairs])
        return loss, {"verifier/pairs": float(len(pairs))}


# ---------------------------------------------------------------- the verifier: a step part that owns the model

class CotrainedVerifier(StepPart):
    """The co-trained verifier (module docstring): its model, tokenizer, AdamW and scheduler; ``run`` reads a step's
    answers, puts its scores into the reward and learns from the rule verifier's labels. As a step part it carries its
    weights, optimizer and scheduler through checkpoints and saves its model as the folder ``verifier``."""

    def __init__(self, cfg: Config, model: torch.nn.Module, tokenizer):
        from rlvr.train.master_weights import adamw
        from rlvr.train.run import lr_factor

        self.cfg, self.seed = cfg, cfg.train.seed
        self.options = parse_options(cfg.algo.verifier_options, cfg.algo.verifier_objective)
        self.model, self.tokenizer = model.requires_grad_(True).train(), tokenizer
        self.yes_ids = _word_ids(tokenizer, self.options.yes, "yes")
        self.no_ids = _word_ids(tokenizer, self.options.no, "no")
        if self.yes_ids == self.no_ids:
            raise ConfigError("algo.verifier_options.yes/no: the two verdict words encode to the same tokens")
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.optimizer = adamw(self.params, lr=cfg.algo.verifier_lr or cfg.train.lr, weight_decay=cfg.train.weight_decay)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, lambda s: lr_factor(s, cfg))
        self.objective = OBJECTIVES[cfg.algo.verifier_objective](self)
        self._engine = None

    def engine(self):
        from rlvr.rollout import build_engine

        if self._engine is None:
            self._engine = build_engine("hf", self.model, self.tokenizer)
        return self._engine

    def encode(self, samples: ScoredSamples) -> list[list[int]]:
        from rlvr.models import encode_prompt

        limit = self.prompt_limit()
        prompts = [encode_prompt(self.tokenizer, self.options.prompt(t.prompt, r, t.reference))
                   for t, r in zip(samples.tasks, samples.responses)]
        return [p[-limit:] for p in prompts]

    def prompt_limit(self) -> int:
        """The most prompt tokens the verifier reads: ``max_prompt_tokens``, and room left in its context for the
        verdict, so a long answer is read by its end and never overflows the model."""
        o = self.options
        context = getattr(self.model.config, "max_position_embeddings", None)
        verdict = max(o.max_new_tokens, len(self.yes_ids), len(self.no_ids))
        return max(1, min(o.max_prompt_tokens, context - verdict)) if context else o.max_prompt_tokens

    def run(self, samples: ScoredSamples, ctx: StageContext, step: int) -> tuple[ScoredSamples, dict[str, float]]:
        verdicts = outcome_verdicts(samples, ctx)
        if verdicts is not samples.verdicts:  # the first term's were the placeholder: log the rule verifier's
            samples = dataclasses.replace(samples, verdicts=verdicts)
        labels = [(1.0 if v.score >= SOLVED else 0.0) if v.status in DECIDED else None for v in verdicts]
        groups = samples.batch.group_index.tolist()
        prompts = self.encode(samples)
        judgement = self.objective.judge(prompts, step)
        metrics = agreement_metrics(judgement, labels)
        if term.model_terms(ctx.scoring.spec):
            samples = with_model_scores(samples, judgement.scores, ctx, step)
        rows = self.training_rows(labels, step)
        metrics.update(self.update(judgement, labels, rows, groups))
        metrics["verifier/labelled"] = float(len(rows))
        return samples, metrics

    def training_rows(self, labels: list[float | None], step: int) -> list[int]:
        rows = [i for i, label in enumerate(labels) if label is not None]
        k = self.options.rows_per_step
        if k and len(rows) > k:
            g = torch.Generator().manual_seed(self.seed * 1_000_003 + step + _SEED_SALT + 1)
            rows = sorted(rows[j] for j in torch.randperm(len(rows), generator=g)[:k].tolist())
        return rows

    def update(self, judgement: Judgement, labels: list[float | None], rows: list[int],
               groups: Sequence[int]) -> dict[str, float]:
        """One optimizer step on the objective's loss over ``rows``; a non-finite gradient is dropped."""
        from rlvr.train.loss_scale import clip_scaled_grad_norm

        metrics: dict[str, float] = {"verifier/lr": self.scheduler.get_last_lr()[0], "verifier/loss": 0.0,
                                     "verifier/grad_norm": 0.0}
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        if rows:
            with torch.enable_grad():
                loss, extra = self.objective.loss(judgement, labels, rows, groups)
                loss.backward()
            norm = clip_scaled_grad_norm(self.params, self.options.grad_clip, 1.0)
            if math.isfinite(norm):
                self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
            metrics.update(extra)
            metrics.update({"verifier/loss": float(loss.detach()), "verifier/grad_norm": norm})
        self.scheduler.step()
        if self._engine is not None:
            self._engine.sync_weights(self.model)
        return metrics

    def state_dict(self) -> dict[str, Any]:
        return {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                "scheduler": self.scheduler.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state:
            self.model.load_state_dict(state["model"])
            self.optimizer.load_state_dict(state["optimizer"])
            self.scheduler.load_state_dict(state["scheduler"])

    def checkpoint_folders(self) -> dict[str, Any]:
        return {"verifier": self.model}


def _word_ids(tokenizer, word: str, key: str) -> list[int]:
    ids = list(tokenizer(word, add_special_tokens=False)["input_ids"])
    if not ids:
        raise ConfigError(f"algo.verifier_options.{key}: the verdict word {word!r} encodes to no token")
    return ids


def outcome_verdicts(samples: ScoredSamples, ctx: StageContext) -> list:
    """The outcome (task) verifier's verdict of every row: the samples' own, or, with ``reward.terms`` and no term on
    the task verifier (the samples then hold the first term's), the task verifier's, asked of the runner (its cache
    answers what it saw before). A label is 1.0 where it judged the answer correct, 0.0 where it judged it wrong,
    none where it did not decide (timed out, failed, undecidable)."""
    spec = ctx.scoring.spec
    if spec is not None and not any(t.uses_task_verifier for t in spec.verifier_terms()):
        return score(samples.tasks, samples.responses, ctx.scoring, None, samples.batch.truncated.tolist())
    return samples.verdicts


def with_model_scores(samples: ScoredSamples, scores: list[float], ctx: StageContext, step: int) -> ScoredSamples:
    """The samples with the reward composed again, every ``model_verifier`` term scored ``scores`` (the other terms'
    raw scores asked of the runner again: its cache answers them)."""
    spec, truncated = ctx.scoring.spec, samples.batch.truncated.tolist()
    rule = {t.name: [v.score for v in score(samples.tasks, samples.responses, ctx.scoring, t, truncated)]
            for t in spec.verifier_terms() if t.verifier != term.NAME}
    composed = term.compose_with_model_scores(
        spec, rule, scores, lengths=samples.batch.response_mask.sum(-1).tolist(), max_len=ctx.params.max_new_tokens,
        groups=samples.batch.group_index.tolist(), step=step)
    return dataclasses.replace(samples, rewards=composed.total, components=composed.components)


def agreement_metrics(judgement: Judgement, labels: list[float | None]) -> dict[str, float]:
    """The verifier's agreement with the rule verifier and the hacking gap (module docstring)."""
    labelled = [i for i, label in enumerate(labels) if label is not None]
    right = [i for i in labelled if labels[i] >= SOLVED]
    wrong = [i for i in labelled if labels[i] < SOLVED]
    mean = lambda values: sum(values) / len(values) if values else 0.0  # noqa: E731
    return {
        "verifier/agreement": mean([judgement.agreement(i, labels[i] >= SOLVED) for i in labelled]),
        "verifier/agreement_on_correct": mean([judgement.agreement(i, True) for i in right]),
        "verifier/agreement_on_wrong": mean([judgement.agreement(i, False) for i in wrong]),
        "verifier/false_positive_rate": mean([judgement.said_yes[i] for i in wrong]),
        "verifier/score_mean": mean(judgement.scores),
        "verifier/true_accuracy": mean([labels[i] for i in labelled]),
    }


# ---------------------------------------------------------------- wiring: the part and its collection stage

_BUILT: dict[int, tuple[weakref.ref, weakref.ref]] = {}  # id(cfg) -> (cfg, the verifier built for it)


def starting_folder(cfg: Config) -> str:
    return cfg.model.path if cfg.algo.verifier_model == POLICY else cfg.algo.verifier_model


@register_part("cotrained_verifier")
def _cotrained_verifier(cfg: Config, ctx: PartContext):
    if not cfg.algo.verifier_model:
        if term.model_terms(_spec(cfg)):
            raise ConfigError("reward.terms: a model_verifier term is scored by a co-trained verifier; set "
                              "algo.verifier_model (a model folder, or 'policy' to start from model.path)")
        return None
    check_first_pass_readers(cfg)
    if cfg.cluster.async_rollouts:
        raise ConfigError("algo.verifier_model: the co-trained verifier reads and learns during collection, so it "
                          "cannot run with cluster.async_rollouts (set it to 0)")
    from rlvr.models import load_model

    model, tokenizer = load_model(starting_folder(cfg), dtype=cfg.model.dtype, device=cfg.model.device)
    check_same_tokenizer(cfg, tokenizer)
    verifier = CotrainedVerifier(cfg, model, tokenizer)
    _BUILT[id(cfg)] = (weakref.ref(cfg), weakref.ref(verifier))
    return verifier


def check_same_tokenizer(cfg: Config, tokenizer) -> None:
    """A checkpoint writes the policy's tokenizer files into every second model's folder (rlvr.train.checkpoint), so a
    verifier with another vocabulary would be saved with the wrong tokenizer: refused until checkpoints keep a
    folder's own tokenizer."""
    from rlvr.models.loading import load_tokenizer

    if cfg.algo.verifier_model == POLICY or cfg.model.path is None:
        return
    if load_tokenizer(cfg.model.path).get_vocab() != tokenizer.get_vocab():
        raise ConfigError(f"algo.verifier_model: {cfg.algo.verifier_model} has another tokenizer than model.path; "
                          "checkpoints save the policy's tokenizer beside every second model, so the co-trained "
                          "verifier must share it")


def check_first_pass_readers(cfg: Config) -> None:
    """Refuse what reads a step's rewards before the verifier's stage puts its scores in: DAPO's dynamic sampling on
    the composed reward, or on verdicts that are the placeholder's (no term on the task verifier), and ReMax's
    greedy baseline (scored by its own generation, which no stage sees)."""
    from rlvr.algos import advantages

    spec = _spec(cfg)
    if not term.model_terms(spec):
        return
    if cfg.algo.dynamic_sampling:
        metric = getattr(cfg.algo, "dynamic_sampling_metric", "score")
        if metric == "reward" or not any(t.uses_task_verifier for t in spec.verifier_terms()):
            raise ConfigError(
                "algo.dynamic_sampling: it picks groups from the first scoring pass, before the co-trained verifier's "
                "scores are in; with a model_verifier term use algo.dynamic_sampling_metric=score and a term on the "
                "task verifier (e.g. {name: correct, verifier: task})")
    if "baseline_rewards" in advantages.needs(cfg.algo.advantage):
        raise ConfigError(f"algo.advantage={cfg.algo.advantage}: its greedy baseline is scored without the co-trained "
                          "verifier, so a model_verifier term would be in the rewards and not in the baseline")


def _spec(cfg: Config):
    from rlvr.train.run import reward_spec

    return reward_spec(cfg)


class VerifierStage(CollectionStage):
    """The co-trained verifier's turn in the collection (``CotrainedVerifier.run``); it runs after the built-in
    stages, so it reads every row they added. Its state is the part's."""

    def __init__(self, verifier: CotrainedVerifier):
        self.verifier = verifier

    def run(self, samples: ScoredSamples, ctx: StageContext, step: int) -> tuple[ScoredSamples, dict[str, float]]:
        return self.verifier.run(samples, ctx, step)


@register_stage("cotrained_verifier")
def _verifier_stage(cfg) -> VerifierStage | None:
    if not cfg.algo.verifier_model:
        return None
    cfg_ref, verifier_ref = _BUILT.get(id(cfg), (None, None))
    verifier = verifier_ref() if verifier_ref is not None and cfg_ref() is cfg else None
    if verifier is None:
        raise ConfigError("algo.verifier_model: the co-trained verifier's collection stage needs its step part, "
                          "built first from the same config (rlvr.train.parts.build_parts)")
    return VerifierStage(verifier)
