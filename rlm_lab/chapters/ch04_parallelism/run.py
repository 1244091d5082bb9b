"""The chapter-4 experiment: every layout measured, recorded, and put next to its prediction.

* :func:`run_suite` runs the layouts of :func:`.cases.suite` and writes one run record per layout
  (``ch04_<layout>``, with ``-oversubscribed`` when there are more processes than cores); the harness
  (counted collectives, memory, the check against one process) is ``rlm_lab.parallel.bench.measure``.
* :func:`predicted_step_time` — the time side of the prediction, from the profile alone for every layout
  (DP, ZeRO, TP, PP, CP, EP): ``rlm_lab.parallel.bench.step_time``.
* :func:`run_e2e` — the same GRPO run through the HF Trainer (``rlm_lab.parallel.bench.e2e``) per mode.
* :mod:`.sweeps` — the recorded PP, CP and EP measurements; :func:`.compare.compare` — one row per record.
* :func:`reference_arm` — one repeat of one layout for ``rlm-lab reference --chapter 4``.

The time prediction per rank: ``step_time``'s module docstring (compute at the rank's thread count,
optimizer, alpha-beta messages, calibrated framework cost, oversubscription).
"""

from __future__ import annotations

import datetime as _dt
import os
import statistics
import subprocess
import sys
from pathlib import Path

from ...errors import unknown
from ...parallel.bench.measure import run_layout, spawn_layouts, write_record
from ...parallel.bench.step_time import predicted_step_time as predict
from ...parallel.launch import init_process_group
from ...parallel.mesh import Layout
from ...record import RecordError, load_record, repo_root, runs_root
from ...sizes import check_size
from ..registry import step_argv
from .cases import run_args, suite


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
    return predict(layout, model, batch, seq, profile, comm=comm, cores=cores, threads=threads, harness=harness)


def _group_of(layout: Layout) -> int:
    return max(layout.dp, layout.tp, layout.pp, layout.cp, layout.ep)


def oversubscribed(world: int) -> bool:
    return world > len(os.sched_getaffinity(0))


def run_suite(size: str, worlds=None, out_root=None, timeout_s: float = 300.0, say=print) -> list:
    """Run the layouts of ``size`` (only those of ``worlds`` processes, if given) and write one record
    per layout; returns the run directories."""
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


def _reference_layout(arm: str, size: str):
    """(layout, extra run arguments) of a reference arm: ``single`` (one process) or a 2-process layout of the
    size's suite; an unknown arm is one error naming the known ones."""
    layouts = {lay.name(): (lay, kw) for lay, kw in suite(size).get(2, [])}
    if arm != "single" and arm not in layouts:
        raise unknown("layout", arm, ("single", *layouts))
    return (Layout(), {}) if arm == "single" else layouts[arm]


def predict_arm(arm: str, size: str, profile: str) -> float:
    """One layout's predicted step for ``rlm-lab reference --chapter 4`` from ``profile``, as :func:`reference_arm`
    runs it: the size's run arguments, the collectives of the formulas (the page judges on the counted ones,
    equal wherever a formula exists), timed under the counter, on this machine's cores; a spawned rank runs one
    torch thread (launch.spawn), ``single`` torch's default (one per core, ``os.cpu_count()`` here)."""
    lay, kw = _reference_layout(arm, size)
    args = run_args(size) | kw
    cores = os.cpu_count() or 1
    res = predicted_step_time(lay, args["model"], args["batch"], args["seq"], profile, cores=cores,
                              threads=cores if arm == "single" else 1, harness=True)
    return res["total_s"]


def reference_arm(arm: str, size: str, out) -> dict:
    """One repeat of one layout for ``rlm-lab reference --chapter 4`` (:data:`.cases.REFERENCES`): ``single`` in this
    process, a 2-process layout of the size's suite on 2 spawned ranks (gloo), as :func:`run_suite` runs it; its
    record under ``<out>/ch04_<arm>/<UTC time>``; ``{"step_s": median step after the first, "record": folder}``."""
    lay, kw = _reference_layout(arm, size)
    args = run_args(size)
    if arm == "single":  # a group of one (its store on loopback), the code path `rlm-lab parallel` runs
        import torch.distributed as dist

        init_process_group(0, 1, 0)
        try:
            res = run_layout(Layout(), **args)
            res["per_rank"] = [{"memory": res["memory"], "comm": res["comm"], "check": res.get("check")}]
        finally:
            dist.destroy_process_group()
    else:
        res = spawn_layouts([(lay, args | kw)], world=2, timeout_s=300.0)[0]
    folder = Path(out) / f"ch04_{arm}" / _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")
    write_record(folder, res, {"size": size, "oversubscribed": False})
    return {"step_s": _median(res["step_s"]), "record": str(folder)}


def _median(xs):
    return statistics.median(xs[1:] or xs)


E2E_MODES = ("single", "ddp", "zero2", "zero3", "fsdp")


def run_e2e(size: str, modes=E2E_MODES, steps: int = 6, model: str = "micro", say=print) -> dict:
    """The same GRPO run through the HF Trainer under torchrun on 2 processes (1 for ``single``, the
    baseline), once per mode; each
    writes ``ch04_e2e_grpo_<mode>`` (``fsdp`` is expected to be refused on CPU: exit status 2)."""
    codes = {}
    for mode in modes:
        n = "1" if mode == "single" else "2"
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", n, *step_argv(4, "e2e")[1:],
               "--mode", mode, "--steps", str(steps), "--model", model, "--size", size]
        p = subprocess.run(cmd, cwd=repo_root(), capture_output=True, text=True)
        codes[mode] = p.returncode
        line = next((ln for ln in p.stdout.splitlines() + p.stderr.splitlines()
                     if ln.startswith((f"{mode}:", "rlm-lab: error"))), f"exit {p.returncode}")
        say(f"e2e {mode}: {line}")
    return codes


def load_records(root: str | Path, prefix: str = "ch04_") -> list:
    """Every run record under ``root`` whose folder starts with ``prefix``, sorted by name. Each must be a
    completed run: a folder without a record, a damaged record or an unfinished run (killed, interrupted,
    failed) is a RecordError naming the folder, never a row silently left out; so is a missing ``root``."""
    root = Path(root)
    if not root.is_dir():
        raise RecordError(f"no run records at {root}: the folder does not exist")
    recs = [load_record(d) for d in sorted(root.iterdir()) if d.name.startswith(prefix) and d.is_dir()]
    # the layout records (not ch04_measure_* / ch04_e2e_*) unless asked for
    return [r for r in recs if prefix != "ch04_" or "layout" in r.results]
