"""The hybrid engine as a placement: GRPO through TRL with one copy of the actor, trained ZeRO-3-sharded over the
set's ranks and gathered into a replicated generation layout (t_g = 1) for every generation, released after.

HybridFlow's 3D-HybridEngine (arXiv 2409.19256, Sec. 5.4): from a training layout sharded over s devices to a
generation layout of tensor-parallel size t_g, each device receives M (s - t_g) / (t_g s) bytes (M: the model's
parameter bytes); going back frees the gathered copy and sends nothing. Here the reshard is done by TRL and
DeepSpeed, not by us: ``GRPOConfig(deepspeed=configs/deepspeed/zero3.json, ds3_gather_for_generation=True)``
makes TRL's generation path (``trl.models.utils.unwrap_model_for_generation``) enter
``deepspeed.zero.GatheredParameters`` around ``generate`` (https://deepspeed.readthedocs.io/en/latest/zero3.html).
Why DeepSpeed and not the Trainer's FSDP: on CPU the HF Trainer turns FSDP into plain DDP
(:mod:`rlm_lab.parallel.bench.e2e` refuses that mislabel); DeepSpeed ZeRO-3 really shards on CPU (gloo).

The runtime: one placement group, one bundle of the set's cores; one Ray actor per rank (``num_cpus=1``,
``torch.set_num_threads(1)``), the actors forming one torch.distributed world (RANK / WORLD_SIZE / MASTER_ADDR =
127.0.0.1 / MASTER_PORT set in each actor before accelerate builds its state), each running the same
``GRPOTrainer`` (:func:`rlm_lab.train.rl.make_trainer`) with TRL's own generation (no rollout_func).
Per-device batch = the run's batch / s, so one step sees the same number of completions as the colocated run.

Measured per rank: the reshard's collectives (:class:`rlm_lab.parallel.comm_counter.CommCounter`, active only
while TRL's context gathers and releases: DeepSpeed's torch backend calls ``torch.distributed``, whose ops pass
the dispatcher the counter watches), the bytes received per device (all-gather message x (s-1)/s), the
gather's and release's time, and the stage tracer's peaks (VmHWM) in the generation layout (TRL's generate
span holds the gather) and in the training layout (forward, backward, optimizer).

    flock -x /tmp/rlm-lab-measure.lock .venv/bin/rlm-lab place --hybrid --size cpu --out data/runs/cpu

Ignores: tensor-parallel generation layouts (t_g > 1: TRL's generation path only gathers, it never
re-partitions), GPU memory (on CPU the RSS is what there is), fault injection (chapter 5's faults are
the rollout and critic workers').
"""

from __future__ import annotations

import importlib.util
import time
from pathlib import Path

from ..errors import RlmLabError
from ..host import free_port, load_average
from ..record import RunRecord, write_trace
from ..trace_merge import merge
from .hybrid_rank import HybridWorker, rank_config, train_rank  # noqa: F401 - the rank's side, in the actors
from .resources import actor_options, bundle
from .ray_run import fail_record, release, results_of
from .runtime import RaySession, _sft_checkpoint, check_placement, startup_timeout
from .trl_rollout import PlacementRunError


def check_hybrid(placement, cfg) -> int:
    """The world size (ranks) of a runnable hybrid placement for ``cfg``, else one RlmLabError line."""
    if not placement.reshard or len(placement.sets) != 1:
        raise RlmLabError(f"placement {placement.name!r} is no hybrid engine (one set, reshard=True)")
    rset = placement.sets[0]
    if rset.kind != "cpu" or rset.generation_tp != 1:
        raise RlmLabError("the hybrid run here is CPU ranks with a replicated generation layout (gen_tp=1)")
    world = rset.devices
    if world < 2:
        raise RlmLabError(f"the hybrid engine shards the actor over >= 2 ranks; the set has {world}")
    per = cfg.batch_size // world
    if cfg.batch_size % world or (per * world) % cfg.num_generations:
        raise RlmLabError(f"batch {cfg.batch_size} does not split over {world} ranks into whole groups of "
                          f"{cfg.num_generations} completions; use a world size that divides it")
    if importlib.util.find_spec("deepspeed") is None:
        raise RlmLabError("the hybrid placement trains with DeepSpeed ZeRO-3, which is not installed: "
                          ".venv/bin/pip install --no-build-isolation -c constraints.txt deepspeed==0.19.8")
    return world


