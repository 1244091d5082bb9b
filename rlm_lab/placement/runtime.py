"""Run a placement on Ray: one placement group per run (a bundle per resource set), the roles as actors
pinned to their set, GRPO through TRL, a run record with the measured step and sync, and a merged timeline.

:class:`rlm_lab.placement.session.RaySession` starts a local Ray (dashboard off, ``num_cpus`` from the
placement) or joins a cluster at ``address=`` / ``$RAY_ADDRESS``
(https://docs.ray.io/en/latest/ray-core/api/doc/ray.init.html). Placement groups:
https://docs.ray.io/en/latest/ray-core/scheduling/placement-group.html.

Several nodes: on a session that spans nodes (``RaySession(nodes=N)``, a local cluster or one joined at
``RAY_ADDRESS``) the placement group is ``STRICT_SPREAD``, each resource set on its own node
(https://docs.ray.io/en/latest/ray-core/scheduling/placement-group.html#placement-strategy); the record says
which node held each set, the weight-sync group's store is served on the trainer's node address, and a node
that dies mid-run is named in the error line.

Nothing of the driver's machine crosses to another (issue 40): the SFT warm start reaches every actor through
Ray's object store (:mod:`rlm_lab.placement.shipping`), and the trainer's metric rows come back through Ray
(:class:`MetricsFeed`) to the driver's record, so the workers' machines need no filesystem shared with the driver.

Bad input (a placement asking for more CPUs than exist, a set larger than a node, Ray that cannot start) is
one :class:`RlmLabError` before anything runs; a worker (or a node) that dies mid-run fails the run within its
timeout with one line, the record says ``failed`` and why, and every actor, the placement group and (when
this module started it) Ray itself are torn down: no orphaned processes.

:func:`run_placement` takes its options as keywords, :func:`run_with` as one :class:`RunOptions`; the Ray steps
of a run (reserve, start the actors, join the sync group, train, finish) are :mod:`rlm_lab.placement.ray_run`'s.
"""

from __future__ import annotations

import os
import shutil
import time
import types
from dataclasses import dataclass, replace
from pathlib import Path

from .. import models
from ..cost.placement_spec import Cluster, Placement, PlacementError
from ..errors import RlmLabError
from ..host import load_average, machine_load
from ..record import RunRecord, repo_root
from ..tasks import ensure_data, parse_task
from ..train.sft import train_sft
from . import resources
from .ray_run import (LORA, MetricsFeed, RunState, bundle_nodes, fail_record, finish,  # noqa: F401 - LORA,
                      join_sync_group, release, reserve, run_trainer, start_actors)  # MetricsFeed, bundle_nodes: API
from .session import RaySession, local_cpus, ray_processes  # noqa: F401 - part of this module's API
from .shipping import pack
from .trl_rollout import PlacementRunError
from .weights import DEFAULT_BUCKET_BYTES


def algo_roles(cfg):
    """What the run places: GRPO with beta = 0 holds no reference model (TRL builds none)."""
    models = ("actor", "verifier") if cfg.beta == 0 else ("actor", "reference", "verifier")
    if cfg.algo == "ppo":  # PPO adds its critic; its reward is the rule-based verifier (no reward-model role)
        models = models[:-1] + ("critic", "verifier")
    return types.SimpleNamespace(name=cfg.algo, models=models)


def check_placement(placement: Placement, cfg, cpus: int | None = None) -> Placement:
    """Validate ``placement`` for ``cfg`` on this machine's CPUs (or ``cpus``); one RlmLabError line."""
    if cfg.algo not in ("grpo", "ppo"):
        raise RlmLabError(f"the placement runtime runs GRPO and PPO; got algo={cfg.algo!r}")
    if cfg.algo == "ppo" and placement.rollout_separate:
        raise RlmLabError("PPO generates with TRL's own generate on the actor's set; place rollout with the actor")
    kind = placement.sets[0].kind if placement.sets else "cpu"
    if kind == "cpu" and cfg.size == "gpu":
        raise RlmLabError("size gpu places its roles on GPU sets; use --size smoke or cpu for cores")
    try:
        if kind == "gpu":  # the gpu size: a set per role group of GPUs, NCCL sync (rlm_lab.placement.resources)
            resources.check_devices(placement, cpus or local_cpus(), resources.local_gpus())
            return placement.validate(algo_roles(cfg), Cluster(resources.local_gpus(), "gpu"))
        return placement.validate(algo_roles(cfg), Cluster(cpus or local_cpus(), "cpu"))
    except PlacementError as e:
        raise RlmLabError(str(e)) from None


