"""The placement advisor: enumerate placements of an RL step's models on a cluster, drop what does not fit,
rank the rest by predicted step time (placement.py), and say why each is fast or slow.

    advise("configs/models/qwen2.5-7b.config.json", "ppo", workload, Cluster(64, "gpu", 80, 50), "h100-sxm")

Search space (issue 9 item 6; the planners of ReaL arXiv 2406.14088 and HybridFlow arXiv 2409.19256 Sec. 6 search
the same kind of space with their own estimators):

1. every grouping of the roles into resource sets (set partitions: Bell numbers, 5 for GRPO's actor, rollout and
   reference, 52 for PPO's five roles; ``placement_spec.enumerate_groupings``);
2. every split of the cluster's devices between the sets, with set sizes from a grid (every size up to 16
   devices; beyond, powers of two and multiples of devices/8) that add up to the cluster;
3. inside each set, its parallel layout: tensor-parallel size tp (powers of two up to ``max_tp``), ZeRO 0 or 3
   for sets that train a model, and for a set holding both actor and rollout the hybrid engine (FSDP training
   resharded into generation tensor-parallel size t_g).

Per set, the layout is chosen independently as the one that fits and gives that set the shortest busy time
(exact for one-set placements; across sets a heuristic, since the step takes a max over concurrent sets).
Each (roles, set, layout) is priced once and cached, so 64 GPUs enumerate in seconds.

Validation against measurements (chapter 5): :func:`kendall_tau` (predicted against measured ranking) and
:func:`regret` (measured time of the advisor's first pick over the best measured time).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from ..errors import RlmLabError, number_arg
from .placement_spec import Cluster, Placement, ResourceSet, enumerate_groupings, roles_for
from .placement import GIB, PlacementPrediction, _Predictor, predict_placement, set_cost
from .workload import workload_from_dict


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


def _layouts(pr, name: str, devices: int, kind: str, roles: tuple, max_tp: int):
    """(ResourceSet, reshard) options for one set: tp x zero, plus the hybrid engine for actor + rollout.
    A layout with more data-parallel ranks than the step has sequences is left out: a rank with no sequence
    (what `rlm-lab predict` refuses for the same shape)."""
    trains = "actor" in roles or "critic" in roles
    n = pr.wl.n
    tps = [t for t in TPS if t <= max_tp and devices % t == 0 and devices // t <= n and _tp_ok(pr, t)]
    for tp in tps:
        for zero in ((0, 3) if trains and devices // tp > 1 else (0,)):
            yield ResourceSet(name, devices, kind, dp=devices // tp, tp=tp, zero=zero), False
    if "actor" in roles and "rollout" in roles and 1 < devices <= n:
        for tg in tps:
            yield ResourceSet(name, devices, kind, dp=devices, tp=1, zero=3, gen_tp=tg), True


@dataclass
class Advice:
    ranked: list            # PlacementPrediction, fastest first (fitting only)
    considered: int         # placements priced
    dropped: int            # of which did not fit
    cluster: Cluster
    groupings: int = 0      # groupings of the roles into sets that had a device split

    def top(self, k: int = 5) -> list[PlacementPrediction]:
        return self.ranked[:k]


def advise(model, algo="grpo", workload=None, cluster: Cluster | int = 8, profile="h100-sxm", max_tp: int = 8,
           lora=None, critic=None, reward_model=None, beta=None) -> Advice:
    """Enumerate, price and rank placements (module docstring). Raises RlmLabError when nothing fits."""
    if isinstance(cluster, int) and not isinstance(cluster, bool):
        cluster = Cluster(cluster)
    if not isinstance(cluster, Cluster):
        raise RlmLabError(f"advise needs a Cluster or a device count, got {cluster!r}")
    if not isinstance(max_tp, int) or isinstance(max_tp, bool) or max_tp < 1:
        raise RlmLabError(f"max_tp must be an integer >= 1, got {max_tp!r}")
    wl = workload if workload is not None and not isinstance(workload, dict) else workload_from_dict(workload or {})
    pr = _Predictor(model, algo, wl, profile, critic, reward_model, beta)
    from .lora import lora_from

    lora = lora_from(lora)
    capacity = (cluster.memory_per_device_gib * GIB if cluster.memory_per_device_gib else float(pr.prof.memory_bytes))
    roles = roles_for(pr.alg)
    widest = max(t for t in TPS if t <= max_tp)
    if cluster.devices > pr.wl.n * widest * len(roles):
        # every set's data-parallel ranks need a sequence each: at most n x tp devices per set are usable
        raise RlmLabError(f"{cluster.devices} devices for {pr.wl.n} sequences ({pr.wl.prompts} prompts x "
                          f"{pr.wl.group_size}): even with each of the {len(roles)} roles on its own set at "
                          f"tensor-parallel size {widest}, at most {pr.wl.n * widest * len(roles)} devices get a "
                          f"sequence (data parallelism needs at least one sequence per replica)")
    sizes = set_sizes(cluster.devices)
    cache: dict = {}
    best_layout: dict = {}
    results: list[PlacementPrediction] = []
    considered = dropped = used = 0
    for grouping in enumerate_groupings(roles):
        if len(grouping) > cluster.devices:
            continue
        if lora is not None and any(("reference" in g) != ("actor" in g) for g in grouping):
            continue   # LoRA: the reference is the actor with its adapter disabled, so it lives with the actor
        used += 1
        names = tuple("+".join(g) for g in grouping)
        separate = any("rollout" in g and "actor" not in g for g in grouping)
        for split in compositions(cluster.devices, len(grouping), sizes):
            chosen, reshard = [], False
            for name, group, devices in zip(names, grouping, split):
                key = (group, devices)
                if key not in best_layout:
                    best = None
                    for rset, hy in _layouts(pr, name, devices, cluster.kind, group, max_tp):
                        sc, r_s, _ = set_cost(pr, rset, group, hy, lora, capacity)
                        if sc.fits and (best is None or sc.busy_s + r_s < best[0]):
                            best = (sc.busy_s + r_s, rset, hy)
                    best_layout[key] = best
                best = best_layout[key]
                if best is None:   # no layout of this set fits: keep the plain one to report "does not fit"
                    best = (0.0, ResourceSet(name, devices, cluster.kind, dp=devices), False)
                chosen.append(best[1])
                reshard = reshard or best[2]
            placement = Placement(_label(grouping, separate, reshard), tuple(chosen),
                                  {r: n for n, g in zip(names, grouping) for r in g},
                                  sync="collective" if separate else "none", reshard=reshard, lora=lora is not None)
            pp = predict_placement(placement, pr.spec, pr.alg, wl, pr.prof, cluster, lora=lora, _predictor=pr,
                                   _cache=cache)
            considered += 1
            if pp.fits:
                results.append(pp)
            else:
                dropped += 1
    if not results:
        raise RlmLabError(f"no placement of {pr.alg.name} on {pr.spec.name} fits {cluster.devices} {cluster.kind} "
                          f"devices of {capacity / GIB:.1f} GiB ({considered} tried); add devices or memory, or use "
                          f"LoRA / smaller batches")
    results.sort(key=lambda p: p.step_s)
    return Advice(results, considered, dropped, cluster, used)


def _label(grouping, separate: bool, reshard: bool) -> str:
    """The named placement a grouping is (placement_spec), else "<k>-set"."""
    if len(grouping) == 1:
        return "hybrid" if reshard else "colocated"
    if len(grouping) == 2 and ("rollout",) in grouping:
        return "disaggregated"
    if len(grouping) == 2 and ("critic", "reward") in grouping:
        return "split"
    return f"{len(grouping)}-set"


def format_advice(advice: Advice, k: int = 5) -> str:
    from .units import _seconds

    c = advice.cluster
    best = advice.ranked[0].step_s
    lines = [f"advise: {advice.considered} placements priced on {c.devices} {c.kind} devices, "
             f"{advice.dropped} do not fit; the fastest {min(k, len(advice.ranked))}:"]
    for i, pp in enumerate(advice.top(k), 1):
        lines.append(f"{i}. {_seconds(pp.step_s)} (x{pp.step_s / best:.2f})  {pp.placement.name}: "
                     f"{pp.placement.describe()}")
        lines.append(f"   {pp.reason()}")
    return "\n".join(lines)


# ---- the command ---------------------------------------------------------------------------------
def register(subparsers) -> None:
    p = subparsers.add_parser("advise", help="rank placements of the RL models on a cluster by predicted step time",
                              description="Enumerate placements (groupings of the models into sets x device "
                                          "splits x layouts), drop what does not fit, rank by predicted step time.")
    p.add_argument("config", nargs="?", help="predict config YAML (model, algorithm, hardware, workload, cluster)")
    p.add_argument("--model", help="zoo name or path to a config.json")
    p.add_argument("--algorithm", "--algo", dest="algorithm", help="ppo | grpo | rloo | reinforce_pp | dapo")
    p.add_argument("--hardware", help="hardware profile name or JSON path (default h100-sxm)")
    p.add_argument("--devices", type=int, help="devices in the cluster (default 8)")
    p.add_argument("--kind", choices=("cpu", "gpu"), help="device kind (default: gpu for GPU profiles)")
    p.add_argument("--memory-gib", type=number_arg("--memory-gib"), help="memory per device, GiB (default: the profile's)")
    p.add_argument("--link-gbps", type=number_arg("--link-gbps"), help="GB/s between sets (default: the profile's link)")
    p.add_argument("--max-tp", type=int, default=8, help="largest tensor-parallel size tried (default 8)")
    p.add_argument("--lora", type=int, metavar="RANK", help="train LoRA adapters of this rank")
    p.add_argument("--top", type=int, default=5, help="how many placements to print (default 5)")
    p.add_argument("--json", action="store_true", help="print the ranking as JSON")
    p.add_argument("--from", dest="from_", metavar="FRAMEWORK:CONFIG",
                   help="advise one change (split, mode, eta, TP) to a verl, openrlhf, trl, nemo-rl or areal config")
    p.set_defaults(func=run)


def run(args) -> int:
    from .cli import DEFAULTS, check_inputs, load_config
    from .placement_config import cluster_from

    cfg = load_config(args.config) if args.config else {}
    for key in ("model", "algorithm", "hardware", "lora"):
        if getattr(args, key) is not None:
            cfg[key] = getattr(args, key)
    if cfg.get("placement") is not None:
        raise RlmLabError("advise enumerates the placements itself; drop the config's placement key")
    if not isinstance(args.top, int) or args.top < 1:
        raise RlmLabError(f"--top must be >= 1, got {args.top}")
    cfg = DEFAULTS | {"hardware": "h100-sxm"} | {k: v for k, v in cfg.items() if v is not None}
    check_inputs(cfg)
    cl = dict(cfg.get("cluster") or {}) if isinstance(cfg.get("cluster") or {}, dict) else cfg["cluster"]
    if not isinstance(cl, dict):
        raise RlmLabError("cluster must be a mapping {devices, kind, memory_per_device_gib, link_gbps}")
    for key, attr in (("devices", "devices"), ("kind", "kind"), ("memory_per_device_gib", "memory_gib"),
                      ("link_gbps", "link_gbps")):
        if getattr(args, attr) is not None:
            cl[key] = getattr(args, attr)
    cluster = cluster_from(cl, cfg["hardware"], (cfg.get("workload") or {}).get("devices") or 8)
    adv = advise(cfg["model"], cfg["algorithm"], cfg.get("workload") or {}, cluster, cfg["hardware"],
                 max_tp=args.max_tp, lora=cfg.get("lora"), critic=cfg.get("critic"),
                 reward_model=cfg.get("reward_model"), beta=cfg.get("beta"))
    if args.json:
        from ..records.files import json_text

        print(json_text({"considered": adv.considered, "dropped": adv.dropped,
                         "ranked": [pp.to_dict() for pp in adv.top(args.top)]}))
    else:
        from .assumed import assumption_lines

        lines = [format_advice(adv, args.top)]
        lines += [f"assumed: {a}" for a in sorted({a for pp in adv.top(args.top) for a in pp.assumptions})]
        lines += assumption_lines(cfg["hardware"])
        print("\n".join(lines))
    return 0
