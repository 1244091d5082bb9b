"""The calibration's fits (fitting.py): non-negative least squares against a brute-force solver, and
synthetic points with known alpha, beta and slopes (with noise) that must come back within stated
tolerances, including cases where clamping an unconstrained fit biases the other coefficient."""

import itertools

import numpy as np
import pytest

from rlm_lab.calibrate.benchmarks import fit_collectives
from rlm_lab.cost.comm import OPS, bytes_per_rank
from rlm_lab.cost.fitting import fit_line, fit_nonneg, nnls
from rlm_lab.record import REPO_ROOT as REPO


def _brute_force_nnls(a, b):
    """Independent solver: the best unconstrained least-squares fit over every support set whose
    solution is non-negative (the NNLS optimum is one of them)."""
    n = a.shape[1]
    best = (np.linalg.norm(b), np.zeros(n))
    for k in range(1, n + 1):
        for support in itertools.combinations(range(n), k):
            z = np.zeros(n)
            z[list(support)] = np.linalg.lstsq(a[:, list(support)], b, rcond=None)[0]
            r = np.linalg.norm(a @ z - b)
            if (z >= -1e-12).all() and r < best[0]:
                best = (r, z)
    return best


def test_nnls_is_the_constrained_optimum():
    rng = np.random.default_rng(0)
    for _ in range(150):
        n = int(rng.integers(1, 5))
        m = n + int(rng.integers(1, 5))  # more rows than columns: the optimum is unique
        a = rng.normal(size=(m, n)) * 10.0 ** rng.integers(-3, 4, size=n)  # columns of unlike scales
        b = rng.normal(size=m)
        x = nnls(a, b)
        r_best, x_best = _brute_force_nnls(a, b)
        assert (x >= 0).all()
        assert np.linalg.norm(a @ x - b) <= r_best * (1 + 1e-7) + 1e-12
        np.testing.assert_allclose(x, x_best, rtol=1e-5, atol=1e-9 * np.abs(x_best).max(initial=1.0))


# the collective benchmark's message sizes (bytes per rank) and a gloo-like link
SIZES = np.array([256, 4096, 65536, 1 << 20, 8 << 20], dtype=float)
ALPHA, BETA = 20e-6, 1 / 2e9


def test_alpha_beta_come_back_from_noisy_points():
    """3 % multiplicative timing noise, 5 sizes, 30 draws: alpha within 12 %, beta within 8 % (the
    largest deviations over these draws are ~8 % and ~6 %; a fit that drops the relative weights lets
    the 8 MiB point set alpha and misses it by far more)."""
    for seed in range(30):
        rng = np.random.default_rng(seed)
        t = (ALPHA + BETA * SIZES) * (1 + 0.03 * rng.standard_normal(SIZES.size))
        alpha, beta = fit_line(SIZES, t)
        assert alpha == pytest.approx(ALPHA, rel=0.12) and beta == pytest.approx(BETA, rel=0.08), seed


def test_fit_collectives_converts_full_tensor_bytes_to_bytes_per_rank():
    """Points are keyed by the FULL tensor's bytes; alpha-beta refer to bytes per rank (comm.py)."""
    world = 2
    full = [1024, 65536, 1 << 20, 8 << 20]
    true = {op: (10e-6 * (i + 1), (i + 1) * 1e-10) for i, op in enumerate(OPS)}
    points = {op: [[nb, a + b * bytes_per_rank(op, nb, world, "gloo")] for nb in full] for op, (a, b) in true.items()}
    fits = fit_collectives(points, world, "gloo")
    for op, (a, b) in true.items():
        assert fits[op]["alpha_s"] == pytest.approx(a, rel=1e-6) and fits[op]["beta_s_per_byte"] == pytest.approx(b, rel=1e-6)


def test_log_prob_head_three_terms_come_back():
    """t = base + s_row N + s_el N V over the benchmark's shapes, 3 % noise: each term within 15 %
    (the largest deviation over these 30 draws is ~11 %)."""
    shapes = [(32, 52), (256, 52), (1024, 52), (4096, 52), (256, 1024), (1024, 512), (4096, 1024)]
    rows = np.array([[1.0, n, n * v] for n, v in shapes])
    true = np.array([50e-6, 0.2e-6, 1e-9])
    for seed in range(30):
        rng = np.random.default_rng(seed)
        t = rows @ true * (1 + 0.03 * rng.standard_normal(len(shapes)))
        np.testing.assert_allclose(fit_nonneg(rows, t), true, rtol=0.15)


