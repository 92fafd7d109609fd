"""The learner: an experience batch is prepared once (old and reference log-probs, values, shaped rewards,
advantages), then ``algo.ppo_epochs`` passes over it, each split into ``algo.mini_batches`` optimizer steps; each
mini-batch may be split further into micro-batches for memory: ``train.micro_batch_size`` rows each, or with
``train.max_tokens_per_micro_batch`` rows grouped by length under a token budget, each micro-batch cut to its own
longest prompt and response so padding stays bounded.

    exp = prepare_experience(model, samples.batch, rewards, parts, cfg)
    metrics = learn(model, optimizer, exp, parts, cfg, generator=g, on_update=engine_sync)

This is PPO's update structure (Schulman et al., 2017, Algorithm 1: K epochs of minibatch SGD on the same samples),
as DAPO (16 updates per rollout batch), GSPO (several mini-batches), verl (ppo_epochs, ppo_mini_batch_size) and TRL
(num_iterations, steps_per_generation) run it. Where the old log-probs come from (the engine, a separate forward of the
behaviour prompts, or the first update's own forward) is decided once per batch by ``rlvr.train.old_logprobs.decide``
and logged as ``old_logp_source``. A separate forward is taken last, after the advantages, and only of the rows that
can have a gradient (``rows_needing_gradients``), unless a part or the estimator reads the old log-probs before then
(which computes them for every row, as they read them).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from rlvr.algos import advantages, losses, offpolicy
from rlvr.config import Config
from rlvr.rollout import RolloutBatch
from rlvr.rollout import provenance
from rlvr.train.group import SINGLE, LearnerGroup, gather_rows
from rlvr.train import old_logprobs
from rlvr.train.loss_scale import LossScale, backward_with_retries, unscale_gradients
from rlvr.train.old_logprobs import Source
from rlvr.train.parts import StepPart
from rlvr.train.policy import PolicyOutput, policy_forward


@dataclass
class Experience:
    """One rollout batch with everything computed once before the updates. Tensors are [N, T] unless noted."""

    batch: RolloutBatch
    rewards: torch.Tensor  # [N] sequence rewards
    loss_mask: torch.Tensor  # positions trained on (the batch's loss mask, narrowed by parts such as overlong filtering)
    old_logp: torch.Tensor  # the old policy's log-probs (the trainer's, or the engine's where they serve)
    old_from_rollout: bool  # old_logp are the engine's sampling log-probs
    token_rewards: torch.Tensor  # per-token reward terms (e.g. a KL penalty), 0 elsewhere
    norm_length: int  # seq-mean-token-sum-norm's constant length
    advantages: torch.Tensor | None = None
    ref_logp: torch.Tensor | None = None
    old_values: torch.Tensor | None = None
    returns: torch.Tensor | None = None
    process_rewards: torch.Tensor | None = None  # step rewards on each step's last token (rlvr.rewards.process)
    step_end: torch.Tensor | None = None  # bool, the last token of each step
    loss_inputs: dict[str, torch.Tensor] = field(default_factory=dict)  # rows first; losses receive them by name
    metrics: dict[str, float] = field(default_factory=dict)

    @property
    def size(self) -> int:
        return self.batch.size

    def defer_old_logp(self, every_row: Callable[[], torch.Tensor]) -> None:
        """Leave ``old_logp`` to be computed later: reading it before ``resolve_old_logp`` computes it for every row
        with ``every_row()`` (so a part that reads it while shaping gets what it always got)."""
        self.__dict__.pop("old_logp", None)
        self.__dict__["_pending_old_logp"] = every_row

    def resolve_old_logp(self, rows: torch.Tensor, of_rows: Callable[[torch.Tensor], torch.Tensor]) -> bool:
        """If ``old_logp`` is still pending: ``of_rows(rows)`` for ``rows``, the engine's log-probs elsewhere (rows no
        loss reads). False when nothing was pending (it had been computed for every row)."""
        if self.__dict__.pop("_pending_old_logp", None) is None:
            return False
        old = self.batch.logprobs.clone()
        if len(rows):
            old[rows] = of_rows(rows).to(old.dtype)
        self.old_logp = old
        return True

    def defer_old_logp_to_first_update(self, trained: torch.Tensor,
                                       of_rows: Callable[[torch.Tensor], torch.Tensor]) -> None:
        """Leave the pending old log-probs of the ``trained`` rows to ``learn``: the rows of its first update take
        theirs from that update's own forward (``old_logp_before_first_update``); reading ``old_logp`` before then
        still computes every row."""
        self.__dict__["_old_logp_at_first_update"] = (trained.tolist(), of_rows)

    def old_logp_before_first_update(self, first_rows: list[int]) -> list[int]:
        """At the first update, whose trained rows are ``first_rows``: if the old log-probs were left to it, those of
        the other trained rows now, from one no-grad forward of the unchanged weights, and the rows whose old
        log-probs the update's own forward gives (it sets them with ``set_old_logp_from_update``); else []."""
        deferred = self.__dict__.pop("_old_logp_at_first_update", None)
        if deferred is None:
            return []
        trained, of_rows = deferred
        self.__dict__["_old_logp_trained"] = trained
        if "_pending_old_logp" not in self.__dict__:  # read since, for every row
            return []
        taken, trained_rows = set(first_rows), set(trained)
        rest = [r for r in trained if r not in taken]
        rows = torch.tensor(rest, dtype=torch.long, device=self.batch.logprobs.device)
        self.resolve_old_logp(rows, of_rows)
        return [r for r in first_rows if r in trained_rows]

    def set_old_logp_from_update(self, rows: torch.Tensor, logp: torch.Tensor) -> None:
        """The old log-probs of ``rows`` are the first update's own (detached) log-probs: the weights have not moved
        yet, and the model computes the same function in training mode (``computes_the_same_in_training``)."""
        self.old_logp[rows] = logp.detach().to(self.old_logp.dtype)

    def old_logp_metrics(self) -> dict[str, float]:
        """The sampler-vs-trainer mismatch of the old log-probs the first update completed (empty otherwise)."""
        trained = self.__dict__.pop("_old_logp_trained", None)
        if not trained:
            return {}
        rows = torch.tensor(trained, dtype=torch.long, device=self.batch.logprobs.device)
        return offpolicy.mismatch_metrics(self.old_logp[rows], self.batch.logprobs[rows], self.batch.loss_mask[rows])

    def __getattr__(self, name: str):  # only reached while old_logp is pending (it is then absent from __dict__)
        pending = self.__dict__.get("_pending_old_logp")
        if name != "old_logp" or pending is None:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        del self.__dict__["_pending_old_logp"]
        self.old_logp = pending()
        return self.old_logp


