"""The in-situ fit: the predictor is linear in the fitted terms (features read off it add up to whole
predictions), the fit recovers known factors from synthetic runs, the MoE per-expert term by hand, the
measured medians equal the tracer's own summary, and the repeat check on a hand-made pair of profiles."""

import pytest

from rlm_lab.cost import load_profile
from rlm_lab.cost.hardware import HARDWARE_DIR
from rlm_lab.cost.spec import model_spec
from rlm_lab.cost.timing import decode_step_time, forward_time
from rlm_lab.compare import OTHER, STEP
from rlm_lab.insitu import fit as F
from rlm_lab.insitu.run import BASE_PROFILE, repeat_agreement, predicted_steps
from rlm_lab.record import load_record, reference_root

BASE = HARDWARE_DIR / BASE_PROFILE
# committed traced runs used only as carriers of a workload's shape (their measured times are replaced)
CARRIERS = ("validation_nano_grpo_B32_G4_R24", "validation_mini_dapo_B64_G8_R8", "validation_micro_ppo_B32_G4_R24",
            "validation_nano-moe_dapo_B128_G16_R8", "validation_micro-moe_grpo_B64_G8_R12",
            "validation_nano_grpo_B64_G8_R10_bf16", "validation_micro_grpo_B32_G4_R10_bf16_ckpt",
            "validation_micro_grpo_B128_G16_R6")


def _recs():
    return {n: load_record(reference_root("cpu") / n) for n in CARRIERS}


# realistic magnitudes (what fits of real runs give), every group non-zero
FACTORS = {"kernels": 0.9, "kernels_bf16": 0.7, "kernels_bf16_backward": 1.3, "decode_step": 0.5, "decode_layer": 2.4, "generate_call": 1.0,
           "forward": 2.5, "forward_grad": 2.8, "backward": 2.3, "checkpoint": 1.0, "optimizer": 1.0, "trl_step": 1.1,
           "generate_loop_row_s": 0.05, "moe_expert_forward_s": 4.0, "moe_expert_backward_s": 2.0,
           "moe_expert_decode_s": 2.0, "autocast_cast_forward_param_s": 20.0, "autocast_cast_backward_param_s": 5.0,
           "autocast_cast_decode_param_s": 2.0}


def _profile_with(factors):
    base = load_profile(BASE).to_dict()
    base["overhead"] = {**base["overhead"], **F.fitted_values(base, factors)}
    base["insitu"] = {"kernel_factor": factors["kernels"], "kernel_factor_bf16": factors["kernels_bf16"],
                      "kernel_factor_bf16_backward": factors["kernels_bf16_backward"],
                      "bf16_scope": "kernels"}  # the truth: every kernel of a bf16 call (not F.BF16_SCOPE)
    return base


def test_features_add_up_to_whole_predictions():
    """fixed + sum_g factor_g x feature_g must equal the predictor run on the profile with those terms."""
    base = load_profile(BASE).to_dict()
    prof = _profile_with(FACTORS)
    for name, rec in _recs().items():
        fixed, feats = F.features(rec, base)
        direct = F._stage_seconds(rec, prof)
        for stage, t in direct.items():
            composed = fixed[stage] + sum(FACTORS[g] * feats[g][stage] for g in F.GROUPS)
            assert composed == pytest.approx(t, rel=1e-9, abs=1e-12), (name, stage)
        assert feats["moe_expert_forward_s"][STEP] > 0 if "moe" in name else feats["moe_expert_forward_s"][STEP] == 0


def _synthetic(feature_mutant=None):
    """(prepared, measured) of the carriers 'measured' as the predictor under FACTORS; ``feature_mutant``:
    groups whose features are zeroed (a fit that forgets a term)."""
    base = load_profile(BASE).to_dict()
    truth = _profile_with(FACTORS)
    recs = _recs()
    prepared, meas = [], []
    for n in sorted(recs):
        fixed, feats = F.features(recs[n], base)
        for g in feature_mutant or ():
            feats[g] = {s: 0.0 for s in feats[g]}
        prepared.append((fixed, feats))
        meas.append({s: t for s, t in F._stage_seconds(recs[n], truth).items() if t > 0})
    return prepared, meas


def _rms(prepared, meas, factors):
    import numpy as np

    a, y = F._system(prepared, meas)
    return float(np.sqrt(np.mean((a @ np.array([factors[g] for g in F.GROUPS]) - y) ** 2)))


