"""The Ray backend (``cluster.backend=ray``): learners, rollout workers and reward workers as Ray actors, the same on
one machine as on many.

- ``cluster.learners`` learner actors form one torch.distributed group (gloo on CPU, NCCL on CUDA; rank 0's actor
  publishes the address) and run the training loop, exactly as torchrun's ranks do (rlvr.cluster.learners);
- ``cluster.rollout_workers`` rollout worker actors each hold an engine (``rollout.engine``: hf, vllm, ...) on its
  own copy of the policy; the main learner splits each step's prompts among them and sends them the weights after
  every step (``RolloutPool``). A worker that dies mid-step (its process killed, its node lost) is replaced by a new
  actor with the current weights, which redoes that worker's share with the same seed, so the step completes;
  with ``cluster.partial_rollouts`` they continue responses in chunks across weight updates instead
  (``submit_chunks``; rlvr.train.streaming decides what each round advances);
- ``cluster.reward_workers`` reward worker actors score responses (``RewardPool``, the learner's reward runner);
  0 scores in the main learner.

What each actor reserves comes from the config (rlvr.cluster.placement): ``cluster.cpus_per_learner``,
``cluster.cpus_per_rollout_worker``, ``cluster.cpus_per_reward_worker`` CPUs (null = an equal share of the cluster's),
and on GPUs one per learner and the engine's tensor x pipeline parallel ranks per rollout worker.

``cluster.address`` joins a running cluster (``ray start --head`` / ``ray://...``); without it a local cluster of
this machine's cores is started for the run and stopped after it. Ray is an optional extra: pip install 'rlvr[ray]'.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from rlvr.cluster import free_port
from rlvr.cluster.lifeline import start_guard
from rlvr.cluster.placement import Placement, Reservation, plan_placement
from rlvr.cluster.weight_transfer import NcclSender
from rlvr.config import Config
from rlvr.rollout import SamplingParams, build_engine, logprobs_serve_as_old_policy
from rlvr.rollout.base import RolloutBatch, concat_batches
from rlvr.rollout.partial import Piece, continue_rows
from rlvr.rollout.vllm import engine_ranks
from rlvr.train.run import prepare_run_dir
from rlvr.verifiers import default_runner, set_default_runner
from rlvr.verifiers.runner.api import RewardRunner
from rlvr.errors import UserError

# PYTHONUNBUFFERED: an actor's output reaches the driver (log_to_driver) as it is written, not when the run ends
ACTOR_ENV = {"OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false", "PYTHONUNBUFFERED": "1"}
MAX_REPLACEMENTS = 3  # a share of a step is redone at most this many times before the step fails
CLOSE_TIMEOUT_S = 30  # how long workers get to clean up before they are killed


class RayUnavailable(UserError):
    """cluster.backend=ray without the ray package (a one-line error naming the extra to install)."""


def require_ray():
    try:
        import ray
    except ImportError:
        raise RayUnavailable("cluster.backend=ray needs the ray package: pip install 'rlvr[ray]'") from None
    return ray


def actor_env(deterministic: bool = False) -> dict[str, str]:
    """Environment of every actor: one intra-op thread, and the rlvr the driver runs on the import path; with
    train.deterministic, the pinned kernels too (actors on a cluster joined by address do not inherit the driver's
    environment, and a worker's first kernel may run before rlvr pins them)."""
    from rlvr.train.determinism import PINNED_ENV

    src = str(Path(__file__).resolve().parents[2])
    path = os.pathsep.join([src, *filter(None, [os.environ.get("PYTHONPATH")])])
    return {**ACTOR_ENV, **(PINNED_ENV if deterministic else {}), "PYTHONPATH": path}


def connect(cfg: Config):
    """Join cluster.address, or start a local cluster. Returns the guard of a local cluster started here (which this
    process must stop, then stop the guard), True after joining a cluster, None when Ray was already connected."""
    ray = require_ray()
    if ray.is_initialized():
        return None
    env = {"env_vars": actor_env(cfg.train.deterministic)}
    if cfg.cluster.address:
        ray.init(address=cfg.cluster.address, runtime_env=env, log_to_driver=True)
        return True
    guard = start_guard()  # the local cluster's processes die with this driver, SIGKILL included
    ray.init(num_cpus=os.cpu_count() or 1, include_dashboard=False, runtime_env=env, log_to_driver=True)
    return guard


def run_on_ray(cfg: Config, *, resume: bool = False) -> Path:
    """Train with the layout of cfg.cluster on Ray; returns the run directory."""
    ray = require_ray()
    from rlvr.train.streaming import check_streaming

    check_streaming(cfg)  # before Ray starts: a combination streaming cannot run is one line
    prepare_run_dir(cfg, resume)
    started = connect(cfg)
    try:
        plan = placement(cfg)  # a layout the cluster cannot hold fails here, before any actor waits for resources
        n = cfg.cluster.learners
        learner = ray.remote(num_cpus=plan.learner.cpus, num_gpus=plan.learner.gpus)(LearnerActor)
        actors = [learner.remote(rank, n) for rank in range(n)]
        init_method = ray.get(actors[0].rendezvous.remote())
        ray.get([a.train.remote(cfg, resume, init_method, plan) for a in actors])
    finally:
        if started is not None:
            ray.shutdown()
        if started not in (None, True):
            started.terminate()  # the cluster stopped normally: nothing left to guard
            started.wait()
    return Path(cfg.train.out)


def _nodes() -> list[dict[str, float]]:
    import ray

    return [node["Resources"] for node in ray.nodes() if node.get("Alive")]


def placement(cfg: Config, nodes: list[dict[str, float]] | None = None) -> Placement:
    """What each of cfg's actors reserves on the connected Ray cluster (rlvr.cluster.placement): the
    ``cluster.cpus_per_*`` keys or an equal share of the CPUs; with the policy on GPUs (model.device auto or cuda,
    and the cluster has GPUs) one GPU per learner and the engine's tensor x pipeline ranks per rollout worker."""
    nodes = _nodes() if nodes is None else nodes
    c = cfg.cluster
    node_gpus = [node.get("GPU", 0.0) for node in nodes]
    wants_gpu = cfg.model.device == "auto" or cfg.model.device.startswith("cuda")
    return plan_placement(learners=c.learners, rollout_workers=c.rollout_workers, reward_workers=c.reward_workers,
                          node_cpus=[node.get("CPU", 0.0) for node in nodes], node_gpus=node_gpus,
                          use_gpus=wants_gpu and sum(node_gpus) > 0,
                          engine_ranks=engine_ranks(cfg.rollout.engine_options.get("llm") or {}),
                          cpus_per_learner=c.cpus_per_learner, cpus_per_rollout_worker=c.cpus_per_rollout_worker,
                          cpus_per_reward_worker=c.cpus_per_reward_worker)


class LearnerActor:
    """One learner rank as a Ray actor; rank 0 also holds the rollout and reward pools."""

    def __init__(self, rank: int, world: int):
        self.rank, self.world = rank, world
        torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))

    def rendezvous(self) -> str:
        """The TCP address of rank 0's process group store: this node's IP and a free port."""
        import ray

        return f"tcp://{ray.util.get_node_ip_address()}:{free_port()}"

    def train(self, cfg: Config, resume: bool, init_method: str, plan: Placement) -> str:
        from rlvr.cluster.learners import TorchLearnerGroup
        from rlvr.models import resolve_device
        from rlvr.train import train

        device = resolve_device(cfg.model.device)
        group = TorchLearnerGroup(cfg.cluster.learner_strategy, device=device.type, init_method=init_method,
                                  rank=self.rank, world=self.world)
        pools: list[Any] = []

        def engine_factory(model, tokenizer):
            pools.append(RolloutPool(model, tokenizer, cfg, plan.rollout_worker))
            return pools[-1]

        previous = None
        if self.rank == 0 and cfg.cluster.reward_workers:
            pools.append(RewardPool(cfg.cluster.reward_workers, plan.reward_worker))
            previous = set_default_runner(pools[-1])
        try:
            run_dir = train(cfg, resume=resume, group=group, engine_factory=engine_factory if self.rank == 0 else None)
        finally:
            for pool in pools:
                pool.close()
            if previous is not None:
                set_default_runner(previous)
            group.close()
        return str(run_dir)