def updates_per_batch(cfg: Config, rows: int) -> tuple[int, int]:
    """(passes, optimizer steps per pass); a batch smaller than algo.mini_batches gets one row per mini-batch."""
    return cfg.algo.ppo_epochs, max(1, min(cfg.algo.mini_batches, rows))


def token_budget_groups(rows: list[int], prompt_lengths: list[int], response_lengths: list[int],
                        max_tokens: int) -> list[list[int]]:
    """Rows packed into micro-batches by length: sorted longest first, each micro-batch takes rows while its
    padded size, rows x (longest prompt + longest response), stays within ``max_tokens``; a row longer than the
    budget forms a micro-batch of its own. Rows of similar length share a micro-batch, so padding is bounded."""
    order = sorted(rows, key=lambda r: (-(prompt_lengths[r] + response_lengths[r]), r))
    groups: list[list[int]] = []
    current: list[int] = []
    longest_prompt = longest_response = 0
    for r in order:
        p, q = max(longest_prompt, prompt_lengths[r]), max(longest_response, response_lengths[r])
        if current and (len(current) + 1) * (p + q) > max_tokens:
            groups.append(current)
            current, p, q = [], prompt_lengths[r], response_lengths[r]
        current.append(r)
        longest_prompt, longest_response = p, q
    if current:
        groups.append(current)
    return groups


