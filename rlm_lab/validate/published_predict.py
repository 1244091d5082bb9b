"""Each published case asked of the cost model, and the calibration fit of its named assumed efficiencies.

    outcome = predict_case(case)                  # Outcome(case, predicted, why)
    outcome = predict_case(case, fitted_values())  # with the efficiencies fitted on the calibration cases
    fit = fit_efficiencies(registry)               # scipy least squares on the calibration cases only

**What is asked.** A case is a predict configuration (model, algorithm, workload, placement, cluster of the case's
GPUs on its hardware profile) and a quantity read from the placement's prediction
(:func:`rlm_lab.cost.placement.predict_placement`, the chain of phases reshard -> generation -> preparation ->
advantage -> training -> sync):

* ``step_time``: one step in the case's mode; ``speedup``: the baseline's step over the variant's;
* ``stage_share``: a phase's seconds over the synchronous step; ``stage_time``: a phase's seconds;
* ``sync_time``: the weight sync phase of a separate rollout set (``nccl_broadcast``), or the reshard phase of a
  hybrid engine (``cuda_ipc``: gathers, the engine's load by CUDA IPC, its sleep), or the rollout set's load of the
  whole model from host memory (``host_broadcast``: checkpoint-engine's update, placement.host_update_time).

**Modes** are the cost model's own (:mod:`rlm_lab.cost.modes`: sync, one-step-off, bounded staleness, fully
asynchronous with partial rollouts; ``PlacementPrediction.in_mode``), with the case's ``eta`` where it gives one.

A case the cost model cannot price (an unknown profile, a model type it refuses, a set that does not fit its GPUs'
memory, a transport it has no term for) is an :class:`Outcome` with ``predicted = None`` and the one-line reason;
it stays in the tables and out of the error statistics.

**The fit.** :data:`FIT_PARAMETERS` are the cost model's named assumed efficiencies of a datasheet profile
(``rlm_lab.cost.assumed.FRACTIONS``: eta_F of the products, eta_B of memory traffic, eta_N of the network across
nodes, eta_H of the host link), applied as a predict configuration's ``assume:`` does. They are fitted on the
calibration cases only, one common value each for every GPU profile, by ``scipy.optimize.least_squares`` on the
log ratios log(predicted / published) within the bounds :data:`FIT_BOUNDS`; the result is written with its provenance
(``data/published/fit.json``): the values before and after, the cases used and left out, the residuals, the
sha256 and commit of ``split.yaml`` at the time of the fit, the predictor's commit, scipy's version and the time.

**Only what the calibration cases identify is fitted.** Before fitting, each parameter's elasticity on each
calibration case, d log(predicted) / d log(eta) at the assumed values (a 10 % step), says how much the cases can say
about it. A parameter whose largest |elasticity| is below :data:`MIN_ELASTICITY` (a 10 % change moves no case by
1 %) is not fitted: it keeps its assumed value, and the record says so with its elasticities. Without this rule a
parameter the cases cannot see is free to wander to absorb other terms' errors at almost no cost in the residuals
(eta_N did, to 0.067 from 0.9, on cases whose predictions it moved by 0.5 % per 10 %: the 2026-12-04 fits), and a
wandered value is wrong wherever it does matter (a weight sync between nodes). The rule and its threshold were set
after that fit had been validated; chapter 5 says so.
"""

from __future__ import annotations

import hashlib
import json
import math
import subprocess
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from ..cost.assumed import ASSUMPTIONS
from ..cost.assumed import FRACTIONS as FIT_PARAMETERS  # the named assumed efficiencies the fit adjusts
from ..cost.hardware import load_profile
from ..cost.placement_config import predict_placement_from_config
from ..errors import RlmLabError, read_input_text
from .published import MODELS, PUBLISHED, REPO, PublishedCase, Registry, expand_response

FIT_FILE = PUBLISHED / "fit.json"
SPLIT_FILE = PUBLISHED / "split.yaml"
FIT_BOUNDS = (0.05, 1.0)
MIN_ELASTICITY = 0.1          # below it on every calibration case, a parameter is not identified: not fitted
ELASTICITY_STEP = 1.1         # the relative step of the finite difference


