"""TRL's per-step bookkeeping term: the fit recovers known coefficients from synthetic points, predict charges
it once per optimizer step (rows and tensors counted by hand), datasheet profiles get the assumed figures and
say so, old calibrated profiles get 0, and the validation comparison adds it to the step and the "other" row."""

import math

import pytest

from rlm_lab.cost import Workload, load_profile, model_spec, predict
from rlm_lab.calibrate import step_benchmarks as SB
from rlm_lab.cost.assumed import ASSUMED_TRL_STEP, assumption_lines
from rlm_lab.cost.hardware import profile_from_dict

FIT = {"trl_step_base_s": 4e-3, "trl_step_row_s": 6e-5, "trl_step_tensor_s": 1e-4}


def test_fit_recovers_known_coefficients_from_synthetic_points():
    # tensors as the hidden-16 Llamas have them (12, 39): not collinear with the batch
    pts = [{"batch": b, "tensors": t, "other_s": 4e-3 + 6e-5 * b + 1e-4 * t} for t in (12, 39) for b in SB.BATCHES]
    fit = SB.fit_trl_step(pts)
    for k, v in FIT.items():
        assert fit[k] == pytest.approx(v, rel=1e-6)
    # a negative per-row residual cannot make a negative coefficient (NNLS): the row term is 0, not < 0
    pts = [dict(p, other_s=5e-3 + 1e-4 * p["tensors"] - 1e-6 * p["batch"]) for p in pts]
    assert SB.fit_trl_step(pts)["trl_step_row_s"] == 0.0


def test_predict_charges_bookkeeping_per_optimizer_step():
    base = load_profile("cpu-2core-epyc")
    prof = profile_from_dict(SB.with_trl_step_terms(base, FIT))
    wl = Workload(prompts=8, group_size=4, prompt_len=6, response=8, epochs=2, minibatches=2, precision="fp32")
    p0, p1 = predict("micro", "grpo", wl, base), predict("micro", "grpo", wl, prof)
    tensors = model_spec("micro").param_tensors
    # 4 optimizer steps of 32 / 2 = 16 rows each, by hand
    expect = 4 * (4e-3 + 16 * 6e-5 + tensors * 1e-4)
    assert p1.bookkeeping_s == pytest.approx(expect)
    assert p0.bookkeeping_s == 0.0  # a calibrated profile made before the benchmark: not charged
    assert p1.total_time - p0.total_time == pytest.approx(expect)
    assert [r.seconds for r in p1.rows] == [r.seconds for r in p0.rows]  # no stage row changes


def test_datasheet_profiles_use_the_assumed_figures_and_name_them():
    wl = Workload(prompts=4, group_size=4, prompt_len=6, response=8)
    pred = predict("micro", "grpo", wl, "h100-sxm")
    a = ASSUMED_TRL_STEP
    expect = a["trl_step_base_s"] + 16 * a["trl_step_row_s"] + model_spec("micro").param_tensors * a["trl_step_tensor_s"]
    assert pred.bookkeeping_s == pytest.approx(expect)
    lines = assumption_lines("h100-sxm", lambda prof: predict("micro", "grpo", wl, prof).total_time)
    line = next(x for x in lines if "bookkeeping" in x)
    assert "trl_step_base_s" in line and "without it the step is" in line and "(+0 %)" not in line


def test_validation_rows_carry_the_bookkeeping():
    from rlm_lab.compare import OTHER, STEP
    from rlm_lab.validate.compare import with_bookkeeping

    class P:
        bookkeeping_s = 0.01

    rows = [{"stage": "generate", "predicted": 0.05, "measured": 0.06, "rel_error": -1 / 6},
            {"stage": OTHER, "predicted": 0.0, "measured": 0.01, "rel_error": math.nan},
            {"stage": STEP, "predicted": 0.08, "measured": 0.1, "rel_error": -0.2}]
    out = {r["stage"]: r for r in with_bookkeeping(rows, P())}
    assert out["generate"] == rows[0]
    assert out[OTHER]["predicted"] == pytest.approx(0.01) and out[OTHER]["rel_error"] == pytest.approx(0.0)
    assert out[STEP]["predicted"] == pytest.approx(0.09) and out[STEP]["rel_error"] == pytest.approx(-0.1)