def micro_batches(batch: RolloutBatch, rows: list[int], cfg: Config) -> list[list[int]]:
    """The micro-batches of ``rows``: by token budget (train.max_tokens_per_micro_batch), else
    train.micro_batch_size rows each in order, else all rows in one."""
    if cfg.train.max_tokens_per_micro_batch:
        index = torch.tensor(rows, dtype=torch.long, device=batch.prompt_mask.device)
        prompt = dict(zip(rows, batch.prompt_mask[index].sum(-1).tolist()))
        response = dict(zip(rows, batch.response_mask[index].sum(-1).tolist()))
        return token_budget_groups(rows, prompt, response, cfg.train.max_tokens_per_micro_batch)
    micro = cfg.train.micro_batch_size or max(len(rows), 1)
    return [rows[start:start + micro] for start in range(0, len(rows), micro)]


def rows_forward(model, batch: RolloutBatch, r: torch.Tensor, cfg: Config, **kwargs) -> PolicyOutput:
    """policy_forward of the rows ``r`` [n, T]. With a token budget, the columns that are padding in every one of
    these rows are cut before the forward (the left of the prompts, the right of the responses; positions come
    from the attention mask, so nothing else changes) and the outputs padded back to T with zeros."""
    prompt_ids, prompt_mask = batch.prompt_ids[r], batch.prompt_mask[r]
    response_ids, response_mask = batch.response_ids[r], batch.response_mask[r]
    width = response_ids.shape[1]
    if cfg.train.max_tokens_per_micro_batch:
        used = (prompt_mask.sum(0) > 0).nonzero()
        first = int(used[0]) if len(used) else prompt_mask.shape[1] - 1
        used = (response_mask.sum(0) > 0).nonzero()
        last = int(used[-1]) + 1 if len(used) else 1
        prompt_ids, prompt_mask = prompt_ids[:, first:], prompt_mask[:, first:]
        response_ids, response_mask = response_ids[:, :last], response_mask[:, :last]
    out = policy_forward(model, prompt_ids, prompt_mask, response_ids, response_mask,
                         temperature=cfg.rollout.temperature, **batch.image_inputs(r), **kwargs)
    if response_ids.shape[1] < width:
        pad = lambda x: None if x is None else torch.nn.functional.pad(x, (0, width - x.shape[1]))  # noqa: E731
        out = PolicyOutput(pad(out.logp), pad(out.entropy), pad(out.values))
    return out


def local_micro_batches(batch: RolloutBatch, rows: list[int], cfg: Config, group: LearnerGroup) -> list[list[int]]:
    """This rank's micro-batches of ``rows`` (already its shard). Where each micro-batch's forward is a collective
    (sharded weights) every rank returns as many as the rank with the most, the missing ones empty: such a rank
    runs a throwaway forward (``dummy_rows``) that contributes nothing."""
    groups = micro_batches(batch, rows, cfg) if rows else []
    if group.world > 1 and group.symmetric_forwards:
        groups += [[] for _ in range(group.max_int(len(groups)) - len(groups))]
    return groups


def dummy_rows(device) -> torch.Tensor:
    """The rows of a throwaway micro-batch: row 0, its loss weighted by zero."""
    return torch.zeros(1, dtype=torch.long, device=device)


def forward_kwargs(group: LearnerGroup) -> dict[str, Any]:
    """Sharded weights are gathered by the model's own forward, so the chunked LM head (which calls the decoder and
    the head separately) is left off there."""
    return {"chunk": 0} if group.symmetric_forwards else {}


@torch.no_grad()
def forward_rows(model, batch: RolloutBatch, rows: torch.Tensor, cfg: Config, group: LearnerGroup = SINGLE, *,
                 with_entropy: bool = False) -> PolicyOutput:
    """No-grad log-probs (and with ``with_entropy`` the entropy) of the given rows, in micro-batches; [len(rows), T].
    Each rank computes its shard of the rows and every rank receives all of them."""
    if not len(rows):
        return PolicyOutput(batch.logprobs[:0], batch.logprobs[:0] if with_entropy else None)
    order = rows.tolist()
    mine = group.shard(order)
    groups = local_micro_batches(batch, mine, cfg, group)
    logps, entropies = [], []
    for g in groups:
        r = torch.tensor(g, device=rows.device) if g else dummy_rows(rows.device)
        out = rows_forward(model, batch, r, cfg, with_entropy=with_entropy, **forward_kwargs(group))
        if g:
            logps.append(out.logp)
            entropies.append(out.entropy)
    done = [r for g in groups for r in g]
    sizes = group.shard_sizes(len(order))

    def whole(pieces: list[torch.Tensor]) -> torch.Tensor:
        x = torch.cat(pieces) if pieces else batch.logprobs[:0]
        if done != mine:  # grouped by length: back to the rows' order
            position = {r: i for i, r in enumerate(done)}
            x = x[torch.tensor([position[r] for r in mine], device=x.device)]
        return gather_rows(group, x, sizes)

    return PolicyOutput(whole(logps), whole(entropies) if with_entropy else None)


