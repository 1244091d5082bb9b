"""The in-situ fit: the profile's per-call terms refitted on traced TRL runs (see :mod:`rlm_lab.insitu`).

The time model is linear in its per-call terms on a CPU (``overlap_overhead`` false: compute + overhead,
:func:`rlm_lab.cost.timing._combine`), so every predicted stage is

    t_stage = fixed_stage + sum_g s_g * f_g,stage

``fixed``: what no fitted term touches (the verifier's measured seconds per sample); ``f_g``: the seconds
group g adds at its reference (:func:`features`, read off the predictor itself: the prediction with the
group at its reference minus the prediction without it). The group ``kernels`` is every kernel the
microbenchmarks timed (products, attention, elementwise, the log-prob head, memory traffic) at their
measured rates; its factor is the profile's ``insitu.kernel_factor`` (``HardwareProfile.kernel_factor``
divides every rate by it, so a roofline max(FLOPs / F, bytes / BW) scales by exactly that factor and the
model stays linear in it). The group ``kernels_bf16`` is the same for the kernels of a bf16 call (TRL's default on
CPU, autocast): every kernel term of it, products to cache traffic (``insitu.bf16_scope`` "kernels",
``HardwareProfile.dtype_factor``; issue 35), so that bf16 is learned as its own kernels and never absorbed into
per-call factors (autocast's per-call dispatch keeps its microbenchmark's values; what autocast adds per
parameter per call is its own FREE term per call kind). A SCALED group keeps the ratios its
microbenchmark measured (e.g. a forward's base and per-layer dispatch) and gets one factor; a FREE term
(a cost no microbenchmark isolates: the MoE blocks' per-expert loop, the generation loop's per-row work) has
reference :data:`UNIT` seconds, so its factor x UNIT is its fitted value. The factors are the non-negative
least-squares solution (:func:`rlm_lab.cost.fitting.nnls`) over every (run, stage) of the calibration
suite that takes >= 5 % of its measured step, plus each run's "other" row (TRL's bookkeeping), with weights
1 / measured (relative errors, as every other fit of this package).

Bounds (issue 35): a fit can never hand a profile a useless factor. Every factor is fitted within
:func:`bounds` (bounded-variable least squares, :func:`rlm_lab.cost.fitting.bounded_lsq`): the kernel rates
within 4x of their microbenchmarks (a factor of 0 would make every kernel free, and every rate infinite), a
microbenchmarked per-call cost between 0.1x and 200x its loop's value, a FREE term between 1 us and 100 ms.
A factor held at a bound is recorded with the unbounded fit's value and the bound's reason (``insitu.at_bound``);
a group no calibration run exercises keeps the base profile's value (factor 1; a FREE term 0, which no
microbenchmark measures). :func:`check_fit` is the one-line refusal of a fit that breaks any of it.

Held-out error: every calibration run is predicted by the fit made without its workload (leave one workload out:
its repeats in pooled suites are held out with it), so the profile carries the error it makes on runs it did not use (``insitu.held_out``: per run, the step's and the worst
stage's relative error; their median absolute value, bias and worst).

The spread: the fit repeated on bootstrap resamples of each run's traced steps (Efron & Tibshirani, *An
Introduction to the Bootstrap*, 1993, ch. 6), the quartiles of each fitted term stored where
:mod:`rlm_lab.cost.spread` reads a calibration's spread, so ``predict_interval`` gives the interval it implies.
"""

from __future__ import annotations

import copy
import statistics

import numpy as np

from ..compare import OTHER, STEP
from ..cost.fitting import bounded_lsq, fit_nonneg, nnls
from ..cost.hardware import load_profile
from ..cost.peak import stage_peaks
from ..errors import RlmLabError
from ..records.provenance import provenance, utc_now
from ..validate.compare import _kept_steps
from ..validate.suite import reward_s_per_sample
from ..validate.traced_case import case_of, predict_case, time_table

