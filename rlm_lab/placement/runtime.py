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
"""

from __future__ import annotations

import os
import shutil
import time
import types
from pathlib import Path

from ..cost.placement_spec import Cluster, Placement, PlacementError
from ..errors import RlmLabError
from ..host import load_average, machine_load
from ..record import RunRecord, write_trace
from ..tasks import ensure_data, parse_task
from ..trace_merge import merge
from ..train.sft import train_sft
from .resources import actor_options, bundle, sync_backend, threads
from .session import RaySession, local_cpus, ray_processes  # noqa: F401 - part of this module's API
from .shipping import pack
from .trl_rollout import PlacementRunError
from .weights import DEFAULT_BUCKET_BYTES
from .workers import RolloutWorker, TrainerWorker

# LoRA of a ``lora=True`` placement: PEFT's default targets for Llama (q_proj, v_proj) at rank 8, what the
# cost model assumes for ``placement.lora`` (rlm_lab.cost.lora); no dropout, so placements stay comparable.
LORA = dict(r=8, lora_alpha=16, lora_dropout=0.0, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM")

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
    from .resources import check_devices, local_gpus  # noqa: PLC0415  tests patch rlm_lab.placement.resources.local_gpus: read at call time

    kind = placement.sets[0].kind if placement.sets else "cpu"
    if kind == "cpu" and cfg.size == "gpu":
        raise RlmLabError("size gpu places its roles on GPU sets; use --size smoke or cpu for cores")
    try:
        if kind == "gpu":  # the gpu size: a set per role group of GPUs, NCCL sync (rlm_lab.placement.resources)
            check_devices(placement, cpus or local_cpus(), local_gpus())
            return placement.validate(algo_roles(cfg), Cluster(local_gpus(), "gpu"))
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


def bundle_nodes(ray, pg) -> dict:
    """Bundle index -> ``{"id", "name", "address"}`` of the node Ray reserved it on."""
    from ray.util.placement_group import placement_group_table

    nodes = {n["NodeID"]: n for n in ray.nodes()}
    out = {}
    for i, node_id in placement_group_table(pg).get("bundles_to_node_id", {}).items():
        n = nodes.get(node_id, {})
        out[int(i)] = {"id": node_id, "name": n.get("NodeName") or node_id[:12],
                       "address": n.get("NodeManagerAddress", "127.0.0.1")}
    return out


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
    from ..models import load, save  # noqa: PLC0415  tests patch rlm_lab.models.save: read at call time
    from ..record import REPO_ROOT  # noqa: PLC0415  tests patch rlm_lab.record.REPO_ROOT: read at call time

    if cfg.sft_checkpoint:
        return Path(cfg.sft_checkpoint)
    root = Path(os.environ.get("RLM_CACHE_DIR") or REPO_ROOT / "_build" / "cache") / "placement_sft"
    folder = root / cfg.sft_key()
    if (folder / "config.json").exists():
        return folder
    task = parse_task(cfg.task)
    if cfg.disable_tqdm:  # no "Writing model shards" bar in notebook outputs either
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
    model, tokenizer = load(cfg.model, seed=cfg.seed)
    tmp = root / f".{folder.name}.{os.getpid()}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    if cfg.sft_steps:
        train_sft(model, tokenizer, ensure_data(task)["train"], cfg, tmp / "trainer")
    shutil.rmtree(tmp / "trainer", ignore_errors=True)
    save(model, tokenizer, tmp)
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


def run_placement(placement: Placement, cfg, run_dir: str | Path, *, session: RaySession | None = None,
                  prediction: dict | None = None, chunks: int = 1, timeout_s: float = 120.0,
                  bucket_bytes: int | None = None, kill_rollout_after_step: int | None = None,
                  kill_critic_after_step: int | None = None, kill_rollout_in_sync: int | None = None,
                  return_weights: bool = False, command=None,
                  startup_timeout_s: float | None = None,
                  evaluate: bool = False, extra_results: dict | None = None, glue: str | None = None,
                  glue_kwargs: dict | None = None, role_threads: dict | None = None) -> dict:
    """Run GRPO (``cfg``) under ``placement``; write ``run_dir``'s record, metrics, trace and timeline.

    ``prediction`` (made before this call) is stored in the record before the run starts.
    ``kill_rollout_after_step``: fault injection, ``ray.kill`` the first rollout worker once the trainer
    has logged that many steps; ``kill_critic_after_step``: the same for PPO's critic actor (split);
    ``kill_rollout_in_sync``: the first rollout worker SIGKILLs itself inside that weight sync (1 = the first),
    mid-broadcast (collective) or as the payload arrives (object store): the run fails within the sync's
    timeout with one line naming the worker.
    ``glue`` ("module:Class") / ``glue_kwargs``: another rollout_func glue than
    :class:`RolloutFunc` (chapter 6's asynchronous modes); its ``record()`` lands in the results as ``glue``.
    ``role_threads``: ``{"actor": n, "rollout": n}``, torch threads of those roles' actors instead of their
    share of cores (a synchronous run whose roles take turns can give each every core: chapter 6's ``sync``).
    ``startup_timeout_s``: each start-up wait's limit (default :func:`startup_timeout`, from the machine's load).
    Returns the record's results (plus ``weights`` if asked).
    """
    bucket_bytes = bucket_bytes or DEFAULT_BUCKET_BYTES
    startup_timeout_s = startup_timeout() if startup_timeout_s is None else startup_timeout_s
    check_placement(placement, cfg, session.cpus() if session is not None and not session.owned else None)
    spread = session is not None and session.nodes > 1
    if spread:
        check_spread(placement, session.node_devices(placement.sets[0].kind))
    run_dir = Path(run_dir)
    # the record first (it refuses a folder that holds a run: records are never overwritten), then the work
    role_threads = dict(role_threads or {})
    bad = sorted(set(role_threads) - {"actor", "rollout"})
    if bad or not all(isinstance(n, int) and 0 < n <= placement.devices for n in role_threads.values()):
        raise RlmLabError(f"role_threads: give actor and/or rollout, each 1..{placement.devices} threads; got {role_threads}")
    record = RunRecord(run_dir, {"run": cfg.to_dict(), "placement": placement.to_dict(), "chunks": chunks,
                                 "timeout_s": timeout_s, "bucket_bytes": bucket_bytes,
                                 **({"role_threads": role_threads} if role_threads else {})}, command, cfg.seed)
    record.update(prediction=prediction, load_average_start=load_average(2), **(extra_results or {}))
    try:
        model_path = _sft_checkpoint(cfg)
    except BaseException as e:
        record.fail(e)
        raise
    own = session is None
    session = session or RaySession(num_cpus=placement.devices)
    ray = session.ray
    from ray.util.placement_group import placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    pg, actors, t_start, set_nodes = None, [], time.perf_counter(), {}
    try:
        if placement.sets[0].kind == "cpu" and session.cpus() < placement.devices:
            raise RlmLabError(f"placement {placement.name!r} asks for {placement.devices} CPUs, Ray has {session.cpus()}")
        strategy = "STRICT_SPREAD" if spread else "PACK"
        pg = placement_group([bundle(s) for s in placement.sets], strategy=strategy)
        try:
            ray.get(pg.ready(), timeout=startup_timeout_s)
        except ray.exceptions.GetTimeoutError:
            raise RlmLabError(f"Ray could not reserve {placement.describe()} ({strategy}) within "
                              f"{startup_timeout_s:g} s") from None
        index = {s.name: i for i, s in enumerate(placement.sets)}
        where = bundle_nodes(ray, pg)
        set_nodes = {s.name: where[i] for s, i in ((s, index[s.name]) for s in placement.sets) if i in where}
        nodes = {"strategy": strategy, "count": session.nodes, "sets": {k: v["name"] for k, v in set_nodes.items()}}
        record.update(nodes=nodes)  # a failed run's record says where its sets were, too

        def on(set_name, cls, share, *args, **more):
            opts = dict(**actor_options(placement.set(set_name), share),
                        scheduling_strategy=PlacementGroupSchedulingStrategy(
                            pg, placement_group_bundle_index=index[set_name]), **more)
            a = ray.remote(cls).options(**opts).remote(*args)
            actors.append(a)
            return a

        # the warm start travels through Ray's object store, not as a path of this machine (.shipping)
        model = ray.put(pack(model_path))

        lora = dict(LORA) if placement.lora else None
        train_set = placement.set_of("actor")
        rollouts = []
        if placement.rollout_separate:
            rset = placement.set_of("rollout")
            per = max(1, rset.devices // rset.dp)
            rollouts = [on(rset.name, RolloutWorker, per, role_threads.get("rollout", threads(rset, per)),
                           model, lora) for _ in range(rset.dp)]
        # max_concurrency 2: the driver fetches the metrics (TrainerWorker.metrics) while train runs
        trainer = on(train_set.name, TrainerWorker, train_set.devices,
                     role_threads.get("actor", threads(train_set, train_set.devices)), max_concurrency=2)
        critic = None
        if cfg.algo == "ppo" and placement.set_of("critic").name != train_set.name:  # split: critic actor
            from .critic_role import CriticWorker  # noqa: PLC0415  optional: guarded by except ImportError

            cset = placement.set_of("critic")
            # PPOConfig.critic_learning_rate defaults to the actor's (rl_args does not set it)
            critic = on(cset.name, CriticWorker, cset.devices, threads(cset, cset.devices), model, cfg.rl_lr)
        try:  # actors import torch + transformers (+ TRL) on start: slow on a busy machine
            pids = ray.get([a.pid.remote() for a in actors], timeout=startup_timeout_s)
            if placement.sync == "collective" and rollouts:
                # the group's store is served by the trainer, on its node's address (127.0.0.1 on one machine)
                host = set_nodes.get(train_set.name, {}).get("address", "127.0.0.1")
                port, world = ray.get(trainer.node_free_port.remote(host), timeout=startup_timeout_s), 1 + len(rollouts)
                backend = sync_backend(placement)  # gloo between cores, NCCL between GPUs
                refs = [trainer.join_group.remote(port, world, timeout_s, backend, host)] + \
                    [r.join_group.remote(port, i + 1, world, timeout_s, backend, host) for i, r in enumerate(rollouts)]
                ray.get(refs, timeout=startup_timeout_s)
        except ray.exceptions.GetTimeoutError:
            raise PlacementRunError(f"the actors of {placement.name!r} did not start within "
                                    f"{startup_timeout_s:g} s") from None
        except ray.exceptions.RayError as e:
            raise PlacementRunError(f"an actor of {placement.name!r} failed to start: "
                                    f"{str(e).strip().splitlines()[-1][:200]}") from None
        if kill_rollout_in_sync is not None and rollouts:
            ray.get(rollouts[0].die_in_sync.remote(kill_rollout_in_sync), timeout=timeout_s)
            record.update(fault_injected=f"rollout worker 0 of {len(rollouts)} killed in weight sync {kill_rollout_in_sync}")
        t_ready = time.perf_counter()
        job = {"cfg": cfg.to_dict(), "model": model,
               "rollouts": rollouts, "sync": placement.sync if rollouts else "none", "chunks": chunks,
               "timeout_s": timeout_s, "bucket_bytes": bucket_bytes, "return_weights": return_weights,
               "lora": lora, "evaluate": evaluate, "glue": glue, "glue_kwargs": glue_kwargs or {}, "critic": critic}
        ref = trainer.train.remote(job)
        victim, after = ((rollouts[0], kill_rollout_after_step) if kill_rollout_after_step is not None and rollouts
                         else (critic, kill_critic_after_step) if kill_critic_after_step is not None and critic is not None
                         else (None, None))
        metrics = MetricsFeed(ray, trainer, record, timeout_s)
        deadline = time.monotonic() + timeout_s * max(1, cfg.rl_steps)
        while not ray.wait([ref], timeout=0.5)[0] and time.monotonic() < deadline:
            if not metrics.fetch():
                break  # the trainer is gone: ray.get below says how
            if victim is not None and metrics.rewards >= after:
                ray.kill(victim, no_restart=True)
                record.update(fault_injected_at_s=round(time.perf_counter() - t_start, 3))
                victim = None
        try:
            out = ray.get(ref, timeout=max(1.0, deadline - time.monotonic()))
        except ray.exceptions.RayTaskError as e:
            cause = getattr(e, "cause", None)
            if isinstance(cause, RlmLabError):
                raise PlacementRunError(str(cause)) from None
            lines = [ln for ln in str(e).strip().splitlines() if ln.strip()]
            raise PlacementRunError(f"trainer failed: {lines[-1][:200] if lines else type(e).__name__}") from None
        except ray.exceptions.RayActorError as e:
            raise PlacementRunError(f"trainer actor died: {type(e).__name__}") from None
        finally:
            metrics.fetch()  # what the trainer logged last (or before it failed)
        spans = {"trainer": out["trainer_spans"]}
        for i, r in enumerate(rollouts):
            spans[f"rollout{i}"] = ray.get(r.spans.remote(), timeout=timeout_s)
        if critic is not None:
            spans["critic"] = ray.get(critic.spans.remote(), timeout=timeout_s)
            out["critic_peak_rss_bytes"] = ray.get(critic.peak_rss.remote(), timeout=timeout_s)
        results = _results(out, placement, spans, pids, t_ready - t_start, cfg)
        results["nodes"] = nodes
        if "glue_record" in out:
            results["glue"] = out["glue_record"]
        results["load_average_end"] = load_average(2)
        results["prediction"] = prediction
        results.update(extra_results or {})
        _write_timeline(record.dir, placement, out, spans)
        record.complete(**results)
        if return_weights:
            results["weights"] = out["weights"]
            if "critic_weights" in out:
                results["critic_weights"] = out["critic_weights"]
        return results
    except BaseException as e:
        named = name_dead_node(ray, e, set_nodes) if spread else e
        fail_record(record, named, t_start)
        if named is e:
            raise
        raise named from None
    finally:
        release(ray, actors, pg, session if own else None)


class MetricsFeed:
    """The trainer's metric rows, fetched through Ray (``TrainerWorker.metrics``) and appended to the driver's
    record as they come: the trainer may run on another machine, whose files the driver never sees."""

    def __init__(self, ray, trainer, record, timeout_s: float):
        self.ray, self.trainer, self.record, self.timeout_s = ray, trainer, record, timeout_s
        self.count = self.rewards = 0

    def fetch(self) -> bool:
        """Append the rows logged since the last fetch; False once the trainer cannot answer (dead)."""
        try:
            rows = self.ray.get(self.trainer.metrics.remote(self.count), timeout=self.timeout_s)
        except self.ray.exceptions.GetTimeoutError:
            return True
        except self.ray.exceptions.RayError:
            return False
        for row in rows:
            self.record.log(row)
        self.count += len(rows)
        self.rewards += sum(1 for r in rows if "reward" in r)
        return True


def fail_record(record, e: BaseException, t_start: float) -> None:
    """Mark ``record`` failed (or interrupted) with the error line, the load and the seconds it ran."""
    record.update(error=str(e) or type(e).__name__, load_average_end=load_average(2),
                  seconds_to_failure=round(time.perf_counter() - t_start, 3))
    record.interrupt() if isinstance(e, KeyboardInterrupt) else record.fail(e)


def release(ray, actors, pg, session=None) -> None:
    """Kill the run's actors, remove its placement group and close the session it started (each may be gone)."""
    from ray.util.placement_group import remove_placement_group

    for a in actors:
        try:
            ray.kill(a, no_restart=True)
        except Exception:  # noqa: BLE001 - already dead
            pass
    if pg is not None:
        try:
            remove_placement_group(pg)
        except Exception:  # noqa: BLE001 - already removed
            pass
    if session is not None:
        session.close()


def _results(out: dict, placement: Placement, spans: dict, pids: list, startup_s: float, cfg) -> dict:
    summary = out["tracer_summary"]
    stages = {k: round(v["mean_s"], 5) for k, v in summary.get("stages", {}).items()}
    rewards = out["rewards"]
    return {
        "placement": placement.name, "describe": placement.describe(),
        "steps": out["steps"], "rewards": rewards,
        "reward_first": rewards[0] if rewards else None, "reward_final": rewards[-1] if rewards else None,
        "step_seconds_median": summary.get("step_wall_s", {}).get("median"),
        "step_seconds_mean": summary.get("step_wall_s", {}).get("mean"),
        "steps_timed": summary.get("steps"), "stage_seconds_mean": stages,
        "train_seconds": round(out["train_seconds"], 3), "startup_seconds": round(startup_s, 3),
        "sync": out["sync"], "trainer_threads": out["threads"], "pids": pids, "lora": placement.lora,
        "throughput": out.get("throughput"),
        "parameters": out["parameters"], "trainable_parameters": out["trainable_parameters"],
        "trainer_peak_rss_bytes": out.get("peak_rss_bytes"), "critic_peak_rss_bytes": out.get("critic_peak_rss_bytes"),
        "state_bytes": out.get("state_bytes"), "weights_sha256": out.get("weights_sha256"),
        **{k: out[k] for k in ("accuracy_after", "format_rate_after") if k in out},
        "tracer": summary,
    }


def _write_timeline(folder: Path, placement: Placement, out: dict, spans: dict) -> None:
    """trace.json.gz (one Perfetto/Chrome trace, a process per actor; ``trace_merge.gantt`` draws it on demand)."""
    processes = {"trainer": {"steps": out["tracer_steps"], "t0": out["tracer_t0"], "spans": spans["trainer"]}}
    for name, sp in spans.items():
        if name != "trainer":
            processes[name] = {"spans": sp}
    trace = merge(processes, t0=out["tracer_t0"])
    write_trace(folder, trace)