def behaviour_view(batch: RolloutBatch) -> RolloutBatch:
    """The batch as it was sampled: the prompts of rows sampled in another context (Guide's hinted prompt) in place of
    the prompts they are trained on. The old policy's log-probs are taken in this context."""
    if batch.behaviour_prompt_ids is None:
        return batch
    return dataclasses.replace(batch, prompt_ids=batch.behaviour_prompt_ids, prompt_mask=batch.behaviour_prompt_mask)


def prepare_experience(model, batch: RolloutBatch, rewards: torch.Tensor, parts: Mapping[str, StepPart], cfg: Config,
                       *, engine_logprobs_serve: bool, reference=None,
                       baseline_rewards: torch.Tensor | None = None, group: LearnerGroup = SINGLE,
                       task_ids: list[str] | None = None) -> Experience:
    """Old log-probs, reference log-probs and values once; then the parts shape rewards and masks; then advantages.
    Every rank of ``group`` ends with the same, whole experience (each computes a shard of the log-probs)."""
    every = torch.arange(batch.size, device=batch.response_ids.device)
    estimator_needs = advantages.needs(cfg.algo.advantage)
    needs = set().union(*(p.needs for p in parts.values())) | set(estimator_needs)
    epochs, mini_batches = updates_per_batch(cfg, batch.size)
    source = old_logprobs.decide(old_logprobs.BatchFacts(
        engine_logprobs_serve=engine_logprobs_serve, updates=epochs * mini_batches,
        read_while_shaping="old_logp" in needs, all_sampled=provenance.all_sampled(batch.row_kind),
        behaviour_differs=old_logprobs.behaviour_differs(batch.prompt_ids, batch.prompt_mask,
                                                         batch.behaviour_prompt_ids, batch.behaviour_prompt_mask),
        same_in_training=computes_the_same_in_training(model), single_learner=group.world == 1))
    old_from_rollout = source == Source.ENGINE
    exp = Experience(
        batch=batch, rewards=rewards, loss_mask=batch.loss_mask.clone(), old_logp=batch.logprobs,
        old_from_rollout=old_from_rollout, token_rewards=torch.zeros(batch.response_mask.shape, device=rewards.device),
        norm_length=cfg.algo.norm_length or cfg.rollout.max_new_tokens,
        process_rewards=batch.step_rewards, step_end=batch.step_end, loss_inputs=provenance.kind_flags(batch.row_kind),
    )

    def old_logp_of(rows: torch.Tensor) -> torch.Tensor:
        was_training = model.training
        model.eval()
        logp = forward_rows(model, behaviour_view(batch), rows, cfg, group).logp
        model.train(was_training)
        return logp

    if not old_from_rollout:
        exp.defer_old_logp(lambda: old_logp_of(every))
    if "values" in needs:
        exp.old_values = next(v for p in parts.values() if (v := p.old_values(model, batch, cfg)) is not None)
    if "ref_logp" in needs:
        exp.ref_logp = forward_rows(reference, batch, every, cfg, group).logp
    for part in parts.values():
        exp.metrics.update(part.shape(exp))
    adv_rewards, kwargs = estimator_inputs(exp, parts, cfg, baseline_rewards, task_ids)
    exp.advantages = advantages.compute(cfg.algo.advantage, adv_rewards, batch.group_index, batch.response_mask, **kwargs)
    if old_from_rollout:
        exp.metrics["old_logp_source"] = float(source)
    else:
        # rows whose loss and gradient are exactly zero never read their old log-probs: no forward for them
        trained = rows_needing_gradients(exp, parts, cfg)
        if "_pending_old_logp" not in exp.__dict__:  # read while shaping: computed for every row already
            source = Source.SEPARATE_FORWARD
        exp.metrics["old_logp_source"] = float(source)
        if source == Source.FIRST_UPDATE:
            exp.defer_old_logp_to_first_update(trained, old_logp_of)  # the first update's forward gives its rows'
            return exp
        computed = trained if exp.resolve_old_logp(trained, old_logp_of) else every
        exp.metrics.update(offpolicy.mismatch_metrics(exp.old_logp[computed], batch.logprobs[computed],
                                                      batch.loss_mask[computed]))
    return exp


