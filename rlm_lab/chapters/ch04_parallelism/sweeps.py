"""The recorded PP, CP and EP measurements of chapter 4 (``ch04_e2_*`` run records), per size."""

from __future__ import annotations

from pathlib import Path

from ...host import load_average
from ...parallel.bench import cp, ep, pp
from ...parallel.bench.common import cores
from ...record import RunRecord, runs_root
from .cases import measurements


def measurement_name(kind: str, kw: dict) -> str:
    """Run directory name, e.g. ``ch04_e2_pp2-gpipe-m4-micro`` (``-oversubscribed`` when world > cores)."""
    extra = f"-{kw['schedule']}-m{kw['microbatches']}" if kind == "pp" else ""
    over = "-oversubscribed" if kw["world"] > cores() else ""
    return f"ch04_e2_{kind}{kw['world']}{extra}-{kw['model']}{over}"


def run_measurements(size: str = "smoke", only: str | None = None, root=None) -> list:
    """Run the :func:`measurements` of ``size`` (``only``: pp, cp or ep) and write one run record each
    under ``root`` (default ``rlm_lab.record.runs_root(size)``, under ``_build``; the committed records are
    ``data/runs/<size>``, re-recorded under the exclusive measurement lock). Returns the record directories."""
    fns = {"pp": pp.measure_pp, "cp": cp.measure_cp, "ep": ep.measure_ep}
    root = Path(root) if root else runs_root(size)
    dirs = []
    for kind, kw in measurements(size):
        if only and kind != only:
            continue
        rec = RunRecord(root / measurement_name(kind, kw), config={"kind": kind, **kw},
                        command=f"rlm_lab.chapters.ch04_parallelism.sweeps.run_measurements({size!r})", seed=kw.get("seed", 0))
        rec.update(**fns[kind](**kw), load_average=load_average())
        dirs.append(rec.dir)
    return dirs
