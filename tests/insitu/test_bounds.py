"""An in-situ fit cannot produce a useless profile (issue 35, item 3): a factor the data pull to 0 (as a fresh
fit on an AMX Xeon did to the bf16 kernels) is held at its bound with the reason recorded, a profile with a
factor of 0 is refused in one line naming it (never a later ZeroDivisionError in ``validate`` or ``predict
--trl-defaults``), and the profile carries its held-out error on calibration runs each fit did not use."""

import json

import numpy as np
import pytest

from rlm_lab.cli import main
from rlm_lab.compare import STEP
from rlm_lab.cost import load_profile
from rlm_lab.errors import RlmLabError
from rlm_lab.insitu import fit as F

from .test_fit import BASE, FACTORS, _profile_with, _recs


def _synthetic(truth_factors):
    """(prepared, measured, names) of the carriers 'measured' as the predictor under ``truth_factors``."""
    base = load_profile(BASE).to_dict()
    truth = _profile_with(truth_factors)
    recs = _recs()
    names = sorted(recs)
    prepared = [F.features(recs[n], base) for n in names]
    meas = [{s: t for s, t in F._stage_seconds(recs[n], truth).items() if t > 0} for n in names]
    return prepared, meas, names


@pytest.fixture(scope="module")
def free_bf16():
    """Runs whose bf16 kernels cost nothing: the data pull the bf16 kernel factor to 0 (the bug of a fresh fit
    on an AMX machine). _profile_with cannot build a 0 factor (the profile is refused), so the truth is built
    with 1e-9 instead."""
    return _synthetic(FACTORS | {"kernels_bf16": 1e-9})


def test_a_factor_the_data_pull_to_zero_is_held_at_its_bound_with_the_reason(free_bf16):
    prepared, meas, _ = free_bf16
    got = F.solve(prepared, meas)
    unexercised, at_bound = got.pop("_unexercised"), got.pop("_at_bound")
    lo, hi = F.bounds("kernels_bf16")
    assert got["kernels_bf16"] == pytest.approx(lo)                      # never 0
    assert at_bound["kernels_bf16"]["side"] == "lower" and at_bound["kernels_bf16"]["unbounded"] < lo
    for g in F.GROUPS:
        lo, hi = F.bounds(g)
        assert g in unexercised or lo * (1 - 1e-9) <= got[g] <= hi * (1 + 1e-9), g
    F.check_fit("synthetic", got, unexercised)                           # the bounded fit passes its check


def test_the_unbounded_fit_would_have_given_zero(free_bf16):
    """The test above can fail: without the bounds (NNLS, the fit before issue 35) the factor falls far below
    its bound, towards 0 (the truth is 1e-9)."""
    from rlm_lab.cost.fitting import nnls

    prepared, meas, _ = free_bf16
    a, y = F._system(prepared, meas)
    x = nnls(a, y)
    assert x[F.GROUPS.index("kernels_bf16")] < F.bounds("kernels_bf16")[0] / 5


def test_a_group_no_run_exercises_keeps_the_base_value_not_zero():
    prepared, meas, _ = _synthetic(FACTORS)
    for fixed, feats in prepared:
        feats["kernels_bf16"] = {s: 0.0 for s in feats["kernels_bf16"]}
    got = F.solve(prepared, meas)
    assert "kernels_bf16" in got["_unexercised"] and got["kernels_bf16"] == 1.0


@pytest.mark.parametrize("group,value", [("kernels_bf16", 0.0), ("kernels", float("nan")), ("forward", 0.0),
                                         ("trl_step", 273.0 * 10), ("autocast_cast_forward_param_s", 0.0), ("generate_loop_row_s", 0.0)])
def test_a_fit_outside_its_bounds_is_one_line_naming_the_profile_and_field(group, value):
    factors = {g: max(F.bounds(g)[0], 1.0) for g in F.GROUPS} | {group: value}
    with pytest.raises(RlmLabError) as e:
        F.check_fit("mine-insitu", factors)
    msg = str(e.value)
    assert "'mine-insitu'" in msg and f"insitu.factors.{group}" in msg and "\n" not in msg


