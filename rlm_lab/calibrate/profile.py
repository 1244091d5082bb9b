"""``rlm-lab calibrate``: micro-benchmarks that write a hardware profile (data/hardware/<name>.json).

Measured, each as the median of repeated timings:

* matrix products: FLOP/s of ``F.linear`` across shapes (m tokens x k -> n), fp32 on CPU (bf16 and
  fp32 on CUDA), with the per-op dispatch time subtracted -> ``matmul_curve`` and ``matmul_flops``;
* memory bandwidth: copy of a large tensor (bytes read + written) / time;
* per-call overheads: a tiny op; forward, backward and ``generate`` steps of tiny Llama models with
  1 and 8 layers (hidden 16, so compute is negligible): the slope over layers is the per-layer
  overhead, the intercept the base; the optimizer step (grad clipping + fused AdamW + zero_grad,
  as transformers' Trainer runs it) over 8 and 64 small tensors: the slope is the per-tensor cost;
* kernels beyond the matrix products, each on synthetic tensors of several sizes (``kernels``):
  the elementwise ops of a decoder layer (RMSNorm, rotary, SiLU * up, residual adds; seconds per
  element, forward / with autograd / backward), the attention kernel (torch SDPA with a causal mask:
  FLOP/s vs size, forward and backward) and TRL's fused log-prob head (beyond its matrix product:
  base + per row + per logit);
* TRL's per-step bookkeeping (not with ``--quick``, CPU only): a real GRPOTrainer on hidden-16 models traced
  by the stage tracer, ``other`` = step - stages at 2 batches x 2 depths, fitted as base + per row + per
  parameter tensor (``step_benchmarks.py``; overhead keys ``trl_step_*``);
* TRL's defaults (not with ``--quick``): on CPU the products and attention under bf16 autocast, forward and
  backward (``matmul_curve`` ``bf16``/``bf16_backward``, ``kernels.attention_bf16``), and gradient
  checkpointing's per-layer overhead (``checkpoint_*``) (``autocast_benchmarks.py``);
* collectives (gloo on CPU, NCCL on CUDA with >= 2 GPUs), 2 processes: time vs message size,
  least-squares fit of t = alpha + beta * bytes_per_rank (comm.py) per op.
* distributed layouts (CPU, not with ``--quick`` or ``--no-collectives``), once after the repeats: the rates
  at 1 torch thread (what each rank of a multi-process run uses) and the framework cost per layout family
  on hidden-16 models (``dist_benchmarks.py``; the profile's ``distributed`` section).

Every fitted coefficient is >= 0 by non-negative least squares (``fitting.py``), not by clamping.
The benchmarks live in ``benchmarks.py`` and ``kernel_benchmarks.py``; this module repeats them,
keeps the median and the spread, checks the machine's load and writes the profile.

Repeats: the whole set of benchmarks runs ``--repeats`` times (default 5); the profile holds, for every
measured number, the median over the repeats, and under ``spread`` its interquartile range [q1, q3]
and its [min, max] over the repeats (``spread.py`` turns the quartiles into a predicted interval).
Load: before the first repeat the 1-minute load average must be at most ``--max-load`` per core
(default 0.5), else the command refuses (exit 2) unless ``--allow-busy``; the load is recorded before
each repeat and after the last, and a busy machine is marked ``"busy": true`` in the profile's
``load`` with a loud warning.

These benchmarks are the ONLY inputs fitted to measurements; runs that predictions are judged
against are never used here (calibration and validation stay separate).
Run the real calibration on a quiet machine: ``flock -x /tmp/rlm-lab-measure.lock rlm-lab calibrate``.
"""

from __future__ import annotations

import math
import os
import statistics
import sys
from pathlib import Path

from ..cost.hardware import HARDWARE_DIR, load_profile, profile_from_dict, save_profile
from ..cost.spread import HEADLINES, spread_summary
from ..device import cpu_name, default_name
from ..errors import RlmLabError
from ..host import machine_load
from ..record import provenance
from . import benchmarks
from .autocast_benchmarks import bench_autocast_and_checkpoint
from .dist_benchmarks import measure_distributed
from .kernel_benchmarks import bench_attention, bench_elementwise, bench_logprob_head, bench_weight_stream
from .step_benchmarks import KEYS, bench_trl_step

REPO = HARDWARE_DIR.parents[1]


# ---- repeats: median and spread of every measured number ---------------------------------------------

SPREAD_STATISTIC = ("median over repeats; quartiles = [q1, q3] (interquartile range, statistics.quantiles "
                    "method 'inclusive'); min_max = [min, max] over repeats")