def check_spread(placement: Placement, node_devices: dict) -> None:
    """``STRICT_SPREAD`` can place ``placement`` on nodes of ``node_devices`` (name -> CPUs, or GPUs for GPU sets):
    each set on a node of its own that holds its devices; one error line otherwise (Ray would wait for such a
    group forever)."""
    unit = "GPUs" if placement.sets[0].kind == "gpu" else "CPUs"
    free = sorted(node_devices.values(), reverse=True)
    need = sorted((s.devices for s in placement.sets), reverse=True)
    if len(need) > len(free):
        raise RlmLabError(f"placement {placement.name!r} has {len(need)} resource sets, the cluster "
                          f"{len(free)} node(s) with {unit}; each set goes on a node of its own")
    for s in placement.sets:
        if s.devices > free[0]:
            raise RlmLabError(f"placement {placement.name!r} puts {s.devices} {unit} in set {s.name!r}, and no node "
                              f"of this {len(free)}-node cluster holds more than {free[0]}; each set goes on a node "
                              f"of its own (choose a placement with one set per node, e.g. disaggregated)")
    if any(n > f for n, f in zip(need, free)):
        raise RlmLabError(f"placement {placement.name!r}'s sets ({need} {unit}) do not fit one per node on "
                          f"nodes of {free} {unit}")


def name_dead_node(ray, error: BaseException, set_nodes: dict, wait_s: float = 25.0) -> BaseException:
    """``error`` with the node that died named first, when a node holding one of the run's sets is dead
    (the GCS marks a lost node dead after its health checks fail: Ray's defaults, 5 failed checks 3 s apart,
    take 15 s or more; a call to a killed node's actor can fail at once, so that is waited for, up to ``wait_s``)."""
    if not set_nodes or not isinstance(error, (PlacementRunError, ray.exceptions.RayError)):
        return error
    deadline = time.monotonic() + wait_s
    while True:
        alive = {n["NodeID"]: n.get("Alive") for n in ray.nodes()}
        dead = [(s, n) for s, n in set_nodes.items() if not alive.get(n["id"], False)]
        if dead or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    if not dead:
        return error
    names = ", ".join(f"{n['name']} (set {s!r})" for s, n in dead)
    return PlacementRunError(f"node {names} died during the run: {str(error).splitlines()[0] if str(error) else type(error).__name__}")


def _sft_checkpoint(cfg) -> Path:
    """The SFT warm start every placement of one config shares: TRL's SFTTrainer (``rlm_lab.train.sft``),
    cached under ``<cache>/placement_sft/<cfg.sft_key()>`` and written to a temp folder then renamed, so a
    crash never leaves half a checkpoint."""
    if cfg.sft_checkpoint:
        return Path(cfg.sft_checkpoint)
    root = Path(os.environ.get("RLM_CACHE_DIR") or repo_root() / "_build" / "cache") / "placement_sft"
    folder = root / cfg.sft_key()
    if (folder / "config.json").exists():
        return folder
    task = parse_task(cfg.task)
    if cfg.disable_tqdm:  # no "Writing model shards" bar in notebook outputs either
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
    model, tokenizer = models.load(cfg.model, seed=cfg.seed)
    tmp = root / f".{folder.name}.{os.getpid()}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    if cfg.sft_steps:
        train_sft(model, tokenizer, ensure_data(task)["train"], cfg, tmp / "trainer")
    shutil.rmtree(tmp / "trainer", ignore_errors=True)
    models.save(model, tokenizer, tmp)
    try:
        os.replace(tmp, folder)
    except OSError:  # another process cached it first
        shutil.rmtree(tmp, ignore_errors=True)
    return folder


STARTUP_BASE_S = 300.0   # an idle machine: Ray reserves the bundles, the actors import torch and TRL, join a group
STARTUP_CAP_S = 1800.0


def startup_timeout(base_s: float = STARTUP_BASE_S, cap_s: float = STARTUP_CAP_S, load: dict | None = None) -> float:
    """How long each of Ray's start-up waits (the placement group, the actors' first call, their process group) may
    take on this machine now: ``base_s`` when idle, scaled by the 1-minute load per core above 1 (an actor's start is
    CPU-bound imports), at most ``cap_s``. On a machine shared with four busy loops the actors of a placement did not
    start within a fixed 300 s (issue 18); the wait that expires still ends in one clear line."""
    per_core = (load or machine_load())["per_core"]
    return min(cap_s, base_s * max(1.0, per_core))


