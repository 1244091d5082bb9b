"""``rlm-lab place``: predict, then run, GRPO under placements on Ray, one record folder per run.

    rlm-lab place --size cpu --out data/runs/cpu              # every placement of chapter 5
    rlm-lab place --placement disaggregated --size smoke      # one, into _build/runs/smoke
    rlm-lab place --hybrid --size cpu                         # the hybrid engine: GRPO under DeepSpeed ZeRO-3
    RAY_ADDRESS=host:6379 rlm-lab place ...                   # join an existing Ray cluster
    rlm-lab place --nodes 2 --size smoke                      # a local cluster of 2 worker nodes: each set on its own
    RAY_ADDRESS=host:6379 rlm-lab place --nodes 2 ...         # the same on a real cluster of at least 2 nodes

Records go to ``<out>/ch05_<placement>/<UTC time>/`` (never an existing folder); the default ``--out`` is
``runs_root(size)`` (``_build/runs/<size>``, not committed).
"""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path

from ...cost.placement_spec import get_placement
from ...errors import RlmLabError
from ...placement.hybrid import check_hybrid
from ...placement.runtime import RaySession, algo_roles, check_placement, check_spread
from ...placement.session import check_nodes, node_name, node_shares
from ...record import runs_root
from ...records.lifecycle import interruptible
from ...sizes import check_size
from .cases import ALL_KEYS, MEMORY_RUN, cluster, configs, run_config
from .run import measure, measure_hybrid, measure_lora_accuracy, measure_lora_memory, measure_reshard


def register(sub) -> None:
    p = sub.add_parser("place", help="run GRPO and PPO under placements on Ray (colocated, disaggregated, split), "
                                     "predicted first")
    p.add_argument("--placement", action="append", choices=ALL_KEYS, help="placement(s) to run (default: all)")
    p.add_argument("--size", default="smoke", help="smoke | cpu | gpu (default smoke)")
    p.add_argument("--out", default=None, help="root folder of the records (default: runs_root(size))")
    p.add_argument("--address", default=None, help="join this Ray cluster (default: $RAY_ADDRESS, else local)")
    p.add_argument("--steps", type=int, default=None, help="GRPO steps per run (default: the size's)")
    p.add_argument("--nodes", type=int, default=1,
                   help="spread each placement's resource sets over this many Ray nodes, one set per node "
                        "(STRICT_SPREAD): a local cluster of a head and N worker nodes sharing the CPUs, or, with "
                        "--address / $RAY_ADDRESS, a cluster of at least N nodes; default 1, all on one node. With "
                        "N > 1 the default placements are those of several sets")
    p.add_argument("--lora-accuracy", action="store_true",
                   help="instead: full fine-tuning vs LoRA (disaggregated, the size's full run), held-out accuracy")
    p.add_argument("--lora-memory", action="store_true",
                   help="instead: memory with beta > 0, full fine-tuning (a reference copy) vs LoRA (none), colocated")
    p.add_argument("--reshard", action="store_true",
                   help="instead: measure the hybrid engine's FSDP2 -> replicated reshard on 2 gloo ranks")
    p.add_argument("--hybrid", action="store_true",
                   help="instead: GRPO in the hybrid-engine placement (one actor, DeepSpeed ZeRO-3 over 2 ranks, "
                        "gathered for TRL's generation; needs deepspeed), predicted first")
    p.add_argument("--hybrid-memory", action="store_true",
                   help="instead: the hybrid placement's peak memory in each layout, on the small model, 3 steps")
    p.set_defaults(func=main)


def check_address(address: str | None) -> None:
    """An unreachable Ray address is one error line now, not a minute of retries inside ray.init."""
    if not address or address == "auto" or "://" in address:
        return
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host or "127.0.0.1", int(port)), timeout=5):
            pass
    except (OSError, ValueError) as e:
        raise RlmLabError(f"Ray could not start: no Ray cluster answers at {address} ({e})") from None


def check_modes(args) -> None:
    """--lora-accuracy and --reshard are whole experiments of their own: no flag they would ignore silently,
    and an --out that is a file is refused before Ray or a model starts."""
    modes = [f for f, on in (("--lora-accuracy", args.lora_accuracy), ("--lora-memory", args.lora_memory),
                             ("--reshard", args.reshard), ("--hybrid", args.hybrid),
                             ("--hybrid-memory", args.hybrid_memory)) if on]
    if len(modes) > 1:
        raise RlmLabError(f"{' and '.join(modes)} are separate experiments; give one of them")
    if modes:
        takes = ("--steps", "--address") if modes[0].startswith("--hybrid") else ()  # the hybrid runs take these
        ignored = [f for f, v in (("--placement", args.placement), ("--steps", args.steps),
                                  ("--address", args.address), ("--nodes", None if args.nodes == 1 else args.nodes))
                   if v is not None and f not in takes]
        if ignored:
            raise RlmLabError(f"{modes[0]} runs its own fixed experiment; it takes no {', '.join(ignored)}")
    if args.out is not None and Path(args.out).exists() and not Path(args.out).is_dir():
        raise RlmLabError(f"--out {args.out} is a file, not a folder for run records")


