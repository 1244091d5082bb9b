"""Running the in-situ calibration suite, fitting it, and checking that two calibrations agree."""

from __future__ import annotations

from pathlib import Path

from ..cost.hardware import HARDWARE_DIR
from ..errors import RlmLabError
from ..sizes import check_size, get
from ..validate.suite import load_suite, reward_s_per_sample, run_suite, workloads
from ..validate.traced_case import Case, predict_case
from .fit import BOOTSTRAP, fit_retention, fit_terms, fitted_profile
from ..record import repo_root

SUITE = "insitu_suite"   # the calibration suite's own record (workloads, baseline RSS, load)
PREFIX = "insitu_"       # its runs: <root>/insitu_<name>
# The base the chapters' machine is refitted on: the full calibration of 2026-12-01 (every kernel term,
# bf16 autocast rates); committed, so the fit can be redone from the repository alone.
BASE_PROFILE = "calibrations/cpu-2core-epyc-2026-12-01T07-21.json"
NAME = "cpu-2core-epyc-insitu"
# Fixed before the first in-situ calibration was made: two calibrations in a row on a quiet machine
# must predict every validation workload's whole step within 5 % of each other.
REPEAT_TOL = 0.05


def base_path(base: str | None = None):
    """The base profile (name or path); default :data:`BASE_PROFILE` under ``data/hardware``."""
    return base if base else HARDWARE_DIR / BASE_PROFILE


def calibration_cases(size: str):
    """The size's calibration suite (``rlm_lab.sizes.get(size).calibration``) as Cases; a size without one
    is one clear error."""
    size = check_size(size)
    cases = tuple(Case(*fields) for fields in get(size).calibration)
    if not cases:
        raise RlmLabError(f"no in-situ calibration suite at size {size!r} (rlm_lab.sizes: calibration)")
    return cases


def run(size: str, root: Path, seed: int = 0, say=print):
    """Run the calibration suite into ``root`` (each workload in a fresh process, as the validation suite)."""
    return run_suite(size, root, seed=seed, say=say, suite_cases=calibration_cases(size), suite_name=SUITE,
                     command=f"rlm-lab insitu --size {size} --run", prefix=PREFIX)


def load(size: str, root: Path) -> tuple:
    """(suite record, {name: RunRecord}) of a completed calibration suite in ``root``."""
    return load_suite(size, Path(root), suite_name=SUITE, prefix=PREFIX)


def calibrate(size: str, roots, base=None, name: str = NAME, bootstrap: int | None = None) -> dict:
    """The fitted profile (a dict) from the calibration records in ``roots`` (one folder or several: the
    runs of repeated calibration suites, pooled) on ``base``."""
    roots = [roots] if isinstance(roots, (str, Path)) else list(roots)
    recs, baselines = {}, {}
    for root in roots:
        suite, found = load(size, root)
        tag = f"{Path(root).name}:" if len(roots) > 1 else ""
        recs.update({tag + n: r for n, r in found.items()})
        baselines.update({tag + n: b for n, b in suite.results["baseline_rss_bytes"].items()})
    result = fit_terms(recs, base_path(base), BOOTSTRAP if bootstrap is None else bootstrap)
    retention = fit_retention(recs, baselines, base_path(base))
    folders = [_repo_relative(r.dir) for r in recs.values()]
    return fitted_profile(base_path(base), result, name, folders, retention)


def _repo_relative(path) -> str:
    """``path`` relative to the repository when it is inside it (what a committed profile names), else absolute."""
    p = Path(path).resolve()
    try:
        return str(p.relative_to(repo_root().resolve()))
    except ValueError:
        return str(p)


def predicted_steps(size: str, profile) -> dict:
    """{validation workload: predicted whole step (stages + TRL bookkeeping)} under ``profile``; workloads it
    cannot predict (no bf16 rates) are left out."""
    out = {}
    for case in workloads(size):
        try:
            pred = predict_case(case, profile, reward_s_per_sample())
        except RlmLabError:
            continue
        out[case.name] = sum(r.seconds for r in pred.rows) + pred.bookkeeping_s
    return out


def repeat_agreement(size: str, profile_a, profile_b) -> dict:
    """How far two calibrations' predictions of the validation workloads' whole steps differ:
    ``{"per_workload": {name: a / b - 1}, "worst": max |a / b - 1|, "tolerance", "met"}``."""
    a, b = predicted_steps(size, profile_a), predicted_steps(size, profile_b)
    common = sorted(set(a) & set(b))
    if not common:
        raise RlmLabError("no validation workload both profiles can predict")
    per = {n: a[n] / b[n] - 1 for n in common}
    worst = max(abs(v) for v in per.values())
    return {"per_workload": per, "worst": worst, "tolerance": REPEAT_TOL, "met": worst <= REPEAT_TOL}
