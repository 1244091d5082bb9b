"""The chapter-4 experiment: every layout measured, recorded, and put next to its prediction.

* :func:`suite` — per size, the layouts to run (from the size registry, ``rlm_lab.sizes``): all 2-process
  layouts share ONE process group
  (spawning costs seconds per process on 2 cores); 4-process layouts (oversubscribed on 2 cores,
  labelled so) share another.
* :func:`run_suite` runs them and writes one run record per layout (``ch04_<layout>``, with
  ``-oversubscribed`` when there are more processes than cores).
* :func:`predicted_step_time` — the time side of the prediction, from the profile alone for every layout
  (DP, ZeRO, TP, PP, CP, EP): ``rlm_lab.parallel.bench.step_time``.
* :func:`compare` — one row per record: measured vs predicted bytes and time, and the errors.

The time prediction per rank: ``step_time``'s module docstring (compute at the rank's thread count,
optimizer, alpha-beta messages, calibrated framework cost, oversubscription).
"""

from __future__ import annotations

import os

from ...parallel.mesh import Layout

def run_args(size: str) -> dict:
    """The run arguments of every layout at ``size`` (model, steps, batch, sequence): ``rlm_lab.sizes``."""
    from ...sizes import get

    return dict(get(size).parallel)


def suite(size: str) -> dict:
    """The layouts of ``size``: ``{world: [(layout, kwargs)]}``. ``gpu`` adapts to the visible GPUs (1-8):
    every ZeRO stage over all of them, and TP 2 (x DP over the rest, FSDP2) with and without SP.
    The other sizes' layouts are in the size registry (``rlm_lab.sizes``, ``parallel_layouts``)."""
    from ...sizes import get

    if size != "gpu":
        return {world: [(Layout(**deg), dict(kw)) for deg, kw in items] for world, items in get(size).parallel_layouts}
    import torch

    n = torch.cuda.device_count()
    if n < 2:
        return {}
    items = [(Layout(dp=n, zero=z), {}) for z in (0, 1, 2, 3)]
    dp = n // 2 if n % 2 == 0 else 0
    if dp:
        items += [(Layout(dp=dp, tp=2, zero=2 if dp > 1 else 0, sp=sp), {}) for sp in (False, True)]
    return {n: items}


def predicted_step_time(layout: Layout, model: str, batch: int, seq: int, profile, comm: dict | None = None,
                        cores: int | None = None, threads: int = 1, harness: bool = False) -> dict:
    """Seconds of one training step of ``layout`` per rank from the profile alone: compute at the rank's
    ``threads``, optimizer, messages, framework cost, oversubscription (``rlm_lab.parallel.bench.step_time``).

    ``cores``: CPU cores the ranks share (CPU only): with more ranks than cores each rank computes at
    cores/world of a core, so compute, optimizer and framework stretch by world/cores (oversubscription).
    ``comm``: the step's collectives ``{kind: {"calls", "bytes", "groups"}}`` (default: the formulas;
    :func:`compare` passes the counted ones, which equal the prediction wherever one exists, so the
    time is judged on the same collectives that ran). ``harness``: the step was timed under
    ``CommCounter`` (``run_layout``): add the counter's calibrated cost.
    """
    from ...parallel.bench.step_time import predicted_step_time as predict

    return predict(layout, model, batch, seq, profile, comm=comm, cores=cores, threads=threads, harness=harness)


def _group_of(layout: Layout) -> int:
    return max(layout.dp, layout.tp, layout.pp, layout.cp, layout.ep)


def oversubscribed(world: int) -> bool:
    return world > len(os.sched_getaffinity(0))


