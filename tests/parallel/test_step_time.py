"""The distributed step-time prediction from the profile alone (rlm_lab.parallel.bench.step_time) and its
calibration (rlm_lab.calibrate.dist_benchmarks): each checked against an independent computation. No process
is started (the measurements themselves run in `rlm-lab chapter 4 dist-benchmarks`)."""

import copy

import pytest

from rlm_lab.calibrate import dist_benchmarks as db
from rlm_lab.cost.hardware import load_profile
from rlm_lab.parallel.bench import step_time as st
from rlm_lab.parallel.mesh import Layout


def _linear_profile(**changes):
    """A CPU profile whose compute is exactly linear in the tokens: one constant matmul rate, no curves,
    kernels assumed (memory-bound elementwise, attention at the matmul rate), a bandwidth so high that no
    product is memory-bound, no overheads, free messages, no distributed section."""
    d = copy.deepcopy(load_profile("cpu-2core-epyc").to_dict())
    d.update(name="linear", matmul_curve={}, kernels={}, memory_bandwidth=1e18, distributed={})
    d["overhead"] = {k: 0.0 for k in d["overhead"]}
    d["collectives"]["ops"] = {k: {"alpha_s": 0.0, "beta_s_per_byte": 0.0} for k in d["collectives"]["ops"]}
    d.update(changes)
    return load_profile(d)


@pytest.mark.parametrize("m", [2, 4, 8])
def test_pipeline_compute_is_the_bubble_times_a_stage_share(m):
    """With compute linear in the rows and no overheads, p stages over m micro-batches take (m+p-1) slots of
    1/(m p) of the one-process pass: T_pp / T_1 = (m+p-1)/(m p) (GPipe, arXiv 1811.06965)."""
    prof, p = _linear_profile(), 2
    one = st.predicted_step_time(Layout(), "micro", 16, 64, prof, comm={})
    pipe = st.predicted_step_time(Layout(pp=p, microbatches=m), "micro", 16, 64, prof, comm={})
    assert pipe["compute_s"] / one["compute_s"] == pytest.approx((m + p - 1) / (m * p), rel=1e-9)


def test_data_parallel_halves_compute_and_zero_shards_the_optimizer():
    prof = _linear_profile()
    one = st.predicted_step_time(Layout(), "micro", 16, 64, prof, comm={})
    dp = st.predicted_step_time(Layout(dp=2), "micro", 16, 64, prof, comm={})
    z1 = st.predicted_step_time(Layout(dp=2, zero=1), "micro", 16, 64, prof, comm={})
    assert dp["compute_s"] == pytest.approx(one["compute_s"] / 2, rel=1e-9)
    assert dp["optimizer_s"] == pytest.approx(one["optimizer_s"], rel=1e-9)
    assert z1["optimizer_s"] == pytest.approx(one["optimizer_s"] / 2, rel=1e-9)  # no per-tensor overhead here


def test_oversubscription_stretches_cpu_work_not_messages():
    prof = load_profile("cpu-2core-epyc")
    kw = dict(comm={"all_reduce": {"calls": 1, "bytes": 1 << 20, "groups": [4]}}, threads=1, harness=True)
    fits = st.predicted_step_time(Layout(dp=4), "micro", 8, 64, prof, cores=4, **kw)
    over = st.predicted_step_time(Layout(dp=4), "micro", 8, 64, prof, cores=2, **kw)
    assert over["oversubscription"] == 2.0 and fits["oversubscription"] == 1.0
    for key in ("compute_s", "optimizer_s", "framework_s"):
        assert over[key] == pytest.approx(2 * fits[key], rel=1e-12)
    assert over["comm_s"] == fits["comm_s"] > 0


def test_rank_threads_swap_in_the_rates_measured_at_that_thread_count():
    base = _linear_profile()
    slow = copy.deepcopy(base.to_dict())
    entry = {"matmul_curve": {}, "matmul_flops": {"fp32": base.matmul_flops["fp32"] / 3},
             "overhead": {"forward_grad_layer_s": 1e-3}, "kernels": {}}
    slow["distributed"] = {"threads": {"1": entry}}
    slow = load_profile(slow)
    at1, used = db.at_threads(slow, 1)
    assert used == 1 and at1.matmul_rate(1e6, "fp32") == pytest.approx(base.matmul_rate(1e6, "fp32") / 3)
    assert at1.call_overhead("forward_grad_layer_s") == 1e-3 and at1.call_overhead("backward_layer_s") == 0.0
    same, used = db.at_threads(slow, slow.threads)  # the calibration's own thread count: unchanged
    assert same is slow and used == slow.threads
    none, used = db.at_threads(base, 1)  # no entry for 1 thread: the profile's rates, and it says so
    assert none is base and used == base.threads
    t1 = st.predicted_step_time(Layout(dp=2), "micro", 8, 64, slow, comm={}, threads=1)
    t2 = st.predicted_step_time(Layout(dp=2), "micro", 8, 64, slow, comm={}, threads=slow.threads)
    assert t1["rates_threads"] == 1 and t1["compute_s"] > 2.5 * t2["compute_s"]