def test_fit_recovers_known_factors_from_synthetic_runs():
    """Runs 'measured' as the predictor under known factors: the fit reproduces every fitted row exactly and
    gives back the factors of the groups the runs tell apart."""
    prepared, meas = _synthetic()
    got = F.solve(prepared, meas)
    got.pop("_unexercised")
    assert _rms(prepared, meas, got) < 1e-7
    # (kernels_bf16_backward is not told apart from the backward casts by the two bf16 carriers)
    for g in ("kernels", "kernels_bf16", "forward", "forward_grad", "backward", "trl_step",
              "moe_expert_forward_s", "decode_layer"):
        assert got[g] == pytest.approx(FACTORS[g], rel=1e-3), g


def test_fit_fails_a_wrong_feature():
    """A mutant that forgets the per-expert terms cannot fit the MoE runs exactly: the check above can fail."""
    prepared, meas = _synthetic(("moe_expert_forward_s", "moe_expert_backward_s", "moe_expert_decode_s"))
    got = F.solve(prepared, meas)
    got.pop("_unexercised")
    assert _rms(prepared, meas, got) > 1e-3


def test_expert_term_by_hand():
    """nano-moe: 2 MoE layers, 4 experts, top-2. A forward over 1 token hits 2 experts, over 2+ tokens all 4:
    the term adds 2 layers x hit x c."""
    spec = model_spec("nano-moe")
    c = 1e-3
    p0 = load_profile(BASE).to_dict()
    p1 = {**p0, "overhead": {**p0["overhead"], "moe_expert_forward_s": c, "moe_expert_decode_s": c}}
    p0, p1 = load_profile(p0), load_profile(p1)
    for batch, seq, hit in ((1, 1, 2), (1, 2, 4), (8, 16, 4)):
        d = forward_time(spec, p1, batch, seq, dtype="fp32", dtype_bytes=4) - forward_time(spec, p0, batch, seq, dtype="fp32", dtype_bytes=4)
        assert d == pytest.approx(2 * hit * c, rel=1e-9)
    d = decode_step_time(spec, 1, 10, p1, "fp32") - decode_step_time(spec, 1, 10, p0, "fp32")
    assert d == pytest.approx(2 * 2 * c, rel=1e-9)
    dense = model_spec("nano")
    assert forward_time(dense, p1, 8, 16, dtype="fp32", dtype_bytes=4) == forward_time(dense, p0, 8, 16, dtype="fp32", dtype_bytes=4)


def test_measured_equals_the_tracer_summary():
    """The medians recomputed from spans.jsonl equal what the tracer summarised when the run ended."""
    for name, rec in _recs().items():
        m = F.measured(rec)
        t = rec.results["trace"]
        for stage, st in t["stages"].items():
            assert m[OTHER if stage == "other" else stage] == pytest.approx(st["median_s"], rel=1e-12), (name, stage)
        assert m[STEP] == pytest.approx(t["step_wall_s"]["median"], rel=1e-12)


def test_repeat_agreement_by_hand():
    """Profile b = a with TRL's per-step base cost raised by delta: each workload's a / b - 1 is -delta / (s + delta),
    s the step under a."""
    a = load_profile(BASE).to_dict()
    delta = 0.004
    b = {**a, "overhead": {**a["overhead"], "trl_step_base_s": a["overhead"]["trl_step_base_s"] + delta}}
    steps = predicted_steps("cpu", a)
    rep = repeat_agreement("cpu", a, b)
    assert set(rep["per_workload"]) == set(steps)
    for n, s in steps.items():
        assert rep["per_workload"][n] == pytest.approx(-delta / (s + delta), rel=1e-9)
    assert rep["worst"] == pytest.approx(max(delta / (s + delta) for s in steps.values()))
    assert repeat_agreement("cpu", a, a)["worst"] == 0 and repeat_agreement("cpu", a, a)["met"]


def test_retained_floor_by_hand():
    """With a fitted floor every stage's predicted peak above the baseline is max(own terms, base + factor x largest)."""
    from rlm_lab.cost.peak import peak_rows, stage_peaks
    from rlm_lab.validate.traced_case import case_of, predict_case

    rec = load_record(reference_root("cpu") / "validation_micro_ppo_B32_G4_R24")
    plain = load_profile(BASE).to_dict()
    fitted = {**plain, "insitu": {"rss_retained": {"base_bytes": 30 * 2**20, "factor": 1.5}}}
    pred0, pred1 = predict_case(case_of(rec), plain), predict_case(case_of(rec), fitted)
    totals = {s: t["total"] for s, t in stage_peaks(pred0).items()}
    floor = 30 * 2**20 + 1.5 * max(totals.values())
    rows0 = {r["stage"]: r for r in peak_rows(rec, pred0, 0)}
    rows1 = {r["stage"]: r for r in peak_rows(rec, pred1, 0)}
    assert rows0 and set(rows0) == set(rows1)
    for s, r in rows1.items():
        assert rows0[s]["transient_predicted"] == totals[s]
        assert r["transient_predicted"] == pytest.approx(max(totals[s], floor))
    assert any(r["transient_predicted"] > totals[s] for s, r in rows1.items())  # the floor lifts some stage