UNIT = 1e-4  # s: the reference value of a FREE term (its feature is what 0.1 ms of it would add)
# group -> overhead keys. SCALED: one factor on the microbenchmarked values (their ratios kept).
SCALED = {
    "decode_step": ("decode_step_base_s",),
    "decode_layer": ("decode_step_layer_s",),
    "generate_call": ("generate_base_s",),
    "forward": ("forward_base_s", "forward_layer_s"),
    "forward_grad": ("forward_grad_base_s", "forward_grad_layer_s"),
    "backward": ("backward_base_s", "backward_layer_s"),
    "checkpoint": ("checkpoint_base_s", "checkpoint_layer_s"),
    "optimizer": ("optimizer_base_s", "optimizer_tensor_s"),
    "trl_step": ("trl_step_base_s", "trl_step_row_s", "trl_step_tensor_s"),
}
# FREE: fitted from reference UNIT (timing.expert_overhead; timing.decode_step_time's generation-loop row term;
# timing._autocast_overhead's weight casts, per parameter per call, from reference CAST_UNIT)
CASTS = ("autocast_cast_forward_param_s", "autocast_cast_backward_param_s", "autocast_cast_decode_param_s")
FREE = ("generate_loop_row_s", "moe_expert_forward_s", "moe_expert_backward_s", "moe_expert_decode_s") + CASTS
CAST_UNIT = 1e-9  # s per parameter per call: what casting 4 + 2 bytes of it at ~6 GB/s costs
KERNELS = "kernels"  # the kernel rates' common in-situ factor (insitu.kernel_factor): fp32 calls
# bf16 autocast's own factor of every kernel term of a bf16 call (products, attention, elementwise, the log-prob
# head, cache traffic: insitu.kernel_factor_bf16 with insitu.bf16_scope "kernels"; HardwareProfile.dtype_factor).
# autocast's per-call dispatch (autocast_{forward,backward,decode}_{base,layer}_s) is NOT fitted: it keeps its
# microbenchmark's values, so that a bf16 step's cost cannot be absorbed into per-call factors (issue 35: the
# fit on main scaled them up to 273x); what autocast costs beyond them is the weights' casts (CASTS).
KERNELS_BF16 = "kernels_bf16"
KERNELS_BF16_BWD = "kernels_bf16_backward"  # bf16 backward products (dtype bf16_backward): insitu.kernel_factor_bf16_backward
KERNEL_GROUPS = {KERNELS: "kernel_factor", KERNELS_BF16: "kernel_factor_bf16", KERNELS_BF16_BWD: "kernel_factor_bf16_backward"}
BF16_SCOPE = "kernels"
GROUPS = tuple(KERNEL_GROUPS) + tuple(SCALED) + FREE
KERNEL_BOUNDS = (0.25, 4.0)    # kernels in a real step vs their microbenchmarks
SCALED_BOUNDS = (0.1, 200.0)   # a per-call cost vs its microbenchmark loop's value
FREE_BOUNDS = (0.01, 1000.0)   # x UNIT: 1 us to 100 ms
WHY = {
    KERNELS: "the same kernels on the same machine run within 4x of their microbenchmarks' rates; 0 would make "
             "every kernel free (and every rate infinite)",
    "scaled": "a per-call cost is within 0.1x to 200x of the value its microbenchmark loop measured on this "
              "machine; 0 would price the calls as free",
    "free": "a cost per call of Python between 1 us and 100 ms",
    "cast": "a weight's cast per call between 0.01 ns and 1 us per parameter",
}
SHARE_MIN = 0.05       # the stages fitted (and judged by the validation): >= 5 % of their measured step
BOOTSTRAP = 200        # resamples for the spread
SEED = 0


def _keys(group: str) -> tuple[str, ...]:
    if group in KERNEL_GROUPS:
        return ()
    return SCALED.get(group, (group,))


def unit(group: str) -> float:
    """The reference value of a FREE term (its factor x this is its fitted value)."""
    return CAST_UNIT if group in CASTS else UNIT


