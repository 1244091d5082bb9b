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

A check that tells the truth (issue 35, item 5): it runs with the profile's own thread count (capped at this
machine's cores: thread-matched), only behind the load gate (a busy machine is said, not measured: under load the
old check read 0.01x), and is repeated until three rounds in a row agree within :data:`STABLE_TOL` (at most
:data:`MAX_ROUNDS`; an unstable check states no factor). What it states is not the kernel ratio itself, which
overstated the real error 1.5-1.8x because the per-call costs of a step do not scale with the kernels, but the
error it implies for a step: :func:`step_error`, the default ``rlm-lab predict`` step priced with the profile
against the same profile with its kernels at the measured ratio (tests/calibrate/test_quick.py checks it against
a profile whose rates are scaled by hand).
"""

from __future__ import annotations

import contextlib
import os
import statistics
import sys

from ..cost import load_profile
from ..cost.cli import predict_from_config
from ..cost.hardware import _interp
from ..host import key_differences, key_of_provenance, machine_key, machine_load
from . import benchmarks

BUDGET_S = 0.08  # per shape: warm-up + at least 3 repeats, about 2 s in all
ROUND_BUDGET_S = BUDGET_S / 2  # per shape in each round of the repeated check (3 rounds at least: about 3 s)
MAX_LOAD = 0.5   # the load gate: 1-minute load per core at most before the check runs
STABLE_TOL = 0.10  # three rounds in a row within 10 % of each other (max / min - 1)
MAX_ROUNDS = 6


@contextlib.contextmanager
def _threads(n: int):
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield n
    finally:
        torch.set_num_threads(before)


def matched_threads(profile) -> int:
    """The thread count the check runs with: the profile's own, at most this machine's cores."""
    return max(1, min(int(getattr(profile, "threads", None) or 1), os.cpu_count() or 1))


def quick_check(profile, budget_s: float = BUDGET_S) -> dict:
    """This machine's micro-benchmark rates against ``profile``'s (a :class:`rlm_lab.cost.HardwareProfile`):
    ``{"ratios": {quantity: here / profile}, "median": ..., "n": ...}``; products by FLOP count, ``memory``."""
    with _threads(matched_threads(profile)):
        op_s = benchmarks.bench_op("cpu", budget_s)
        ratios = {}
        curve = profile.matmul_curve.get("fp32")
        if curve:
            for flops, rate in benchmarks.bench_matmul("cpu", "fp32", True, op_s, budget_s):
                ratios[f"matmul_{flops:.3g}"] = rate / _interp(curve, flops)
        if profile.memory_bandwidth:
            ratios["memory"] = benchmarks.bench_bandwidth("cpu", True, budget_s) / float(profile.memory_bandwidth)
    vals = list(ratios.values())
    return {"ratios": ratios, "median": statistics.median(vals) if vals else None, "n": len(vals),
            "products": statistics.median(v for k, v in ratios.items() if k.startswith("matmul")) if curve else None}


def stable_check(profile, run_check=quick_check, loadavg=os.getloadavg, max_load: float = MAX_LOAD,
                 tol: float = STABLE_TOL, max_rounds: int = MAX_ROUNDS) -> dict:
    """:func:`quick_check` behind the load gate, repeated until the last three rounds' medians agree within
    ``tol``: ``{"median" (of those three; None when busy), "stable", "rounds", "medians", "busy" (the load when the
    gate refused), "threads"}``; the first round's ratios are kept for the line."""
    load = machine_load(None, loadavg)
    if load["per_core"] > max_load:
        return {"median": None, "stable": False, "rounds": 0, "medians": [], "busy": load,
                "threads": matched_threads(profile)}
    rounds = []
    while len(rounds) < max_rounds:
        rounds.append(run_check(profile, ROUND_BUDGET_S) if run_check is quick_check else run_check(profile))
        last = [r["median"] for r in rounds[-3:] if r["median"] is not None]
        if len(last) == 3 and max(last) / min(last) - 1 <= tol:
            break
    meds = [r["median"] for r in rounds if r["median"] is not None]
    last = meds[-3:]
    stable = len(last) == 3 and max(last) / min(last) - 1 <= tol
    return rounds[-1] | {"median": statistics.median(last) if last else None, "stable": stable,
                         "rounds": len(rounds), "medians": meds, "busy": None, "threads": matched_threads(profile)}


def step_error(profile, ratio: float, config: dict | None = None) -> float:
    """The relative error of a step priced with ``profile`` on a machine whose kernels run ``ratio`` times the
    profile's rates (above 1: faster) and whose per-call costs are the profile's: predicted / true - 1, for the
    default ``rlm-lab predict`` workload (or ``config``). The kernel ratio alone overstates it by the share of
    the step that is not kernels."""
    d = profile.to_dict()
    ins = dict(d.get("insitu") or {})
    kf, kb, kbb = profile.kernel_factor, profile.product_factor("bf16"), profile.product_factor("bf16_backward")
    d["insitu"] = ins | {"kernel_factor": kf / ratio, "kernel_factor_bf16": kb / ratio,
                         "kernel_factor_bf16_backward": kbb / ratio}
    cfg = dict(config or {})
    predicted = predict_from_config(cfg | {"hardware": profile}).total_time
    true = predict_from_config(cfg | {"hardware": d}).total_time
    return predicted / true - 1


def machine_line(profile, check: bool = False, key: dict | None = None, run_check=quick_check,
                 loadavg=os.getloadavg) -> str | None:
    """One warning line when ``profile`` was measured on another machine (its key differs from ``key``, default
    this machine's), with the quick check's answer; with ``check`` the quick check runs and is reported even when
    the keys match. None when there is nothing to say (a datasheet profile, or matching keys without ``check``)."""
    if profile.kind != "calibrated" or not profile.provenance:
        return None

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
    q = stable_check(profile, run_check, loadavg)
    if q["busy"] is not None:
        b = q["busy"]
        return head + (f"; not checked here: the machine is busy (1-minute load {b['loadavg'][0]:.2f} on {b['cores']} "
                       f"cores, > {MAX_LOAD} per core), and a busy check says nothing about the machine")
    if q["median"] is None:
        return head + "; the profile holds no rates to check"
    seen = f"{min(q['medians']):.2f}x to {max(q['medians']):.2f}x" if q["medians"] else "?"
    if not q["stable"]:
        return head + (f"; a quick check here ({q['threads']} threads, {q['rounds']} rounds) did not settle "
                       f"({seen} the profile's rates): no factor stated")
    err = step_error(profile, q["median"])
    return (f"{head}; a quick check here ({q['threads']} threads, stable over {q['rounds']} rounds) runs its "
            f"micro-benchmarks at {q['median']:.2f}x the profile's rates (products {q['products']:.2f}x, memory "
            f"{q['ratios'].get('memory', float('nan')):.2f}x): a default step predicted with it is off by about "
            f"{err:+.0%}" + ("" if abs(err) <= 0.1 else "; calibrate this machine (rlm-lab insitu --run)"))


def warn_machine(profile_name, check: bool = False, say=None) -> str | None:
    """Print :func:`machine_line` for the profile named ``profile_name`` as one ``rlm-lab: WARNING:`` line (or, for
    a match that ``check`` asked about, a note); returns the line."""
    prof = load_profile(profile_name)
    line = machine_line(prof, check)
    if line:
        (say or (lambda s: print(s, file=sys.stderr)))(
            ("rlm-lab: WARNING: " if "another machine" in line or "calibrate this machine" in line else "rlm-lab: ")
            + line)
    return line