@dataclass(frozen=True)
class Outcome:
    """A case and what the cost model says of it: ``predicted`` in the case's unit, or None and ``why``."""

    case: PublishedCase
    predicted: float | None
    why: str = ""

    @property
    def error(self) -> float | None:
        """predicted / published - 1 (None when not predicted)."""
        return None if self.predicted is None else self.predicted / self.case.published.value - 1.0


def predict_config(case: PublishedCase, part: dict, values: dict | None = None) -> dict:
    """The ``rlm-lab predict`` configuration of the case's baseline (``part = {}``) or of its variant, with
    ``values`` ({name: value} of :data:`FIT_PARAMETERS`) as its ``assume:``."""
    unknown = sorted(set(values or {}) - set(FIT_PARAMETERS))
    if unknown:
        raise RlmLabError(f"unknown fitted parameter(s) {', '.join(unknown)}; known: {', '.join(FIT_PARAMETERS)}")
    wl = dict(case.workload) | dict(part.get("workload", {}))
    wl["response"] = expand_response(wl.get("response", {}))
    cluster = {"devices": case.hardware["count"], "kind": "gpu"}
    if "link_gbps" in case.hardware:
        cluster["link_gbps"] = case.hardware["link_gbps"]
    cfg = {"model": str(case.model_config), "algorithm": case.algorithm["name"], "beta": case.algorithm["beta"],
           "hardware": case.hardware["profile"], "assume": dict(values or {}), "workload": wl,
           "placement": part.get("placement", case.placement), "cluster": cluster}
    for role in ("critic", "reward_model"):   # another size than the actor's, when the case names one
        m = getattr(case, role, None)
        if m:
            cfg[role] = str(MODELS / m["config"])
    return cfg


def phases(pp) -> dict:
    """{phase: seconds} of a placement prediction; one error line if a set does not fit its devices."""
    if not pp.fits:
        raise RlmLabError(pp.memory_error())
    return {p: t for p, (t, _) in pp.phases.items()}


def step_seconds(pp, mode: str, eta: int | None = None) -> float:
    """One step of the placement prediction ``pp`` in ``mode`` (the cost model's modes, rlm_lab.cost.modes)."""
    phases(pp)     # one error line if a set does not fit
    return pp.in_mode(mode, eta).step_s


_CACHE: dict = {}     # predict configuration (as JSON) -> placement prediction: cases share their baselines


def _placement(case: PublishedCase, part: dict, values: dict | None):
    cfg = predict_config(case, part, values)
    key = json.dumps(cfg, sort_keys=True, default=str)
    if key not in _CACHE:
        if len(_CACHE) > 256:
            _CACHE.clear()
        _CACHE[key] = predict_placement_from_config(cfg)
    return _CACHE[key]


def _predict(case: PublishedCase, values: dict | None) -> float:
    base = _placement(case, {}, values)
    q = case.quantity
    if q == "step_time":
        return step_seconds(base, case.mode, case.eta)
    if q == "speedup":
        variant = _placement(case, case.variant, values)
        return step_seconds(base, case.mode, case.eta) / step_seconds(variant, case.variant.get("mode", case.mode),
                                                                     case.variant.get("eta"))
    if q == "stage_share":
        return phases(base)[case.stage] / base.sync_step_s
    if q == "stage_time":
        return phases(base)[case.stage]
    # sync_time: a transport the placement prices: an NCCL broadcast to a separate rollout set (the sync phase),
    # or the CUDA IPC hand-over of a hybrid engine (the reshard phase: gathers, the engine's load, its sleep)
    if case.transport == "nccl_broadcast":
        if not base.placement.rollout_separate:
            raise RlmLabError("an NCCL weight broadcast needs the rollout on its own set (a disaggregated placement)")
        return phases(base)["sync"]
    if case.transport == "cuda_ipc":
        if not base.placement.reshard:
            raise RlmLabError("a CUDA IPC weight hand-over is the hybrid engine's reshard (placement hybrid)")
        return phases(base)["reshard"]
    if case.transport == "host_broadcast":   # checkpoint-engine: weights from host memory into the engine
        return base.host_update_s
    raise RlmLabError(f"no term for a {case.transport.replace('_', ' ')} weight update in the cost model")