def test_fit_retention_recovers_a_synthetic_floor():
    """Runs whose smallest stage peak sits at baseline + c0 + c1 x largest predicted stage give back c0, c1."""
    from types import SimpleNamespace

    from rlm_lab.cost.peak import stage_peaks
    from rlm_lab.validate.traced_case import case_of, predict_case

    c0, c1, base_rss = 12 * 2**20, 1.3, 500 * 2**20
    recs, baselines = {}, {}
    for name, rec in _recs().items():
        largest = max(t["total"] for t in stage_peaks(predict_case(case_of(rec), BASE), case_of(rec).checkpointing).values())
        floor = base_rss + c0 + c1 * largest
        stages = {"generate": {"peak_bytes": floor + 5 * 2**20}, "reward": {"peak_bytes": floor},
                  "actor_backward": {"peak_bytes": floor + 9 * 2**20}}
        recs[name] = SimpleNamespace(config=rec.config, results={"trace": {"stages": stages}})
        baselines[name] = base_rss
    got = F.fit_retention(recs, baselines, BASE)
    assert got["base_bytes"] == pytest.approx(c0, rel=1e-6) and got["factor"] == pytest.approx(c1, rel=1e-6)


# bf16 learned (issue 35, item 4): a bf16 call's kernels have their own factor across every kernel term, and what
# autocast costs is not absorbed into the fp32 per-call factors.
BF16 = ("validation_nano_grpo_B64_G8_R10_bf16", "validation_micro_grpo_B32_G4_R10_bf16_ckpt")


def test_bf16_factor_scales_every_kernel_of_a_bf16_call_and_none_of_an_fp32_one():
    """By hand: under ``bf16_scope: kernels`` the elementwise work, the log-prob head and the bandwidth of a bf16
    call scale with ``kernel_factor_bf16``; an fp32 call's with ``kernel_factor``; a profile without the scope
    (fitted before) keeps the common factor for them (its products and attention only at the bf16 one)."""
    from rlm_lab.cost.hardware import profile_from_dict
    from rlm_lab.cost.timing import elementwise_time

    spec = model_spec("micro")
    d = load_profile(BASE).to_dict()
    one = profile_from_dict(d | {"insitu": {"kernel_factor": 1.0, "kernel_factor_bf16": 1.0, "bf16_scope": "kernels"}})
    scoped = profile_from_dict(d | {"insitu": {"kernel_factor": 2.0, "kernel_factor_bf16": 3.0, "bf16_scope": "kernels"}})
    old = profile_from_dict(d | {"insitu": {"kernel_factor": 2.0, "kernel_factor_bf16": 3.0}})
    e1 = elementwise_time(spec, one, 4096, "forward", 2, "bf16")
    assert elementwise_time(spec, scoped, 4096, "forward", 2, "bf16") == pytest.approx(3.0 * e1, rel=1e-12)
    assert elementwise_time(spec, scoped, 4096, "forward", 4, "fp32") == pytest.approx(
        2.0 * elementwise_time(spec, one, 4096, "forward", 4, "fp32"), rel=1e-12)
    assert elementwise_time(spec, old, 4096, "forward", 2, "bf16") == pytest.approx(2.0 * e1, rel=1e-12)
    h1 = one.logprob_head_time(512, spec.head_width, "forward", 2, "bf16")
    assert scoped.logprob_head_time(512, spec.head_width, "forward", 2, "bf16") == pytest.approx(3.0 * h1, rel=1e-12)
    assert one.bandwidth("bf16") == pytest.approx(3.0 * scoped.bandwidth("bf16"), rel=1e-12)
    assert one.bandwidth("fp32") == pytest.approx(2.0 * scoped.bandwidth("fp32"), rel=1e-12)
    assert scoped.bandwidth() == scoped.bandwidth("fp32")   # no dtype: the common factor (optimizer, copies)


def test_autocast_weight_casts_by_hand():
    """P x autocast_cast_<kind>_param_s per bf16 call, nothing for fp32: a forward of micro gains exactly that."""
    from rlm_lab.cost.hardware import profile_from_dict

    spec = model_spec("micro")
    d = load_profile(BASE).to_dict()
    with_cast = profile_from_dict(d | {"overhead": {**d["overhead"], "autocast_cast_forward_param_s": 2e-9}})
    plain = profile_from_dict(d)
    for dtype, want in (("bf16", spec.params * 2e-9), ("fp32", 0.0)):
        got = forward_time(spec, with_cast, 8, 16, dtype=dtype) - forward_time(spec, plain, 8, 16, dtype=dtype)
        assert got == pytest.approx(want, rel=1e-9, abs=1e-15), dtype