@pytest.mark.parametrize("field,value", [("kernel_factor_bf16", 0.0), ("kernel_factor", 0), ("kernel_factor", -1.0),
                                         ("kernel_factor", float("inf"))])
def test_a_profile_with_a_zero_kernel_factor_is_refused_when_loaded(tmp_path, field, value):
    d = _profile_with(FACTORS)
    d["insitu"][field] = value
    path = tmp_path / "zero.json"
    path.write_text(json.dumps(d))
    with pytest.raises(RlmLabError, match=f"insitu.{field} = .* must be a positive number"):
        load_profile(path)


@pytest.mark.parametrize("argv", [["predict", "--trl-defaults", "--prompts", "8"], ["validate", "--size", "cpu"]])
def test_validate_and_predict_trl_defaults_say_one_line_not_a_zero_division(tmp_path, capsys, argv):
    d = _profile_with(FACTORS)
    d["insitu"]["kernel_factor_bf16"] = 0.0
    path = tmp_path / "zero.json"
    path.write_text(json.dumps(d))
    flag = "--hardware" if argv[0] == "predict" else "--profile"
    rc = main([*argv, flag, str(path)])
    err = capsys.readouterr().err
    assert rc == 2 and "kernel_factor_bf16" in err and err.count("\n") == 1, err


def test_held_out_error_is_each_run_predicted_by_the_fit_without_it():
    """Checked against an independent route: the fit on the other runs written into a profile and the whole
    predictor run on it (F._stage_seconds), not the linear composition held_out uses."""
    prepared, meas, names = _synthetic(FACTORS)
    ho = F.held_out(prepared, meas, names)
    assert set(ho["runs"]) == set(names) and "leave one workload out" in ho["method"]
    recs = _recs()
    i = names.index("validation_nano_grpo_B64_G8_R10_bf16")
    rest = [j for j in range(len(names)) if j != i]
    f = F.solve([prepared[j] for j in rest], [meas[j] for j in rest])
    prof = _profile_with({g: f[g] for g in F.GROUPS})
    direct = F._stage_seconds(recs[names[i]], prof)
    want = (direct[STEP] - meas[i][STEP]) / meas[i][STEP]
    assert ho["runs"][names[i]]["step"] == pytest.approx(want, rel=1e-6, abs=1e-9)
    steps = [r["step"] for r in ho["runs"].values()]
    assert ho["median_abs_step_error"] == pytest.approx(float(np.median(np.abs(steps))))
    assert abs(ho["worst_stage"]["error"]) == max(abs(r["worst_stage_error"] or 0) for r in ho["runs"].values())


def test_held_out_error_shows_a_run_the_others_cannot_price():
    """The only MoE runs held out leave the per-expert terms unexercised: their error is large, not hidden."""
    prepared, meas, names = _synthetic(FACTORS)
    moe = [n for n in names if "moe" in n]
    keep = [i for i, n in enumerate(names) if n not in moe[1:]]             # one MoE run left
    ho = F.held_out([prepared[i] for i in keep], [meas[i] for i in keep], [names[i] for i in keep])
    assert abs(ho["runs"][moe[0]]["step"]) > 0.05
    assert max(abs(r["step"]) for n, r in ho["runs"].items() if "moe" not in n) < abs(ho["runs"][moe[0]]["step"])


def test_a_repeat_of_the_held_out_workload_is_held_out_with_it():
    """Pooled suites (A:w, B:w): holding out A:w alone would let B:w, the same workload, stand in for it. With
    one MoE workload left, its repeat would price its per-expert terms exactly (error ~0); held out together,
    nothing else prices them and the error shows."""
    prepared, meas, names = _synthetic(FACTORS)
    moe = [n for n in names if "moe" in n]
    keep = [i for i, n in enumerate(names) if n not in moe[1:]]
    p, m = [prepared[i] for i in keep], [meas[i] for i in keep]
    pooled = [f"A:{names[i]}" for i in keep] + [f"B:{names[i]}" for i in keep]
    ho = F.held_out(p + p, m + m, pooled)
    assert ho["workloads"] == len(keep)
    assert abs(ho["runs"][f"A:{moe[0]}"]["step"]) > 0.05 and abs(ho["runs"][f"B:{moe[0]}"]["step"]) > 0.05
