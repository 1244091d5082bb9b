"""``rlm-lab predict`` with a placement: the config's ``placement:`` and ``cluster:`` keys, and the text report.

The prediction itself is :func:`rlm_lab.cost.placement.predict_placement`.
"""

from __future__ import annotations

from ..errors import RlmLabError
from ..stages import STAGE_ORDER, Stage
from .assumed import apply_assumptions
from .hardware import load_profile
from .placement import GIB, PlacementPrediction, _Predictor, cluster_profile, predict_placement
from .placement_spec import Cluster, Placement, get_placement, placement_from_dict
from .units import _bytes, _seconds

S = Stage


def _order(stage) -> int:
    gen = {S.PREFILL: 0, S.DECODE: 1}
    return gen[stage] if stage in gen else 2 + STAGE_ORDER.index(stage)


def format_placement(pp: PlacementPrediction) -> str:
    """Text report: one line per set, the phases, step time, reason; "DOES NOT FIT" with the numbers."""
    lines = [f"placement {pp.placement.name}: {pp.placement.describe()}  ({pp.algo.name}, {pp.profile_name})"]
    for s in pp.sets:
        st = ", ".join(f"{k} {_seconds(v)}" for k, v in sorted(s.stages.items(), key=lambda kv: _order(kv[0])))
        lines.append(f"  set {s.name} ({s.devices} dev, {'+'.join(s.roles)}): busy {_seconds(s.busy_s)}; "
                     f"memory {_bytes(s.memory.total)} of {_bytes(s.capacity)} per device"
                     f"{'' if s.fits else '  DOES NOT FIT'}; {st}")
    lines.append("  phases: " + ", ".join(f"{p} {_seconds(t)}" + (f" [{n}]" if n != '-' else '')
                                          for p, (t, n) in pp.phases.items() if t))
    lines.append(f"  weight sync {_bytes(pp.sync_bytes)}, reshard {_bytes(pp.reshard_bytes)} (all devices)")
    for s in pp.sets:
        e = s.engine
        if e is not None and e.fits:
            d = e.drain
            lines.append(f"  engine on {s.name}: {e.kv_tokens:,.0f} KV tokens per replica, max_num_seqs {e.max_num_seqs}; "
                         f"drained batch of {len(e.lengths)} sequences: {d.steps:,.0f} steps, mean batch "
                         f"{d.concurrency:.1f}, peak {d.peak_batch}, {d.preemptions} preemptions")
    if not pp.fits:
        lines.append("  " + pp.memory_error().replace("does not fit", "DOES NOT FIT", 1))
        return "\n".join(lines)
    for mode in ((pp.mode,) if pp.mode == "sync" else ("sync", pp.mode)):
        r = pp.in_mode(mode, pp.eta if mode == pp.mode else None)
        idle = ", ".join(f"{k} {100 * v:.0f} %" for k, v in r.idle.items())
        eta = "" if mode in ("sync", "one_step_off") else f" eta {'unbounded' if r.eta is None else r.eta}"
        lines.append(f"  mode {mode}{eta}: step {_seconds(r.step_s)} (generation {_seconds(r.gen_s)}, trainer "
                     f"{_seconds(r.train_s)}; {r.bound}); critical stage {r.critical[0]}"
                     f"{'' if r.critical[1] == '-' else ' on ' + r.critical[1]}; exposed sync "
                     f"{_seconds(r.exposed_sync_s)}; idle {idle}" + (f"; {r.note}" if r.note else ""))
    lines.append(f"  step time: {_seconds(pp.step_s)} (mode {pp.mode}); {pp.reason()}")
    return "\n".join(lines)


# ---- from a predict config ---------------------------------------------------------------------
def cluster_from(value, profile, devices: int | None = None) -> Cluster:
    """A Cluster from a config mapping {devices, kind, memory_per_device_gib, link_gbps, devices_per_node,
    network_gbps}; missing fields come from the hardware profile (memory; the link between sets, the node size and
    the network card from its topology, placement.sync_time) and ``devices`` (the workload's); kind defaults to
    "gpu" for a profile whose launches overlap compute (CUDA streams), else "cpu"."""
    prof = load_profile(profile)
    value = {} if value is None else value
    known = {"devices", "kind", "memory_per_device_gib", "link_gbps", "devices_per_node", "network_gbps"}
    if not isinstance(value, dict):
        raise RlmLabError(f"cluster must be a mapping of {', '.join(sorted(known))}")
    bad = sorted(set(map(str, value)) - known)
    if bad:
        raise RlmLabError(f"unknown cluster field(s) {', '.join(bad)}; known: {', '.join(sorted(known))}")
    return Cluster(devices=value.get("devices", devices or 1),
                   kind=value.get("kind", "gpu" if prof.overlap_overhead else "cpu"),
                   memory_per_device_gib=value.get("memory_per_device_gib", prof.memory_bytes / GIB),
                   link_gbps=value.get("link_gbps"), devices_per_node=value.get("devices_per_node"),
                   network_gbps=value.get("network_gbps"))


def placement_from(value, cluster: Cluster, algo) -> Placement:
    """A placement from a config value: a name (``disaggregated``), a mapping {name, options...} of a named
    placement (``{name: disaggregated, rollout_devices: 2}``) or a full mapping with ``sets`` and ``roles``."""
    if isinstance(value, str):
        return get_placement(value, cluster, algo)
    if isinstance(value, dict) and "sets" in value:
        return placement_from_dict(value).validate(algo, cluster)
    if isinstance(value, dict) and "name" in value:
        opts = {k: v for k, v in value.items() if k != "name"}
        return get_placement(value["name"], cluster, algo, **opts)
    raise RlmLabError("placement must be a name, {name: ..., options} or {sets: [...], roles: {...}}")


def predict_placement_from_config(cfg: dict) -> PlacementPrediction:
    """The ``placement:`` path of ``rlm-lab predict`` (cfg already has the CLI's defaults; ``mode``/``eta`` the
    execution mode, modes.py)."""
    prof = apply_assumptions(cfg["hardware"], cfg.get("assume"))
    wl = cfg.get("workload") or {}
    cluster = cluster_from(cfg.get("cluster"), prof, wl.get("devices") if isinstance(wl, dict) else None)
    pr = _Predictor(cfg["model"], cfg["algorithm"], wl, cluster_profile(prof, cluster),
                    cfg.get("critic"), cfg.get("reward_model"), cfg.get("beta"))
    placement = placement_from(cfg["placement"], cluster, pr.alg)
    return predict_placement(placement, pr.spec, pr.alg, pr.wl, pr.prof, cluster, lora=cfg.get("lora"),
                             _predictor=pr, mode=cfg.get("mode") or "sync", eta=cfg.get("eta"))