def test_two_point_overhead_fit_is_not_biased_by_clamping():
    """Per-layer overhead from 1 and 8 layers. True: 1 ms base, 0 per layer. Noise made the 8-layer
    time the smaller one. The old fit clamped the negative slope to 0 and kept the intercept of the
    line through the first point (1.05 ms, +5 %); the constrained least-squares fit weighs both points:
    argmin_c ((c - 1.05)/1.05)^2 + ((c - 0.95)/0.95)^2 = (1/1.05 + 1/0.95) / (1/1.05^2 + 1/0.95^2)
    = 0.9950 ms (-0.5 %)."""
    base, slope = fit_line((1, 8), (1.05e-3, 0.95e-3))
    assert slope == 0.0
    y = np.array([1.05e-3, 0.95e-3])
    assert base == pytest.approx((1 / y).sum() / (1 / y ** 2).sum(), rel=1e-9)
    # statistically: over draws where noise makes the unconstrained slope negative, the clamped fit's
    # intercept (= the first point) errs by more on average than the constrained fit's
    rng = np.random.default_rng(1)
    err_clamped, err_nnls = [], []
    while len(err_nnls) < 150:
        t = 1e-3 * (1 + 0.05 * rng.standard_normal(2))
        if t[1] >= t[0]:
            continue
        err_clamped.append(abs(t[0] / 1e-3 - 1))
        err_nnls.append(abs(fit_line((1, 8), t)[0] / 1e-3 - 1))
    assert np.mean(err_nnls) < 0.85 * np.mean(err_clamped)


def test_clamping_is_not_the_constrained_optimum():
    """A log-prob-head fit whose unconstrained base comes out negative (smallest shape timed 50 % low):
    clamping it to 0 keeps s_row at the value that compensated the negative base; the constrained fit
    re-fits s_row, and its relative residual is strictly smaller."""
    shapes = [(32, 52), (256, 52), (1024, 52), (4096, 52), (256, 1024), (1024, 512), (4096, 1024)]
    rows = np.array([[1.0, n, n * v] for n, v in shapes])
    t = rows @ np.array([0.0, 1e-7, 1e-9])
    t[0] *= 0.5
    w = 1 / t
    unconstrained = np.linalg.lstsq(rows * w[:, None], t * w, rcond=None)[0]
    assert unconstrained[0] < 0  # the case the test is about
    clamped = np.maximum(unconstrained, 0)
    fitted = np.array(fit_nonneg(rows, t))
    assert fitted[0] == 0 and abs(fitted[1] / clamped[1] - 1) > 0.2  # s_row re-fitted, not kept
    resid = lambda c: np.linalg.norm((rows @ c - t) / t)  # noqa: E731
    assert resid(fitted) < 0.9 * resid(clamped)


# ---- the committed fits, reproduced: scipy.optimize.nnls replaced a hand-written Lawson-Hanson solver, and every
# fit below was made (and committed) with the hand-written one; the solver swap must not move them.
COMMITTED_REL = 1e-12


def _close(got: float, want: float) -> bool:
    return abs(got - want) <= COMMITTED_REL * max(abs(want), 1e-300) or (want == 0.0 and abs(got) < 1e-300)


def test_committed_trl_step_and_generate_loop_fits_reproduce():
    from rlm_lab.calibrate import step_benchmarks as SB
    from rlm_lab.record import load_record

    r = load_record(REPO / "data/runs/cpu/validation_trl_step").results
    fit = SB.fit_trl_step(r["points"])
    assert len(fit) == 3 and all(_close(fit[k], r[k]) for k in fit), (fit, r)
    r = load_record(REPO / "data/runs/cpu/validation_generate_loop").results
    base, row = fit_nonneg([[1.0, p["batch"]] for p in r["points"]], [p["residual_s"] for p in r["points"]],
                           relative=False)
    assert _close(base, r["generate_loop_base_s"]) and _close(row, r["generate_loop_row_s"]), (base, row)


def test_committed_distributed_framework_fit_reproduces():
    import json

    from rlm_lab.cost import load_profile
    from rlm_lab.parallel.bench.step_time import fit_framework

    d = json.loads((REPO / "data/hardware/distributed/cpu-2core-epyc.json").read_text())["distributed"]
    fit = fit_framework(d["framework_points"], load_profile("cpu-2core-epyc"))
    assert set(fit) == set(d["framework"]) and len(fit) >= 8
    for fam, want in d["framework"].items():
        assert _close(fit[fam]["base_s"], want["base_s"]) and _close(fit[fam]["unit_s"], want["unit_s"]), fam