def computes_the_same_in_training(model) -> bool:
    """True when ``model`` computes the same function in training and evaluation mode: no dropout module with
    p > 0 and no dropout rate in its config or sub-configs (attention dropout is applied inside the attention
    call from the config). Then the first update's own forward, taken before any weight moves, gives the old
    policy's log-probs, as TRL's GRPOTrainer and verl take them for a single on-policy update."""
    if any(isinstance(m, torch.nn.modules.dropout._DropoutNd) and m.p > 0 for m in model.modules()):
        return False
    configs = [getattr(model, "config", None)]
    while configs:
        config = configs.pop()
        if config is None:
            continue
        for key, value in vars(config).items():
            if "dropout" in key and isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
                return False
            if hasattr(value, "to_dict") and hasattr(value, "model_type"):
                configs.append(value)
    return True


def estimator_inputs(exp: Experience, parts: Mapping[str, StepPart], cfg: Config, baseline_rewards, task_ids):
    """(rewards, keywords) of the advantage estimator: ``epsilon`` and
    ``algo.advantage_options`` always, and what it declares it needs (rlvr.algos.advantages.register)."""
    estimator_needs = advantages.needs(cfg.algo.advantage)
    kwargs: dict[str, Any] = {"epsilon": cfg.algo.epsilon, **cfg.algo.advantage_options}
    rewards = exp.rewards
    available = {
        "values": lambda: {"values": exp.old_values},
        "baseline_rewards": lambda: {"baseline_rewards": baseline_rewards},
        "old_logp": lambda: {"old_logp": exp.old_logp},
        "ref_logp": lambda: {"ref_logp": exp.ref_logp},
        "entropy": lambda: {"entropy": exp.batch.entropy},
        "process_rewards": lambda: {"process_rewards": exp.process_rewards, "step_end": exp.step_end},
        "step_state": lambda: {"step_state": next(p.step_state for p in parts.values() if p.step_state is not None),
                               "task_ids": list(task_ids or [])},
    }
    for need in estimator_needs:
        if need != "token_rewards":
            kwargs.update(available[need]())
    if "token_rewards" in estimator_needs:
        kwargs["token_rewards"] = exp.token_rewards
    else:  # outcome estimators see the per-token terms summed into the sequence reward
        rewards = exp.rewards + exp.token_rewards.sum(-1)
    if "process_rewards" in estimator_needs and exp.process_rewards is None:
        raise ValueError(f"algo.advantage={cfg.algo.advantage} needs step rewards: set reward.process (e.g. "
                         "{source: arith_steps}) or a part that provides them (algo.implicit_prm)")
    return rewards, kwargs


def rows_needing_gradients(exp: Experience, parts: Mapping[str, StepPart], cfg: Config) -> torch.Tensor:
    """Indices of the rows whose loss can have a non-zero gradient. When the policy loss declares it
    (losses.register(..., zero_at_zero_advantage=True): ppo, gspo, cispo) and no part adds a loss on every row,
    a row whose advantages are all zero contributes exactly zero loss and gradient, so its forward and backward
    passes are skipped; its tokens still count in the normaliser, so the loss and gradient equal the full-batch
    computation."""
    every = torch.arange(exp.size, device=exp.advantages.device)
    if any(p.keeps_every_row for p in parts.values()) or not losses.zero_at_zero_advantage(cfg.algo.loss):
        return every
    return every[((exp.advantages != 0) & (exp.loss_mask > 0)).any(dim=1)]


