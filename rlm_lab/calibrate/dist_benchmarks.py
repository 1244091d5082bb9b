"""Calibration of the distributed layouts: the rates at a rank's thread count and the framework cost per step.

Two measurements, written into a profile's ``distributed`` section (``rlm-lab calibrate`` adds it; for a
profile made before it existed, ``rlm-lab chapter 4 dist-benchmarks --profile NAME`` writes a companion
file ``data/hardware/distributed/NAME.json`` that :func:`distributed_section` reads beside the profile):

* ``threads``: the matrix-product curve, per-call overheads, elementwise and attention rates measured with
  ``torch.set_num_threads(n)`` for each n in ``THREADS`` (default 1: what every rank of a spawned or torchrun
  run uses). :func:`at_threads` returns the profile with those rates swapped in.
* ``framework``: per layout family (DDP's reducer, ZeroRedundancyOptimizer, FSDP2 with and without
  resharding, DTensor TP with and without SP, the pipeline schedule, the ring of context parallelism, the
  expert all-to-all dispatch), the time a step costs beyond what the profile predicts for its compute and
  the α-β time of its counted messages. Measured with the chapter's own harness
  (``rlm_lab.parallel.bench.measure.run_layout``) on 2 gloo processes (1 thread each) training hidden-16
  models whose compute is ~0, at two depths (or two micro-batch counts for PP); the residual
  ``measured - predicted without framework`` is fitted as ``base_s + unit_s · units`` by non-negative
  least squares (``fitting.py``), units = layers (micro-batches for PP, ring hops for CP).
  ``harness``: the cost of ``CommCounter`` (a ``TorchDispatchMode`` that sees every op) per step, measured
  as the one-process step with it minus without it; runs timed under the counter add it.

The hidden-16 models are not any run the predictions are judged against (calibration and validation stay
apart). Datasheet profiles have no such measurement: ``assumed.ASSUMED_DIST_FRAMEWORK`` (named as assumed).
Torch is imported inside the functions.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
from pathlib import Path

from ..cost.hardware import load_profile
from ..errors import RlmLabError
from ..host import machine_load
from ..parallel.bench.framework import (  # noqa: F401 (re-exported)
    BATCH,
    COMPANION_DIR,
    DEPTHS,
    PP_DEPTH,
    SEQ,
    at_threads,
    distributed_section,
    spec_of,
    tiny,
)
from ..parallel.bench.measure import run_layout
from ..parallel.bench.step_time import fit_framework, framework_terms  # noqa: F401 (re-exported)
from ..parallel.launch import spawn
from ..parallel.mesh import Layout
from ..record import atomic_write_json, provenance
from . import benchmarks
from .kernel_benchmarks import bench_attention, bench_elementwise

THREADS = (1,)
STEPS = 20
# (layout kwargs, depths or micro-batch counts): one row of the fit each
WORLD2 = [({"dp": 2}, "ddp"), ({"dp": 2, "zero": 1}, "zero1"), ({"dp": 2, "zero": 2}, "fsdp_zero2"),
          ({"dp": 2, "zero": 3}, "fsdp_zero3"), ({"tp": 2}, "tp"), ({"tp": 2, "sp": True}, "tp_sp"),
          ({"cp": 2}, "cp"), ({"ep": 2}, "ep")]
PP_CASES = [({"pp": 2, "schedule": s, "microbatches": m}, "pp") for s in ("gpipe", "1f1b") for m in (2, 4)]



# ---- measurements -----------------------------------------------------------------------------------

def bench_threads(threads: int, device: str = "cpu", quick: bool = False) -> dict:
    """The rates a rank with ``threads`` torch threads computes at (this process, threads restored after)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        budget = 0.05 if quick else 0.25
        op_s = benchmarks.bench_op(device, budget)
        curve = benchmarks.bench_matmul(device, "fp32", quick, op_s, budget)
        over = benchmarks.bench_overheads(device, quick, budget)
        kernels = {"elementwise": bench_elementwise(device, quick, 0.4 * budget),
                   "attention": bench_attention(device, quick, op_s, 0.4 * budget)}
    finally:
        torch.set_num_threads(before)
    return {"matmul_curve": {"fp32": curve}, "matmul_flops": {"fp32": max(r for _, r in curve)},
            "overhead": over, "kernels": kernels}


