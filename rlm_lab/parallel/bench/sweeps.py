"""The recorded PP, CP and EP measurements of chapter 4 (``ch04_e2_*`` run records), per size."""

from __future__ import annotations

from .common import cores


MEASUREMENTS = {  # size -> [(kind, kwargs)]; "oversubscribed" (world > cores) is recorded with each run
    "smoke": [("pp", dict(model="nano", world=2, microbatches=4, schedule="1f1b", steps=1, batch=8, seq=16)),
              ("cp", dict(model="nano", world=2, steps=1, batch=2, seq=32)),
              ("ep", dict(model="nano-moe", world=2, steps=1, batch=2, seq=16))],
    "cpu": [*[("pp", dict(model="micro", world=2, microbatches=m, schedule=s, steps=5, batch=16, seq=64))
              for s in ("gpipe", "1f1b") for m in (2, 4, 8, 16)],
            ("pp", dict(model="micro", world=4, layers=4, microbatches=8, schedule="1f1b", steps=3, batch=16, seq=64)),
            ("cp", dict(model="micro", world=2, steps=5, batch=2, seq=256)),
            ("cp", dict(model="micro", world=4, steps=3, batch=2, seq=256)),
            ("ep", dict(model="micro-moe", world=2, steps=5, batch=4, seq=64)),
            ("ep", dict(model="micro-moe", world=4, steps=3, batch=4, seq=64))],
}


def measurement_name(kind: str, kw: dict) -> str:
    """Run directory name, e.g. ``ch04_e2_pp2-gpipe-m4-micro`` (``-oversubscribed`` when world > cores)."""
    extra = f"-{kw['schedule']}-m{kw['microbatches']}" if kind == "pp" else ""
    over = "-oversubscribed" if kw["world"] > cores() else ""
    return f"ch04_e2_{kind}{kw['world']}{extra}-{kw['model']}{over}"


def run_measurements(size: str = "smoke", only: str | None = None, root=None) -> list:
    """Run the :data:`MEASUREMENTS` of ``size`` (``only``: pp, cp or ep) and write one run record each
    under ``root`` (default ``rlm_lab.record.runs_root(size)``, under ``_build``; the committed records are
    ``data/runs/<size>``, re-recorded under the exclusive measurement lock). Returns the record directories."""
    import os
    from pathlib import Path

    from ...record import RunRecord, runs_root
    from ...sizes import check_size
    from . import cp, ep, pp

    check_size(size)
    fns = {"pp": pp.measure_pp, "cp": cp.measure_cp, "ep": ep.measure_ep}
    root = Path(root) if root else runs_root(size)
    dirs = []
    for kind, kw in MEASUREMENTS.get(size, MEASUREMENTS["cpu"]):
        if only and kind != only:
            continue
        rec = RunRecord(root / measurement_name(kind, kw), config={"kind": kind, **kw},
                        command=f"rlm_lab.parallel.bench.sweeps.run_measurements({size!r})", seed=kw.get("seed", 0))
        rec.update(**fns[kind](**kw), load_average=list(os.getloadavg()))
        dirs.append(rec.dir)
    return dirs