def bounds(group: str) -> tuple[float, float]:
    """(lower, upper) of ``group``'s factor."""
    if group in KERNEL_GROUPS:
        return KERNEL_BOUNDS
    return SCALED_BOUNDS if group in SCALED else FREE_BOUNDS


def why(group: str) -> str:
    """The reason for ``group``'s bounds, in words."""
    if group in CASTS:
        return WHY["cast"]
    return WHY[KERNELS] if group in KERNEL_GROUPS else WHY["scaled" if group in SCALED else "free"]


def unexercised_factor(group: str) -> float:
    """The factor of a group no calibration run exercises: the base profile's own value (1), 0 for a FREE term
    (no microbenchmark measures it)."""
    return 0.0 if group in FREE else 1.0


def _reference(base: dict, group: str) -> dict:
    """{key: seconds} of ``group`` at its reference: the base profile's values (SCALED) or UNIT (FREE)."""
    if group in KERNEL_GROUPS:
        return {}
    if group in SCALED:
        return {k: float(base["overhead"].get(k, 0.0)) for k in SCALED[group]}
    return {group: unit(group)}


def _with(base: dict, values: dict, kernels: dict | None = None) -> dict:
    """``base`` (a profile dict) with every fitted key set to 0 except ``values``, the kernel groups at their
    factors in ``kernels`` ({group: factor}, default 1)."""
    d = copy.deepcopy(base)
    d["insitu"] = {**(d.get("insitu") or {}), "bf16_scope": BF16_SCOPE,
                   **{key: (kernels or {}).get(g, 1.0) for g, key in KERNEL_GROUPS.items()}}
    over = dict(d["overhead"])
    for g in GROUPS:
        for k in _keys(g):
            over[k] = 0.0
    over.update(values)
    d["overhead"] = over
    return d


def _stage_seconds(rec, profile: dict) -> dict:
    """{stage: predicted seconds} of ``rec``'s case under ``profile`` (chapter 2's time table; "other" =
    TRL's predicted bookkeeping, the step = stages + bookkeeping)."""
    pred = predict_case(case_of(rec), profile, reward_s_per_sample())
    out = {r["stage"]: r["predicted"] for r in time_table(rec, pred)}
    out[OTHER] = pred.bookkeeping_s
    out[STEP] = out[STEP] + pred.bookkeeping_s
    return out


def features(rec, base: dict) -> tuple[dict, dict]:
    """(fixed, {group: {stage: seconds}}) of one record: the prediction with every fitted term at 0, and
    what each group adds at its reference (:func:`_reference`). Exact because the CPU model is linear in
    the terms (tests/insitu/test_fit.py checks it against whole predictions)."""
    kern1 = _stage_seconds(rec, _with(base, {}))
    feats = {}
    for g in KERNEL_GROUPS:
        two = _stage_seconds(rec, _with(base, {}, {g: 2.0}))
        feats[g] = {s: two[s] - kern1[s] for s in kern1}
    fixed = {s: kern1[s] - sum(feats[g][s] for g in KERNEL_GROUPS) for s in kern1}
    for g in GROUPS[len(KERNEL_GROUPS):]:
        with_g = _stage_seconds(rec, _with(base, _reference(base, g)))
        feats[g] = {s: with_g[s] - kern1[s] for s in kern1}
    return fixed, feats


def measured(rec, steps: list[dict] | None = None) -> dict:
    """{stage: measured seconds}: the median over the traced steps after warm-up (``steps``: a resample of
    them), "other" = the tracer's unmodelled time, "step" = the step wall."""
    steps = _kept_steps(rec) if steps is None else steps
    names = {n for s in steps for n in s["stages"]}
    out = {n: statistics.median(s["stages"].get(n, 0.0) for s in steps) for n in names}
    out[OTHER] = out.pop("other", 0.0)
    out[STEP] = statistics.median(s["wall_s"] for s in steps)
    return out