def test_framework_fit_recovers_known_terms_per_family_and_unit():
    """Synthetic measurements = the profile's own prediction + known framework and harness costs: the NNLS fit
    returns them, for layer-, micro-batch- and hop-counted families alike."""
    prof = load_profile("cpu-2core-epyc")
    truth = {"ddp": (2e-3, 1e-3), "tp": (1e-3, 7e-3), "pp": (3e-3, 2e-3), "cp": (1e-3, 4e-3), "ep": (0.0, 5e-3)}
    harness = (3e-3, 1.5e-3)
    cases = [({"dp": 2}, "ddp"), ({"tp": 2}, "tp"), ({"cp": 2}, "cp"), ({"ep": 2}, "ep")]
    points = [{"layout": {}, "family": "single", "layers": L, "counted": c,
               "step_s": 0.01 + (harness[0] + harness[1] * L if c else 0.0), "comm": {}}
              for L in db.DEPTHS for c in (True, False)]
    comm = {"all_reduce": {"calls": 2, "bytes": 4096, "groups": [2]}}
    for kw, fam, L in [(kw, fam, L) for kw, fam in cases for L in db.DEPTHS] + \
            [({"pp": 2, "microbatches": m}, "pp", db.PP_DEPTH) for m in (2, 4)]:
        lay = Layout(**kw)
        spec = db.spec_of(db.tiny(L, moe=lay.ep > 1))
        pred = st.predicted_step_time(lay, spec, db.BATCH, db.SEQ, prof, comm=comm, cores=2, threads=1, framework=False)
        (_, unit), = st.families(lay)
        b, u = truth[fam]
        step = pred["total_s"] + b + u * st.units(lay, L, unit) + harness[0] + harness[1] * L
        points.append({"layout": kw, "family": fam, "layers": L, "counted": True, "step_s": step, "comm": comm})
    fit = db.fit_framework(points, prof)
    for fam, (b, u) in truth.items():
        assert fit[fam]["base_s"] == pytest.approx(b, abs=1e-9) and fit[fam]["unit_s"] == pytest.approx(u, abs=1e-9)
    assert (fit["harness"]["base_s"], fit["harness"]["unit_s"]) == pytest.approx(harness, abs=1e-9)
    assert (fit["pp"]["unit"], fit["cp"]["unit"]) == ("microbatch", "hop")


def test_composed_layout_pays_both_families_and_datasheet_terms_are_named_assumed():
    h200 = load_profile("h200")
    terms, src = db.framework_terms(h200)
    assert src.startswith("ASSUMED")
    t = st.predicted_step_time(Layout(dp=2, tp=2, zero=2), "micro", 8, 64, h200, comm={})
    L = 2  # micro's layers
    expect = sum(terms[f]["base_s"] + terms[f]["unit_s"] * L for f in ("tp", "fsdp_zero2"))
    assert t["framework_s"] == pytest.approx(expect) and t["framework_source"] == src


def test_validation_verdict_follows_the_live_numbers():
    from rlm_lab.chapters.ch04_parallelism.out_of_sample import BAR, summary

    assert BAR == 0.25  # the cases below are placed around it
    rows = [{"time_rel_err": e} for e in (-0.1, 0.2, 0.3)]
    s = summary(rows)
    assert s["median_abs"] == pytest.approx(0.2) and s["worst_abs"] == pytest.approx(0.3)
    assert s["met"].startswith("undecided (3 errors")  # three errors: no 95 % interval of the median exists
    above = (0.3, -0.4, 0.5, 0.35, -0.6, 0.45)  # six errors: the exact interval is [min, max], wholly above the bar
    assert summary([{"time_rel_err": e} for e in above])["met"] == "not met"
    assert summary([{"time_rel_err": e} for e in (0.01, -0.02, 0.03, 0.02, 0.1, -0.24)])["met"] == "met"
    straddle = (0.1, 0.2, 0.22, 0.3, 0.35, -0.4)  # median 0.26 above the bar, interval [0.1, 0.4] straddles it
    assert summary([{"time_rel_err": e} for e in straddle])["met"].startswith("undecided (")
    assert summary([{"time_rel_err": 0.01}])["met"].startswith("undecided (one run")


def test_companion_calibration_refuses_to_overwrite_and_bad_profile_is_one_line(tmp_path):
    """Both refusals come before any benchmark runs: an existing companion without --force, an unknown profile
    (exit 2, one ``rlm-lab: error:`` line, no traceback)."""
    import subprocess
    import sys
    import time

    from rlm_lab.errors import RlmLabError

    out = tmp_path / "c.json"
    out.write_text("{}")
    t = time.perf_counter()
    with pytest.raises(RlmLabError, match="exists; pass --force"):
        db.write_companion("cpu-2core-epyc", out)
    assert time.perf_counter() - t < 2 and out.read_text() == "{}"
    p = subprocess.run([sys.executable, "-m", "rlm_lab.cli", "chapter", "4", "dist-benchmarks", "--profile", "no-such-profile",
                        "--out", str(tmp_path / "d.json")], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and p.stderr.startswith("rlm-lab: error: unknown hardware profile")
    assert "Traceback" not in p.stderr and not (tmp_path / "d.json").exists()
