"""Calibration of the distributed layouts: the rates at a rank's thread count and the framework cost per step.

Two measurements, written into a profile's ``distributed`` section (``rlm-lab calibrate`` adds it; for a
profile made before it existed, ``python -m rlm_lab.cost.dist_benchmarks --profile NAME`` writes a companion
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

import json
import os
import statistics
from pathlib import Path

from ..errors import RlmLabError
from .hardware import HARDWARE_DIR, load_profile

COMPANION_DIR = HARDWARE_DIR / "distributed"
THREADS = (1,)
STEPS = 20
BATCH, SEQ = 4, 8
# (layout kwargs, depths or micro-batch counts): one row of the fit each
WORLD2 = [({"dp": 2}, "ddp"), ({"dp": 2, "zero": 1}, "zero1"), ({"dp": 2, "zero": 2}, "fsdp_zero2"),
          ({"dp": 2, "zero": 3}, "fsdp_zero3"), ({"tp": 2}, "tp"), ({"tp": 2, "sp": True}, "tp_sp"),
          ({"cp": 2}, "cp"), ({"ep": 2}, "ep")]
DEPTHS = (1, 4)
PP_CASES = [({"pp": 2, "schedule": s, "microbatches": m}, "pp") for s in ("gpipe", "1f1b") for m in (2, 4)]
PP_DEPTH = 2


def tiny(layers: int, moe: bool = False):
    """A hidden-16 zoo-shaped model (``ZooSpec``): compute ~0, every framework call still made."""
    from ..models.zoo import ZooSpec

    if moe:
        return ZooSpec(16, layers, 2, 2, 32, arch="mixtral", experts=4, top_k=2, max_positions=64)
    return ZooSpec(16, layers, 2, 2, 32, max_positions=64)


def spec_of(zoo_spec):
    """The cost model's ModelSpec of a ``ZooSpec`` (the zoo's tokenizer vocabulary)."""
    from ..models.tokenizer import ALPHABET, SPECIALS
    from .spec import spec_from_dict

    z = zoo_spec
    cfg = dict(model_type=z.arch, vocab_size=len(SPECIALS) + len(ALPHABET), hidden_size=z.hidden,
               num_hidden_layers=z.layers, num_attention_heads=z.heads, num_key_value_heads=z.kv_heads,
               intermediate_size=z.intermediate, tie_word_embeddings=False)
    if z.arch == "mixtral":
        cfg |= dict(num_local_experts=z.experts, num_experts_per_tok=z.top_k)
    return spec_from_dict(cfg, f"tiny-{z.arch}-L{z.layers}")


# ---- profile side -----------------------------------------------------------------------------------

def distributed_section(profile) -> tuple[dict, str | None]:
    """(the profile's ``distributed`` section, where it came from): the profile itself, its companion file
    ``data/hardware/distributed/<name>.json``, or ({}, None)."""
    prof = load_profile(profile)
    if prof.distributed:
        return prof.distributed, f"profile {prof.name}"
    path = COMPANION_DIR / f"{prof.name}.json"
    if path.is_file():
        try:
            return json.loads(path.read_text())["distributed"], str(path.relative_to(HARDWARE_DIR.parents[1]))
        except (json.JSONDecodeError, KeyError) as e:
            raise RlmLabError(f"{path} is not a distributed calibration ({e})") from None
    return {}, None


def at_threads(profile, threads: int | None):
    """(profile with the rates measured at ``threads`` torch threads, the thread count those rates were
    measured with). Unchanged when the profile was calibrated with ``threads`` or has no such entry."""
    prof = load_profile(profile)
    if threads is None or threads == prof.threads:
        return prof, prof.threads
    sec, _ = distributed_section(prof)
    entry = sec.get("threads", {}).get(str(threads))
    if not entry:
        return prof, prof.threads
    d = prof.to_dict()
    # the dtypes measured at ``threads`` (fp32 on CPU) replace the profile's; others (bf16 autocast) are kept
    d["matmul_curve"] = d["matmul_curve"] | entry["matmul_curve"]
    d["matmul_flops"] = d["matmul_flops"] | entry["matmul_flops"]
    d["overhead"] = d["overhead"] | entry["overhead"]
    d["kernels"] = d["kernels"] | entry.get("kernels", {})
    d["threads"] = threads
    d["name"] = f"{prof.name}@{threads}thread"
    return load_profile(d), threads


def framework_terms(profile) -> tuple[dict | None, str | None]:
    """({family: {base_s, unit_s, unit}} or None, source).

    Calibrated profiles: refitted from the section's measured points against THIS profile (the framework
    cost is what the profile's own prediction misses on the hidden-16 models, so a recalibrated profile
    gets its own residual); None without a distributed calibration. Datasheet profiles:
    ``assumed.ASSUMED_DIST_FRAMEWORK``."""
    prof = load_profile(profile)
    sec, src = distributed_section(prof)
    if sec.get("framework_points"):
        key = (prof.name, json.dumps(prof.provenance, sort_keys=True, default=str), src)
        if key not in _FITS:
            _FITS[key] = fit_framework(sec["framework_points"], prof, cores=sec.get("cores", 2))
        return _FITS[key], src
    if sec.get("framework"):
        return sec["framework"], src
    if prof.kind == "datasheet":
        from .assumed import ASSUMED_DIST_FRAMEWORK

        return ASSUMED_DIST_FRAMEWORK, "ASSUMED (assumed.ASSUMED_DIST_FRAMEWORK)"
    return None, None


_FITS: dict = {}

# ---- measurements -----------------------------------------------------------------------------------

def bench_threads(threads: int, device: str = "cpu", quick: bool = False) -> dict:
    """The rates a rank with ``threads`` torch threads computes at (this process, threads restored after)."""
    import torch

    from .benchmarks import bench_matmul, bench_op, bench_overheads
    from .kernel_benchmarks import bench_attention, bench_elementwise

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        budget = 0.05 if quick else 0.25
        op_s = bench_op(device, budget)
        curve = bench_matmul(device, "fp32", quick, op_s, budget)
        over = bench_overheads(device, quick, budget)
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
    from ..parallel.bench.measure import run_layout
    from ..parallel.mesh import Layout

    out = []
    for kw, fam, layers, count in cases:
        lay = Layout(**kw)
        model = tiny(layers, moe=lay.ep > 1)
        r = run_layout(lay, model=model, steps=steps + 1, batch=BATCH, seq=SEQ, reference=False, count=count)
        out.append({"step_s": statistics.median(r["step_s"][1:]), "comm": r["comm"]})
    return out


def bench_framework(steps: int = STEPS) -> list[dict]:
    """Measured points: {layout, family, layers, counted, step_s, comm} per case (rank 0's, slowest = barrier)."""
    from ..parallel.launch import spawn

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


def fit_framework(points: list[dict], profile, cores: int = 2) -> dict:
    """{family: {base_s, unit_s, unit, points}}: NNLS fit of measured - predicted (no framework) per family;
    ``harness``: the counter's cost per step (one process, with minus without), base + per layer."""
    from ..parallel.bench.step_time import families, predicted_step_time, units
    from ..parallel.mesh import Layout
    from .fitting import fit_nonneg

    single = {(p["layers"], p["counted"]): p["step_s"] for p in points if p["family"] == "single"}
    hs = [(L, single[(L, True)] - single[(L, False)]) for L in DEPTHS]
    h0, h1 = fit_nonneg([[1.0, L] for L, _ in hs], [y for _, y in hs], relative=False)
    out = {"harness": {"base_s": h0, "unit_s": h1, "unit": "layer", "points": [list(h) for h in hs]}}
    rows: dict[str, list] = {}
    for p in points:
        if p["family"] == "single":
            continue
        lay = Layout(**p["layout"])
        spec = spec_of(tiny(p["layers"], moe=lay.ep > 1))
        pred = predicted_step_time(lay, spec, BATCH, SEQ, profile, comm=p["comm"], cores=cores, threads=1,
                                   framework=False)
        (fam, unit), = families(lay)
        resid = p["step_s"] - pred["total_s"] - (h0 + h1 * p["layers"])  # every case ran under the counter
        rows.setdefault(fam, []).append((units(lay, p["layers"], unit), resid, unit))
    for fam, rs in rows.items():
        c0, c1 = fit_nonneg([[1.0, u] for u, _, _ in rs], [y for _, y, _ in rs], relative=False)
        out[fam] = {"base_s": c0, "unit_s": c1, "unit": rs[0][2], "points": [[u, y] for u, y, _ in rs]}
    return out


def measure_distributed(profile, quick: bool = False) -> dict:
    """The ``distributed`` section for ``profile`` (whose collectives price the messages of the fit)."""
    import torch

    from .calibrate import machine_load

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
    from ..record import atomic_write_json, provenance

    prof = load_profile(profile_name)
    out = Path(out) if out else COMPANION_DIR / f"{prof.name}.json"
    if out.exists() and not force:
        raise RlmLabError(f"{out} exists; pass --force to replace it")
    sec = measure_distributed(prof, quick)
    return atomic_write_json(out, {"profile": prof.name, "distributed": sec, "provenance": provenance(),
                                   "command": "flock -x /tmp/rlm-lab-measure.lock python -m rlm_lab.cost.dist_benchmarks"
                                              f" --profile {prof.name}"})


if __name__ == "__main__":
    import argparse
    import sys

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--profile", required=True)
    ap.add_argument("--out")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--force", action="store_true")
    a = ap.parse_args()
    try:
        print(write_companion(a.profile, a.out, a.quick, a.force))
    except RlmLabError as e:
        print(f"rlm-lab: error: {e}", file=sys.stderr)
        sys.exit(2)
