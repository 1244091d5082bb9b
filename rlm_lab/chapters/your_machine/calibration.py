"""The reader's calibration, made once per machine and cached (``_build/your_machine/<key>/``): this machine's
in-situ profile (:func:`insitu_calibration`), the quick micro-benchmark calibration where that is refused.

:func:`machine_key` says what a calibration is valid for (host, CPU model, cores, torch version, torch's
thread count); the cache folder is named from it, and its ``meta.json`` holds the key again with the
profile's hash, so a folder made for another key, or a profile changed since, is not reused. A calibration
made on a busy machine is reused only while the machine is still busy: the first quiet build replaces it.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import hashlib
import io
import json
import os
import statistics
import time
from functools import partial
from pathlib import Path
from typing import Callable

from filelock import FileLock

from ...calibrate.profile import MAX_LOAD_PER_CORE, calibrate
from ...cost.hardware import load_profile, save_profile
from ...cost.spread import HEADLINES as QUANTITIES
from ...cost.spread import spread_summary
from ...host import key_slug, machine_key, machine_load  # noqa: F401 - this module's API before they moved to the core
from ...insitu import this_machine as TM
from ...record import REPO_ROOT, atomic_write_json

CACHE = REPO_ROOT / "_build" / "your_machine"
CAL_REPEATS = 5      # repeats of the calibration (its short set of shapes: seconds each), median and spread kept
SETTLE_S, SETTLE_POLL_S = 60.0, 2.0  # before calibrating: wait at most this long for the load to fall


def now() -> str:
    """UTC time to the microsecond: the order of a prediction and its measurement must show."""
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="microseconds")


# ---- the calibration, cached per machine ---------------------------------------------------------------

def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _cached(folder: Path, key: dict, busy_now: bool) -> dict | None:
    """The folder's calibration if it was made for ``key``, is intact, and is not a busy machine's
    calibration while the machine is quiet now; else None."""
    try:
        meta = json.loads((folder / "meta.json").read_text())
        ok = meta.get("machine_key") == key and _sha(folder / meta["profile"]) == meta["sha256"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return meta if ok and (busy_now or not meta.get("busy")) else None


def _busy_now(max_load: float, loadavg: Callable) -> bool:
    return machine_load(None, loadavg)["per_core"] > max_load


def settle(max_load: float, loadavg: Callable = os.getloadavg, wait_s: float | None = None, sleep=time.sleep) -> float:
    """Wait (at most ``wait_s``) for the 1-minute load average to fall to ``max_load`` per core; the seconds
    waited. The book's earlier notebooks keep it high for about a minute after they end (it is an average with
    a one-minute time constant), and ``rlm-lab calibrate`` would mark a quiet machine busy because of them."""
    waited, wait_s = 0.0, SETTLE_S if wait_s is None else wait_s
    while waited < wait_s and _busy_now(max_load, loadavg):
        sleep(SETTLE_POLL_S)
        waited += SETTLE_POLL_S
    return waited


def ensure_calibration(key: dict | None = None, root: Path | None = None, calibrate_fn: Callable | None = None,
                       repeats: int = CAL_REPEATS, loadavg: Callable = os.getloadavg, sleep=time.sleep) -> dict:
    """This machine's calibration: the cached one made for ``key`` (:func:`_cached`), else a new one, made once
    the load has settled (:func:`settle`): ``rlm-lab calibrate`` without collectives, ``repeats`` times.

    Returns its meta: ``profile`` (path), ``sha256``, ``made``, ``seconds``, ``machine_key``, ``busy``, the
    calibration's warnings (busy machine, noisy quantities) and ``reused``."""
    key = key or machine_key()
    folder = Path(root or CACHE) / key_slug(key)
    folder.mkdir(parents=True, exist_ok=True)
    # a second build waits for the first's calibration (filelock: flock on the file, released when the process dies)
    with FileLock(folder / ".calibration.lock"):
        meta = _cached(folder, key, _busy_now(MAX_LOAD_PER_CORE, loadavg))
        if meta is not None:
            return meta | {"profile": str(folder / meta["profile"]), "reused": True}
        t0, err = time.perf_counter(), io.StringIO()
        waited = settle(MAX_LOAD_PER_CORE, loadavg, sleep=sleep)
        # its warnings are kept in the meta (the book shows busy and spread itself); the models' progress bars go
        with contextlib.redirect_stderr(err):
            path = Path((calibrate_fn or partial(insitu_calibration, fallback=calibrate))(
                out=folder / "calibration.json", quick=True, device="cpu", collectives=False,
                name=f"your-machine-{key_slug(key)}", repeats=repeats, allow_busy=True, force=True))
        prof = json.loads(path.read_text())
        meta = {"machine_key": key, "profile": path.name, "sha256": _sha(path), "made": now(),
                "seconds": round(time.perf_counter() - t0, 1), "waited_for_load_s": waited, "repeats": repeats,
                "busy": bool((prof.get("load") or {}).get("busy")),
                "warnings": [w.removeprefix("rlm-lab: WARNING: ") for w in err.getvalue().splitlines()
                             if w.startswith("rlm-lab: WARNING: ")]}
        atomic_write_json(folder / "meta.json", meta)
        return meta | {"profile": str(path), "reused": False}


def insitu_calibration(out, name: str, fallback: Callable, no_calibrate: bool = False, **kw) -> Path:
    """The reader's calibration by default (issue 35, item 2): this machine's in-situ profile
    (:func:`rlm_lab.insitu.this_machine.default_profile`: says in one line that it calibrates in situ, about 2
    minutes behind the load gate, and caches it by machine key in the user's cache folder), written to ``out``
    under ``name`` with the load it was made under. Where that refuses (``--no-calibrate``,
    ``$RLM_NO_CALIBRATE``) and would give another machine's profile, ``fallback`` (the quick micro-benchmark
    calibration, ``rlm-lab calibrate --quick``) measures this machine instead: never another machine's numbers
    under "your calibration"."""
    path, origin = TM.default_profile(no_calibrate, say=print)
    if not origin["this_machine"]:
        return Path(fallback(out=out, name=name, **kw))
    d = load_profile(path).to_dict()
    folder = Path(path).parent
    meta = json.loads((folder / "meta.json").read_text()) if (folder / "meta.json").is_file() else {}
    before = meta.get("load_before")
    d["name"] = name
    d["load"] = {"before": before, "busy": bool(before and before.get("per_core", 0) > TM.MAX_LOAD),
                 "max_load_per_core": TM.MAX_LOAD, "note": "the in-situ calibration's load gate"}
    return save_profile(d, out)


def calibration_facts(meta: dict) -> dict:
    """What the book says about a calibration: busy or not, load per core before it, the spread."""
    prof = json.loads(Path(meta["profile"]).read_text())
    load = prof.get("load") or {}
    spread = spread_summary(prof)
    widest = max(spread.items(), key=lambda kv: kv[1]["rel_iqr"], default=(None, None))
    return {"busy": bool(load.get("busy")), "load_per_core": (load.get("before") or {}).get("per_core"),
            "repeats": (prof.get("spread") or {}).get("repeats"), "noisy": (prof.get("spread") or {}).get("noisy", []),
            "median_rel_iqr": statistics.median(v["rel_iqr"] for v in spread.values()) if spread else None,
            "widest": QUANTITIES.get(widest[0]) if widest[0] else None,
            "widest_rel_iqr": widest[1]["rel_iqr"] if widest[1] else None}