@dataclass(frozen=True)
class RunOptions:
    """How :func:`run_placement` runs a placement (all but what it places, the config and the folder).

    ``prediction`` (made before the run) is stored in the record before the run starts; ``extra_results`` are
    added to the record's results. ``timeout_s``: each step's (and each sync's) limit; ``startup_timeout_s``: each
    start-up wait's limit (None: :func:`startup_timeout`, from the machine's load). ``bucket_bytes``: the weight
    sync's bucket (None: ``DEFAULT_BUCKET_BYTES``); ``chunks``: prompt chunks per rollout call.
    Fault injection: ``kill_rollout_after_step``, ``ray.kill`` the first rollout worker once the trainer has logged
    that many steps; ``kill_critic_after_step``, the same for PPO's critic actor (split); ``kill_rollout_in_sync``,
    the first rollout worker SIGKILLs itself inside that weight sync (1 = the first), mid-broadcast (collective)
    or as the payload arrives (object store): the run fails within the sync's timeout with one line naming the
    worker. ``glue`` ("module:Class") / ``glue_kwargs``: another rollout_func glue than
    :class:`RolloutFunc` (chapter 6's asynchronous modes); its ``record()`` lands in the results as ``glue``.
    ``role_threads``: ``{"actor": n, "rollout": n}``, torch threads of those roles' actors instead of their share
    of cores (a synchronous run whose roles take turns can give each every core: chapter 6's ``sync``).
    ``return_weights``: the results carry the trained ``weights``; ``evaluate``: held-out accuracy after training.
    """

    prediction: dict | None = None
    chunks: int = 1
    timeout_s: float = 120.0
    startup_timeout_s: float | None = None
    bucket_bytes: int | None = None
    kill_rollout_after_step: int | None = None
    kill_critic_after_step: int | None = None
    kill_rollout_in_sync: int | None = None
    return_weights: bool = False
    evaluate: bool = False
    glue: str | None = None
    glue_kwargs: dict | None = None
    role_threads: dict | None = None
    extra_results: dict | None = None
    command: object = None

    def resolved(self, placement: Placement) -> RunOptions:
        """These options with the defaults filled in for ``placement``; one RlmLabError line for bad role threads."""
        role_threads = dict(self.role_threads or {})
        bad = sorted(set(role_threads) - {"actor", "rollout"})
        if bad or not all(isinstance(n, int) and 0 < n <= placement.devices for n in role_threads.values()):
            raise RlmLabError(f"role_threads: give actor and/or rollout, each 1..{placement.devices} threads; "
                              f"got {role_threads}")
        wait_s = startup_timeout() if self.startup_timeout_s is None else self.startup_timeout_s
        return replace(self, bucket_bytes=self.bucket_bytes or DEFAULT_BUCKET_BYTES, role_threads=role_threads,
                       startup_timeout_s=wait_s,
                       glue_kwargs=self.glue_kwargs or {}, extra_results=self.extra_results or {})


def run_placement(placement: Placement, cfg, run_dir: str | Path, *, session: RaySession | None = None,
                  **options) -> dict:
    """Run GRPO or PPO (``cfg``) under ``placement``; write ``run_dir``'s record, metrics, trace and timeline.

    ``options`` are :class:`RunOptions`' fields (``timeout_s=``, ``prediction=``, ``kill_rollout_after_step=``...).
    ``session``: a Ray session to run in (None: a local one started and closed here).
    Returns the record's results (plus ``weights`` if asked)."""
    return run_with(placement, cfg, run_dir, RunOptions(**options), session=session)


def run_with(placement: Placement, cfg, run_dir: str | Path, options: RunOptions,
             session: RaySession | None = None) -> dict:
    """:func:`run_placement` with its options as one :class:`RunOptions`: check, open the record, build (or find)
    the SFT warm start, then on Ray reserve the placement group, start the actors, join the sync group, train and
    collect, finish the record. A failure marks the record failed (naming a dead node); the actors, the
    placement group and a session started here are released whatever happens."""
    check_placement(placement, cfg, session.cpus() if session is not None and not session.owned else None)
    spread = session is not None and session.nodes > 1
    if spread:
        check_spread(placement, session.node_devices(placement.sets[0].kind))
    opts = options.resolved(placement)
    record = _open_record(placement, cfg, Path(run_dir), opts)
    try:
        model_path = _sft_checkpoint(cfg)
    except BaseException as e:
        record.fail(e)
        raise
    own = session is None
    session = session or RaySession(num_cpus=placement.devices)
    run = RunState(session.ray, placement, cfg, opts, record)
    try:
        reserve(run, session, spread)
        # the warm start travels through Ray's object store, not as a path of this machine (.shipping)
        model = run.ray.put(pack(model_path))
        start_actors(run, model)
        join_sync_group(run)
        out = run_trainer(run, model)
        return finish(run, out)
    except BaseException as e:
        named = name_dead_node(run.ray, e, run.set_nodes) if spread else e
        fail_record(record, named, run.t_start)
        if named is e:
            raise
        raise named from None
    finally:
        release(run.ray, run.actors, run.pg, session if own else None)


def _open_record(placement: Placement, cfg, run_dir: Path, opts: RunOptions) -> RunRecord:
    """The run's record, before any work (it refuses a folder that holds a run: records are never overwritten)."""
    record = RunRecord(run_dir, {"run": cfg.to_dict(), "placement": placement.to_dict(), "chunks": opts.chunks,
                                 "timeout_s": opts.timeout_s, "bucket_bytes": opts.bucket_bytes,
                                 **({"role_threads": opts.role_threads} if opts.role_threads else {})},
                       opts.command, cfg.seed)
    record.update(prediction=opts.prediction, load_average_start=load_average(2), **opts.extra_results)
    return record