def _system(prepared: list, meas: list[dict]):
    """Weighted rows (A, y) of the fit: every (run, stage) >= SHARE_MIN of its step, and each run's other."""
    a, y = [], []
    for (fixed, feats), m in zip(prepared, meas):
        step = m[STEP]
        for stage, t in m.items():
            if stage == STEP or stage not in fixed or t <= 0:
                continue
            if stage != OTHER and t < SHARE_MIN * step:
                continue
            a.append([feats[g][stage] / t for g in GROUPS])
            y.append((t - fixed[stage]) / t)
    return np.asarray(a), np.asarray(y)


def solve(prepared: list, meas: list[dict]) -> dict:
    """{group: factor within :func:`bounds`} minimising the relative squared error of the fitted rows
    (:func:`_system`), plus ``_unexercised`` (groups no row touches: :func:`unexercised_factor`) and
    ``_at_bound`` ({group: {"side", "bound", "unbounded"}}: factors the bounds held, with the non-negative
    unbounded fit's value)."""
    a, y = _system(prepared, meas)
    if not len(y):
        raise RlmLabError("in-situ fit: no stage of the calibration runs to fit")
    cols = np.abs(a).sum(axis=0) > 0
    x = np.array([unexercised_factor(g) for g in GROUPS])
    lo, hi = np.array([bounds(g) for g in GROUPS]).T
    x[cols] = bounded_lsq(a[:, cols], y, lo[cols], hi[cols])
    free = np.zeros(len(GROUPS))
    free[cols] = nnls(a[:, cols], y)
    at_bound = {}
    for i, g in enumerate(GROUPS):
        if cols[i] and (x[i] <= lo[i] * (1 + 1e-9) or x[i] >= hi[i] * (1 - 1e-9)):
            side = "lower" if x[i] <= lo[i] * (1 + 1e-9) else "upper"
            if (free[i] < lo[i]) if side == "lower" else (free[i] > hi[i]):
                at_bound[g] = {"side": side, "bound": float(x[i]), "unbounded": float(free[i])}
    return ({g: float(v) for g, v in zip(GROUPS, x)} | {"_unexercised": [g for g, c in zip(GROUPS, cols) if not c]}
            | {"_at_bound": at_bound})


def predict_rows(prep: tuple, factors: dict) -> dict:
    """{stage: predicted seconds} of one prepared run (:func:`features`) under ``factors``: fixed + sum f x g."""
    fixed, feats = prep
    return {s: fixed[s] + sum(factors[g] * feats[g][s] for g in GROUPS) for s in fixed}


def workload_of(name: str) -> str:
    """The workload of a calibration run's name: pooled suites tag theirs ``<folder>:<workload>``."""
    return name.rsplit(":", 1)[-1]


def held_out(prepared: list, meas: list[dict], names: list[str]) -> dict:
    """Leave one workload out: every run of a workload (its repeats in pooled suites too, so that a repeat of
    it cannot stand in for it) predicted by the fit made on the other workloads' runs. Per run, the relative
    error of the step and of its worst stage (stages >= SHARE_MIN of the step, as fitted); then the median
    absolute step error, the median signed one (bias) and the worst stage over all runs. Empty with fewer than
    2 workloads."""
    workloads = sorted({workload_of(n) for n in names})
    if len(workloads) < 2:
        return {}
    runs = {}
    for w in workloads:
        rest = [j for j, n in enumerate(names) if workload_of(n) != w]
        f = solve([prepared[j] for j in rest], [meas[j] for j in rest])
        for i in (i for i, n in enumerate(names) if workload_of(n) == w):
            pred, m = predict_rows(prepared[i], f), meas[i]
            step = (pred[STEP] - m[STEP]) / m[STEP]
            stages = {s: (pred[s] - t) / t for s, t in m.items()
                      if s in pred and s not in (STEP, OTHER) and t > 0 and t >= SHARE_MIN * m[STEP]}
            worst = max(stages, key=lambda s: abs(stages[s])) if stages else None
            runs[names[i]] = {"step": step, "worst_stage": worst, "worst_stage_error": stages.get(worst)}
    steps = [r["step"] for r in runs.values()]
    worst_run = max(runs, key=lambda n: abs(runs[n]["worst_stage_error"] or 0.0))
    return {"method": "leave one workload out: each calibration run predicted by the fit on the other workloads' "
                      "runs", "workloads": len(workloads),
            "runs": runs, "median_abs_step_error": statistics.median(abs(e) for e in steps),
            "bias": statistics.median(steps),
            "worst_stage": {"run": worst_run, "stage": runs[worst_run]["worst_stage"],
                            "error": runs[worst_run]["worst_stage_error"]}}