def mini_batch_rows(n: int, mini_batches: int, *, generator: torch.Generator | None) -> list[torch.Tensor]:
    """Row indices of each mini-batch of one pass: a permutation drawn from ``generator`` (None keeps the order),
    split into ``mini_batches`` nearly equal parts."""
    order = torch.randperm(n, generator=generator) if generator is not None else torch.arange(n)
    return [part for part in torch.tensor_split(order, mini_batches) if part.numel()]


def learn(model, optimizer: torch.optim.Optimizer, exp: Experience, parts: Mapping[str, StepPart], cfg: Config, *,
          generator: torch.Generator | None = None,
          on_update: Callable[[int, dict[str, float]], None] | None = None,
          group: LearnerGroup = SINGLE, loss_scale: LossScale | None = None) -> dict[str, float]:
    """``ppo_epochs`` x ``mini_batches`` optimizer steps on the experience; metrics ("loss", "grad_norm", ...)
    averaged over the updates that were applied, plus "updates" (optimizer steps taken), "bad_step" (1 if any
    update was skipped for a non-finite loss or gradient), "skipped_updates" (how many) and, unless train.approx_kl
    is false, "approx_kl" between the policy after the last update and the old policy. When every update was skipped, the metrics are the finite
    values of the skipped updates and "loss" and "grad_norm" (not finite there) are left out of the step's metrics. ``on_update(i, m)``
    is called after every optimizer step that changed the weights. With a ``group`` of several ranks each rank
    runs the forward and backward passes of its shard of every mini-batch (rlvr.train.group)."""
    epochs, mini_batches = updates_per_batch(cfg, exp.size)
    needed = set(rows_needing_gradients(exp, parts, cfg).tolist())
    shuffle = generator if cfg.algo.shuffle_mini_batches and mini_batches > 1 else None
    per_update: list[dict[str, float]] = []
    taken = 0
    zero_grads: dict[int, torch.Tensor] = {}  # reused by the updates whose rows all have zero advantages
    for _ in range(epochs):
        for rows in mini_batch_rows(exp.size, mini_batches, generator=shuffle):
            rows = rows.to(exp.advantages.device)
            trained = [r for r in rows.tolist() if r in needed]
            old_from_update = [] if per_update else exp.old_logp_before_first_update(trained)
            metrics = update(model, optimizer, exp, rows, trained, parts, cfg, first=not per_update, group=group,
                             loss_scale=loss_scale, zero_grads=zero_grads, old_from_update=old_from_update)
            stepped = metrics.pop("policy_stepped")
            per_update.append(metrics)
            if stepped:
                taken += 1
                if on_update is not None:
                    on_update(taken, metrics)
    exp.metrics.update(exp.old_logp_metrics())  # the old log-probs are complete after the first update
    skipped = sum(1 for m in per_update if m["bad_step"])
    result = average([m for m in per_update if not m["bad_step"]] if skipped < len(per_update) else per_update)
    result.update(exp.metrics)
    result["updates"] = taken
    result["bad_step"] = int(skipped > 0)
    result["skipped_updates"] = skipped
    result["rows_backpropagated"] = float(len(needed))
    if cfg.train.approx_kl:
        result["approx_kl"] = approx_kl(model, exp, sorted(needed), cfg, group)
    return result


