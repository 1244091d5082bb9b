"""The placement advisor: enumerate placements of an RL step's models on a cluster and the execution modes they
can run in, drop what does not fit, rank the rest by predicted step time (placement.py, modes.py), and say why
each is fast or slow.

    advise("configs/models/qwen2.5-7b.config.json", "ppo", workload, Cluster(64, "gpu", 80, 50), "h100-sxm",
           modes=("sync", "one_step_off", "stale", "async"))

Search space (issue 9 item 6; the planners of ReaL arXiv 2406.14088 and HybridFlow arXiv 2409.19256 Sec. 6 search
the same kind of space with their own estimators):

1. every grouping of the roles into resource sets (set partitions: Bell numbers, 5 for GRPO's actor, rollout and
   reference, 52 for PPO's five roles; ``placement_spec.enumerate_groupings``);
2. every split of the cluster's devices between the sets, with set sizes from a grid (every size up to 16
   devices; beyond, powers of two and multiples of devices/8) that add up to the cluster;
3. inside each set, its parallel layout: tensor-parallel size tp (powers of two up to ``max_tp``), expert
   parallelism ep for a MoE model (powers of two up to ``max_ep`` dividing the data-parallel size and the experts),
   ZeRO 0 or 3 for sets that train a model, and for a set holding both actor and rollout the hybrid engine (FSDP
   training resharded into generation tensor-parallel size t_g);
4. each placement in each of the asked execution modes (sync, one_step_off, stale eta, async; modes.py).

Per set, the layout is chosen independently as the one that fits and gives that set the shortest busy time of
the synchronous step (exact for one-set placements; across sets and for the overlapping modes a heuristic, since
the step takes a max over concurrent sets). Each (roles, set, first device, layout) is priced once and cached.

**Ranking and ties** (:data:`TIE_RULE`): by predicted step time; step times equal to 3 significant digits are tied
and ordered by lower staleness (on-policy first: a stale sample changes learning, chapter 6), then less memory per
device (more headroom), then fewer sets, then the placement's description (alphabetical), so the order is
deterministic and the report says why two equal times are listed as they are.

Validation against measurements (chapter 5): :func:`kendall_tau` (predicted against measured ranking) and
:func:`regret` (measured time of the advisor's first pick over the best measured time).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace

from ..errors import RlmLabError, number_arg
from ..records.files import json_text
from .assumed import apply_assumptions, assumption_lines, fitted_assumptions, parse_assume
from .cli import (
    DEFAULTS,
    add_run_flags,
    check_inputs,
    hardware_line,
    load_config,
    require_workload,
    run_workload,
    shipped_model,
)
from .hardware import load_profile
from .lora import lora_from
from .modes import MODE_HELP, MODES, check_mode
from .placement import (
    GIB,
    PlacementPrediction,
    _Predictor,
    check_offline_mode,
    cluster_profile,
    cluster_topology,
    predict_placement,
    set_cost,
)
from .placement_config import cluster_from
from .placement_spec import Cluster, Placement, ResourceSet, enumerate_groupings, roles_for
from .units import _bytes, _seconds
from .validated import VALIDATION_FILE, validated_error  # noqa: F401 - re-exported (predict prints it too)
from .workload import offline_group_size, workload_from_dict

TIE_RULE = ("ties (equal step time to 3 significant digits) are ordered by lower staleness, then less memory per "
            "device, then fewer sets, then the placement's description")


# ---- validation statistics ----------------------------------------------------------------------
def kendall_tau(predicted, measured) -> float:
    """Kendall's tau-b between two rankings given as values (lower = faster), ties handled (Kendall 1945).

    Written out (O(n^2) over pairs, n = the handful of measured placements) because the pinned environment has
    no scipy; ``scipy.stats.kendalltau`` computes the same tau-b.
    """
    x, y = list(map(float, predicted)), list(map(float, measured))
    if len(x) != len(y) or len(x) < 2:
        raise RlmLabError(f"kendall_tau needs two equally long lists of >= 2 values, got {len(x)} and {len(y)}")
    concordant = discordant = ties_x = ties_y = 0
    for i, j in itertools.combinations(range(len(x)), 2):
        dx, dy = x[i] - x[j], y[i] - y[j]
        if dx == 0 and dy == 0:
            continue
        if dx == 0:
            ties_x += 1
        elif dy == 0:
            ties_y += 1
        elif (dx > 0) == (dy > 0):
            concordant += 1
        else:
            discordant += 1
    denom = ((concordant + discordant + ties_x) * (concordant + discordant + ties_y)) ** 0.5
    if denom == 0:
        raise RlmLabError("kendall_tau is undefined when one of the rankings is all ties")
    return (concordant - discordant) / denom


def regret(predicted, measured) -> float:
    """Measured time of the placement the prediction ranks first, over the best measured time (1 = best pick).
    Ties in the prediction: the first listed wins (the advisor's order)."""
    x, y = list(map(float, predicted)), list(map(float, measured))
    if len(x) != len(y) or not x:
        raise RlmLabError(f"regret needs two equally long non-empty lists, got {len(x)} and {len(y)}")
    if min(y) <= 0:
        raise RlmLabError("regret needs measured times > 0")
    pick = min(range(len(x)), key=lambda i: x[i])
    return y[pick] / min(y)


# ---- enumeration ------------------------------------------------------------------------------
def set_sizes(devices: int) -> list[int]:
    """The grid of set sizes: every size up to 16 devices; beyond, powers of two and multiples of devices/8
    (when 8 divides the cluster)."""
    if devices <= 16:
        return list(range(1, devices + 1))
    sizes = {2 ** i for i in range(devices.bit_length()) if 2 ** i <= devices}
    if devices % 8 == 0:
        sizes |= {j * devices // 8 for j in range(1, 9)}
    sizes.add(devices)
    return sorted(sizes)


def compositions(total: int, parts: int, sizes: list[int]):
    """Ordered tuples of ``parts`` sizes from ``sizes`` adding up to ``total``."""
    if parts == 1:
        if total in sizes:
            yield (total,)
        return
    for first in sizes:
        if first >= total:
            break
        for rest in compositions(total - first, parts - 1, sizes):
            yield (first,) + rest


def _tp_ok(pr, tp: int) -> bool:
    try:
        pr.specs(tp)
    except RlmLabError:
        return False
    return True


TPS = (1, 2, 4, 8, 16)  # tensor-parallel sizes tried (up to --max-tp)
EPS = (1, 2, 4, 8, 16, 32, 64)  # expert-parallel sizes tried for a MoE model (up to --max-ep)


def _ep_ok(pr, ep: int) -> bool:
    return ep == 1 or (pr.spec.moe_layers > 0 and pr.spec.experts % ep == 0)


def _layouts(pr, name: str, devices: int, kind: str, roles: tuple, max_tp: int, max_ep: int = 8, max_pp: int = 1,
             node: int | None = None, max_sp: int = 1):
    """(ResourceSet, reshard) options for one set: tp x ep x zero, plus the hybrid engine for actor + rollout.
    A layout with more data-parallel ranks than the step has sequences is left out: a rank with no sequence
    (what `rlm-lab predict` refuses for the same shape). Beyond them, for a set that trains: pipeline stages pp up
    to ``max_pp`` (Megatron's layout: ZeRO-1, resharded into a generation layout when the set also generates),
    hybrid sharding inside a node of ``node`` devices (``node`` None: not tried) and Ulysses groups up to
    ``max_sp``, each for ZeRO-3 layouts."""
    trains = "actor" in roles or "critic" in roles
    n = pr.wl.n
    tps = [t for t in TPS if t <= max_tp and devices % t == 0 and devices // t <= n and _tp_ok(pr, t)]
    generates = "actor" in roles and "rollout" in roles
    for tp in tps:
        dp = devices // tp
        for ep in (e for e in EPS if e <= max_ep and dp % e == 0 and _ep_ok(pr, e)):
            for zero in ((0, 3) if trains and dp > 1 else (0,)):
                yield ResourceSet(name, devices, kind, dp=dp, tp=tp, zero=zero, ep=ep), False
                if zero == 3 and not generates and "rollout" not in roles:
                    yield from _zero3_variants(pr, name, devices, kind, dp, tp, ep, node, max_sp, 0, False)
        for pp in (q for q in PPS if q <= max_pp and trains and devices % (tp * q) == 0
                   and pr.spec.layers >= q):
            dpp = devices // (tp * pp)
            if generates:
                for tg in tps:
                    yield ResourceSet(name, devices, kind, dp=dpp, tp=tp, pp=pp, zero=1 if dpp > 1 else 0,
                                      gen_tp=tg), True
            elif "rollout" not in roles:
                yield ResourceSet(name, devices, kind, dp=dpp, tp=tp, pp=pp, zero=1 if dpp > 1 else 0), False
    if generates and 1 < devices <= n:
        for tg in tps:
            yield ResourceSet(name, devices, kind, dp=devices, tp=1, zero=3, gen_tp=tg), True
            yield from _zero3_variants(pr, name, devices, kind, devices, 1, 1, node, max_sp, tg, True)


PPS = (2, 4, 8)   # pipeline-parallel sizes tried (up to --max-pp)
SPS = (2, 4, 8)   # Ulysses sizes tried (up to --max-sp)


def _zero3_variants(pr, name, devices, kind, dp, tp, ep, node, max_sp, gen_tp, reshard):
    """A ZeRO-3 layout's HSDP (a shard group of one node's ranks) and Ulysses (sp) variants."""
    shards = [0] + ([node // tp] if node and node % tp == 0 and 1 < node // tp < dp and dp % (node // tp) == 0
                    else [])
    sps = [1] + [q for q in SPS if q <= max_sp and dp % q == 0 and (pr.spec.heads // tp) % q == 0]
    for shard in shards:
        for sp in sps:
            if shard or sp > 1:
                yield ResourceSet(name, devices, kind, dp=dp, tp=tp, zero=3, ep=ep, shard=shard, sp=sp,
                                  gen_tp=gen_tp), reshard


@dataclass
class Advice:
    ranked: list            # PlacementPrediction (each in its mode), fastest first (fitting only), TIE_RULE
    considered: int         # placements priced (each placement once, whatever the number of modes)
    dropped: int            # of which did not fit
    cluster: Cluster
    groupings: int = 0      # groupings of the roles into sets that had a device split
    modes: tuple = ("sync",)
    workload: object = None
    profile: object = None
    misfit: object = None   # the placement that does not fit with the least memory per device (None: all fit)

    def top(self, k: int = 5) -> list[PlacementPrediction]:
        return self.ranked[:k]


def _staleness(pp: PlacementPrediction) -> float:
    return float("inf") if pp.eta is None else float(pp.eta)


def rank_key(pp: PlacementPrediction) -> tuple:
    """The ranking's sort key (:data:`TIE_RULE`)."""
    return (float(f"{pp.step_s:.3g}"), _staleness(pp), pp.memory_per_device(), len(pp.sets), pp.placement.describe())


def advise(model, algo="grpo", workload=None, cluster: Cluster | int = 8, profile="h100-sxm", max_tp: int = 8,
           lora=None, critic=None, reward_model=None, beta=None, modes=("sync",), eta=None,
           max_ep: int = 8, max_pp: int = 1, hsdp: bool = False, max_sp: int = 1) -> Advice:
    """Enumerate, price and rank placements x modes (module docstring). ``modes``: execution modes to rank
    (modes.MODES); ``eta``: the staleness bound of ``stale`` (default 2) and ``async`` (default unbounded).
    Raises RlmLabError when nothing fits."""
    if isinstance(cluster, int) and not isinstance(cluster, bool):
        cluster = Cluster(cluster)
    if not isinstance(cluster, Cluster):
        raise RlmLabError(f"advise needs a Cluster or a device count, got {cluster!r}")
    for name, v in (("max_tp", max_tp), ("max_ep", max_ep), ("max_pp", max_pp), ("max_sp", max_sp)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise RlmLabError(f"{name} must be an integer >= 1, got {v!r}")
    if isinstance(modes, str):
        modes = (modes,)
    mode_etas = []
    for m in modes:
        mm, e = check_mode(m, eta if m not in ("sync", "one_step_off") else None)
        if (mm, e) not in mode_etas:
            mode_etas.append((mm, e))
    if not mode_etas:
        raise RlmLabError("advise needs at least one mode")
    wl = workload if workload is not None and not isinstance(workload, dict) else workload_from_dict(workload or {})

    pr = _Predictor(model, algo, wl, cluster_profile(load_profile(profile), cluster), critic, reward_model, beta)
    for mm, _ in mode_etas:
        check_offline_mode(pr.alg, mm)

    lora = lora_from(lora)
    capacity = (cluster.memory_per_device_gib * GIB if cluster.memory_per_device_gib else float(pr.prof.memory_bytes))
    topo = cluster_topology(pr.prof, cluster)
    roles = roles_for(pr.alg)
    widest = max(t for t in TPS if t <= max_tp)
    if cluster.devices > pr.wl.n * widest * len(roles):
        # every set's data-parallel ranks need a sequence each: at most n x tp devices per set are usable
        raise RlmLabError(f"{cluster.devices} devices for {pr.wl.n} sequences ({pr.wl.prompts} prompts x "
                          f"{pr.wl.group_size}): even with each of the {len(roles)} roles on its own set at "
                          f"tensor-parallel size {widest}, at most {pr.wl.n * widest * len(roles)} devices get a "
                          f"sequence (data parallelism needs at least one sequence per replica)")
    sizes = set_sizes(cluster.devices)
    per_node = topo.devices_per_node
    cache: dict = {}
    best_layout: dict = {}
    results: list[PlacementPrediction] = []
    considered = dropped = used = 0
    misfit = None
    for grouping in enumerate_groupings(roles):
        if len(grouping) > cluster.devices:
            continue
        if lora is not None and any(("reference" in g) != ("actor" in g) for g in grouping):
            continue   # LoRA: the reference is the actor with its adapter disabled, so it lives with the actor
        if "swap" in pr.wl.offload and any(("reference" in g) != ("actor" in g) for g in grouping):
            continue   # swap: the reference's weights take the policy's place on the policy's devices
        used += 1
        names = tuple("+".join(g) for g in grouping)
        separate = any("rollout" in g and "actor" not in g for g in grouping)
        for split in compositions(cluster.devices, len(grouping), sizes):
            chosen, reshard, start = [], False, 0
            for name, group, devices in zip(names, grouping, split):
                key = (group, devices, start % per_node if per_node else 0)   # what node boundaries it crosses
                if key not in best_layout:
                    best = None
                    for rset, hy in _layouts(pr, name, devices, cluster.kind, group, max_tp, max_ep, max_pp,
                                             per_node if hsdp else None, max_sp):
                        sc, r_s, _ = set_cost(pr, rset, group, hy, lora, capacity, topo, start)
                        if sc.fits and (best is None or sc.busy_s + r_s < best[0]):
                            best = (sc.busy_s + r_s, rset, hy)
                    best_layout[key] = best
                best = best_layout[key]
                if best is None:   # no layout of this set fits: keep the plain one to report "does not fit"
                    best = (0.0, ResourceSet(name, devices, cluster.kind, dp=devices), False)
                chosen.append(best[1])
                reshard = reshard or best[2]
                start += devices
            placement = Placement(_label(grouping, separate, reshard), tuple(chosen),
                                  {r: n for n, g in zip(names, grouping) for r in g},
                                  sync="collective" if separate else "none", reshard=reshard, lora=lora is not None)
            pp = predict_placement(placement, pr.spec, pr.alg, wl, pr.prof, cluster, lora=lora, _predictor=pr,
                                   _cache=cache)
            considered += 1
            if not pp.fits:
                dropped += 1
                if misfit is None or pp.memory_per_device() < misfit.memory_per_device():
                    misfit = pp
                continue
            for mode, e in mode_etas:
                if mode != "sync" and not separate and mode in ("one_step_off", "stale"):
                    continue   # on one set nothing overlaps: the synchronous step again (modes.py)
                results.append(replace(pp, mode=mode, eta=e))
    if not results:
        closest = f"; the closest, {misfit.memory_error().removeprefix('does not fit: ')}" if misfit is not None else ""
        raise RlmLabError(f"no placement of {pr.alg.name} on {pr.spec.name} fits {cluster.devices} {cluster.kind} "
                          f"devices of {capacity / GIB:.1f} GiB ({considered} tried){closest}; priced {describe_workload(wl)}"
                          f"; add devices or memory, or use LoRA / smaller batches (a config's workload: sets micro_batch, "
                          f"precision, gradient_checkpointing, engine)")
    results.sort(key=rank_key)
    return Advice(results, considered, dropped, cluster, used, tuple(m for m, _ in mode_etas), wl, pr.prof, misfit)


def _label(grouping, separate: bool, reshard: bool) -> str:
    """The named placement a grouping is (placement_spec), else "<k>-set"."""
    if len(grouping) == 1:
        return "hybrid" if reshard else "colocated"
    if len(grouping) == 2 and ("rollout",) in grouping:
        return "disaggregated"
    if len(grouping) == 2 and ("critic", "reward") in grouping:
        return "split"
    return f"{len(grouping)}-set"


def describe_workload(wl) -> str:
    """The workload in full, one line (a newcomer sees exactly what was priced)."""
    r = wl.response
    resp = {"fixed": lambda: f"{r.length} tokens", "uniform": lambda: f"uniform {r.low}-{r.high} tokens",
            "lognormal": lambda: f"lognormal median {r.median:g}, sigma {r.sigma:g}, {r.min}-{r.max} tokens",
            "list": lambda: f"{len(r.values)} listed lengths"}[r.kind]()
    extra = [f"{wl.epochs} epoch(s) x {wl.minibatches} mini-batch(es)", f"micro-batch {wl.micro}",
             f"{wl.precision}", f"engine {wl.engine}" + (" (prefix sharing)" if wl.prefix_sharing else "")]
    if wl.gradient_checkpointing:
        extra.append("gradient checkpointing")
    return (f"workload: {wl.prompts} prompts x {wl.group_size} samples = {wl.n} sequences, prompt {wl.prompt_len} "
            f"tokens, responses {resp}; " + ", ".join(extra))


def format_advice(advice: Advice, k: int = 5) -> str:
    c = advice.cluster
    best = advice.ranked[0].step_s
    top = advice.top(k)
    lines = [f"advise: {advice.considered} placements priced on {c.devices} {c.kind} devices in mode(s) "
             f"{', '.join(advice.modes)}, {advice.dropped} do not fit; the fastest {len(top)}:"]
    keys = [float(f"{pp.step_s:.3g}") for pp in advice.ranked]
    for i, pp in enumerate(top, 1):
        tied = any(keys[j] == keys[i - 1] for j in (i - 2, i) if 0 <= j < len(keys))
        r = pp.in_mode(pp.mode, pp.eta) if pp.mode != "sync" else None
        mode = pp.mode + ("" if pp.mode in ("sync", "one_step_off") else
                          f" eta {'unbounded' if pp.eta is None else pp.eta}")
        lines.append(f"{i}. {_seconds(pp.step_s)} (x{pp.step_s / best:.2f}){' tied' if tied else ''}  [{mode}]  "
                     f"{pp.placement.name}: {pp.placement.describe()}")
        stage, set_name, _ = pp.critical()
        idle = ", ".join(f"{n} {100 * v:.0f} %" for n, v in pp.idle().items())
        cap = min(s.capacity for s in pp.sets)
        lines.append(f"   critical stage {stage}{'' if set_name == '-' else ' on ' + set_name}; exposed sync "
                     f"{_seconds(pp.sync_s)}; idle {idle}; memory {_bytes(pp.memory_per_device())} of {_bytes(cap)} "
                     f"per device (fits)" + (f"; {r.note}" if r is not None and r.note else ""))
    if advice.misfit is not None:
        m = advice.misfit
        worst = max(m.sets, key=lambda s: s.memory.total / s.capacity)
        lines.append(f"closest that does not fit: {m.placement.describe()}: set {worst.name} needs "
                     f"{_bytes(worst.memory.total)} of {_bytes(worst.capacity)} per device (does not fit)")
    lines.append(TIE_RULE)
    return "\n".join(lines)


# ---- the command ---------------------------------------------------------------------------------
def register(subparsers) -> None:
    p = subparsers.add_parser("advise", help="rank placements x modes of the RL models on a cluster by predicted step "
                                             "time",
                              description="Enumerate placements (groupings of the models into sets x device "
                                          "splits x layouts) in execution modes, drop what does not fit, rank by "
                                          "predicted step time. A workload is required (a config's workload: or "
                                          "the --prompts/--group-size/--prompt-len/--response-len flags).")
    p.add_argument("config", nargs="?", help="predict config YAML (model, algorithm, hardware, workload, cluster)")
    p.add_argument("--model", help="zoo name or path to a config.json")
    p.add_argument("--algorithm", "--algo", dest="algorithm", help="ppo | grpo | rloo | reinforce_pp | dapo | dpo")
    p.add_argument("--hardware", help="hardware profile name or JSON path (default: the committed profile of the "
                                      "machine the chapters' runs were made on)")
    p.add_argument("--devices", type=int, help="devices in the cluster (default 8)")
    p.add_argument("--kind", choices=("cpu", "gpu"), help="device kind (default: gpu for GPU profiles)")
    p.add_argument("--memory-gib", type=number_arg("--memory-gib"), help="memory per device, GiB (default: the profile's)")
    p.add_argument("--link-gbps", type=number_arg("--link-gbps"), help="GB/s between sets (default: from the topology)")
    p.add_argument("--devices-per-node", type=number_arg("--devices-per-node", integer=True),
                   help="devices per node (default: the profile's, 8 for the GPU datasheets)")
    p.add_argument("--network-gbps", type=number_arg("--network-gbps"),
                   help="GB/s of each device's network card (default: the profile's)")
    p.add_argument("--prompts", type=int)
    p.add_argument("--group-size", type=int)
    p.add_argument("--prompt-len", type=int)
    p.add_argument("--response-len", type=int, help="fixed response length")
    p.add_argument("--max-tp", type=int, default=8, help="largest tensor-parallel size tried (default 8)")
    p.add_argument("--max-ep", type=int, default=8, help="largest expert-parallel size tried, MoE models (default 8)")
    p.add_argument("--max-pp", type=int, default=1, help="largest pipeline-parallel size tried (default 1: none)")
    p.add_argument("--max-sp", type=int, default=1, help="largest Ulysses sequence-parallel size tried (default 1)")
    p.add_argument("--hsdp", action="store_true", help="also try ZeRO-3 sharded inside a node (HSDP)")
    p.add_argument("--mode", default="sync",
                   help=f"modes to rank, comma-separated, or all: {MODE_HELP} (default sync)")
    p.add_argument("--eta", type=int, help="staleness bound of stale (default 2) and async (default unbounded)")
    p.add_argument("--assume", action="append", metavar="NAME=VALUE",
                   help="override a named assumption (eta_F, eta_A, eta_B, eta_N, eta_H, engine_step_s, network_alpha_s)")
    p.add_argument("--fitted", action="store_true",
                   help="use the efficiencies fitted on the published calibration cases (data/published/fit.json), "
                        "the ones the printed validated error belongs to; --assume still overrides one")
    p.add_argument("--lora", type=int, metavar="RANK", help="train LoRA adapters of this rank")
    p.add_argument("--critic", help="PPO's critic: a zoo name or config.json, or 'shared' (a value head on the actor)")
    p.add_argument("--top", type=int, default=5, help="how many placements to print (default 5)")
    p.add_argument("--json", action="store_true", help="print the ranking as JSON")
    p.add_argument("--from", dest="from_", metavar="FRAMEWORK:CONFIG",
                   help="advise one change (split, mode, eta, TP) to a verl, openrlhf, trl, nemo-rl, areal or slime config")
    p.add_argument("--precision", help="fp32 | bf16-mixed | bf16")

    add_run_flags(p, tp=False)
    p.set_defaults(func=run)


def parse_modes(text: str) -> tuple:
    """``--mode``: ``all`` or a comma-separated list of modes.MODES (``-`` read as ``_``)."""
    if str(text).strip().lower() == "all":
        return MODES
    out = tuple(check_mode(m, None)[0] for m in str(text).split(",") if m.strip())
    if not out:
        raise RlmLabError(f"--mode needs at least one of {', '.join(MODES)} or all, got {text!r}")
    return out


def run(args) -> int:
    cfg = load_config(args.config) if args.config else {}
    for key in ("model", "algorithm", "hardware", "lora", "critic"):
        if getattr(args, key, None) is not None:
            cfg[key] = getattr(args, key)
    given_hw = cfg.get("hardware") is not None
    if cfg.get("placement") is not None:
        raise RlmLabError("advise enumerates the placements itself; drop the config's placement key")
    if not isinstance(args.top, int) or args.top < 1:
        raise RlmLabError(f"--top must be >= 1, got {args.top}")
    modes = parse_modes(args.mode if cfg.get("mode") is None or args.mode != "sync" else cfg["mode"])
    eta = args.eta if args.eta is not None else cfg.get("eta")
    if eta is not None and not set(modes) & {"stale", "async"}:
        raise RlmLabError(f"--eta {eta} bounds the staleness of --mode stale or async; the modes asked are "
                          f"{', '.join(modes)}")
    if args.assume:
        cfg["assume"] = dict(cfg.get("assume") or {}) | parse_assume(args.assume)
    if not isinstance(cfg.get("workload") or {}, dict):
        raise RlmLabError(f"workload must be a mapping of workload fields, got {cfg['workload']!r}")
    wl = dict(cfg.get("workload") or {})
    for key in ("prompts", "group_size", "prompt_len", "precision"):
        if getattr(args, key, None) is not None:
            wl[key] = getattr(args, key)
    if args.response_len is not None:
        wl["response"] = {"kind": "fixed", "length": args.response_len}

    wl = run_workload(args, wl)
    wl = offline_group_size(cfg.get("algorithm"), wl) if wl else wl
    cfg = DEFAULTS | {k: v for k, v in cfg.items() if v is not None} | {"workload": wl}
    given_model = cfg["model"]
    cfg["model"] = shipped_model(cfg["model"])
    if args.fitted:
        cfg["assume"] = fitted_assumptions(cfg["hardware"]) | dict(cfg.get("assume") or {})
    check_inputs(cfg)
    prof = apply_assumptions(cfg["hardware"], cfg.get("assume"))
    cl = dict(cfg.get("cluster") or {}) if isinstance(cfg.get("cluster") or {}, dict) else cfg["cluster"]
    if not isinstance(cl, dict):
        raise RlmLabError("cluster must be a mapping {devices, kind, memory_per_device_gib, link_gbps}")
    for key, attr in (("devices", "devices"), ("kind", "kind"), ("memory_per_device_gib", "memory_gib"),
                      ("link_gbps", "link_gbps"), ("devices_per_node", "devices_per_node"),
                      ("network_gbps", "network_gbps")):
        if getattr(args, attr) is not None:
            cl[key] = getattr(args, attr)
    cluster = cluster_from(cl, prof, wl.get("devices") or 8)
    require_workload(cfg | {"model": given_model, "resolved_model": cfg["model"]}, "advise")
    adv = advise(cfg["model"], cfg["algorithm"], wl, cluster, prof,
                 max_tp=args.max_tp, lora=cfg.get("lora"), critic=cfg.get("critic"),
                 reward_model=cfg.get("reward_model"), beta=cfg.get("beta"), modes=modes, eta=eta, max_ep=args.max_ep,
                 max_pp=args.max_pp, hsdp=args.hsdp, max_sp=args.max_sp)
    if args.json:
        print(json_text({"considered": adv.considered, "dropped": adv.dropped, "modes": list(adv.modes),
                         "hardware": prof.name, "workload": adv.workload.to_dict(), "tie_rule": TIE_RULE,
                         "validated_error": validated_error(fitted=args.fitted),
                         "ranked": [pp.to_dict() for pp in adv.top(args.top)]}))
    else:
        lines = [hardware_line(cfg, given_hw), describe_workload(adv.workload), validated_error(fitted=args.fitted),
                 format_advice(adv, args.top)]
        lines += [f"assumed: {a}" for a in sorted({a for pp in adv.top(args.top) for a in pp.assumptions})]
        lines += assumption_lines(prof, engine=adv.workload.engine == "continuous")
        print("\n".join(lines))
    return 0