def run_suite(size: str, worlds=None, out_root=None, timeout_s: float = 300.0, say=print) -> list:
    """Run the layouts of ``size`` (only those of ``worlds`` processes, if given) and write one record
    per layout; returns the run directories."""
    from ...sizes import check_size
    from ...record import runs_root
    from ...parallel.bench.measure import spawn_layouts, write_record

    check_size(size)
    root = out_root or runs_root(size)
    dirs = []
    for world, items in suite(size).items():
        if worlds is not None and world not in worlds:
            continue
        jobs = [(lay, run_args(size) | kw) for lay, kw in items]
        results = spawn_layouts(jobs, world=world, timeout_s=timeout_s)
        for res in results:
            name = f"ch04_{res['layout']['name']}" + ("-oversubscribed" if oversubscribed(world) else "")
            d = write_record(root / name, res, {"size": size, "oversubscribed": oversubscribed(world)})
            say(f"{name}: {1000 * _median(res['step_s']):.1f} ms/step -> {d}")
            dirs.append(d)
    return dirs


def _median(xs):
    import statistics

    return statistics.median(xs[1:] or xs)


def compare(records, profile=None) -> list[dict]:
    """One row per record: measured median step time and counted bytes next to the predictions."""
    from ...errors import RlmLabError
    from ...parallel.predict import comm_mismatches, layout_of, predicted_comm

    rows = []
    for rec in records:
        r = rec.results
        lay = layout_of(r)
        row = {"layout": r["layout"]["name"], "world": r["world"], "model": r["model"],
               "measured_ms": 1000 * _median(r["step_s"]),
               "counted_bytes": sum(v["bytes"] for v in r["comm"].values()),
               "counted_wire": sum(v["wire_bytes"] for v in r["comm"].values()),
               "check_ok": None if "check" not in r else _ok(r["check"])}
        try:
            pred = predicted_comm(lay, r["model"], r["batch"], r["seq"])
            row["predicted_bytes"] = sum(v["bytes"] for v in pred.values())
            row["bytes_equal"] = not comm_mismatches(pred, r["comm"])
        except RlmLabError:
            pred, row["predicted_bytes"], row["bytes_equal"] = None, None, None
        if profile is not None:
            hw = rec.data["provenance"]["hardware"]
            # spawned ranks run 1 torch thread each (launch.spawn); the one-process layout the CLI's threads
            threads = 1 if r["world"] > 1 else hw.get("torch_threads")
            t = predicted_step_time(lay, r["model"], r["batch"], r["seq"], profile, comm=r["comm"],
                                    cores=hw.get("cpu_count"), threads=threads, harness=True)
            row |= {"predicted_ms": 1000 * t["total_s"], "predicted_comm_ms": 1000 * t["comm_s"],
                    "predicted_framework_ms": None if t["framework_s"] is None else 1000 * t["framework_s"],
                    "predicted_compute_ms": 1000 * (t["compute_s"] + t["optimizer_s"]),
                    "rank_threads": threads, "rates_threads": t["rates_threads"],
                    "time_rel_err": (1000 * t["total_s"] - row["measured_ms"]) / row["measured_ms"]}
        rows.append(row)
    return rows


def _ok(check) -> bool:
    from ...parallel.bench.measure import within_tolerance

    return within_tolerance(check)


E2E_MODES = ("single", "ddp", "zero2", "zero3", "fsdp")


def run_e2e(size: str, modes=E2E_MODES, steps: int = 6, model: str = "micro", say=print) -> dict:
    """The same GRPO run through the HF Trainer under torchrun on 2 processes (1 for ``single``, the
    baseline), once per mode; each
    writes ``ch04_e2e_grpo_<mode>`` (``fsdp`` is expected to be refused on CPU: exit status 2)."""
    import subprocess
    import sys

    from ...record import REPO_ROOT

    codes = {}
    for mode in modes:
        n = "1" if mode == "single" else "2"
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", n, "-m", "rlm_lab.parallel.bench.e2e",
               "--mode", mode, "--steps", str(steps), "--model", model, "--size", size]
        p = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True)
        codes[mode] = p.returncode
        line = next((ln for ln in p.stdout.splitlines() + p.stderr.splitlines()
                     if ln.startswith((f"{mode}:", "rlm-lab: error"))), f"exit {p.returncode}")
        say(f"e2e {mode}: {line}")
    return codes
