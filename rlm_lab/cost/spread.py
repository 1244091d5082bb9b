"""How far a calibration's own noise moves a prediction, and how far calibrations of one machine differ.

* :func:`bound_profiles` / :func:`predict_interval`: a repeated calibration (``rlm-lab calibrate
  --repeats N``) stores, for every measured number, its interquartile range over the repeats
  (``spread.quartiles``). The FAST profile takes every rate (FLOP/s, bytes/s) at its upper quartile and
  every cost (seconds per call, per layer, per element, per byte) at its lower quartile; the SLOW profile
  the opposite. The predicted seconds under the two are the interval's low and high ends. All terms
  move together, so the interval is on the wide side of what independent noise would give; it covers
  the calibration's repeat-to-repeat noise ONLY, not the time model's own error (chapter 2 measures that).
* :func:`calibration_spread`: the headline quantities of every committed calibration of a machine
  (``data/hardware/calibrations/<name>-<date>.json``) side by side, with their range relative to the
  median (chapter 2 shows it).
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from .hardware import HARDWARE_DIR, HardwareProfile, load_profile
from .predict import predict

CALIBRATIONS_DIR = HARDWARE_DIR / "calibrations"

HEADLINES = {  # path in a profile -> label: the quantities a summary of a calibration's spread shows
    "matmul_flops.fp32": "matmul peak (FLOP/s)",
    "memory_bandwidth": "memory bandwidth (B/s)",
    "overhead.op_s": "op dispatch (s)",
    "overhead.forward_layer_s": "forward per layer (s)",
    "overhead.decode_step_base_s": "decode step base (s)",
    "overhead.decode_step_layer_s": "decode step per layer (s)",
    "overhead.backward_layer_s": "backward per layer (s)",
    "kernels.elementwise.forward.s_per_element": "elementwise (s/element)",
    "kernels.weight_stream.bandwidth": "weight streaming (B/s)",
    "collectives.ops.all_reduce.alpha_s": "all_reduce alpha (s)",
}
# a number under one of these keys is a RATE (larger = faster); every other number is a cost
RATE_KEYS = ("matmul_flops", "matmul_curve", "memory_bandwidth", "link_bandwidth", "curve", "backward_curve",
             "bandwidth")


def get_path(d: dict, path: str):
    """``d["a"]["b"]`` for path "a.b"; None when a key is missing."""
    for key in path.split("."):
        if not isinstance(d, dict) or key not in d:
            return None
        d = d[key]
    return d


def spread_summary(profile: dict) -> dict:
    """{path: {median, q1, q3, min, max, rel_iqr}} of the headline quantities a profile's spread holds."""
    sp = profile.get("spread") or {}
    out = {}
    for path in HEADLINES:
        med, q, mm = get_path(profile, path), get_path(sp.get("quartiles", {}), path), \
            get_path(sp.get("min_max", {}), path)
        if isinstance(med, (int, float)) and q and mm:
            out[path] = {"median": med, "q1": q[0], "q3": q[1], "min": mm[0], "max": mm[1],
                         "rel_iqr": (q[1] - q[0]) / med if med else float("nan")}
    return out


def _pick(value, quart, fast: bool, rate: bool):
    """Replace each number of ``value`` by the quartile that makes the profile fast (or slow)."""
    if isinstance(value, dict) and isinstance(quart, dict):
        return {k: _pick(v, quart.get(k), fast, rate or k in RATE_KEYS) for k, v in value.items()}
    if isinstance(value, list) and isinstance(quart, list) and len(quart) == len(value):
        if value and all(isinstance(v, (int, float)) for v in value) and all(
                isinstance(q, list) and len(q) == 2 for q in quart):  # a list of numbers
            return [q[1 if fast == rate else 0] for q in quart]
        return [_pick(v, q, fast, rate) for v, q in zip(value, quart)]
    if isinstance(value, (int, float)) and not isinstance(value, bool) and isinstance(quart, list) and len(quart) == 2:
        return quart[1 if fast == rate else 0]  # fast: rates high, costs low
    return value


def bound_profiles(profile) -> tuple[HardwareProfile, HardwareProfile]:
    """(fast, slow) profiles from a repeated calibration's quartiles (the same profile twice without them)."""
    prof = load_profile(profile)
    quart = prof.spread.get("quartiles")
    if not quart:
        return prof, prof
    d = prof.to_dict()
    fast = {k: _pick(v, quart.get(k), True, k in RATE_KEYS) if k in quart else v for k, v in d.items()}
    slow = {k: _pick(v, quart.get(k), False, k in RATE_KEYS) if k in quart else v for k, v in d.items()}
    return load_profile(fast | {"name": prof.name + "-fast"}), load_profile(slow | {"name": prof.name + "-slow"})


def predict_interval(model, algo="grpo", workload=None, profile="cpu-2core-epyc", **kw) -> dict:
    """{"low", "median", "high"} predicted seconds of one iteration (``predict``'s arguments), the ends
    from the calibration's interquartile range (module docstring); low == high without a spread."""
    fast, slow = bound_profiles(profile)
    mid = predict(model, algo, workload, load_profile(profile), **kw).total_time
    return {"low": predict(model, algo, workload, fast, **kw).total_time, "median": mid,
            "high": predict(model, algo, workload, slow, **kw).total_time,
            "covers": "calibration repeat noise (IQR), not the time model's error"}


def calibration_files(name: str = "cpu-2core-epyc", folder: Path = CALIBRATIONS_DIR) -> list[Path]:
    return sorted(Path(folder).glob(f"{name}-*.json"))


def calibration_list(name: str = "cpu-2core-epyc", folder: Path = CALIBRATIONS_DIR) -> list[dict]:
    """One row per committed calibration of ``name``: file, date, repeats, whether the machine was busy
    (None: not recorded, calibrations made before the load check) and the load per core before it."""
    rows = []
    for path in calibration_files(name, folder):
        d = json.loads(path.read_text())
        load = d.get("load") or {}
        rows.append({"calibration": path.stem, "date": d.get("provenance", {}).get("date"),
                     "repeats": (d.get("spread") or {}).get("repeats", 1), "busy": load.get("busy"),
                     "load_per_core_before": (load.get("before") or {}).get("per_core")})
    return rows


def calibration_spread(name: str = "cpu-2core-epyc", folder: Path = CALIBRATIONS_DIR,
                       include_busy: bool = True) -> list[dict]:
    """One row per headline quantity: its value in each committed calibration of ``name`` (by date),
    min, max, median and (max - min) / median. Quantities a calibration did not measure are None there.
    ``include_busy=False`` leaves out calibrations marked busy (see :func:`calibration_list`)."""
    profiles = [json.loads(p.read_text()) for p in calibration_files(name, folder)]
    if not include_busy:
        profiles = [d for d in profiles if not (d.get("load") or {}).get("busy")]
    rows = []
    for path, label in HEADLINES.items():
        vals = [get_path(d, path) for d in profiles]
        got = [v for v in vals if isinstance(v, (int, float))]
        row = {"quantity": label, "path": path, "values": vals,
               "dates": [d.get("provenance", {}).get("date") for d in profiles], "n": len(got)}
        if got:
            med = statistics.median(got)
            row |= {"min": min(got), "max": max(got), "median": med,
                    "rel_range": (max(got) - min(got)) / med if med else float("nan")}
        rows.append(row)
    return rows