def formula_received_per_device(param_bytes: float, s: int, t_g: int = 1) -> float:
    """HybridFlow Sec. 5.4: bytes one device receives going from s training shards to a t_g generation layout."""
    return param_bytes * (s - t_g) / (t_g * s)


def run_hybrid(placement, cfg, run_dir, *, session=None, prediction: dict | None = None, timeout_s: float = 120.0,
               command=None, startup_timeout_s: float | None = None) -> dict:
    """GRPO (``cfg``) under the hybrid ``placement`` on Ray; writes ``run_dir``'s record, metrics and merged
    timeline like :func:`rlm_lab.placement.runtime.run_placement`. ``prediction`` (made before) is stored
    first; ``startup_timeout_s`` as there (default from the machine's load). Returns the record's results."""
    startup_timeout_s = startup_timeout() if startup_timeout_s is None else startup_timeout_s

    check_placement(placement, cfg, session.cpus() if session is not None and not session.owned else None)
    world = check_hybrid(placement, cfg)
    rcfg = rank_config(cfg, world, timeout_s)
    record = RunRecord(Path(run_dir), {"run": cfg.to_dict(), "rank_run": rcfg.to_dict(), "placement": placement.to_dict(),
                                       "world": world, "timeout_s": timeout_s}, command, cfg.seed)
    record.update(prediction=prediction, load_average_start=load_average(2))
    try:
        model_path = _sft_checkpoint(cfg)  # the same SFT start as the other placements of this config
    except BaseException as e:
        record.fail(e)
        raise
    own = session is None
    session = session or RaySession(num_cpus=placement.devices)
    ray = session.ray
    from ray.util.placement_group import placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    rset = placement.sets[0]
    pg, actors, t_start = None, [], time.perf_counter()
    try:
        if session.cpus() < placement.devices:
            raise RlmLabError(f"placement {placement.name!r} asks for {placement.devices} CPUs, Ray has {session.cpus()}")
        pg = placement_group([bundle(rset)], strategy="PACK")
        try:
            ray.get(pg.ready(), timeout=startup_timeout_s)
        except ray.exceptions.GetTimeoutError:
            raise RlmLabError(f"Ray could not reserve {placement.describe()} within {startup_timeout_s:g} s") from None
        opts = dict(**actor_options(rset, 1), scheduling_strategy=PlacementGroupSchedulingStrategy(
            pg, placement_group_bundle_index=0))
        port = free_port()
        actors = [ray.remote(HybridWorker).options(**opts).remote(1, r, world, port) for r in range(world)]
        try:
            pids = ray.get([a.pid.remote() for a in actors], timeout=startup_timeout_s)
        except (ray.exceptions.GetTimeoutError, ray.exceptions.RayError) as e:
            raise PlacementRunError(f"the ranks of {placement.name!r} did not start: {type(e).__name__}") from None
        t_ready = time.perf_counter()
        job = {"cfg": rcfg.to_dict(), "model_path": str(model_path), "metrics_path": str(record.metrics_path)}
        refs = [a.train.remote(job) for a in actors]
        try:
            outs = ray.get(refs, timeout=timeout_s * max(1, cfg.rl_steps) + startup_timeout_s)
        except ray.exceptions.RayTaskError as e:
            lines = [ln for ln in str(e).strip().splitlines() if ln.strip()]
            raise PlacementRunError(f"a rank failed: {lines[-1][:200] if lines else type(e).__name__}") from None
        except ray.exceptions.RayActorError as e:
            raise PlacementRunError(f"a rank's actor died: {type(e).__name__}") from None
        except ray.exceptions.GetTimeoutError:
            raise PlacementRunError(f"the ranks did not finish within "
                                    f"{timeout_s * max(1, cfg.rl_steps) + startup_timeout_s:g} s") from None
        results = hybrid_results(outs, placement, pids, t_ready - t_start, cfg, results_of)
        results.update(load_average_end=load_average(2), prediction=prediction)
        _timeline(record.dir, placement, outs)
        record.complete(**results)
        return results
    except BaseException as e:
        fail_record(record, e, t_start)
        raise
    finally:
        release(ray, actors, pg, session if own else None)