def check_fit(name: str, factors: dict, unexercised=()) -> None:
    """One line, naming the profile and the field, for a factor that is not finite or outside its bounds (an
    unexercised group: not 1, or 0 for a FREE term); nothing when all hold. Run on every fit before its profile
    is written, so that no later prediction meets a factor of 0 (a ZeroDivisionError) or an absurd one."""
    for g in GROUPS:
        v = factors.get(g)
        lo, hi = bounds(g)
        if not isinstance(v, (int, float)) or not np.isfinite(v):
            raise RlmLabError(f"in-situ profile {name!r}: insitu.factors.{g} is {v!r}, not a finite number")
        if g in unexercised:
            if v != unexercised_factor(g):
                raise RlmLabError(f"in-situ profile {name!r}: insitu.factors.{g} = {v:.4g} but no calibration run "
                                  f"exercises it (it must keep {unexercised_factor(g):g})")
        elif not lo * (1 - 1e-9) <= v <= hi * (1 + 1e-9):
            raise RlmLabError(f"in-situ profile {name!r}: insitu.factors.{g} = {v:.4g} is outside [{lo:g}, {hi:g}] "
                              f"({why(g)})")


def fitted_values(base: dict, factors: dict) -> dict:
    """{overhead key: in-situ seconds} = factor x reference, for every fitted key."""
    out = {}
    for g in GROUPS:
        for k, v in _reference(base, g).items():
            out[k] = factors[g] * v
    return out


def check_base(base_profile):
    """The base profile, loaded, if the fit can use it: a microbenchmark calibration of a CPU; one clear error
    otherwise (called before any run starts)."""
    prof = load_profile(base_profile)
    if prof.insitu:
        raise RlmLabError("in-situ fit: the base profile was itself fitted in situ; fit on a microbenchmark "
                          "calibration (`rlm-lab calibrate`)")
    if prof.overlap_overhead:
        raise RlmLabError("in-situ fit: the profile overlaps overheads with compute (a GPU profile); the fit "
                          "assumes the CPU's additive model")
    return prof


def fit_terms(recs: dict, base_profile, bootstrap: int = BOOTSTRAP, seed: int = SEED) -> dict:
    """The in-situ fit over calibration records ``recs`` ({name: RunRecord}) on ``base_profile``.

    Returns ``{"factors", "values", "quartiles" (per fitted key, over the bootstrap), "rows", "rms"
    (relative, of the fitted rows), "unexercised"}``."""
    base = check_base(base_profile).to_dict()
    names = sorted(recs)
    prepared = [features(recs[n], base) for n in names]
    meas = [measured(recs[n]) for n in names]
    factors = solve(prepared, meas)
    unexercised, at_bound = factors.pop("_unexercised"), factors.pop("_at_bound")
    check_fit("(being fitted)", factors, unexercised)
    a, y = _system(prepared, meas)
    x = np.array([factors[g] for g in GROUPS])
    rms = float(np.sqrt(np.mean((a @ x - y) ** 2)))
    rng = np.random.default_rng(seed)
    kept = [_kept_steps(recs[n]) for n in names]
    draws = []
    for _ in range(bootstrap):
        resampled = [measured(recs[n], [k[i] for i in rng.integers(0, len(k), len(k))]) for n, k in zip(names, kept)]
        f = solve(prepared, resampled)
        f.pop("_unexercised"), f.pop("_at_bound")
        draws.append({**fitted_values(base, f), **{g: f[g] for g in KERNEL_GROUPS}})
    values = fitted_values(base, factors)
    quartiles = {k: [float(q) for q in np.quantile([d[k] for d in draws], [0.25, 0.75])]
                 for k in [*values, *KERNEL_GROUPS]} if draws else {}
    return {"factors": factors, "values": values, "quartiles": quartiles, "rows": int(len(y)), "rms": rms,
            "unexercised": unexercised, "bootstrap": bootstrap, "seed": seed,
            "at_bound": {g: v | {"reason": why(g)} for g, v in at_bound.items()},
            "held_out": held_out(prepared, meas, names)}