def _cases():
    out = [({}, "single", L, True) for L in DEPTHS] + [({}, "single", L, False) for L in DEPTHS]
    out += [(kw, fam, L, True) for kw, fam in WORLD2 for L in DEPTHS]
    out += [(kw, fam, PP_DEPTH, True) for kw, fam in PP_CASES]
    return out


def _framework_rank(rank, world, cases, steps):
    """In each of the 2 processes: the median step of every case (run_layout, the chapter's harness)."""
    out = []
    for kw, fam, layers, count in cases:
        lay = Layout(**kw)
        model = tiny(layers, moe=lay.ep > 1)
        r = run_layout(lay, model=model, steps=steps + 1, batch=BATCH, seq=SEQ, reference=False, count=count)
        out.append({"step_s": statistics.median(r["step_s"][1:]), "comm": r["comm"]})
    return out


def bench_framework(steps: int = STEPS) -> list[dict]:
    """Measured points: {layout, family, layers, counted, step_s, comm} per case (rank 0's, slowest = barrier)."""
    cases = _cases()
    one = [c for c in cases if c[1] == "single"]  # one process (the harness alone), then the 2-process layouts
    two = [c for c in cases if c[1] != "single"]
    res = spawn(_framework_rank, 1, args=(one, steps), timeout_s=300)[0]
    res += spawn(_framework_rank, 2, args=(two, steps), timeout_s=300)[0]
    pts = []
    for (kw, fam, layers, count), r in zip(one + two, res):
        pts.append({"layout": kw, "family": fam, "layers": layers, "counted": count, "step_s": r["step_s"],
                    "comm": r["comm"]})
    return pts


def measure_distributed(profile, quick: bool = False) -> dict:
    """The ``distributed`` section for ``profile`` (whose collectives price the messages of the fit)."""
    import torch

    before = machine_load()
    thr = {str(n): bench_threads(n, quick=quick) for n in THREADS}
    base = load_profile(profile).to_dict()
    base["distributed"] = {"threads": thr}
    points = bench_framework(steps=4 if quick else STEPS)
    fw = fit_framework(points, load_profile(base), cores=len(os.sched_getaffinity(0)))
    return {"threads": thr, "framework": fw, "framework_points": points, "cores": len(os.sched_getaffinity(0)),
            "model": "hidden 16 (tiny, spec_of)",
            "batch": BATCH, "seq": SEQ, "world": 2, "rank_threads": 1, "calibration_threads": torch.get_num_threads(),
            "load": {"before": before, "after": machine_load()}}


def write_companion(profile_name: str, out: str | Path | None = None, quick: bool = False, force: bool = False) -> Path:
    """Measure the distributed section for an existing profile and write it beside it (with provenance)."""
    prof = load_profile(profile_name)
    out = Path(out) if out else COMPANION_DIR / f"{prof.name}.json"
    if out.exists() and not force:
        raise RlmLabError(f"{out} exists; pass --force to replace it")
    sec = measure_distributed(prof, quick)
    return atomic_write_json(out, {"profile": prof.name, "distributed": sec, "provenance": provenance(),
                                   "command": "flock -x /tmp/rlm-lab-measure.lock rlm-lab chapter 4 dist-benchmarks"
                                              f" --profile {prof.name}"})


def main(argv: list[str]) -> int:
    """``rlm-lab chapter 4 dist-benchmarks --profile NAME [--out FILE] [--quick] [--force]``: the companion file."""
    ap = argparse.ArgumentParser(prog="rlm-lab chapter 4 dist-benchmarks", description=__doc__.split("\n\n")[0])
    ap.add_argument("--profile", required=True)
    ap.add_argument("--out")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--force", action="store_true")
    a = ap.parse_args(argv)
    print(write_companion(a.profile, a.out, a.quick, a.force))
    return 0
