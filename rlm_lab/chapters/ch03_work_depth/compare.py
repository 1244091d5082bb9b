"""Chapter 3's comparison: the cost model's decode steps and ``generate`` times against the records,
Brent's bounds from measured and from predicted W and D, and the headline numbers the prose quotes."""

from __future__ import annotations

import statistics

from ...compare import relative_error, verdict
from ...cost import decode_step_time, load_profile, model_spec
from ...cost.timing import generate_time
from ...record import RunRecord
from .cases import PROMPT_LEN, assign


def predicted_decode_steps(model_name: str, batches, k0: int, k1: int, profile) -> list[float]:
    """Mean predicted t_step(b, c) over the contexts the measurement spans (fp32, as measured)."""
    spec, prof = model_spec(model_name), load_profile(profile)
    ctx = range(PROMPT_LEN + k0, PROMPT_LEN + k1)
    return [statistics.mean(decode_step_time(spec, b, c, prof, "fp32", 4) for c in ctx) for b in batches]


def knee(batches, times, factor: float = 1.5) -> int | None:
    """The largest batch whose step time is within ``factor`` x the batch-1 time (below it, more
    sequences per step are almost free); None if even the largest batch is."""
    base = times[0]
    inside = [b for b, t in zip(batches, times) if t <= factor * base]
    return inside[-1] if len(inside) < len(batches) else None


def predicted_generate(model_name: str, lengths, profile, batch: int | None = None) -> float:
    """The cost model's static ``generate`` of these rows (``rlm_lab.cost.timing.generate_time``, fp32)."""
    return generate_time(model_name, profile, PROMPT_LEN, lengths, batch, "static", "fp32", 4)


def brent_table(record: RunRecord, how: str = "round_robin", profile=None) -> list[dict]:
    """Per p: measured T_p (slowest replica, simulated and, where run, real), Brent's bounds from the
    measured W = T_1 and D, and (with ``profile``) the cost model's T_p for the same assignment."""
    res = record.results
    sim = res["simulated"][how]
    w = max(sim["1"])  # one replica holds everything: its time is the whole work (device-seconds)
    d = res["depth_s"]
    rows = []
    for p_str, times in sim.items():
        p = int(p_str)
        row = {"replicas": p, "measured_sim": max(times), "work_sim": sum(times), "lower": max(w / p, d),
               "upper": w / p + d}
        if p_str in res["real"]:
            row["measured_real"] = max(res["real"][p_str])
        if profile is not None:
            model = record.config["model"]
            shares = assign(res["lengths"], p, how)
            row["predicted"] = max(predicted_generate(model, s, profile) for s in shares if s)
        rows.append(row)
    return rows


# ---- compare: predicted against measured, one table per experiment ------------------------------------

def knee_table(record: RunRecord, profile) -> tuple[list[dict], list[dict]]:
    """Decode step time per (model, batch), predicted against measured, and per model the knee (:func:`knee`:
    the largest batch whose step takes at most 1.5x the batch-1 step) measured and predicted side by side."""
    cfg = record.config
    rows, knees = [], []
    for model, meas in record.results["step_s"].items():
        pred = predicted_decode_steps(model, cfg["batches"], cfg["k0"], cfg["k1"], profile)
        rows += [{"model": model, "batch": b, "predicted": pt, "measured": mt, "rel_error": relative_error(pt, mt)}
                 for b, pt, mt in zip(cfg["batches"], pred, meas)]
        knees.append({"model": model, "knee_measured": knee(cfg["batches"], meas),
                      "knee_predicted": knee(cfg["batches"], pred)})
    return rows, knees


def tail_table(record: RunRecord, profile) -> list[dict]:
    """One static-batch ``generate`` per length distribution: predicted and measured seconds, the bubble,
    and the measured slowdown against the fixed-length row next to the static-batch law 1 / (1 - bubble)."""
    rows = []
    for r in record.results["rows"]:
        pred = predicted_generate(record.config["model"], r["lengths"], profile)
        rows.append({"lengths": r["label"], "mean_R": r["r_mean"], "max_R": r["r_max"], "bubble": r["bubble"],
                     "predicted": pred, "measured": r["seconds"], "rel_error": relative_error(pred, r["seconds"])})
    base = rows[0]["measured"]
    for r in rows:
        r["slowdown_measured"], r["slowdown_law"] = r["measured"] / base, 1 / (1 - r["bubble"])
    return rows


def replica_table(record: RunRecord, profile) -> list[dict]:
    """Both assignments: :func:`brent_table` rows with the error of the predicted T_p against the simulated
    one, and Brent's bounds from the *predicted* W and D (``pred_lower``, ``pred_upper``), so that the
    prediction is drawn between its own bounds and the measurement between the measured ones."""
    model, lengths = record.config["model"], record.results["lengths"]
    w_pred = predicted_generate(model, lengths, profile)
    d_pred = predicted_generate(model, [max(lengths)], profile)
    rows = []
    for how in ("round_robin", "by_length"):
        for r in brent_table(record, how, profile):
            p = r["replicas"]
            rows.append({"assignment": how, **r, "pred_lower": max(w_pred / p, d_pred),
                         "pred_upper": w_pred / p + d_pred, "rel_error": relative_error(r["predicted"], r["measured_sim"]),
                         "above_upper": r["measured_sim"] > r["upper"]})
    return rows


def headline(records: dict, profile) -> dict:
    """The chapter's comparison as its prose quotes it: whole generation times first (the long-tail batches
    and the replica T_p, each one whole ``generate``), then single decode steps, then all together; each
    median |error| with its verdict against the goals (``compare.BAR``, ``compare.GOAL``)."""
    knee_rows, knees = knee_table(records["decode_knee"], profile)
    tail_rows = tail_table(records["long_tail"], profile)
    rep_rows = replica_table(records["replicas"], profile)
    errs = {k: [abs(r["rel_error"]) for r in rs] for k, rs in
            (("whole", tail_rows + rep_rows), ("step", knee_rows), ("every", knee_rows + tail_rows + rep_rows))}
    whole, step, every = (statistics.median(errs[k]) for k in ("whole", "step", "every"))
    real = {r["replicas"]: r["measured_real"] / r["measured_sim"] for r in rep_rows
            if r["assignment"] == "round_robin" and "measured_real" in r}
    return {"knee_rows": knee_rows, "knees": knees, "tail_rows": tail_rows, "replica_rows": rep_rows,
            "whole_error": whole, "whole_verdict": verdict(errs["whole"]), "step_error": step,
            "step_verdict": verdict(errs["step"]), "all_error": every, "all_verdict": verdict(errs["every"]),
            "above_upper": [(r["assignment"], r["replicas"]) for r in rep_rows if r["above_upper"]],
            "real_over_sim": real, "errors": errs}