def predict_case(case: PublishedCase, values: dict | None = None) -> Outcome:
    """The cost model's answer to one case (``values``: fitted parameters, else the profile's assumed ones)."""
    try:
        value = _predict(case, values)
    except RlmLabError as e:   # the reason as a reader sees it: paths relative to the repository
        return Outcome(case, None, str(e).replace(str(REPO) + "/", ""))
    if not math.isfinite(value) or value <= 0:
        return Outcome(case, None, f"the cost model gave {value!r}")
    return Outcome(case, value)


def predict_all(registry: Registry, values: dict | None = None) -> list[Outcome]:
    return [predict_case(c, values) for c in registry.cases.values()]


# ---- the calibration fit ------------------------------------------------------------------------------
def _git(*args: str) -> str:
    try:
        out = subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return ""
    return out.stdout.strip() if out.returncode == 0 else ""


def split_sha256(path: Path = SPLIT_FILE) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def assumed_values(profiles) -> dict:
    """{parameter: the value the known ``profiles`` assume} (None when none of them is known); one error line when
    they assume different values (one common fitted value would hide that)."""
    out = {}
    for name in FIT_PARAMETERS:
        section, key = ASSUMPTIONS[name][0]
        vals = set()
        for p in sorted(profiles):
            try:
                vals.add(float(getattr(load_profile(p), section).get(key, 1.0)))
            except RlmLabError:
                continue
        if len(vals) > 1:
            raise RlmLabError(f"the profiles assume different {name} ({sorted(vals)}); a common fit would hide that")
        out[name] = vals.pop() if vals else None
    return out


def fit_efficiencies(registry: Registry) -> dict:
    """Fit :data:`FIT_PARAMETERS` on the calibration cases the cost model prices (see the module docstring); the
    record to write to ``fit.json``."""
    import scipy
    from scipy.optimize import least_squares

    cal = registry.by_split("calibration")
    if any(c.split != "calibration" for c in cal):
        raise RlmLabError("the fit may read calibration cases only")
    assumed = assumed_values({c.hardware["profile"] for c in cal})
    names = list(FIT_PARAMETERS)
    before = {o.case.id: o for o in (predict_case(c) for c in cal)}
    used = [cid for cid, o in before.items() if o.predicted is not None]
    if not used:
        raise RlmLabError("no calibration case is priced by the cost model: nothing to fit")
    cases = [registry.cases[cid] for cid in used]

    start = {n: min(max(assumed[n] if assumed[n] is not None else 0.5, FIT_BOUNDS[0]), FIT_BOUNDS[1]) for n in names}
    elasticity = elasticities(cases, start)
    free = [n for n in names if max(abs(e) for e in elasticity[n].values()) >= MIN_ELASTICITY]
    if not free:
        raise RlmLabError("no efficiency is identified by the calibration cases (every elasticity below "
                          f"{MIN_ELASTICITY}): nothing to fit")

    def residuals(x):
        vals = start | dict(zip(free, x))
        out = []
        for c in cases:
            o = predict_case(c, vals)
            out.append(math.log(o.predicted / c.published.value) if o.predicted else 10.0)
        return np.array(out)

    res = least_squares(residuals, [start[n] for n in free], bounds=FIT_BOUNDS, method="trf", diff_step=1e-3,
                        xtol=1e-6, ftol=1e-8)
    fitted = {n: round(float(start[n]), 6) for n in names} | dict(zip(free, (round(float(v), 6) for v in res.x)))
    after = {c.id: predict_case(c, fitted) for c in cases}
    return {
        "parameters": {n: {"profile_key": ".".join(ASSUMPTIONS[n][0]), "meaning": ASSUMPTIONS[n][1],
                           "assumed": assumed[n], "fitted": fitted[n],
                           **({} if n in free else {"not_fitted": f"not identified: its largest |elasticity| on the "
                              f"calibration cases is {max(abs(e) for e in elasticity[n].values()):.3f} < "
                              f"{MIN_ELASTICITY}"})} for n in names},
        "elasticity": {n: {cid: round(e, 4) + 0.0 for cid, e in elasticity[n].items()} for n in names},
        "min_elasticity": MIN_ELASTICITY,
        "bounds": list(FIT_BOUNDS),
        "method": "scipy.optimize.least_squares (trf) on log(predicted / published), one common value per "
                  "parameter for every GPU datasheet profile",
        "cases": used,
        "determined": ("over" if len(used) > len(free) else "exactly" if len(used) == len(free) else "under"),
        "left_out": {cid: o.why for cid, o in before.items() if o.predicted is None},
        "log_residuals_before": {cid: _log_ratio(before[cid]) for cid in used},
        "log_residuals_after": {cid: _log_ratio(o) for cid, o in after.items() if o.predicted},
        "converged": bool(res.success), "message": str(res.message),
        "split_sha256": split_sha256(), "split_commit": _git("log", "-1", "--format=%H", "--", str(SPLIT_FILE)),
        "predictor_commit": _git("rev-parse", "HEAD"), "scipy": scipy.__version__,
        "fitted_at": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }


