"""``rlm-lab parallel``: train a zoo model for a few steps under one parallel layout and record it.

    rlm-lab parallel --dp 2 --zero 3 --model nano --steps 5
    rlm-lab parallel --tp 2 --sp
    rlm-lab parallel --ep 2                                        # nano-moe (EP needs experts)
    torchrun --nproc_per_node 2 -m rlm_lab.cli parallel --dp 2     # the same, launched by hand
    rlm-lab parallel --nnodes 2 --dp 2                              # 2 torchrun agents (node ranks 0, 1), c10d

Every input is validated first, in this process, so a bad layout, batch, sequence, learning rate or
output folder fails in one ``rlm-lab: error:`` line (exit 2) before any rank starts. With more than one
rank the command starts them itself (``rlm_lab.parallel.launch.spawn``: one process per rank, gloo on
CPU, NCCL on GPU); with ``--nnodes N`` it starts N torchrun agents on this machine instead, one per node
rank, meeting at a c10d rendezvous on 127.0.0.1 (:mod:`rlm_lab.parallel.nodes`). Collectives time out after ``--timeout`` seconds, so a dead or stalled rank ends the
run with one line naming the rank and the cause instead of hanging it. Rank 0's results are written
as a run record (config, provenance, losses, step times, counted and predicted collectives, memory per
rank, the check against one process) to ``--out`` or ``_build/runs/<size>/ch04_<layout>``; an existing
record there is replaced only with ``--force``. The exit status is 1 when the run does not match one
process within the tolerance or its counted collectives differ from the formula (the record is kept).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import math
import os
import statistics
import sys
from pathlib import Path

from ..errors import RlmLabError
from ..host import die_with_parent
from ..models import check_model
from ..models.tokenizer import ALPHABET, SPECIALS
from ..record import RunRecord, runs_root
from ..sizes import check_size, size_from_env
from .bench.measure import TOLERANCE, run_layout, spawn_layouts, tolerance_problem, write_record
from .launch import bound_store
from .mesh import Layout, backend_for, device_type, validate
from .nodes import check_nnodes, run_nodes
from .predict import comm_mismatches, layout_of, predicted_comm


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
    p.set_defaults(func=command)


def _arguments(p) -> None:
    add_layout_args(p)
    p.add_argument("--model", default=None, help="zoo model (default nano; nano-moe with --ep > 1)")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--batch", type=int, default=8, help="global batch (sequences)")
    p.add_argument("--seq", type=int, default=16, help="sequence length")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--size", default=None, help="smoke | cpu | gpu: where the record goes, _build/runs/<size> "
                                                "(default $RLM_SIZE or smoke)")
    p.add_argument("--out", default=None, help="run directory (default _build/runs/<size>/ch04_<layout>)")
    p.add_argument("--force", action="store_true", help="replace an existing run record in the run directory")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds before a stalled collective fails the run")
    p.add_argument("--no-check", action="store_true", help="skip the single-process comparison")
    p.add_argument("--label", default="", help="appended to the run directory name (e.g. oversubscribed)")
    p.add_argument("--nnodes", type=int, default=1,
                   help="run the ranks under this many torchrun agents on this machine, one per node rank, with a "
                        "c10d rendezvous on 127.0.0.1 (what torchrun --nnodes does across machines); default 1")


def layout_from_args(args):
    return Layout(dp=args.dp, tp=args.tp, pp=args.pp, cp=args.cp, ep=args.ep, zero=args.zero, sp=args.sp,
                  schedule=args.schedule, microbatches=args.microbatches)


def check_args(args):
    """Validate every input (no process, no torch); returns ``(layout, run_dir)``."""
    args.size = check_size(args.size) if args.size else size_from_env("smoke")
    args.model = check_model(args.model or ("nano-moe" if args.ep > 1 else "nano"))
    if args.steps < 1:
        raise RlmLabError(f"--steps must be >= 1, got {args.steps}")
    if not (math.isfinite(args.timeout) and args.timeout > 0):
        raise RlmLabError(f"--timeout must be a finite number of seconds > 0, got {args.timeout}")
    if not (math.isfinite(args.lr) and args.lr > 0):
        raise RlmLabError(f"--lr must be a finite number > 0, got {args.lr}")
    if args.label and (os.sep in args.label or args.label in (".", "..")):
        raise RlmLabError(f"--label is part of a folder name; it cannot contain {os.sep!r}: {args.label!r}")
    layout = layout_from_args(args)
    world = int(os.environ["WORLD_SIZE"]) if in_torchrun() else layout.world
    if args.nnodes != 1 and in_torchrun():
        raise RlmLabError("--nnodes starts torchrun agents itself; under torchrun, give torchrun's own --nnodes")
    check_nnodes(args.nnodes, layout.world)
    validate(layout, args.model, world_size=world, batch=args.batch, seq=args.seq,
             vocab=len(SPECIALS) + len(ALPHABET))
    nodes = f"-{args.nnodes}nodes" if args.nnodes > 1 else ""
    run_dir = Path(args.out) if args.out else \
        runs_root(args.size) / f"ch04_{layout.name()}{nodes}{'-' + args.label if args.label else ''}"
    if run_dir.exists() and not run_dir.is_dir():
        raise RlmLabError(f"--out {run_dir} is a file, not a folder; give a folder for the run record")
    for parent in (run_dir, *run_dir.parents):  # the nearest existing folder must be writable
        if parent.exists():
            if not os.access(parent, os.W_OK | os.X_OK):
                raise RlmLabError(f"cannot write the run record under {parent}: permission denied")
            break
    return layout, run_dir


def in_torchrun() -> bool:
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ


def _run(args, argv: list[str] | None = None) -> int:
    layout, run_dir = check_args(args)
    kw = dict(model=args.model, steps=args.steps, batch=args.batch, seq=args.seq, lr=args.lr, seed=args.seed,
              reference=not args.no_check)
    rank0 = int(os.environ.get("RANK", "0")) == 0
    # the record is opened (status running, folder locked) before any rank starts: a folder that holds a
    # run is refused (or, with --force, set aside) at no cost, and a failed run is recorded as failed
    config = {k: v for k, v in vars(args).items() if k not in ("func", "out", "force")}
    rec = RunRecord(run_dir, config=config, seed=args.seed, force=args.force) if rank0 else None
    try:
        if in_torchrun():
            res = _run_rank(args, layout, kw)
        elif args.nnodes > 1:
            res = run_nodes(args.nnodes, layout.world // args.nnodes, rank_args(args), rec.scratch("nodes-"),
                            timeout_s=600 + 10 * args.timeout)
        elif layout.world > 1:
            res = spawn_layouts([(layout, kw)], world=layout.world, timeout_s=args.timeout)[0]
        else:
            res = _run_rank(args, layout, kw)
    except KeyboardInterrupt:
        if rec is not None:
            rec.interrupt()
        raise
    except BaseException as e:
        if rec is not None:
            rec.fail(e)
        raise
    return 0 if rec is None else _report(res, rec)


def rank_args(args) -> list[str]:
    """The arguments that give a rank (under torchrun) the run ``args`` describes (no --out, --nnodes)."""
    out = []
    for d in ("dp", "tp", "pp", "cp", "ep"):
        out += [f"--{d}", str(getattr(args, d))]
    out += ["--zero", str(args.zero), "--schedule", args.schedule, "--microbatches", str(args.microbatches),
            "--model", args.model, "--steps", str(args.steps), "--batch", str(args.batch), "--seq", str(args.seq),
            "--lr", repr(args.lr), "--seed", str(args.seed), "--size", args.size, "--timeout", repr(args.timeout)]
    return out + (["--sp"] if args.sp else []) + (["--no-check"] if args.no_check else [])


def _report(res: dict, rec) -> int:
    """Complete the record, print the summary; 1 (with one error line per failed check) if a check failed."""
    run_dir = write_record(rec, res)
    print(summary_line(res) + f"  -> {run_dir}")
    problems = failed_checks(res)
    for p in problems:
        print(f"rlm-lab: error: {res['layout']['name']}: {p} (record kept: {run_dir})", file=sys.stderr)
    return 1 if problems else 0


def failed_checks(res: dict, tol: dict | None = None) -> list[str]:
    """What failed: every rank's comparison with one process (a pipeline rank holds only its stage, so
    the stages' gradient counts must add up to the model's), and the counted collectives against the
    formula (where the formula exists for the layout: not EP, not PP beyond 2 stages)."""
    tol = tol or TOLERANCE
    layout = layout_of(res)
    out = []
    checks = [pr.get("check") for pr in res.get("per_rank") or []] or [res.get("check")]
    checks = [(rank, c) for rank, c in enumerate(checks) if c is not None]
    for rank, check in checks:
        problem = tolerance_problem(check, tol)
        if problem:
            who = f"rank {rank} " if len(checks) > 1 else ""
            out.append(f"{who}does not match one process: {problem}")
    counted = [c["n_grads"] for _, c in checks if c.get("n_ref") is not None]
    if counted:
        n_ref = checks[0][1]["n_ref"]
        per = [sum(counted)] if layout.pp > 1 else counted  # PP: each parameter lives on exactly one stage
        for n in per:
            if n != n_ref:
                out.append(f"{n} gradients compared, the model has {n_ref} parameters")
                break
    try:
        pred = predicted_comm(layout, res["model"], res["batch"], res["seq"])
    except RlmLabError:
        pred = None  # bytes not predicted for this layout (the record says so)
    if layout.dp > 1 and layout.zero <= 1 and res["steps"] < 3:
        pred = None  # DDP rebuilds its buckets after step 0 and broadcasts the layout in step 1: no steady step
    if pred is not None:
        bad = comm_mismatches(pred, res["comm"])
        if bad:
            out.append("counted collectives differ from the formula: " + "; ".join(bad))
    return out


def deterministic_cuda() -> None:
    """Deterministic CUDA kernels for the parity check against one process: it compares parameters after several
    AdamW steps, and AdamW turns a gradient element near zero into a whole step of either sign, so the atomics
    of a nondeterministic backward kernel (memory-efficient attention's, for one) would show up as a layout's
    error. cuBLAS needs its workspace fixed before its first call
    (https://docs.pytorch.org/docs/stable/notes/randomness.html); an op with no deterministic kernel raises."""
    import torch

    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True)


def _run_rank(args, layout, kw: dict):
    """This process as one rank (under torchrun) or as the only rank (a group of one)."""
    import torch
    import torch.distributed as dist

    device = device_type()
    if device == "cuda":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
        deterministic_cuda()
    if not in_torchrun():  # a one-rank layout: a group of one (its store on loopback), so the same code path runs
        dist.init_process_group(backend_for(device), store=bound_store("127.0.0.1", 0, 1, True, args.timeout),
                                rank=0, world_size=1, timeout=_dt.timedelta(seconds=args.timeout))
    else:
        dist.init_process_group(backend_for(device), timeout=_dt.timedelta(seconds=args.timeout))
    try:
        res = run_layout(layout, device=device, **kw)
        per_rank = [None] * dist.get_world_size()
        dist.all_gather_object(per_rank, {"memory": res["memory"], "comm": res["comm"], "check": res.get("check")})
        res["per_rank"] = per_rank
        return res if dist.get_rank() == 0 else None
    finally:
        dist.destroy_process_group()


def summary_line(res: dict) -> str:
    times = res["step_s"][1:] or res["step_s"]
    comm = ", ".join(f"{k} {v['calls']}x/{v['bytes']:,} B" for k, v in res["comm"].items()) or "no collectives"
    check = res.get("check")
    ok = "" if check is None else f"  vs 1 process: loss |d| {check['loss_abs']:.1e}, grad rel {check['grad_abs_rel'][1]:.1e}"
    return (f"{res['layout']['name']}: loss {res['losses'][-1]:.4f}, {1000 * statistics.median(times):.1f} ms/step, "
            f"{comm}{ok}")


def command(args) -> int:
    """``rlm-lab parallel``, also as a rank under torchrun (``torchrun ... -m rlm_lab.cli parallel --dp 2 ...``):
    a rank whose agent dies (SIGKILLed: it cannot stop us) goes with it, and only rank 0 says an error (every
    rank finds the same one before the process group starts; the entry point prints it as one line)."""
    if not in_torchrun():
        return _run(args)
    die_with_parent()
    try:
        return _run(args)
    except RlmLabError:
        if int(os.environ.get("RANK", "0")) == 0:
            raise
        return 2