def test_no_fitted_group_is_autocast_per_call_dispatch():
    """autocast's per-call dispatch keeps its microbenchmark's values: no group may scale them (the fit on main
    scaled them up to 273x to absorb a bf16 step)."""
    fitted = {k for g in F.GROUPS for k in F._keys(g)}
    assert not {k for k in fitted if k.startswith("autocast_") and not k.startswith("autocast_cast_")}


def test_bf16_is_learned_by_its_own_terms_not_absorbed_into_per_call_factors():
    """Runs 'measured' with bf16 kernels 0.4x the fp32 ones across every kernel term: the fit gives back the bf16
    factor and the fp32 per-call factors unchanged, and predicts the bf16 runs exactly."""
    truth = FACTORS | {"kernels_bf16": 0.4}
    base = load_profile(BASE).to_dict()
    prof = _profile_with(truth)
    recs = _recs()
    prepared, meas = [], []
    for n in sorted(recs):
        prepared.append(F.features(recs[n], base))
        meas.append({s: t for s, t in F._stage_seconds(recs[n], prof).items() if t > 0})
    got = F.solve(prepared, meas)
    got.pop("_unexercised"), got.pop("_at_bound")
    assert _rms(prepared, meas, got) < 1e-7
    for g in ("kernels", "kernels_bf16", "forward", "forward_grad", "backward", "decode_layer"):
        assert got[g] == pytest.approx(truth[g], rel=1e-3), g


def test_a_fit_whose_bf16_factor_reaches_products_only_cannot_learn_bf16():
    """The plausible bug: the bf16 factor scaled only the products and attention (the rest of a bf16 call at the
    fp32 factor), so the bf16 runs' elementwise, head and cache traffic are absorbed elsewhere. Fitted on runs made
    with the bf16 factor across every kernel, that feature set misfits the bf16 runs or moves an fp32 factor."""
    truth = FACTORS | {"kernels_bf16": 0.4}
    base = load_profile(BASE).to_dict()
    prof = _profile_with(truth)
    recs = _recs()
    orig = F.BF16_SCOPE
    prepared, meas = [], []
    try:
        F.BF16_SCOPE = "products"   # the mutant: dtype_factor falls back to the common factor for the rest
        for n in sorted(recs):
            prepared.append(F.features(recs[n], base))
    finally:
        F.BF16_SCOPE = orig
    for n in sorted(recs):
        meas.append({s: t for s, t in F._stage_seconds(recs[n], prof).items() if t > 0})
    got = F.solve(prepared, meas)
    got.pop("_unexercised"), got.pop("_at_bound")
    wrong = [g for g in ("kernels", "forward", "forward_grad", "backward", "decode_layer")
             if got[g] != pytest.approx(truth[g], rel=1e-2)]
    assert _rms(prepared, meas, got) > 1e-3 or wrong


def test_bf16_backward_products_have_their_own_factor():
    """By hand: kernel_factor_bf16_backward scales the bf16 backward products (dtype bf16_backward) only."""
    from rlm_lab.cost.hardware import profile_from_dict

    d = load_profile(BASE).to_dict()
    ins = {"kernel_factor": 1.0, "kernel_factor_bf16": 1.0, "bf16_scope": "kernels"}
    one = profile_from_dict(d | {"insitu": ins})
    bwd = profile_from_dict(d | {"insitu": ins | {"kernel_factor_bf16_backward": 2.5}})
    assert one.matmul_rate(1e8, "bf16_backward") == pytest.approx(2.5 * bwd.matmul_rate(1e8, "bf16_backward"))
    assert one.matmul_rate(1e8, "bf16") == bwd.matmul_rate(1e8, "bf16")
    assert one.matmul_rate(1e8, "fp32") == bwd.matmul_rate(1e8, "fp32")


def test_checkpointing_recomputes_the_actor_only_never_the_critic():
    """The Trainer enables gradient checkpointing on its own model only; PPO's critic (train/critic.py) runs no
    recompute: its update is priced the same with and without checkpointing, the actor's backward is not."""
    from rlm_lab.cost.predict import predict
    from rlm_lab.cost.workload import Workload

    rows = {ck: {r.stage: r.seconds for r in predict("micro", "ppo", Workload(gradient_checkpointing=ck), BASE).rows}
            for ck in (False, True)}
    assert rows[True]["critic_update"] == pytest.approx(rows[False]["critic_update"], rel=1e-12)
    assert rows[True]["actor_backward"] > rows[False]["actor_backward"] * 1.05