def elasticities(cases: list[PublishedCase], values: dict) -> dict:
    """{parameter: {case id: d log(predicted) / d log(eta)}} at ``values``, by a forward step of
    :data:`ELASTICITY_STEP` on each parameter in turn (the cases must be priced at ``values``)."""
    base = {c.id: predict_case(c, values).predicted for c in cases}
    out = {}
    for n in values:
        step = values | {n: values[n] * ELASTICITY_STEP}
        moved = {c.id: predict_case(c, step).predicted for c in cases}
        out[n] = {cid: 0.0 if not (moved[cid] and base[cid]) else
                  (math.log(moved[cid]) - math.log(base[cid])) / math.log(ELASTICITY_STEP) for cid in base}
    return out


def _log_ratio(o: Outcome) -> float:
    return round(math.log(o.predicted / o.case.published.value), 6) + 0.0    # + 0.0: no "-0.0"


def load_fit(path: Path = FIT_FILE) -> dict | None:
    """The committed fit record, or None when there is none; a malformed one is one error line naming the file and
    the field. Every fitted value is an efficiency the fit keeps inside :data:`FIT_BOUNDS`: a NaN, 0, a negative or
    an absurd value (``1e308``) would price nothing (or everything wrongly) without a word, so it is refused here."""
    if not path.exists() and not path.is_symlink():   # no fit; anything else named fit.json is read (or refused)
        return None
    text = read_input_text(path, f"fit file {path.name}", 10_000_000)
    try:
        fit = json.loads(text)
    except ValueError as e:
        raise RlmLabError(f"fit file {path.name} is not valid JSON ({e})") from None
    params = fit.get("parameters") if isinstance(fit, dict) else None
    if not isinstance(params, dict) or set(params) != set(FIT_PARAMETERS) or not all(
            isinstance(p, dict) and "fitted" in p for p in params.values()):
        raise RlmLabError(f"fit file {path.name} must give a fitted value for each of {', '.join(FIT_PARAMETERS)}")
    lo, hi = FIT_BOUNDS
    for name in FIT_PARAMETERS:
        v = params[name]["fitted"]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not lo <= v <= hi:
            raise RlmLabError(f"fit file {path.name}: parameters.{name}.fitted must be a number in [{lo:g}, {hi:g}] "
                              f"(the fit's bounds), got {v!r}")
    return fit


def fitted_values(fit: dict | None) -> dict | None:
    """{parameter: fitted value} of a fit record (None: no fit)."""
    return None if fit is None else {n: float(p["fitted"]) for n, p in fit["parameters"].items()}