def hybrid_results(outs: list[dict], placement, pids, startup_s: float, cfg, base) -> dict:
    """The record's results: rank 0's run (as every placement's, ``base`` = ray_run.results_of) plus the reshard
    per rank against HybridFlow's formula and the peaks of both layouts."""
    r0 = outs[0]
    out = {**r0, "trainer_spans": [], "sync": {"syncs": 0, "bytes_per_sync": 0}, "state_bytes": None}
    res = base(out, placement, {}, pids, startup_s, cfg)
    s = len(outs)
    m = r0["param_bytes"]
    per_rank = []
    for o in outs:
        msg = o["reshard"]["allgather_message_bytes_per_gather"]
        per_rank.append({"rank": o["rank"], "gathers": o["reshard"]["gathers"], "allgather_message_bytes": msg,
                         "received_bytes": msg * (s - 1) / s, "release_bytes": sum(
                             v["bytes"] for v in o["reshard"]["release"].values()),
                         "gather_seconds_mean": o["reshard"]["gather_seconds_mean"],
                         "release_seconds_mean": o["reshard"]["release_seconds_mean"],
                         "allgather_bytes_each_gather": o["reshard"]["allgather_bytes_each_gather"],
                         "shard_bytes": o["shard_bytes"], "threads": o["threads"],
                         "generate_peak_rss_bytes": o["generate_peak_rss_bytes"],
                         "train_peak_rss_bytes": o["train_peak_rss_bytes"], "peak_rss_bytes": o["peak_rss_bytes"],
                         "rewards": o["rewards"]})
    res.update(world=s, parallelism=r0["parallelism"], losses=r0["losses"], reshard={
        "per_rank": per_rank, "param_bytes": m, "partitioned_param_bytes": r0["partitioned_param_bytes"],
        "persistent_param_bytes": r0["persistent_param_bytes"],
        "formula_received_per_device": formula_received_per_device(m, s),
        "formula_received_per_device_partitioned": formula_received_per_device(r0["partitioned_param_bytes"], s),
        # steady state: the gathers after the first (the first also fetches the small parameters DeepSpeed then
        # keeps replicated, ``ds_persist``: at most stage3_param_persistence_threshold elements each)
        "measured_received_per_device": _steady(per_rank[0]["allgather_bytes_each_gather"]) * (s - 1) / s,
        "first_gather_received_per_device": per_rank[0]["allgather_bytes_each_gather"][0] * (s - 1) / s,
        "collectives": r0["reshard"]["collectives"], "gather_seconds_mean": r0["reshard"]["gather_seconds_mean"],
        "release_seconds_mean": r0["reshard"]["release_seconds_mean"]},
        generate_peak_rss_bytes=r0["generate_peak_rss_bytes"], train_peak_rss_bytes=r0["train_peak_rss_bytes"])
    return res


def _steady(each: list) -> float:
    later = each[1:] or each
    return sum(later) / len(later)


def _timeline(folder: Path, placement, outs: list[dict]) -> None:
    """trace.json.gz (a process per rank: its stage tracer's steps plus its gather/release spans)."""
    t0 = outs[0]["tracer_t0"]
    processes = {f"rank{o['rank']}": {"steps": o["tracer_steps"], "t0": o["tracer_t0"], "spans": o["reshard_spans"]}
                 for o in outs}
    trace = merge(processes, t0=t0)
    write_trace(folder, trace)