def update(model, optimizer, exp: Experience, rows: torch.Tensor, trained: list[int], parts: Mapping[str, StepPart],
           cfg: Config, *, first: bool, group: LearnerGroup = SINGLE, loss_scale: LossScale | None = None,
           zero_grads: dict[int, torch.Tensor] | None = None, old_from_update: list[int] = ()) -> dict[str, float]:
    """One optimizer step on the mini-batch ``rows``; only the ``trained`` rows (those that can have a gradient)
    run forward and backward, each rank its shard of them. Micro-batches are weighted by their units over the
    whole mini-batch's units, so the loss (and the gradient summed over ranks) equals the mini-batch's loss;
    metrics are averaged over the units (tokens or rows) that produced them, on every rank. With a float16
    ``loss_scale`` (rlvr.train.loss_scale) the gradients are taken of the scaled loss, and a backward pass that
    overflowed is redone with a smaller scale. The rows of ``old_from_update`` take their old log-probs from this
    update's forward (see ``Experience.old_logp_before_first_update``). ``zero_grads`` keeps the zero gradients of an update with no trained
    row for the next such update (clipping and unscaling leave zeros as they are), so they are allocated once."""
    params = [p for group_ in optimizer.param_groups for p in group_["params"]]
    zero_grads = {} if zero_grads is None else zero_grads
    if trained:  # a backward pass allocates real gradients: the zeros are not kept beside them
        zero_grads.clear()
    result: dict[str, float] = {}

    def run_backward(scale: float) -> float:
        result.clear()
        result.update(backward(model, exp, rows, trained, parts, cfg, first=first, group=group, scale=scale,
                               old_from_update=old_from_update))
        if not trained:  # every advantage is zero: the gradient is exactly zero, and Adam still takes its step
            for p in params:
                p.grad = zero_grads.get(id(p))
                if p.grad is None:
                    p.grad = zero_grads[id(p)] = torch.zeros_like(p)
        group.reduce_gradients(params)
        return result["loss"]

    def discard() -> None:
        optimizer.zero_grad(set_to_none=True)
        for part in parts.values():
            part.discard_update()

    scale = loss_scale or LossScale()
    selected = begin_update(model, exp, rows, parts, cfg, group)
    done = backward_with_retries(run_backward, params, cfg.train.max_grad_norm, scale, discard)
    result.update(selected)
    frozen = any(p.policy_frozen for p in parts.values())
    if done.finite and not frozen:
        unscale_gradients(optimizer, params, done.scale)
        optimizer.step()
    optimizer.zero_grad(set_to_none=True)  # a non-finite step is skipped: the weights stay as they were
    for part in parts.values():
        result.update(part.after_update(grad_scale=done.scale))
    result.update(scale.metrics(done))
    return {**result, "grad_norm": done.grad_norm, "bad_step": 0 if done.finite else 1,
            "policy_stepped": done.finite and not frozen}


def begin_update(model, exp: Experience, rows: torch.Tensor, parts: Mapping[str, StepPart], cfg: Config,
                 group: LearnerGroup = SINGLE) -> dict[str, float]:
    """Before the update of the mini-batch ``rows``: the parts that select tokens over the whole mini-batch (the
    forking-token mask) see the entropy of every one of its rows under the current weights, from one no-grad
    forward pass (rows whose gradient is skipped included: their tokens count in the selection). Their selection
    is then the same whatever the micro-batches, and on every rank."""
    wanting = [p for p in parts.values() if p.mini_batch_entropy]
    if not wanting:
        return {}
    was_training = model.training
    model.eval()
    entropy = forward_rows(model, exp.batch, rows, cfg, group, with_entropy=True).entropy
    model.train(was_training)
    metrics: dict[str, float] = {}
    for part in wanting:
        metrics.update(part.begin_update(exp, rows, entropy))
    return metrics