class RolloutWorker:
    """One engine replica: its own copy of the policy and ``rollout.engine``'s engine on it."""

    def __init__(self, model_config, tokenizer, state, engine: str, options: dict[str, Any], dtype: str,
                 version: int = 0):
        from rlvr.models.loading import model_from_config

        torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
        device = "cuda" if torch.cuda.is_available() else "cpu"  # the GPU Ray gave this actor, if any
        self.model = model_from_config(model_config, dtype=getattr(torch, dtype)).to(device).eval()
        self.model.load_state_dict(state)
        self.engine = build_engine(engine, self.model, tokenizer, **options)
        self.version = version  # how many updates the weights it holds have had (the pool's count)

    def pid(self) -> int:
        return os.getpid()

    def serves_old_policy(self) -> bool:
        return logprobs_serve_as_old_policy(self.engine)

    def weight_transfer_backend(self) -> str | None:
        return getattr(self.engine, "weight_transfer_backend", None)

    def load(self, state, version: int | None = None) -> None:
        self.model.load_state_dict(state)
        self.engine.sync_weights(self.model)
        self.version = version if version is not None else self.version + 1

    def weight_transfer(self, call: str, payload=None) -> None:
        self.engine.weight_transfer(call, payload)

    def close(self) -> None:
        """Let the engine remove what it keeps on disk (vLLM: the folder it loads weights from); a killed actor
        runs no exit handlers."""
        close = getattr(self.engine, "close", None)
        if close is not None:
            close()

    def generate(self, prompts: list[list[int]], params: SamplingParams, seed: int,
                 images: list[dict] | None = None) -> RolloutBatch:
        torch.manual_seed(seed)
        with torch.no_grad():
            batch = self.engine.generate(prompts, params) if images is None else \
                self.engine.generate(prompts, params, images=images)
        return _to_cpu(batch)

    def continue_rows(self, prompts: list[list[int]], prefixes: list[list[int]], budgets: list[int],
                      params: SamplingParams, seed: int, weights: tuple[int, list] | None = None) -> list[Piece]:
        """One chunk of each response under way (rlvr.rollout.partial). ``weights``: (version, [state ref]) the round
        was submitted with; a worker holding another version (a replacement started after a later update) loads
        that state first, so a redone share samples with the round's weights."""
        if weights is not None and weights[0] != self.version:
            import ray

            self.load(ray.get(weights[1][0]), weights[0])
        torch.manual_seed(seed)
        return continue_rows(self.engine, prompts, prefixes, budgets, params)