NOISY_REL_IQR = 0.10  # a headline quantity whose IQR exceeds 10 % of its median is reported as noisy
MAX_LOAD_PER_CORE = 0.5


def _quartiles(values: list[float]) -> tuple[float, float, float]:
    if len(values) == 1:
        return values[0], values[0], values[0]
    q1, q2, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return q1, q2, q3


def combine_repeats(runs: list, path: str = "") -> tuple:
    """Leaf-wise (median, quartiles [q1, q3], [min, max]) of repeated measurements of the same structure.

    Dicts are combined key by key and lists element by element; numbers give their median; anything
    else (names, flags) is taken from the first repeat. ``points`` (the raw measurements behind a fit)
    get a median but no spread entry. Returns (median, quartiles, min_max); the last two are None where
    a subtree has no spread.
    """
    first = runs[0]
    if isinstance(first, dict):
        keys = list(first)
        if any(list(r) != keys for r in runs):
            raise RlmLabError(f"calibration repeats measured different quantities at {path or 'the top'}")
        med, q, mm = {}, {}, {}
        for k in keys:
            m_, q_, mm_ = combine_repeats([r[k] for r in runs], f"{path}.{k}".lstrip("."))
            med[k] = m_
            if q_ is not None and k != "points":
                q[k], mm[k] = q_, mm_
        return med, (q or None), (mm or None)
    if isinstance(first, (list, tuple)):
        if any(len(r) != len(first) for r in runs):
            raise RlmLabError(f"calibration repeats measured lists of different lengths at {path}")
        parts = [combine_repeats([r[i] for r in runs], f"{path}[{i}]") for i in range(len(first))]
        return [m_ for m_, _, _ in parts], [q_ for _, q_, _ in parts], [mm_ for _, _, mm_ in parts]
    if isinstance(first, (int, float)) and not isinstance(first, bool):
        vals = [float(r) for r in runs]
        q1, q2, q3 = _quartiles(vals)
        return q2, [q1, q3], [min(vals), max(vals)]
    return first, None, None


def repeated_calibration(measure, repeats: int, loadavg=os.getloadavg, cores: int | None = None,
                         max_load: float = MAX_LOAD_PER_CORE, allow_busy: bool = False, own_threads: int = 1,
                         warn=None) -> dict:
    """Run ``measure()`` (one pass of every benchmark -> nested dict of numbers) ``repeats`` times.

    Refuses (RlmLabError) when the 1-minute load average per core exceeds ``max_load`` before the
    first repeat, unless ``allow_busy``. The load is read before each repeat and after the last; the
    benchmark's own ``own_threads`` busy threads are allowed for in the readings taken while it runs.
    Returns {"measured": medians, "spread": {...}, "load": {...}}.
    """
    if repeats < 1:
        raise RlmLabError(f"--repeats must be >= 1, got {repeats}")
    warn = warn or (lambda msg: print(f"rlm-lab: WARNING: {msg}", file=sys.stderr))
    before = machine_load(cores, loadavg)
    busy_before = before["per_core"] > max_load
    if busy_before and not allow_busy:
        raise RlmLabError(f"the machine is busy: 1-minute load average {before['loadavg'][0]:.2f} on "
                          f"{before['cores']} cores (> {max_load} per core); calibrate on a quiet machine, "
                          f"or pass --allow-busy to record a calibration marked busy")
    runs, during = [], []
    for i in range(repeats):
        if i:
            during.append(machine_load(cores, loadavg))
        runs.append(measure())
    after = machine_load(cores, loadavg)
    # while (and just after) the benchmark runs, its own threads count in the load average
    allowance = own_threads / after["cores"]
    busy_during = [r for r in during + [after] if r["per_core"] - allowance > max_load]
    busy = busy_before or bool(busy_during)
    med, quartiles, min_max = combine_repeats(runs)
    spread = {"statistic": SPREAD_STATISTIC, "repeats": repeats, "quartiles": quartiles or {},
              "min_max": min_max or {}}
    noisy = [p for p, v in spread_summary(med | {"spread": spread}).items() if v["rel_iqr"] > NOISY_REL_IQR]
    spread["noisy"] = noisy
    load = {"before": before, "during": during, "after": after, "max_load_per_core": max_load,
            "own_threads_allowed": own_threads, "busy": busy}
    if busy:
        warn(f"the machine was BUSY during calibration (load per core before {before['per_core']:.2f}, "
             f"max during {max(r['per_core'] for r in during + [after]):.2f}; limit {max_load} + own "
             f"{allowance:.2f}): the profile is marked busy; its numbers are slower than this machine's")
    if noisy:
        warn(f"spread above {NOISY_REL_IQR:.0%} of the median (IQR over {repeats} repeats) in: {', '.join(noisy)}")
    return {"measured": med, "spread": spread, "load": load}


