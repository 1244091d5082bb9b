"""The Ray side of one placement run, in the order :func:`rlm_lab.placement.runtime.run_with` takes it: reserve the
placement group (a bundle per resource set), start the roles' actors pinned to their sets, wait for them and join
the weight-sync group, train (the trainer's metric rows fetched through Ray as they come, the asked-for fault
injected), then collect the spans and finish the record. :class:`RunState` holds what each step adds, so that
the teardown (:func:`release`) frees what was started whichever step failed.

Also what every placement run writes at its end (the Ray runtime, :mod:`rlm_lab.placement.inprocess`,
:mod:`rlm_lab.placement.hybrid`): the record's results from the trainer's output (:func:`results_of`), the merged
timeline (:func:`write_timeline`), a failed record (:func:`fail_record`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from ..cost.placement_spec import Placement
from ..errors import RlmLabError
from ..host import load_average
from ..record import RunRecord, write_trace
from ..trace_merge import merge
from .critic_role import CriticWorker
from .resources import actor_options, bundle, sync_backend, threads
from .trl_rollout import PlacementRunError
from .workers import RolloutWorker, TrainerWorker

# LoRA of a ``lora=True`` placement: PEFT's default targets for Llama (q_proj, v_proj) at rank 8, what the
# cost model assumes for ``placement.lora`` (rlm_lab.cost.lora); no dropout, so placements stay comparable.
LORA = dict(r=8, lora_alpha=16, lora_dropout=0.0, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM")


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


@dataclass
class RunState:
    """One run's Ray handles, filled in step by step: what the teardown releases and the error names."""

    ray: object
    placement: Placement
    cfg: object
    opts: object                  # the run's RunOptions, resolved (rlm_lab.placement.runtime)
    record: RunRecord
    t_start: float = field(default_factory=time.perf_counter)
    pg: object = None
    index: dict = field(default_factory=dict)       # set name -> bundle index
    set_nodes: dict = field(default_factory=dict)   # set name -> the node Ray reserved it on
    nodes: dict = field(default_factory=dict)       # what the record says of them
    actors: list = field(default_factory=list)
    trainer: object = None
    rollouts: list = field(default_factory=list)
    critic: object = None
    lora: dict | None = None
    pids: list = field(default_factory=list)
    t_ready: float = 0.0


def reserve(run: RunState, session, spread: bool) -> None:
    """Reserve the placement group (a bundle per resource set; ``STRICT_SPREAD`` over nodes, else ``PACK``) and
    write to the record which node holds each set."""
    from ray.util.placement_group import placement_group

    ray, placement, wait_s = run.ray, run.placement, run.opts.startup_timeout_s
    if placement.sets[0].kind == "cpu" and session.cpus() < placement.devices:
        raise RlmLabError(f"placement {placement.name!r} asks for {placement.devices} CPUs, Ray has {session.cpus()}")
    strategy = "STRICT_SPREAD" if spread else "PACK"
    run.pg = placement_group([bundle(s) for s in placement.sets], strategy=strategy)
    try:
        ray.get(run.pg.ready(), timeout=wait_s)
    except ray.exceptions.GetTimeoutError:
        raise RlmLabError(f"Ray could not reserve {placement.describe()} ({strategy}) within {wait_s:g} s") from None
    run.index = {s.name: i for i, s in enumerate(placement.sets)}
    where = bundle_nodes(ray, run.pg)
    run.set_nodes = {s.name: where[run.index[s.name]] for s in placement.sets if run.index[s.name] in where}
    run.nodes = {"strategy": strategy, "count": session.nodes, "sets": {k: v["name"] for k, v in run.set_nodes.items()}}
    run.record.update(nodes=run.nodes)  # a failed run's record says where its sets were, too


def _actor(run: RunState, set_name: str, cls, share: int, *args, **more):
    """Start ``cls(*args)`` as a Ray actor pinned to ``set_name``'s bundle with ``share`` of its devices."""
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    opts = dict(**actor_options(run.placement.set(set_name), share),
                scheduling_strategy=PlacementGroupSchedulingStrategy(
                    run.pg, placement_group_bundle_index=run.index[set_name]), **more)
    a = run.ray.remote(cls).options(**opts).remote(*args)
    run.actors.append(a)
    return a


