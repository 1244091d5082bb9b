"""The headline workloads of chapters 2 and 3 that the reader's machine runs: what each is, how it is
predicted (the chapter's own prediction code) and measured (the chapter's own measurement code), and the
committed reference's prediction and measurement of the same workloads."""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Callable

from ...errors import RlmLabError
from ...models import build_model
from ...stages import Stage
from .. import ch03_work_depth as W
from ..ch02_anatomy import (
    CPU_PROFILE,
    algorithm_cases,
    comparison,
    load_reference,
    predict_case,
    reward_calibration,
    run_case,
)

READER_SIZE = "cpu"  # the one size at which the reader's column is measured
CH02_STEPS, CH02_WARMUP = 7, 2  # the reference ran 12 steps (10 traced); 5 traced steps give its median


# ---- the chapters' headline workloads -----------------------------------------------------------------

@dataclass(frozen=True)
class Headline:
    """One chapter's headline workloads: what they are, how each is predicted and measured, and the
    committed reference's prediction and measurement of the same workloads."""

    chapter: str
    labels: dict            # workload id -> label in the table
    config: Callable        # () -> dict: the workloads' parameters (part of the cache's identity)
    prepare: Callable       # (folder) -> dict: calibration inputs measured here (e.g. the verifier's rate)
    predict: Callable       # (profile, prepared) -> {id: seconds}
    measure: Callable       # (folder, prepared) -> ({id: seconds}, details)
    reference: Callable     # () -> {id: (predicted, measured)} from the committed records, or {}


def _ch02_case():
    return replace(algorithm_cases(READER_SIZE)["grpo"], steps=CH02_STEPS, warmup=CH02_WARMUP)


def _ch02_prepare(folder: Path) -> dict:
    rec = reward_calibration(READER_SIZE, run_dir=folder / "reward_calibration")
    return {"reward_s_per_sample": rec.results["reward_s_per_sample"]}


def _ch02_predict(profile, prep: dict) -> dict:
    pred = predict_case(_ch02_case(), profile, prep["reward_s_per_sample"])
    # as traced_case.time_table compares them: the step is the sum of the predicted stages
    return {"step": sum(r.seconds for r in pred.rows), "generate": pred.seconds(Stage.GENERATE)}


def _ch02_measure(folder: Path, prep: dict):
    rec = run_case(_ch02_case(), READER_SIZE, folder / "run")
    tr = rec.results["trace"]
    return ({"step": tr["step_wall_s"]["median"], "generate": tr["stages"]["generate"]["median_s"]},
            {"run": str(rec.dir), "traced_steps": tr["steps"], "torch_threads": rec.results.get("torch_threads")})


def _ch02_reference() -> dict:
    ref = load_reference(READER_SIZE)
    if not {"grpo", "reward_calibration"} <= set(ref):
        return {}
    rows = {r["stage"]: r for r in comparison(ref, ["grpo"], CPU_PROFILE)}
    return {k: (rows[k]["predicted"], rows[k]["measured"]) for k in ("step", "generate") if k in rows}


def ch03_headline(knee_model: str = "micro", batches=(1, 64), tail_dists=(0, -1), size: str = READER_SIZE,
                  reps: int | None = None) -> Headline:
    """Chapter 3's headline workloads: decode steps of ``knee_model`` at ``batches`` and whole ``generate``
    calls of the size's tail model for the length distributions at ``tail_dists`` (indices into
    ``work_depth.distributions``); the parameters default to the chapter's own at ``size``."""
    p = W.params(size)
    reps = reps or p["reps"]
    dists = [W.distributions(size)[i] for i in tail_dists]
    # whole generate calls first (the chapter's headline), then single decode steps
    labels = {f"generate_{d.kind}{d.sigma:g}": f"generate, {p['tail_model']}, n={d.n}, {d.label}" for d in dists}
    gen_ids = list(labels)
    labels |= {f"decode_b{b}": f"decode step, {knee_model}, batch {b}" for b in batches}

    def config():
        return {"knee_model": knee_model, "batches": list(batches), "k0": p["k0"], "k1": p["k1"], "reps": reps,
                "tail_model": p["tail_model"], "lengths": {i: d.values(0) for i, d in zip(gen_ids, dists)}}

    def predict(profile, prep):
        steps = W.predicted_decode_steps(knee_model, batches, p["k0"], p["k1"], profile)
        out = {f"decode_b{b}": t for b, t in zip(batches, steps)}
        return out | {i: W.predicted_generate(p["tail_model"], d.values(0), profile) for i, d in zip(gen_ids, dists)}

    def measure(folder, prep):
        out = {}
        model = build_model(knee_model, seed=0)[0].eval()  # on the CPU: the calibration is the CPU's
        W.generate_timed(model, [p["k0"]] * 2)  # warm-up, as the chapter's decode_knee
        for b, t in zip(batches, W.measure_decode_steps(model, batches, p["k0"], p["k1"], reps)):
            out[f"decode_b{b}"] = t
        model = build_model(p["tail_model"], seed=0)[0].eval()
        W.generate_timed(model, [4] * 4)
        for i, d in zip(gen_ids, dists):
            lengths, times = d.values(0), []
            for r in range(reps):
                t, produced = W.generate_timed(model, lengths, r)
                if produced != lengths:
                    raise RlmLabError(f"forced lengths were not honoured for {d.label}; the measurement is not exact")
                times.append(t)
            out[i] = statistics.median(times)
        return out, {"reps": reps}

    def reference():
        ref = W.load_reference(READER_SIZE)
        if not {"decode_knee", "long_tail"} <= set(ref):
            return {}
        knee_rows, _ = W.knee_table(ref["decode_knee"], CPU_PROFILE)
        out = {f"decode_b{r['batch']}": (r["predicted"], r["measured"]) for r in knee_rows
               if r["model"] == knee_model and r["batch"] in batches}
        by_label = {r["lengths"]: r for r in W.tail_table(ref["long_tail"], CPU_PROFILE)}
        for i, d in zip(gen_ids, dists):
            if d.label in by_label and ref["long_tail"].config["model"] == p["tail_model"]:
                out[i] = (by_label[d.label]["predicted"], by_label[d.label]["measured"])
        return out

    return Headline("ch03", labels, config, lambda folder: {}, predict, measure, reference)


def headlines() -> dict[str, Headline]:
    ch02 = Headline("ch02", {"step": "GRPO step (micro, B=64, G=8, R=16)", "generate": "generate stage of that step"},
                    lambda: {"case": asdict(_ch02_case())}, _ch02_prepare, _ch02_predict, _ch02_measure,
                    _ch02_reference)
    return {"ch02": ch02, "ch03": ch03_headline()}
