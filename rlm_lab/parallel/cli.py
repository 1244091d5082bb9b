"""``rlm-lab parallel``: train a zoo model for a few steps under one parallel layout and record it.

    rlm-lab parallel --dp 2 --zero 3 --model nano --steps 5
    rlm-lab parallel --tp 2 --sp
    torchrun --nproc_per_node 2 -m rlm_lab.parallel.cli --dp 2     # the same, launched by hand

The layout is validated first, in this process, so a bad layout fails before any rank starts. With
more than one rank and no torchrun around it, the command re-executes itself under ``torchrun``
(``--nproc_per_node`` = product of the degrees). Each rank joins a process group (gloo on CPU, NCCL on
GPU) whose collectives time out after ``--timeout`` seconds, so a dead or stalled rank ends the run
instead of hanging it. Rank 0 writes a run record (config, provenance, losses, step times, counted and
predicted collectives, memory per rank, the check against one process) to
``<runs_root(size)>/ch04_<layout>`` or ``--out``.
"""

from __future__ import annotations

import os
import subprocess
import sys

from ..errors import RlmLabError


def add_layout_args(p) -> None:
    for d in ("dp", "tp", "pp", "cp", "ep"):
        p.add_argument(f"--{d}", type=int, default=1, help=f"{d} degree (default 1)")
    p.add_argument("--zero", type=int, default=0, choices=(0, 1, 2, 3),
                   help="0 DDP, 1 ZeroRedundancyOptimizer, 2/3 FSDP2 reshard-after-forward off/on")
    p.add_argument("--sp", action="store_true", help="sequence parallelism with --tp")
    p.add_argument("--schedule", default="1f1b", help="pipeline schedule: gpipe or 1f1b")
    p.add_argument("--microbatches", type=int, default=0, help="pipeline micro-batches (0 = 2 x pp)")


def register(subparsers) -> None:
    p = subparsers.add_parser("parallel", help="run a parallel layout (DP/ZeRO/TP/SP/PP/CP/EP) and record it",
                              description=__doc__.splitlines()[0])
    _arguments(p)
    p.set_defaults(func=_run)


def _arguments(p) -> None:
    add_layout_args(p)
    p.add_argument("--model", default="nano", help="zoo model (default nano; nano-moe for --ep)")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--batch", type=int, default=8, help="global batch (sequences)")
    p.add_argument("--seq", type=int, default=16, help="sequence length")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--size", default=None, help="smoke | cpu | gpu: where the record goes (default $RLM_SIZE or smoke)")
    p.add_argument("--out", default=None, help="run directory (default <runs>/<size>/ch04_<layout>)")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds before a stalled collective fails the run")
    p.add_argument("--no-check", action="store_true", help="skip the single-process comparison")
    p.add_argument("--label", default="", help="appended to the run directory name (e.g. oversubscribed)")


def layout_from_args(args):
    from .mesh import Layout

    return Layout(dp=args.dp, tp=args.tp, pp=args.pp, cp=args.cp, ep=args.ep, zero=args.zero, sp=args.sp,
                  schedule=args.schedule, microbatches=args.microbatches)


def _run(args, argv: list[str] | None = None) -> int:
    from ..models import check_model
    from ..sizes import check_size, size_from_env
    from .mesh import validate

    check_model(args.model)
    args.size = check_size(args.size) if args.size else size_from_env("smoke")
    if args.steps < 1:
        raise RlmLabError(f"--steps must be >= 1, got {args.steps}")
    if args.timeout <= 0:
        raise RlmLabError(f"--timeout must be > 0 seconds, got {args.timeout}")
    layout = layout_from_args(args)
    in_torchrun = "RANK" in os.environ and "WORLD_SIZE" in os.environ
    world = int(os.environ["WORLD_SIZE"]) if in_torchrun else layout.world
    from ..models.tokenizer import ALPHABET, SPECIALS

    validate(layout, args.model, world_size=world, batch=args.batch, seq=args.seq, vocab=len(SPECIALS) + len(ALPHABET))
    if not in_torchrun and layout.world > 1:
        argv = sys.argv[sys.argv.index("parallel") + 1:] if argv is None and "parallel" in sys.argv else (argv or [])
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(layout.world),
               "-m", "rlm_lab.parallel.cli", *argv, "--size", args.size]
        return subprocess.call(cmd)
    return _run_rank(args, layout, in_torchrun)


def _run_rank(args, layout, in_torchrun: bool) -> int:
    import datetime as _dt

    import torch
    import torch.distributed as dist

    from ..record import runs_root
    from .launch import free_port
    from .measure import run_layout, write_record
    from .mesh import backend_for, device_type

    device = device_type()
    if device == "cuda":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    if not in_torchrun:  # a one-rank layout: a group of one, so the same code path runs
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", str(free_port()))
        dist.init_process_group(backend_for(device), rank=0, world_size=1,
                                timeout=_dt.timedelta(seconds=args.timeout))
    else:
        dist.init_process_group(backend_for(device), timeout=_dt.timedelta(seconds=args.timeout))
    try:
        res = run_layout(layout, model=args.model, steps=args.steps, batch=args.batch, seq=args.seq,
                         lr=args.lr, seed=args.seed, reference=not args.no_check, device=device)
        per_rank = [None] * dist.get_world_size()
        dist.all_gather_object(per_rank, {"memory": res["memory"], "comm": res["comm"]})
        if dist.get_rank() == 0:
            res["per_rank"] = per_rank
            run_dir = args.out or runs_root(args.size) / f"ch04_{layout.name()}{'-' + args.label if args.label else ''}"
            write_record(run_dir, res, {k: v for k, v in vars(args).items() if k not in ("func", "out")})
            print(summary_line(res) + f"  -> {run_dir}")
    finally:
        dist.destroy_process_group()
    return 0


def summary_line(res: dict) -> str:
    import statistics

    times = res["step_s"][1:] or res["step_s"]
    comm = ", ".join(f"{k} {v['calls']}x/{v['bytes']:,} B" for k, v in res["comm"].items()) or "no collectives"
    check = res.get("check")
    ok = "" if check is None else f"  vs 1 process: loss |d| {check['loss_abs']:.1e}, grad rel {check['grad_abs_rel'][1]:.1e}"
    return (f"{res['layout']['name']}: loss {res['losses'][-1]:.4f}, {1000 * statistics.median(times):.1f} ms/step, "
            f"{comm}{ok}")


def main(argv: list[str] | None = None) -> int:
    """Entry point under torchrun: ``python -m rlm_lab.parallel.cli --dp 2 ...``."""
    import argparse

    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(prog="rlm-lab parallel", description=__doc__.splitlines()[0])
    _arguments(p)
    try:
        args = p.parse_args(argv)
        return _run(args, argv)
    except RlmLabError as e:
        print(f"rlm-lab: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