def start_actors(run: RunState, model) -> None:
    """Start the roles' actors: the rollout workers (if rollout has a set of its own), the trainer, and PPO's
    critic when split from the actor."""
    placement, cfg, role_threads = run.placement, run.cfg, run.opts.role_threads
    run.lora = dict(LORA) if placement.lora else None
    if placement.rollout_separate:
        rset = placement.set_of("rollout")
        per = max(1, rset.devices // rset.dp)
        run.rollouts = [_actor(run, rset.name, RolloutWorker, per, role_threads.get("rollout", threads(rset, per)),
                               model, run.lora) for _ in range(rset.dp)]
    train_set = placement.set_of("actor")
    # max_concurrency 2: the driver fetches the metrics (TrainerWorker.metrics) while train runs
    run.trainer = _actor(run, train_set.name, TrainerWorker, train_set.devices,
                         role_threads.get("actor", threads(train_set, train_set.devices)), max_concurrency=2)
    if cfg.algo == "ppo" and placement.set_of("critic").name != train_set.name:  # split: critic actor
        cset = placement.set_of("critic")
        # PPOConfig.critic_learning_rate defaults to the actor's (rl_args does not set it)
        run.critic = _actor(run, cset.name, CriticWorker, cset.devices, threads(cset, cset.devices), model, cfg.rl_lr)


def join_sync_group(run: RunState) -> None:
    """Wait for the actors to start (they import torch + transformers (+ TRL): slow on a busy machine) and, for
    a collective sync, join the trainer and the rollout workers into one process group."""
    ray, placement, wait_s, timeout_s = run.ray, run.placement, run.opts.startup_timeout_s, run.opts.timeout_s
    try:
        run.pids = ray.get([a.pid.remote() for a in run.actors], timeout=wait_s)
        if placement.sync == "collective" and run.rollouts:
            # the group's store is served by the trainer, on its node's address (127.0.0.1 on one machine)
            host = run.set_nodes.get(placement.set_of("actor").name, {}).get("address", "127.0.0.1")
            port, world = ray.get(run.trainer.node_free_port.remote(host), timeout=wait_s), 1 + len(run.rollouts)
            backend = sync_backend(placement)  # gloo between cores, NCCL between GPUs
            refs = [run.trainer.join_group.remote(port, world, timeout_s, backend, host)] + \
                [r.join_group.remote(port, i + 1, world, timeout_s, backend, host) for i, r in enumerate(run.rollouts)]
            ray.get(refs, timeout=wait_s)
    except ray.exceptions.GetTimeoutError:
        raise PlacementRunError(f"the actors of {placement.name!r} did not start within {wait_s:g} s") from None
    except ray.exceptions.RayError as e:
        raise PlacementRunError(f"an actor of {placement.name!r} failed to start: "
                                f"{str(e).strip().splitlines()[-1][:200]}") from None


def run_trainer(run: RunState, model) -> dict:
    """Run the trainer's job, appending its metric rows to the record as they come and injecting the asked-for
    fault; the trainer's output, or one PlacementRunError line."""
    ray, opts, placement = run.ray, run.opts, run.placement
    if opts.kill_rollout_in_sync is not None and run.rollouts:
        ray.get(run.rollouts[0].die_in_sync.remote(opts.kill_rollout_in_sync), timeout=opts.timeout_s)
        run.record.update(fault_injected=f"rollout worker 0 of {len(run.rollouts)} killed in weight sync "
                                         f"{opts.kill_rollout_in_sync}")
    run.t_ready = time.perf_counter()
    job = {"cfg": run.cfg.to_dict(), "model": model,
           "rollouts": run.rollouts, "sync": placement.sync if run.rollouts else "none", "chunks": opts.chunks,
           "timeout_s": opts.timeout_s, "bucket_bytes": opts.bucket_bytes, "return_weights": opts.return_weights,
           "lora": run.lora, "evaluate": opts.evaluate, "glue": opts.glue, "glue_kwargs": opts.glue_kwargs,
           "critic": run.critic}
    ref = run.trainer.train.remote(job)
    victim, after = ((run.rollouts[0], opts.kill_rollout_after_step)
                     if opts.kill_rollout_after_step is not None and run.rollouts
                     else (run.critic, opts.kill_critic_after_step)
                     if opts.kill_critic_after_step is not None and run.critic is not None
                     else (None, None))
    metrics = MetricsFeed(ray, run.trainer, run.record, opts.timeout_s)
    deadline = time.monotonic() + opts.timeout_s * max(1, run.cfg.rl_steps)
    while not ray.wait([ref], timeout=0.5)[0] and time.monotonic() < deadline:
        if not metrics.fetch():
            break  # the trainer is gone: ray.get below says how
        if victim is not None and metrics.rewards >= after:
            ray.kill(victim, no_restart=True)
            run.record.update(fault_injected_at_s=round(time.perf_counter() - run.t_start, 3))
            victim = None
    try:
        return ray.get(ref, timeout=max(1.0, deadline - time.monotonic()))
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


def finish(run: RunState, out: dict) -> dict:
    """Collect the actors' spans, write the merged timeline and complete the record; the results (plus the
    weights if asked)."""
    ray, timeout_s, opts = run.ray, run.opts.timeout_s, run.opts
    spans = {"trainer": out["trainer_spans"]}
    for i, r in enumerate(run.rollouts):
        spans[f"rollout{i}"] = ray.get(r.spans.remote(), timeout=timeout_s)
    if run.critic is not None:
        spans["critic"] = ray.get(run.critic.spans.remote(), timeout=timeout_s)
        out["critic_peak_rss_bytes"] = ray.get(run.critic.peak_rss.remote(), timeout=timeout_s)
    results = results_of(out, run.placement, spans, run.pids, run.t_ready - run.t_start, run.cfg)
    results["nodes"] = run.nodes
    if "glue_record" in out:
        results["glue"] = out["glue_record"]
    results["load_average_end"] = load_average(2)
    results["prediction"] = opts.prediction
    results.update(opts.extra_results)
    write_timeline(run.record.dir, run.placement, out, spans)
    run.record.complete(**results)
    if opts.return_weights:
        results["weights"] = out["weights"]
        if "critic_weights" in out:
            results["critic_weights"] = out["critic_weights"]
    return results


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


def results_of(out: dict, placement: Placement, spans: dict, pids: list, startup_s: float, cfg) -> dict:
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


def write_timeline(folder: Path, placement: Placement, out: dict, spans: dict) -> None:
    """trace.json.gz (one Perfetto/Chrome trace, a process per actor; ``trace_merge.gantt`` draws it on demand)."""
    processes = {"trainer": {"steps": out["tracer_steps"], "t0": out["tracer_t0"], "spans": spans["trainer"]}}
    for name, sp in spans.items():
        if name != "trainer":
            processes[name] = {"spans": sp}
    trace = merge(processes, t0=out["tracer_t0"])
    write_trace(folder, trace)

