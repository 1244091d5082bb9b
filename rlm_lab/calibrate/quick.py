"""Is a profile's machine this one, now? The machine key and a few-second check against the profile's rates.

A calibrated profile (``rlm-lab calibrate``, ``rlm-lab insitu``) describes one machine in one window. Its
provenance names the machine (:func:`rlm_lab.host.key_of_provenance`); when that key is not this machine's
(:func:`rlm_lab.host.machine_key`), ``rlm-lab predict`` and ``rlm-lab validate`` say so in one line, with how
far a quick check differs. A key can also match a machine that changed (a VM keeps its host name and its CPU
model line), so ``--check-machine`` runs the quick check whatever the key says.

The quick check (:func:`quick_check`, about 2 s on 2 cores): the calibration's own micro-benchmarks at its quick
shapes (:mod:`rlm_lab.calibrate.benchmarks`): fp32 products (``bench_matmul``, 13 shapes from one token by 64
features to 1024^3, each against the profile's measured curve at the same FLOP count, log-log interpolated as the
cost model reads it) and the streaming copy (``bench_bandwidth``, against the profile's memory bandwidth). Each
gives a speed ratio, this machine over the profile (above 1: this machine is faster); their median is the
check's answer. Kernel rates only: the per-call overheads of a real step and the in-situ kernel factor are not
re-measured (that is ``rlm-lab insitu``). Only a CPU profile is checked on a CPU: a GPU profile on this machine
gets the key line alone.
"""

from __future__ import annotations

import statistics
import sys

from ..host import key_differences, key_of_provenance

BUDGET_S = 0.08  # per shape: warm-up + at least 3 repeats, about 2 s in all


def quick_check(profile, budget_s: float = BUDGET_S) -> dict:
    """This machine's micro-benchmark rates against ``profile``'s (a :class:`rlm_lab.cost.HardwareProfile`):
    ``{"ratios": {quantity: here / profile}, "median": ..., "n": ...}``; products by FLOP count, ``memory``."""
    from ..cost.hardware import _interp
    from .benchmarks import bench_bandwidth, bench_matmul, bench_op

    op_s = bench_op("cpu", budget_s)
    ratios = {}
    curve = profile.matmul_curve.get("fp32")
    if curve:
        for flops, rate in bench_matmul("cpu", "fp32", True, op_s, budget_s):
            ratios[f"matmul_{flops:.3g}"] = rate / _interp(curve, flops)
    if profile.memory_bandwidth:
        ratios["memory"] = bench_bandwidth("cpu", True, budget_s) / float(profile.memory_bandwidth)
    vals = list(ratios.values())
    return {"ratios": ratios, "median": statistics.median(vals) if vals else None, "n": len(vals),
            "products": statistics.median(v for k, v in ratios.items() if k.startswith("matmul")) if curve else None}


def machine_line(profile, check: bool = False, key: dict | None = None, run_check=quick_check) -> str | None:
    """One warning line when ``profile`` was measured on another machine (its key differs from ``key``, default
    this machine's), with the quick check's answer; with ``check`` the quick check runs and is reported even when
    the keys match. None when there is nothing to say (a datasheet profile, or matching keys without ``check``)."""
    if profile.kind != "calibrated" or not profile.provenance:
        return None
    from ..host import machine_key

    theirs = key_of_provenance(profile.provenance)
    key = key or machine_key()
    diffs = key_differences(theirs, key)
    if not diffs and not check:
        return None
    cpu_profile = not (profile.provenance.get("hardware") or {}).get("gpus")  # calibrated where no GPU was seen
    head = (f"profile {profile.name!r} was measured on another machine ({'; '.join(diffs)})" if diffs
            else f"profile {profile.name!r} has this machine's key")
    if not cpu_profile:
        return head + "; not checked here (a GPU profile)"
    q = run_check(profile)
    if q["median"] is None:
        return head + "; the profile holds no rates to check"
    return (f"{head}; a quick check here runs its micro-benchmarks at {q['median']:.2f}x the profile's rates "
            f"(median of {q['n']}; products {q['products']:.2f}x, memory {q['ratios'].get('memory', float('nan')):.2f}x)"
            + ("" if 0.8 <= q["median"] <= 1.25 else ": predictions made with it may be off by about that factor"))


def warn_machine(profile_name, check: bool = False, say=None) -> str | None:
    """Print :func:`machine_line` for the profile named ``profile_name`` as one ``rlm-lab: WARNING:`` line (or, for
    a match that ``check`` asked about, a note); returns the line."""
    from ..cost import load_profile

    prof = load_profile(profile_name)
    line = machine_line(prof, check)
    if line:
        (say or (lambda s: print(s, file=sys.stderr)))(
            ("rlm-lab: WARNING: " if "another machine" in line or "off by" in line else "rlm-lab: ") + line)
    return line