# ---- the command ----------------------------------------------------------------------------------

def measure_once(device: str, quick: bool, collectives: bool) -> dict:
    """One pass of every micro-benchmark: the measured part of a profile."""
    import torch

    # seconds per timed benchmark: a GPU kernel takes microseconds to milliseconds, so 0.1 s is still hundreds of
    # repeats; 0.5 s on CUDA made one pass of every benchmark take over half a minute
    budget = 0.05 if quick else (0.1 if device == "cuda" else 0.5)
    op_s = benchmarks.bench_op(device, budget)
    dtypes = ("fp32",) if device == "cpu" else ("bf16", "fp32")
    curve = {dt: benchmarks.bench_matmul(device, dt, quick, op_s, budget) for dt in dtypes}
    bw = benchmarks.bench_bandwidth(device, quick, budget)
    overhead = benchmarks.bench_overheads(device, quick, budget)
    if device == "cpu" and not quick:  # TRL's per-step bookkeeping on a real GRPOTrainer (~30 s; step_benchmarks.py)

        trl = bench_trl_step(device)
        overhead.update({k: trl[k] for k in KEYS})
    autocast = None
    if not quick:  # bf16 autocast (CPU) and gradient checkpointing, TRL's defaults (autocast_benchmarks.py)

        autocast = bench_autocast_and_checkpoint(device, quick, op_s, 0.4 * budget)  # ~1 min a repeat
        overhead.update(autocast["overhead"])
    kb = 0.4 * budget  # many shapes: a shorter budget each keeps the whole calibration within minutes
    kernels = {"elementwise": bench_elementwise(device, quick, kb),
               "attention": bench_attention(device, quick, op_s, kb),
               "logprob_head": bench_logprob_head(device, quick, kb),
               "weight_stream": bench_weight_stream(device, quick, kb)}
    if collectives and (device == "cpu" or torch.cuda.device_count() >= 2):
        coll = benchmarks.bench_collectives(device, quick)
    else:
        coll = {"backend": "gloo" if device == "cpu" else "nccl", "world": 2, "ops": {}, "points": {},
                "note": "not measured (needs 2 devices or --collectives)"}
    if autocast and "matmul" in autocast:
        curve.update({"bf16": autocast["matmul"]["forward"], "bf16_backward": autocast["matmul"]["backward"]})
        kernels["attention_bf16"] = autocast["attention"]
    p2p = coll["ops"].get("send_recv", {}).get("beta_s_per_byte")
    return {"matmul_flops": {dt: max(r for _, r in pts) for dt, pts in curve.items()}, "matmul_curve": curve,
            "memory_bandwidth": bw, "overhead": overhead, "kernels": kernels,
            "link_bandwidth": 1.0 / p2p if p2p else 0.0, "collectives": coll}


def calibrate(out: str | Path | None = None, quick: bool = False, device: str = "cpu",
              collectives: bool = True, name: str | None = None, repeats: int | None = None,
              max_load: float = MAX_LOAD_PER_CORE, allow_busy: bool = False, force: bool = False) -> Path:
    """Run the micro-benchmarks ``repeats`` times (default 5; 1 with ``quick``) and write the profile.

    Refuses to overwrite an existing profile unless ``force``; returns the profile's path."""
    import torch

    if device == "cuda" and not torch.cuda.is_available():
        raise RlmLabError("--device cuda asked for, but torch sees no CUDA device; use --device cpu")
    repeats = repeats or (1 if quick else 5)
    name = name or default_name(device) + ("-quick" if quick else "")
    if out is None:
        out = (REPO / "_build" / "hardware" if quick else HARDWARE_DIR) / f"{name}.json"
    out = Path(out)
    if out.exists() and not force:
        raise RlmLabError(f"{out} exists; pass --force to replace it, or --out another path")
    threads = torch.get_num_threads()
    res = repeated_calibration(lambda: measure_once(device, quick, collectives), repeats,
                               max_load=max_load, allow_busy=allow_busy,
                               own_threads=threads if device == "cpu" else 1)
    if device == "cuda":
        mem, dev_name = torch.cuda.get_device_properties(0).total_memory, torch.cuda.get_device_name(0)
    else:
        mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        dev_name = f"{cpu_name()} ({os.cpu_count()} cores)"
    profile = {
        "name": name, "kind": "calibrated", "device": dev_name, "source": "rlm-lab calibrate" + (" --quick" if quick else ""),
        "memory_bytes": mem, **res["measured"], "efficiency": {"matmul": 1.0, "memory": 1.0},
        "overlap_overhead": device == "cuda", "threads": threads, "spread": res["spread"], "load": res["load"],
        "provenance": provenance(), "notes": "measured numbers; efficiencies are 1 because rates are achieved rates",
    }
    profile_from_dict(profile, where=name)
    if device == "cpu" and collectives and not quick:  # once, after the repeats (~2 min; dist_benchmarks.py)

        profile["distributed"] = measure_distributed(profile)
    return save_profile(profile, out)