def main(args) -> int:
    interruptible()  # SIGINT / SIGTERM end the run `interrupted` and stop the local Ray, within seconds
    size = check_size(args.size)
    check_modes(args)
    if args.lora_accuracy:
        for key, r in measure_lora_accuracy(size, args.out or runs_root(size)).items():
            print(f"{key}: accuracy {r['accuracy_before']:.3f} -> {r['accuracy_after']:.3f}, step "
                  f"{r['step_seconds_median']:.4f} s, sync {r['sync']['bytes_per_sync']:,} B -> {r['dir']}")
        return 0
    if args.lora_memory:
        for key, r in measure_lora_memory(size, args.out or runs_root(size)).items():
            sb = r["state_bytes"]
            print(f"{key}: trainer peak RSS {r['trainer_peak_rss_bytes'] / 2**20:.0f} MiB; reference "
                  f"{sb['reference_parameters']:,} B, trainable {sb['actor_trainable']:,} B, AdamW state "
                  f"{sb['optimizer_state']:,} B -> {r['dir']}")
        return 0
    if args.reshard:
        rec = measure_reshard(size, args.out or runs_root(size))
        r = rec.results
        print(f"reshard {r['model']} on {r['world']} ranks: all-gather {r['allgather'].get('bytes', 0):,} B message, "
              f"received per device {r['measured_received_per_device']:,.0f} B (formula "
              f"{r['formula_received_per_device']:,.0f}); peak RSS train {r['train_peak_bytes'] / 2**20:.0f} MiB, "
              f"generate {r['generate_peak_bytes'] / 2**20:.0f} MiB -> {rec.dir}")
        return 0
    if args.steps is not None and args.steps < 1:
        raise RlmLabError(f"--steps must be >= 1, got {args.steps}")
    if args.hybrid or args.hybrid_memory:
        return _hybrid(args, size)
    overrides = {"rl_steps": args.steps} if args.steps else {}
    address = args.address or os.environ.get("RAY_ADDRESS")
    check_address(address)
    # a cluster to join is joined first (that starts nothing): its CPUs, GPUs and nodes are what placements get
    joined = RaySession(address=address, nodes=args.nodes) if address else None
    try:
        keys = tuple(args.placement or spread_keys(size, args.nodes, overrides))
        cfgs, chosen = configs(size, keys, **overrides)
        cpus = max(chosen[k].devices for k in keys)
        check_nodes(args.nodes, cpus if joined is None else args.nodes)
        local_nodes = {node_name(i + 1): c for i, c in enumerate(node_shares(cpus, args.nodes))}
        for key in keys:  # bad input is an error before a local Ray starts
            check_placement(chosen[key], cfgs[key], joined.cpus() if joined else None)
            if args.nodes > 1:
                kind = chosen[key].sets[0].kind
                check_spread(chosen[key], joined.node_devices(kind) if joined else local_nodes)
        root = args.out or runs_root(size)
        with joined or RaySession(num_cpus=cpus, nodes=args.nodes) as session:
            out = measure(size, root, keys, session=session, **overrides)
    finally:
        if joined is not None:
            joined.close()
    for key, res in out.items():
        pred = res.get("prediction") or {}
        where = "" if args.nodes == 1 else "  on " + ", ".join(f"{s}@{n}" for s, n in res["nodes"]["sets"].items())
        print(f"{key:28s} step {res['step_seconds_median']:.4f} s (predicted {pred.get('step_s', float('nan')):.4f} s)"
              f"  sync {res['sync'].get('bytes_per_sync', 0)} B/step{where}  -> {res['dir']}")
    return 0


def spread_keys(size: str, nodes: int, overrides: dict) -> tuple:
    """The default placements: all of them on one node; over several nodes, those of several resource sets
    (one set per node), since a one-set placement holds all the CPUs that the nodes share out."""
    if nodes <= 1:
        return ALL_KEYS
    _, chosen = configs(size, ALL_KEYS, **overrides)
    return tuple(k for k in ALL_KEYS if len(chosen[k].sets) > 1)


def _hybrid(args, size: str) -> int:
    """``--hybrid``: predicted, then run; bad input (no deepspeed, a world that does not split the batch, an
    unreachable --address) is refused before Ray starts."""
    run = dict(key="hybrid_memory", **MEMORY_RUN) if args.hybrid_memory else {}
    cfg = run_config(size, **{**{k: v for k, v in run.items() if k != "key"},
                              **({"rl_steps": args.steps} if args.steps else {})})
    p = get_placement("hybrid", cluster(2), algo_roles(cfg))
    check_placement(p, cfg)
    check_hybrid(p, cfg)
    address = args.address or os.environ.get("RAY_ADDRESS")
    check_address(address)
    with RaySession(num_cpus=p.devices, address=address) as session:
        r = measure_hybrid(size, args.out or runs_root(size), args.steps, session=session, command=sys.argv, **run)
    rs, pred = r["reshard"], r.get("prediction") or {}
    print(f"hybrid {r['describe']}: step {r['step_seconds_median']:.4f} s (predicted {pred.get('step_s', float('nan')):.4f} s);"
          f" reshard received per device {rs['measured_received_per_device']:,.0f} B (formula "
          f"{rs['formula_received_per_device']:,.0f}); peak RSS generate {r['generate_peak_rss_bytes'] / 2**20:.0f} MiB,"
          f" train {r['train_peak_rss_bytes'] / 2**20:.0f} MiB -> {r['dir']}")
    return 0
