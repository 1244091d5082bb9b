"""Chapter 7's records and tables: which records the chapter shows at a size, and the closing ranking.

At ``smoke`` size the chapter measures now (into the build tree, reused while it is there); at ``cpu`` and
``gpu`` it reads the committed records ``data/runs/<size>/ch07_*`` and, where one is missing, says "not
measured yet" with the command that makes it (it never measures a cpu-size run inside a book build).
"""

from __future__ import annotations

from ..compare import relative_error, verdict
from ..record import finished, load_record, reference_root, runs_root
from ..sizes import check_size
from .run import TECHNIQUES, measure

COMMAND = "flock -x /tmp/rlm-lab-measure.lock .venv/bin/python -m rlm_lab.longtail --size {size} --out data/runs/{size}"
TABLE_COLUMNS = ("technique", "predicted gain", "measured gain", "repeats min-max", "rel. error", "verdict")

# what each record's "gain" is: the ratio (baseline / technique) of time, or of work for dynamic sampling
GAIN = {
    "overprovision": ("speedup", "step time, full batch of n / first n of n' done"),
    "tail_batching": ("speedup", "rounds' time, arrival order / long prompts in their own rounds"),
    "dispatch": ("speedup", "makespan, round-robin / longest-first"),
    "packing": ("speedup", "forward+backward, padded / packed"),
    "dynamic_sampling": ("inflation", "groups generated per group kept (a cost, not a gain)"),
    "fusion": ("speedup", "generate+score, score after / score as each finishes"),
}


def load_reference(size: str = "cpu") -> dict:
    """``{technique: record or None}`` from ``data/runs/<size>/ch07_*``; None: not measured yet. A folder
    that is there must hold a completed run (else the RecordError names it)."""
    size = check_size(size)
    return {t: (load_record(reference_root(size) / f"ch07_{t}") if (reference_root(size) / f"ch07_{t}").exists()
                else None) for t in TECHNIQUES}


def ensure_runs(size: str) -> dict:
    """The records the chapter shows at ``size`` (see the module docstring)."""
    size = check_size(size)
    if size != "smoke":
        return load_reference(size)
    own = {t: runs_root(size) / f"ch07_{t}" for t in TECHNIQUES}
    todo = [t for t, d in own.items() if not finished(d)]
    if todo:
        measure(size, only=todo)
    return {t: load_record(d) for t, d in own.items()}


def gain_row(technique: str, record) -> dict:
    """predicted and measured gain of one technique, the relative error and the verdict (25 % bar)."""
    key, meaning = GAIN[technique]
    if record is None:
        return {"technique": technique, "predicted gain": None, "measured gain": None, "repeats min-max": None,
                "rel. error": None, "verdict": "not measured yet", "meaning": meaning, "outside noise": None}
    res = record.results
    pred, meas = res["predicted"][key], res["measured"][key]
    err = relative_error(pred, meas)
    spread = res["measured"].get(f"{key}_spread")  # every repeat's gain, its pair run back to back
    band = f"{spread['min']:.2f}-{spread['max']:.2f}" if spread else "one run"
    # a gain is outside the noise band when every repeat's pair agrees on its side of 1
    outside = None if not spread else (spread["min"] > 1 or spread["max"] < 1)
    return {"technique": technique, "predicted gain": pred, "measured gain": meas, "repeats min-max": band,
            "rel. error": err, "verdict": verdict(abs(err)), "meaning": meaning, "outside noise": outside}


def ranking(runs: dict) -> list[dict]:
    """The closing table: every technique, measured ones ranked by measured gain (largest first; dynamic
    sampling's inflation is a cost, so it ranks by 1/inflation), then the ones not measured yet."""
    rows = [gain_row(t, runs.get(t)) for t in TECHNIQUES]

    def benefit(r):
        g = r["measured gain"]
        return 1 / g if r["technique"] == "dynamic_sampling" else g

    done = sorted((r for r in rows if r["measured gain"] is not None), key=benefit, reverse=True)
    return done + [r for r in rows if r["measured gain"] is None]


LEARN_ARMS = ("baseline", "overprovision", "dynamic_sampling")


def load_learning(size: str = "cpu", seeds: int = 3) -> dict:
    """``{arm: [(record, learning.json dict), ...]}``, one pair per seed present (seed 0 first):
    the committed learning runs ``data/runs/<size>/ch07_learn_<arm>[_seed<k>]`` (:mod:`rlm_lab.longtail.
    learning`); an empty list: not run yet."""
    import json

    size = check_size(size)
    out = {}
    for arm in LEARN_ARMS:
        out[arm] = []
        for k in range(seeds):
            d = reference_root(size) / (f"ch07_learn_{arm}" + (f"_seed{k}" if k else ""))
            if (d / "learning.json").exists():
                out[arm].append((load_record(d), json.loads((d / "learning.json").read_text())))
    return out


def accuracy_difference(acc_a: float, acc_b: float, n: int) -> dict:
    """Difference of two held-out accuracies on the same ``n`` problems and the bar it is read against,
    fixed before the runs: 2 standard errors of a difference of two independent binomial proportions,
    2 * sqrt((a(1-a) + b(1-b)) / n). One seed per arm: seed-to-seed spread is not in it."""
    diff = acc_a - acc_b
    bar = 2 * ((acc_a * (1 - acc_a) + acc_b * (1 - acc_b)) / n) ** 0.5
    return {"difference": diff, "bar": bar, "effect": abs(diff) > bar}


def seeds_effect(arm_acc: list, base_acc: list, n: int) -> dict:
    """Several seeds (arm and baseline paired by seed): the mean difference, the 2-standard-error bar of a
    mean of ``k`` paired differences of binomial proportions on ``n`` problems, and "effect" only when the
    mean clears it *and* every seed's difference has the same sign."""
    k = min(len(arm_acc), len(base_acc))
    diffs = [a - b for a, b in zip(arm_acc, base_acc)]
    a, b = sum(arm_acc[:k]) / k, sum(base_acc[:k]) / k
    bar = 2 * ((a * (1 - a) + b * (1 - b)) / (k * n)) ** 0.5
    same = all(d > 0 for d in diffs) or all(d < 0 for d in diffs)
    return {"difference": a - b, "bar": bar, "seeds": k, "diffs": diffs, "effect": abs(a - b) > bar and same}
