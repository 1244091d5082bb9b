"""The default profile is this machine's, measured in situ (issue 35, item 2).

``rlm-lab predict`` and ``rlm-lab validate --run`` price what the reader runs on the reader's machine. On a
machine with no profile of its own they say so in one line, run the in-situ calibration (``rlm-lab insitu
--run``: about 2 minutes, behind the load gate), cache the fitted profile by machine key in the user's cache
folder (``$RLM_CACHE_DIR``, else ``$XDG_CACHE_HOME/rlm-lab``, else ``~/.cache/rlm-lab``; never inside the
repository) and use it from then on. ``--no-calibrate`` (or ``$RLM_NO_CALIBRATE=1``, which the test suite
sets so that no test calibrates for real) or an explicit profile refuses that and says which profile is used
instead. A committed profile of another machine is never called this machine's: :func:`origin` says whose a
profile is (``{"machine_key", "this_machine", "method"}``, what ``predict --json`` prints as
``profile_origin``).

Which profile is this machine's: the one cached for its machine key (:func:`rlm_lab.host.machine_key`), else a
committed calibrated profile whose provenance names this machine (its CPU model and cores:
:func:`rlm_lab.cost.hardware.same_machine`; the in-situ one first).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from filelock import FileLock

from ..cost.hardware import (
    CPU_PROFILE,
    HARDWARE_DIR,
    INSITU_PROFILE,
    load_profile,
    profile_of_machine,
    same_machine,
    save_profile,
)
from ..errors import RlmLabError
from ..host import key_of_provenance, key_slug, machine_key, machine_load
from ..record import atomic_write_json, hardware, repo_root
from ..records.portable import portable
from .run import calibrate, run

CACHE_ENV = "RLM_CACHE_DIR"
NO_CALIBRATE_ENV = "RLM_NO_CALIBRATE"
MAX_LOAD = 0.5      # the load gate: 1-minute load per core at most (as `rlm-lab insitu --run`)
GATE_WAIT_S = 120.0  # wait this long at most for the load to fall before calibrating
GATE_POLL_S = 5.0
SIZE = "cpu"
LOADAVG, SLEEP = os.getloadavg, time.sleep  # tests stand in for them


def cache_root() -> Path:
    """The user's cache folder for rlm-lab; one line when it would be inside the repository."""
    if os.environ.get(CACHE_ENV):
        root = Path(os.environ[CACHE_ENV]).expanduser()
        where = f"${CACHE_ENV}"
    else:
        base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
        root, where = Path(base).expanduser() / "rlm-lab", "the cache folder"
    root = root.resolve()
    if root == repo_root() or repo_root() in root.parents:
        raise RlmLabError(f"{where} ({root}) is inside the repository; a machine's profile is the user's, never "
                          f"the repository's: point ${CACHE_ENV} elsewhere")
    return root


def no_calibrate_env() -> bool:
    return os.environ.get(NO_CALIBRATE_ENV, "").strip() not in ("", "0")


def _folder(key: dict) -> Path:
    return cache_root() / "profiles" / key_slug(key)


def cached(key: dict | None = None) -> Path | None:
    """The in-situ profile cached for ``key`` (default this machine's), if it was made for that key."""
    key = key or machine_key()
    folder = _folder(key)
    try:
        meta = json.loads((folder / "meta.json").read_text())
    except (OSError, ValueError):
        return None
    path = folder / "profile.json"
    return path if isinstance(meta, dict) and meta.get("machine_key") == key and path.is_file() else None


def origin(profile, fitted: bool = False) -> dict:
    """Whose ``profile`` is, and how it was made: ``machine_key`` (its provenance's; None for a datasheet),
    ``this_machine`` (its provenance names this machine's CPU model and cores), ``method``: datasheet, in-situ,
    microbenchmarks, or fitted (the published fit's efficiencies on a datasheet profile)."""
    prof = load_profile(profile)
    if prof.kind == "datasheet":
        return {"machine_key": None, "this_machine": False, "method": "fitted" if fitted else "datasheet"}
    mine = same_machine(hardware(), prof.provenance or {})
    return {"machine_key": key_of_provenance(prof.provenance) if prof.provenance else None, "this_machine": mine,
            "method": "in-situ" if prof.insitu else "microbenchmarks"}


def _committed_of_this_machine():
    """A committed calibrated profile of this machine (an in-situ one first), or None."""
    hw = hardware()
    try:
        insitu = load_profile(INSITU_PROFILE)
        if same_machine(hw, insitu.provenance or {}):
            return insitu
    except RlmLabError:
        pass
    return profile_of_machine(hw, folder=HARDWARE_DIR)


def calibrate_in_situ(key: dict, folder: Path, say=print) -> dict:
    """The real calibrator: the in-situ calibration suite run into ``folder/runs`` and fitted (a profile dict)."""
    runs = folder / "runs"
    run(SIZE, runs, say=say)
    return calibrate(SIZE, [runs], name=f"this-machine-{key_slug(key)}")


CALIBRATOR = calibrate_in_situ  # tests put a fake here: no test runs a real two-minute calibration


def _gate(max_load: float, wait_s: float) -> dict:
    """Wait (at most ``wait_s``) for the 1-minute load per core to fall to ``max_load``; one line if it does not."""
    loadavg, sleep = LOADAVG, SLEEP
    waited = 0.0
    load = machine_load(None, loadavg)
    while load["per_core"] > max_load and waited < wait_s:
        sleep(GATE_POLL_S)
        waited += GATE_POLL_S
        load = machine_load(None, loadavg)
    if load["per_core"] > max_load:
        raise RlmLabError(f"cannot calibrate this machine in situ now: 1-minute load {load['loadavg'][0]:.2f} on "
                          f"{load['cores']} cores (> {max_load} per core) after {waited:.0f} s; retry on a quiet "
                          "machine, or pass --no-calibrate (or --hardware/--profile) to use another profile")
    return load


def default_profile(no_calibrate: bool = False, say=print) -> tuple[str, dict]:
    """(profile name or path, :func:`origin`) of the default profile: this machine's cached in-situ profile,
    else a committed profile of this machine, else (calibrating unless ``no_calibrate`` or
    ``$RLM_NO_CALIBRATE``) a new in-situ calibration cached by machine key; with no calibration, the chapters'
    committed profile (``cost.hardware.CPU_PROFILE``), said in one line to be another machine's."""
    key = machine_key()
    path = cached(key)
    if path is not None:
        return str(path), origin(path)
    if no_calibrate or no_calibrate_env():  # the chapters' profile, whatever this machine is (tests rely on it);
        return CPU_PROFILE, origin(CPU_PROFILE)  # the caller's hardware line (or JSON) says whose it is
    mine = _committed_of_this_machine()
    if mine is not None:
        return mine.name, origin(mine)
    folder = _folder(key)
    say(f"rlm-lab: this machine ({key['cpu_model']}, {key['cores']} cores) has no profile of its own: calibrating "
        f"it in situ now (about 2 minutes, behind the load gate), cached by machine key in {portable(str(cache_root()))} "
        "for next time "
        "(--no-calibrate: use another machine's profile instead)")

    folder.mkdir(parents=True, exist_ok=True)
    with FileLock(folder / ".calibration.lock"):  # a second command waits for the first's calibration
        path = cached(key)
        if path is None:
            load = _gate(MAX_LOAD, GATE_WAIT_S)
            prof = CALIBRATOR(key, folder, say)
            path = folder / "profile.json"
            save_profile(prof, path)
            atomic_write_json(folder / "meta.json", {"machine_key": key, "made": time.time(), "load_before": load,
                                                     "profile": path.name})
    return str(path), origin(path)
