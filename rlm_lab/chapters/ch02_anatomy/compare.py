"""Chapter 2's comparison: the cost model's prediction for each case, joined with the record stage by stage
(time), item by item (model-state bytes) and as shares of a step; the headline numbers the prose quotes."""

from __future__ import annotations

import json
import statistics

from ...compare import STEP, relative_error, step_summary, verdict
from ...cost import memory as M
from ...cost import scalar_head
from ...cost.hardware import CPU_PROFILE
from ...cost.spread import calibration_files
from ...record import RunRecord
from ...stages import MODELS_HELD, Stage
from ...validate.traced_case import case_of, predict_case, time_table
from .cases import algorithm_cases


def memory_table(record: RunRecord, prediction) -> list[dict]:
    """Bytes per held model and kind, predicted (cost model) against counted from the live tensors."""
    meas = record.results["memory_measured"]
    spec, prec = prediction.spec, prediction.workload.precision
    actor = M.model_memory(spec, True, prec)
    pred = {"actor_weights": actor.weights, "actor_gradients": actor.gradients, "actor_optimizer": actor.optimizer}
    if prediction.algo.reference:
        pred["reference_weights"] = M.model_memory(spec, False, prec).weights
    if prediction.algo.critic:
        critic = M.model_memory(scalar_head(spec), True, prec)
        pred.update(critic_weights=critic.weights, critic_gradients=critic.gradients, critic_optimizer=critic.optimizer)
    wl = prediction.workload
    pred["kv_cache"] = M.kv_cache_bytes(spec, wl.gen * M.generate_kv_tokens(wl.prompt_len, wl.response.length),
                                        wl.dtype_bytes)
    rows = []
    for key, p in pred.items():
        m = meas.get(key)
        rows.append({"item": key, "predicted": p, "measured": m,
                     "rel_error": relative_error(p, m) if m is not None else float("nan")})
    return rows


def share_row(record: RunRecord, prediction, label: str) -> dict:
    """Per stage: predicted FLOP share, predicted time share and measured time share of one step
    (generation = prefill + decode; "other" is measured only)."""
    flops: dict[str, float] = {}
    secs: dict[str, float] = {}
    for r in prediction.rows:
        key = Stage.GENERATE.value if r.stage in (Stage.PREFILL, Stage.DECODE) else r.stage.value
        flops[key] = flops.get(key, 0.0) + r.flops
        secs[key] = secs.get(key, 0.0) + r.seconds
    total_f, total_s = sum(flops.values()) or 1.0, sum(secs.values()) or 1.0
    stages = record.results["trace"]["stages"]
    wall = record.results["trace"]["step_wall_s"]["median"]
    return {"label": label, "flop_share": {k: v / total_f for k, v in flops.items() if v},
            "time_share_predicted": {k: v / total_s for k, v in secs.items() if v},
            "time_share": {k: v["median_s"] / wall for k, v in stages.items()}}


def algorithms_table(size: str, profile=CPU_PROFILE) -> list[dict]:
    """Per algorithm: models held, stages run, predicted model-state bytes (weights + grads + AdamW)."""
    rows = []
    for name, case in algorithm_cases(size).items():
        pred = predict_case(case, profile)
        held = pred.algo.models
        m = pred.memory
        rows.append({"run": name, "algorithm": case.label.split(" ")[0], "models": ", ".join(held),
                     "stages": ", ".join(str(r.stage) for r in pred.rows),
                     "model_state_MiB": round((m.weights + m.gradients + m.optimizer) / 2**20, 3),
                     "paper_notes": ", ".join(MODELS_HELD["dapo" if case.beta == 0 and case.algo == "grpo"
                                                         else case.algo])})
    return rows


def comparison(records: dict, names, profile=CPU_PROFILE) -> list[dict]:
    """Predicted against measured per stage for the named runs, one row per (run, stage)."""
    reward_s = records["reward_calibration"].results["reward_s_per_sample"]
    out = []
    for name in names:
        rec = records[name]
        for row in time_table(rec, predict_case(case_of(rec), profile, reward_s)):
            out.append({"run": name, **row})
    return out


def generation_shares(records: dict, names, profile=CPU_PROFILE) -> list[dict]:
    """Generation's share of the FLOPs (predicted) and of the step time (predicted, measured) per run."""
    reward_s = records["reward_calibration"].results["reward_s_per_sample"]
    out = []
    for name in names:
        rec = records[name]
        case = case_of(rec)
        share = share_row(rec, predict_case(case, profile, reward_s), case.label)
        g = Stage.GENERATE.value
        out.append({"run": name, "B": case.batch, "R": case.length, "gen_flop_share": share["flop_share"].get(g, 0.0),
                    "gen_time_share_pred": share["time_share_predicted"].get(g, 0.0),
                    "gen_time_share_meas": share["time_share"].get(g, 0.0), "share": share})
    return out


ALGORITHMS = ("grpo", "dapo", "ppo")


def headline(records: dict, profile=CPU_PROFILE) -> dict:
    """The chapter's comparison as the numbers its prose quotes: the per-stage rows of the three
    algorithms, then (``compare.step_summary``) the whole-step error first and the per-stage median
    second, their verdicts against the goals, and generation's own signed error (median over runs)."""
    rows = comparison(records, ALGORITHMS, profile)
    summary = step_summary(rows)
    gen = [r["rel_error"] for r in rows if r["stage"] == Stage.GENERATE.value]
    stage_errs = [r["rel_error"] for r in rows if r["stage"] != STEP]  # median_abs_error's rows (verdict drops NaN)
    return {"rows": rows, **summary, "step_verdict": verdict(list(summary["step_errors"].values())),
            "stage_verdict": verdict(stage_errs), "generate_error": statistics.median(gen)}


def errors_by_calibration(records: dict, name: str = "cpu-2core-epyc") -> list[dict]:
    """The chapter's headline errors under every committed calibration of machine ``name``
    (``data/hardware/calibrations/<name>-<date>.json``, see ``rlm_lab.cost.spread``), so that the spread
    of the machine's calibrations shows as a spread of the verdict. ``kernels``: whether that calibration
    measured the kernel terms (elementwise, attention, log-prob head, weight streaming)."""
    rows = []
    for path in calibration_files(name):
        h = headline(records, str(path))
        prof = json.loads(path.read_text())
        load = prof.get("load") or {}
        rows.append({"calibration": path.stem, "kernels": bool(prof.get("kernels")),
                     # a calibration made on a busy machine (load per core over its limit) is shown, not hidden
                     "busy_load_per_core": round(load["before"]["per_core"], 1) if load.get("busy") else None,
                     "step_error": h["step_error"], "stage_error": h["stage_error"],
                     "step_verdict": h["step_verdict"], "stage_verdict": h["stage_verdict"]})
    return rows
