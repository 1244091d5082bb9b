"""Fits of the calibration's cost terms: non-negative least squares, never a clamped unconstrained fit.

Every fitted term of a hardware profile (a latency, a per-byte / per-layer / per-element cost) is a
non-negative coefficient of a linear model t = sum_j c_j x_j. Fitting without the constraint and then
clamping a negative coefficient to 0 leaves the OTHER coefficients at values that were chosen to
compensate the negative one, i.e. biased; the constrained problem min ||A c - t||, c >= 0 has to be
solved as such. That is non-negative least squares (Lawson & Hanson, *Solving Least Squares Problems*,
1974, ch. 23), solved by ``scipy.optimize.nnls`` (https://docs.scipy.org/doc/scipy/reference/generated/
scipy.optimize.nnls.html). It replaced a hand-written solver of the same algorithm; the committed fits made with
that one come back to 1e-12 with scipy's (tests/cost/test_fitting.py).

Weights: timings span microseconds to seconds, so the fits minimise RELATIVE errors (each row divided
by its measured time), which makes a 5 us latency and a 50 ms transfer count alike.
"""

from __future__ import annotations

import numpy as np


def nnls(a, b, max_iter: int | None = None) -> np.ndarray:
    """argmin_x ||a x - b||_2 subject to x >= 0: ``scipy.optimize.nnls`` (Lawson-Hanson active set).

    Columns are scaled to unit norm first (a positive scaling keeps x >= 0 and makes columns such as
    [1, bytes] of very different magnitude well conditioned), then unscaled.
    """
    from scipy.optimize import nnls as _nnls

    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    norms = np.linalg.norm(a, axis=0)
    norms[norms == 0] = 1.0
    x, _ = _nnls(a / norms, b, maxiter=max_iter)
    return x / norms


def bounded_lsq(a, b, lower, upper) -> np.ndarray:
    """argmin_x ||a x - b||_2 subject to lower <= x <= upper (per column): ``scipy.optimize.lsq_linear`` with
    the bounded-variable least-squares method (Stark & Parker 1995; https://docs.scipy.org/doc/scipy/reference/
    generated/scipy.optimize.lsq_linear.html). Columns scaled to unit norm first, as :func:`nnls` does."""
    from scipy.optimize import lsq_linear

    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    lo, hi = np.asarray(lower, dtype=float), np.asarray(upper, dtype=float)
    if np.any(lo > hi) or np.any(lo < 0):
        raise ValueError("bounded_lsq: every lower bound must be >= 0 and <= its upper bound")
    norms = np.linalg.norm(a, axis=0)
    norms[norms == 0] = 1.0
    res = lsq_linear(a / norms, b, bounds=(lo * norms, hi * norms), method="bvls")
    return np.clip(res.x / norms, lo, hi)


def fit_nonneg(rows, ys, relative: bool = True) -> list[float]:
    """Coefficients c >= 0 of t = sum_j c_j x_j over measured rows ``[[x_1, ..., x_k], ...]`` and times ``ys``.

    ``relative``: minimise sum ((a c - t) / t)^2 (weights 1/t, floored at 1 % of the median time so
    that a point measured as ~0 cannot pin the fit); otherwise plain squared errors.
    """
    a, y = np.asarray(rows, dtype=float), np.asarray(ys, dtype=float)
    if a.ndim != 2 or a.shape[0] != y.shape[0] or a.shape[0] == 0:
        raise ValueError(f"fit_nonneg: {a.shape[0] if a.ndim == 2 else '?'} rows for {y.shape[0]} times")
    if relative:
        floor = max(0.01 * float(np.median(np.abs(y))), 1e-15)
        w = 1.0 / np.maximum(np.abs(y), floor)
        a, y = a * w[:, None], y * w
    return [float(c) for c in nnls(a, y)]


def fit_line(xs, ys, relative: bool = True) -> tuple[float, float]:
    """(intercept, slope), both >= 0, of t = intercept + slope * x (two or more points)."""
    c0, c1 = fit_nonneg([[1.0, float(x)] for x in xs], ys, relative)
    return c0, c1