def fit_retention(recs: dict, baselines: dict, base_profile) -> dict:
    """The resident-set floor of :func:`rlm_lab.cost.peak.retained_floor`, fitted on calibration records:
    per run, the smallest measured stage peak above its baseline (every stage starts from the floor) against
    the run's largest predicted stage total, floor = base_bytes + factor x largest (NNLS, relative).
    ``{"base_bytes", "factor", "points": [[largest, floor], ...]}``."""
    points = []
    for name in sorted(recs):
        rec, case = recs[name], case_of(recs[name])
        pred = predict_case(case, base_profile)
        largest = max(t["total"] for t in stage_peaks(pred, case.checkpointing).values())
        measured_peaks = [st["peak_bytes"] for st in rec.results["trace"]["stages"].values() if st.get("peak_bytes")]
        if measured_peaks and name in baselines:
            points.append([float(largest), float(min(measured_peaks) - baselines[name])])
    if len(points) < 2:
        raise RlmLabError("in-situ fit: fewer than 2 calibration runs with measured peaks and a baseline")
    c0, c1 = fit_nonneg([[1.0, x] for x, _ in points], [max(y, 0.0) for _, y in points])
    return {"base_bytes": c0, "factor": c1, "points": points}


def fitted_profile(base_profile, result: dict, name: str, records: list[str], retention: dict | None = None) -> dict:
    """``base_profile`` as a dict with the in-situ values in ``overhead``, their bootstrap quartiles in
    ``spread.quartiles.overhead`` and the fit in ``insitu``."""
    base = load_profile(base_profile)
    d = base.to_dict()
    d["name"] = name
    d["overhead"] = {**d["overhead"], **result["values"]}
    spread = copy.deepcopy(d.get("spread") or {})
    quart = dict(result["quartiles"])
    kq = {key: quart.pop(g, None) for g, key in KERNEL_GROUPS.items()}
    spread.setdefault("quartiles", {}).setdefault("overhead", {}).update(quart)
    if kq["kernel_factor"]:
        spread["quartiles"]["insitu"] = kq
    spread.setdefault("statistic", f"in-situ terms: quartiles over {result['bootstrap']} bootstrap resamples "
                                   "of each calibration run's traced steps")
    d["spread"] = spread
    d["source"] = f"{base.source or base.name} + rlm-lab insitu"

    d["provenance"] = provenance("rlm-lab insitu")
    d["insitu"] = {**{key: result["factors"][g] for g, key in KERNEL_GROUPS.items()}, "bf16_scope": BF16_SCOPE,
                   "base_profile": base.name, "fitted": utc_now(),
                   "base_provenance": base.provenance,
                   "base_source": str(base_profile), "records": records, "factors": result["factors"],
                   "groups": {g: list(_keys(g)) for g in GROUPS}, "free_unit_s": UNIT,
                   "free_units_s": {g: unit(g) for g in FREE}, "rows": result["rows"],
                   "rms_relative": result["rms"], "unexercised": result["unexercised"],
                   "bounds": {g: list(bounds(g)) for g in GROUPS}, "at_bound": result.get("at_bound", {}),
                   "held_out": result.get("held_out", {}),
                   "share_min": SHARE_MIN, "bootstrap": result["bootstrap"], "seed": result["seed"]}
    if retention:
        d["insitu"]["rss_retained"] = retention
    check_fit(name, d["insitu"]["factors"], d["insitu"]["unexercised"])
    return d