def backward(model, exp: Experience, rows: torch.Tensor, trained: list[int], parts: Mapping[str, StepPart],
             cfg: Config, *, first: bool, group: LearnerGroup, scale: float = 1.0,
             old_from_update: list[int] = ()) -> dict[str, float]:
    """Forward and backward passes of this rank's shard of the mini-batch ``rows``, the loss multiplied by ``scale``;
    returns the mini-batch's metrics, "loss" (unscaled) among them."""
    algo = cfg.algo
    agg = algo.agg or losses.default_agg(algo.loss)
    total_units = max(losses.aggregation_units(exp.loss_mask[rows], agg), 1)
    wants_entropy = any(p.wants_entropy for p in parts.values()) or exp.batch.entropy is None
    entropy_grad = any(p.entropy_grad for p in parts.values())
    value_head = next((p.value_head for p in parts.values() if p.value_head is not None), None)
    batch = exp.batch
    sums: dict[str, float] = {}
    seen = 0.0
    loss_total = 0.0
    for group_rows in local_micro_batches(batch, group.shard(trained), cfg, group):
        r = torch.tensor(group_rows, device=rows.device) if group_rows else dummy_rows(rows.device)
        mask = exp.loss_mask[r] if group_rows else torch.zeros_like(exp.loss_mask[r])
        out = rows_forward(model, batch, r, cfg, with_entropy=wants_entropy, entropy_grad=entropy_grad,
                           value_head=value_head, **forward_kwargs(group))
        metrics: dict[str, float] = {}
        if old_from_update and group_rows:  # the weights have not moved: this forward IS the old policy's
            from_update = set(old_from_update)
            own = [i for i, row in enumerate(group_rows) if row in from_update]
            exp.set_old_logp_from_update(r[own], out.logp[own])
        if first and exp.old_from_rollout and group_rows:  # unchanged since sampling: this IS the trainer's old policy
            metrics.update(offpolicy.mismatch_metrics(out.logp.detach(), batch.logprobs[r], batch.loss_mask[r]))
        weights = None
        for part in parts.values():
            w, w_metrics = part.token_weights(exp, r, out)
            if w is not None:
                weights = w if weights is None else weights * w
                metrics.update(w_metrics)
        pg_loss, loss_metrics = losses.compute(
            algo.loss, out.logp, exp.old_logp[r], exp.advantages[r], mask, clip_low=algo.clip_low,
            clip_high=algo.clip_high, dual_clip=algo.dual_clip, agg=agg, norm_length=exp.norm_length,
            token_weights=weights, **algo.loss_options, **{k: v[r] for k, v in exp.loss_inputs.items()},
        )
        units = losses.aggregation_units(mask, agg) if group_rows else 0
        weight = units / total_units
        loss = pg_loss * weight
        metrics.update(loss_metrics, pg_loss=pg_loss.item() if units else 0.0)
        for part in parts.values():
            term, term_metrics = part.loss(exp, r, out, mask, agg, exp.norm_length)
            if term is not None:
                loss = loss + term * weight
            metrics.update(term_metrics)
        if out.entropy is not None:
            metrics["entropy"] = losses.aggregate(out.entropy.detach(), mask, agg, exp.norm_length).item()
        (loss * scale).backward()
        loss_total += loss.item()
        for key, value in metrics.items():
            sums[key] = sums.get(key, 0.0) + value * units
        seen += units
    if group.world > 1:
        sums, seen, loss_total = merge_sums(group.gather((sums, seen, loss_total)))
    result = {key: value / seen for key, value in sums.items()} if seen else {}
    if "entropy" not in result and batch.entropy is not None:  # the sampler's entropy, over this mini-batch
        result["entropy"] = float(losses.aggregate(batch.entropy[rows], exp.loss_mask[rows], agg, exp.norm_length))
    result["loss"] = loss_total
    return result


def merge_sums(per_rank: list[tuple[dict[str, float], float, float]]) -> tuple[dict[str, float], float, float]:
    """Every rank's (unit-weighted metric sums, units, loss share) added up."""
    sums: dict[str, float] = {}
    for rank_sums, _, _ in per_rank:
        for key, value in rank_sums.items():
            sums[key] = sums.get(key, 0.0) + value
    return sums, sum(s for _, s, _ in per_rank), sum(l for _, _, l in per_rank)


def average(rows: list[dict[str, float]]) -> dict[str, float]:
    """Mean of each key over the updates that report it a finite value; a key with no finite value is left out
    (the loss and gradient norm of a step whose every update was skipped), so a logged metric is never NaN."""
    means = {}
    for key in sorted({k for row in rows for k in row}):
        values = [row[key] for row in rows if key in row and math.isfinite(row[key])]
        if values:
            means[key] = sum(values) / len(values)
    return means


def approx_kl(model, exp: Experience, trained: list[int], cfg: Config, group: LearnerGroup = SINGLE) -> float:
    """Mean k3 estimate of KL(pi_old || pi_new) over the trained rows' valid tokens, after the updates (Schulman,
    2020, "Approximating KL Divergence"): with d = logp_new - logp_old on tokens sampled from the old policy,
    k3 = exp(d) - 1 - d. 0.0 when no row was trained."""
    if not trained:
        return 0.0
    rows = torch.tensor(trained, device=exp.advantages.device)
    was_training = model.training
    model.eval()
    new = forward_rows(model, exp.batch, rows, cfg, group).logp
    model.train(was_training)
    m = exp.loss_mask[rows].bool()
    if not m.any():
        return 0.0
    d = (new - exp.old_logp[rows])[m].double()
    return float((torch.expm1(d) - d).mean())