def _to_cpu(batch: RolloutBatch) -> RolloutBatch:
    fields = {k: (v.cpu() if isinstance(v, torch.Tensor) else v) for k, v in vars(batch).items()}
    return RolloutBatch(**fields)


class RolloutPool:
    """The rollout engine the main learner sees: ``cluster.rollout_workers`` RolloutWorker actors. ``generate``
    gives each worker a contiguous share of the prompts (so groups stay whole and in order) with its own seed,
    drawn from the learner's RNG, and concatenates the batches; ``sync_weights`` sends the weights to all workers,
    through Ray's object store or, when the engines receive over NCCL (vLLM, ``weight_sync: nccl``, GPUs), as one
    broadcast from this process (rlvr.cluster.weight_transfer). ``replacements`` counts workers replaced after dying."""

    def __init__(self, model, tokenizer, cfg: Config, reservation: Reservation | None = None):
        ray = require_ray()
        self.ray, self.tokenizer, self.cfg = ray, tokenizer, cfg
        options = dict(cfg.rollout.engine_options)
        if cfg.rollout.batch_size:
            options.setdefault("batch_size", cfg.rollout.batch_size)
        self.spec = (model.config, tokenizer, cfg.rollout.engine, options, cfg.model.dtype)
        self.device = next(model.parameters()).device
        reservation = reservation or placement(cfg).rollout_worker
        self.actor = ray.remote(num_cpus=reservation.cpus, num_gpus=reservation.gpus, max_restarts=0)(RolloutWorker)
        self.state = ray.put(_cpu_state(model))
        self.model, self.sender = model, None
        self.version = 0  # weight updates sent so far
        self.workers = [self._start() for _ in range(cfg.cluster.rollout_workers)]
        # responses continued across weight updates (partial rollouts) hold tokens of older weights than the trainer's
        self.logprobs_serve_as_old_policy = ray.get(self.workers[0].serves_old_policy.remote()) \
            and not cfg.cluster.partial_rollouts
        self.transfer = ray.get(self.workers[0].weight_transfer_backend.remote())
        if self.transfer and self.device.type != "cuda":
            raise ValueError("rollout.engine_options.weight_sync: 'nccl' broadcasts from the main learner's GPU, but "
                             f"the learner runs on {self.device.type}; use model.device=cuda or weight_sync: inplace")
        self.ranks_per_worker = engine_ranks(options.get("llm") or {})
        self.replacements = 0

    def _start(self):
        if self.sender is not None:  # a replacement: the broadcast group is opened again, for the new set of workers
            self.sender.close()
            self.sender = None
            self.state = self.ray.put(_cpu_state(self.model))
        config, tokenizer, engine, options, dtype = self.spec
        return self.actor.options(scheduling_strategy="SPREAD").remote(config, tokenizer, self.state, engine, options,
                                                                       dtype, self.version)

    def worker_pids(self) -> list[int]:
        return self.ray.get([w.pid.remote() for w in self.workers])

    def sync_weights(self, model) -> None:
        self.model = model
        self.version += 1
        if self.transfer:
            if self.sender is None:
                self.sender = NcclSender(self.ray, self.workers, self.ranks_per_worker, model)
            self.sender.send(model)
            return
        self.state = self.ray.put(_cpu_state(model))
        self._each(lambda w, state: w.load.remote(state, self.version), [self.state] * len(self.workers))

    def generate(self, prompts: list[list[int]], params: SamplingParams,
                 images: list[dict] | None = None) -> RolloutBatch:
        """``images``: one dict of image inputs per prompt (vision-language tasks), sent with the prompt's share."""
        n = len(self.workers)
        bounds = [len(prompts) * i // n for i in range(n + 1)]
        shares = [prompts[bounds[i]:bounds[i + 1]] for i in range(n)]
        image_shares = [None if images is None else images[bounds[i]:bounds[i + 1]] for i in range(n)]
        seeds = torch.randint(0, 2**62, (n,)).tolist()  # from the learner's RNG: a resumed run samples the same
        batches = self._each(lambda w, job: w.generate.remote(job[0], params, job[1], job[2]),
                             [(share, seed, image_share) if share else None
                              for share, seed, image_share in zip(shares, seeds, image_shares)])
        batch = concat_batches([b for b in batches if b is not None], self.tokenizer.pad_token_id)
        return _to_device(batch, self.device)

    def _each(self, call, jobs: list) -> list:
        results, replaced = call_each(self.ray, self.workers, self._start, call, jobs)
        self.replacements += replaced
        return results

    def submit_chunks(self, prompts: list[list[int]], prefixes: list[list[int]], budgets: list[int],
                      params: SamplingParams, seed: int):
        """Submit one round of chunks now (rlvr.train.streaming): each worker a contiguous share of the rows, with a
        seed drawn from ``seed``; the workers sample with the weights sent before this call, and a share redone by a
        replacement worker after a later update too (the round carries its weights' version and, through the object
        store, their state; weights sent over NCCL are not kept, so there a redone share takes the newest).
        ``gather_chunks`` waits."""
        n = len(self.workers)
        bounds = [len(prompts) * i // n for i in range(n + 1)]
        seeds = torch.randint(0, 2**62, (n,), generator=torch.Generator().manual_seed(seed)).tolist()
        # in a list, the state's ref reaches the worker as a ref (Ray resolves only refs passed directly)
        weights = None if self.transfer else (self.version, [self.state])
        jobs = [(prompts[a:b], prefixes[a:b], budgets[a:b], params, s, weights) if b > a else None
                for a, b, s in zip(bounds, bounds[1:], seeds)]
        call = lambda w, job: w.continue_rows.remote(*job)  # noqa: E731
        return call, jobs, submit_each(self.workers, call, jobs)

    def gather_chunks(self, handle) -> list[Piece]:
        call, jobs, refs = handle
        parts, replaced = gather_each(self.ray, self.workers, self._start, call, jobs, refs)
        self.replacements += replaced
        return [piece for part in parts if part is not None for piece in part]

    def close(self) -> None:
        if self.sender is not None:
            self.sender.close()
            self.sender = None
        try:
            self.ray.get([w.close.remote() for w in self.workers], timeout=CLOSE_TIMEOUT_S)
        except Exception:  # a dead or stuck worker: killed below all the same
            pass
        for w in self.workers:
            self.ray.kill(w, no_restart=True)
        self.workers = []


def call_each(ray, actors: list, start: Callable[[], Any], call: Callable[[Any, Any], Any], jobs: list
              ) -> tuple[list, int]:
    """``call(actors[i], jobs[i])`` (which submits a remote call) for every job that is not None, results in order.
    An actor that died before or during its call is killed for good, replaced in ``actors`` by ``start()`` and the
    call redone, at most MAX_REPLACEMENTS times per job. Returns the results and the number of replacements."""
    return gather_each(ray, actors, start, call, jobs, submit_each(actors, call, jobs))


def submit_each(actors: list, call: Callable[[Any, Any], Any], jobs: list) -> dict[int, Any]:
    """Submit ``call(actors[i], jobs[i])`` for every job that is not None; the object refs by job index."""
    return {i: call(actors[i], job) for i, job in enumerate(jobs) if job is not None}


def gather_each(ray, actors: list, start: Callable[[], Any], call: Callable[[Any, Any], Any], jobs: list,
                refs: dict[int, Any]) -> tuple[list, int]:
    """The results of submitted calls (``submit_each``) in job order, replacing dead actors as ``call_each`` does."""
    from ray.exceptions import ActorDiedError, ActorUnavailableError, RayActorError

    results: list[Any] = [None] * len(jobs)
    replaced = 0
    for i, ref in refs.items():
        for attempt in range(MAX_REPLACEMENTS + 1):
            try:
                results[i] = ray.get(ref)
                break
            except (ActorDiedError, ActorUnavailableError, RayActorError):
                if attempt == MAX_REPLACEMENTS:
                    raise
                ray.kill(actors[i], no_restart=True)
                actors[i] = start()
                replaced += 1
                ref = call(actors[i], jobs[i])
    return results, replaced


def _cpu_state(model) -> dict[str, torch.Tensor]:
    return {k: v.detach().cpu() for k, v in model.state_dict().items()}


def _to_device(batch: RolloutBatch, device: torch.device) -> RolloutBatch:
    if device.type == "cpu":
        return batch
    return RolloutBatch(**{k: (v.to(device) if isinstance(v, torch.Tensor) else v) for k, v in vars(batch).items()})


class RewardWorker:
    """Scores requests with the worker's own reward runner (rlvr.verifiers: timeouts, isolation, cache)."""

    def __init__(self):
        self.runner = default_runner()

    def pid(self) -> int:
        return os.getpid()

    def score(self, items):
        return self.runner.score(items)

    def stats(self) -> dict[str, Any]:
        return self.runner.stats()

    def reset_stats(self) -> None:
        self.runner.reset_stats()


class RewardPool(RewardRunner):
    """A reward runner whose requests are scored by ``workers`` RewardWorker actors, each taking a contiguous share
    of a batch; verdicts come back in input order. A worker that dies (its process killed, its node lost) is
    replaced and its share scored again. Statistics are the live workers' summed (latencies: their largest), with
    the replacements counted among "worker_restarts". Each worker reserves ``reservation`` (default: an equal share of
    the cluster's CPUs among the workers)."""

    def __init__(self, workers: int, reservation: Reservation | None = None):
        super().__init__(workers=1)
        ray = require_ray()
        self.ray = ray
        if reservation is None:
            reservation = plan_placement(learners=0, rollout_workers=0, reward_workers=workers,
                                         node_cpus=[node.get("CPU", 0.0) for node in _nodes()]).reward_worker
        self.actor = ray.remote(num_cpus=reservation.cpus, max_restarts=0)(RewardWorker)
        self.actors = [self._start() for _ in range(workers)]
        self.replacements = 0

    def _start(self):
        return self.actor.remote()

    def _each(self, call, jobs: list) -> list:
        results, replaced = call_each(self.ray, self.actors, self._start, call, jobs)
        self.replacements += replaced
        return results

    def _on_all(self, method: str) -> list:
        return self._each(lambda a, _: getattr(a, method).remote(), [True] * len(self.actors))

    def worker_pids(self) -> list[int]:
        return self._on_all("pid")

    def score(self, items):
        items = list(items)
        n = len(self.actors)
        bounds = [len(items) * i // n for i in range(n + 1)]
        shares = [items[bounds[i]:bounds[i + 1]] or None for i in range(n)]
        parts = self._each(lambda a, share: a.score.remote(share), shares)
        return [v for part in parts if part is not None for v in part]

    def stats(self) -> dict[str, Any]:
        every = self._on_all("stats")
        out: dict[str, Any] = {"worker_restarts": self.replacements}
        for stats in every:
            for key, value in stats.items():
                if isinstance(value, (int, float)):
                    out[key] = max(out.get(key, 0), value) if key.startswith("latency") else out.get(key, 0) + value
        return out

    def reset_stats(self) -> None:
        self._on_all("reset_stats")
        self.replacements = 0

    def close(self) -> None:
        for a in self.actors:
            self.ray.kill(a, no_restart=True)
        self.actors = []
        super().close()