def register(subparsers) -> None:
    p = subparsers.add_parser("calibrate", help="measure this machine and write a hardware profile",
                              description=__doc__.split("\n\n")[0])
    p.add_argument("--out", help="profile path (default data/hardware/<name>.json; --quick: _build/hardware/)")
    p.add_argument("--name", help="profile name (default from the CPU/GPU model)")
    p.add_argument("--quick", action="store_true", help="seconds-long smoke calibration (for tests)")
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    p.add_argument("--no-collectives", action="store_true", help="skip the 2-process collective benchmarks")
    p.add_argument("--repeats", type=int, default=None,
                   help="repetitions of the whole set of benchmarks (default 5; --quick: 1); median and spread kept")
    p.add_argument("--max-load", type=float, default=MAX_LOAD_PER_CORE,
                   help=f"refuse when the 1-minute load average per core exceeds this (default {MAX_LOAD_PER_CORE})")
    p.add_argument("--allow-busy", action="store_true",
                   help="calibrate a busy machine anyway; the profile is marked busy")
    p.add_argument("--force", action="store_true", help="replace an existing profile at the output path")
    p.set_defaults(func=_run)


def _run(args) -> int:
    if args.repeats is not None and args.repeats < 1:
        raise RlmLabError(f"--repeats must be >= 1, got {args.repeats}")
    if not (args.max_load > 0 and math.isfinite(args.max_load)):
        raise RlmLabError(f"--max-load must be a positive number, got {args.max_load}")
    path = calibrate(args.out, args.quick, args.device, not args.no_collectives, args.name, args.repeats,
                     args.max_load, args.allow_busy, args.force)

    prof = load_profile(path)
    o = prof.overhead
    print(f"wrote {path}")
    print(f"  matmul peak {max(prof.matmul_flops.values()) / 1e9:.3g} GFLOP/s, memory {prof.memory_bandwidth / 1e9:.3g} GB/s, "
          f"op {o['op_s'] * 1e6:.3g} us, forward {o['forward_base_s'] * 1e3:.3g} ms + {o['forward_layer_s'] * 1e3:.3g} ms/layer, "
          f"decode step {o['decode_step_base_s'] * 1e3:.3g} ms + {o['decode_step_layer_s'] * 1e3:.3g} ms/layer")
    k = prof.kernels
    print(f"  elementwise {k['elementwise']['forward']['s_per_element'] * 1e9:.3g} ns/element (backward "
          f"{k['elementwise']['backward']['s_per_element'] * 1e9:.3g}), log-prob head {k['logprob_head']['forward']['base_s'] * 1e6:.3g} us "
          f"+ {k['logprob_head']['forward']['s_per_row'] * 1e6:.3g} us/row + {k['logprob_head']['forward']['s_per_element'] * 1e9:.3g} ns/logit")
    for op, fit in prof.collectives.get("ops", {}).items():
        print(f"  {op:<15} alpha {fit['alpha_s'] * 1e6:8.1f} us   1/beta {1 / fit['beta_s_per_byte'] / 1e9 if fit['beta_s_per_byte'] else float('inf'):.3g} GB/s")
    print(f"  spread over {prof.spread.get('repeats')} repeats (IQR / median):")
    for path_, v in spread_summary(prof.to_dict()).items():
        print(f"    {HEADLINES[path_]:<28} {v['rel_iqr']:7.1%}   [min {v['min']:.4g}, max {v['max']:.4g}]")
    print(f"  load per core before {prof.load['before']['per_core']:.2f}, after {prof.load['after']['per_core']:.2f}"
          + ("  (BUSY: marked in the profile)" if prof.load.get("busy") else ""))
    return 0
