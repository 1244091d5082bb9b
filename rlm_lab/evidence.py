"""Evidence: intervals that hold their level, chosen by how many values there are, and verdict words that follow them.

A comparison of A against B is built from **paired ratios** A_i / B_i (each pair measured back to back, so a slow
minute of the machine slows both); a quantity repeated over seeds, runs or windows from its per-repeat values.
Its interval (:func:`repeat_interval`) is chosen by n, the number of independent values, so that a "95 %"
interval holds the estimate 95 % of the time:

* n <= 2 (:data:`DECIDE_MIN`): no interval; such a quantity decides nothing;
* 3 <= n < 10 (:data:`BOOTSTRAP_MIN`): the **mean** with its Student-t interval (``scipy.stats.t``). A percentile
  bootstrap of so few values is close to their range, which holds the median only 1 - 2^(1-n) of the time
  (75 % at n = 3, 94 % at n = 5), not 95 %;
* n >= 10: the **median** with its percentile-bootstrap interval (Efron & Tibshirani, *An Introduction to the
  Bootstrap*, 1993; ``scipy.stats.bootstrap``:
  https://docs.scipy.org/doc/scipy/reference/generated/scipy.stats.bootstrap.html).

A quantity *defined* as a median (a bar on the median |error| over cases) keeps the median at every n
(:func:`median_interval`): below 10 values its interval is the exact one of order statistics, and below 6 there
is none at 95 %.

The interval names its method (:attr:`Interval.method`), which every page and the results ledger print.
A question with a test fixed before its runs (chapter 6's exact sign-flip test) is decided by that test.

The words follow the interval, never the point alone:

* a ratio is ``faster``/``slower`` (or ``larger``/``smaller``) only when its interval excludes 1;
* a prediction ``met`` its bar only when the whole interval of its error lies inside the bar, ``not met`` only
  when the whole interval lies outside it; everything else is ``undecided``, and so is a single run;
* a goal of at least x (a speed-up of 2x) is ``met`` only when the whole interval is at or above x, ``not met``
  only when the whole interval is below it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import median
from typing import Sequence

import numpy as np

from .errors import RlmLabError

LEVEL = 0.95
RESAMPLES = 2000
SEED = 0
DECIDE_MIN = 3       # fewer values than this have no interval and decide nothing
BOOTSTRAP_MIN = 10   # a bootstrap interval only from this many values on; fewer get Student-t

STUDENT_T = "Student-t"
BOOTSTRAP = "percentile bootstrap"
NO_INTERVAL = "none"
EXACT = "exact"
STEPS = "none (steps of one run)"
ORDER_STATS = "exact order statistics"


@dataclass(frozen=True)
class Interval:
    """A point estimate with its interval; ``lo``/``hi`` are None when the values are too few to decide
    (:data:`DECIDE_MIN`). ``method``: how the interval was made (:data:`STUDENT_T`, :data:`BOOTSTRAP`,
    :data:`EXACT`, :data:`NO_INTERVAL`; empty: given by hand)."""

    estimate: float
    lo: float | None
    hi: float | None
    n: int
    method: str = ""

    @property
    def decided(self) -> bool:
        return self.lo is not None and self.hi is not None

    @property
    def label(self) -> str:
        """The interval's method and n as a page prints it (e.g. "Student-t 95 %, n = 3")."""
        if not self.decided:
            return f"no interval, n = {self.n}"
        return f"{self.method or 'interval'}{' 95 %' if self.method in (STUDENT_T, BOOTSTRAP, ORDER_STATS) else ''}, n = {self.n}"

    def text(self, fmt: str = "{:.2f}") -> str:
        if not self.decided:
            what = "one run" if self.n <= 1 else f"n = {self.n}"
            return f"{fmt.format(self.estimate)} ({what}, no interval)"
        return f"{fmt.format(self.estimate)} [{fmt.format(self.lo)}, {fmt.format(self.hi)}]"


def _finite(values: Sequence[float], what: str) -> list[float]:
    out = [float(v) for v in values]
    if not out:
        raise RlmLabError(f"{what}: no values")
    if not all(math.isfinite(v) for v in out):
        raise RlmLabError(f"{what}: a value is not a finite number ({out})")
    return out


def estimator_of(n: int) -> str:
    """The estimator :func:`repeat_interval` uses for ``n`` values: ``"median"`` or ``"mean"``."""
    return "median" if n >= BOOTSTRAP_MIN or n < DECIDE_MIN else "mean"


def repeat_interval(values: Sequence[float], level: float = LEVEL, resamples: int = RESAMPLES,
                    seed: int = SEED) -> Interval:
    """The estimate of ``values`` (independent repeats: seeds, runs, windows, paired repeats) with an interval
    chosen by n (the module docstring): none below :data:`DECIDE_MIN`, Student-t on the mean below
    :data:`BOOTSTRAP_MIN`, the percentile bootstrap of the median (deterministic: fixed seed) from there on."""
    xs = _finite(values, "repeat_interval")
    n = len(xs)
    if n < DECIDE_MIN:
        return Interval(median(xs), None, None, n, NO_INTERVAL)
    if n < BOOTSTRAP_MIN:
        return mean_interval(xs, level)
    if min(xs) == max(xs):
        return Interval(xs[0], xs[0], xs[0], n, BOOTSTRAP)
    from scipy.stats import bootstrap

    res = bootstrap((np.asarray(xs),), np.median, confidence_level=level, n_resamples=resamples,
                    method="percentile", rng=np.random.default_rng(seed))
    ci = res.confidence_interval
    return Interval(median(xs), float(ci.low), float(ci.high), n, BOOTSTRAP)


def steps_interval(steps: Sequence[float]) -> Interval:
    """The median of the steps of one run, with no interval: the steps of one process are not repeats of the
    workload (fresh processes differ far more than the steps inside one), so they decide nothing."""
    xs = _finite(steps, "steps_interval")
    return Interval(median(xs), None, None, len(xs), STEPS)


def median_interval(values: Sequence[float], level: float = LEVEL, resamples: int = RESAMPLES,
                    seed: int = SEED) -> Interval:
    """The **median** of ``values`` with an interval that holds its level, for a quantity defined as a median
    (a bar on the median |error| over cases): the percentile bootstrap from :data:`BOOTSTRAP_MIN` values on; below
    that the exact distribution-free interval of order statistics (the binomial(n, 1/2) count of values below the
    median; ``scipy.stats.quantile_test``, https://docs.scipy.org/doc/scipy/reference/generated/scipy.stats.quantile_test.html),
    which needs at least 6 values at 95 % ([min, max] of 5 holds the median only 94 % of the time): fewer have
    no interval."""
    xs = _finite(values, "median_interval")
    n = len(xs)
    if n >= BOOTSTRAP_MIN:
        iv = repeat_interval(xs, level, resamples, seed)
        return iv
    from scipy.stats import quantile_test

    if n < 2:
        return Interval(median(xs), None, None, n, NO_INTERVAL)
    ci = quantile_test(np.asarray(xs), q=median(xs), p=0.5).confidence_interval(level)
    if not (math.isfinite(ci.low) and math.isfinite(ci.high)):
        return Interval(median(xs), None, None, n, NO_INTERVAL)
    return Interval(median(xs), float(ci.low), float(ci.high), n, ORDER_STATS)


def paired_ratios(a: Sequence[float], b: Sequence[float]) -> list[float]:
    """A_i / B_i of pairs measured together; the two lists must pair one to one."""
    a, b = _finite(a, "paired_ratios (A)"), _finite(b, "paired_ratios (B)")
    if len(a) != len(b):
        raise RlmLabError(f"paired_ratios: {len(a)} repeats of A against {len(b)} of B; they must pair")
    if min(b) <= 0:
        raise RlmLabError("paired_ratios: a B value is not positive")
    return [x / y for x, y in zip(a, b)]


def ratio_interval(a: Sequence[float], b: Sequence[float], **kw) -> Interval:
    """The paired ratios A_i / B_i with their interval (:func:`repeat_interval`)."""
    return repeat_interval(paired_ratios(a, b), **kw)


def ratio_word(iv: Interval, above: str = "faster", below: str = "slower") -> str:
    """``above`` when the whole interval is above 1, ``below`` when below, else ``undecided``."""
    return _side_word(iv, 1.0, above, below)


def _side_word(iv: Interval, threshold: float, above: str, below: str) -> str:
    if not iv.decided:
        return "undecided"
    if iv.lo > threshold:
        return above
    if iv.hi < threshold:
        return below
    return "undecided"


def error_interval(predicted: float, measured: Interval) -> Interval:
    """The relative error predicted / measured - 1 at the point and at both ends of the measured interval
    (decreasing in the measurement, so the ends swap)."""
    if not (math.isfinite(predicted) and measured.estimate > 0):
        raise RlmLabError(f"error_interval: predicted {predicted}, measured {measured.estimate}")
    point = predicted / measured.estimate - 1
    if not measured.decided:
        return Interval(point, None, None, measured.n, measured.method)
    if measured.hi <= 0:
        raise RlmLabError("error_interval: the measured interval lies at or below 0")
    # a Student-t interval of a few positive values may reach 0 or below: the error is then unbounded above
    hi = predicted / measured.lo - 1 if measured.lo > 0 else math.inf
    return Interval(point, predicted / measured.hi - 1, hi, measured.n, measured.method)


def bar_word(err: Interval, bar: float) -> str:
    """``met`` when the whole error interval is within ±``bar``; ``not met`` when it lies wholly outside;
    ``undecided`` otherwise (a single run included)."""
    if not (bar > 0 and math.isfinite(bar)):
        raise RlmLabError(f"bar_word: the bar must be a positive number, not {bar}")
    if not err.decided:
        return "undecided"
    if -bar <= err.lo and err.hi <= bar:
        return "met"
    if err.lo > bar or err.hi < -bar:
        return "not met"
    return "undecided"


def mean_interval(values: Sequence[float], level: float = LEVEL) -> Interval:
    """The mean of ``values`` (e.g. one accuracy per seed) with its Student-t interval at ``level``:
    mean +- t_{(1+level)/2, n-1} s / sqrt(n) (s the sample standard deviation; ``scipy.stats.t``). Fewer than
    :data:`DECIDE_MIN` values have no interval (they decide nothing); identical values have a zero-width one."""
    xs = _finite(values, "mean_interval")
    m = sum(xs) / len(xs)
    if len(xs) < DECIDE_MIN:
        return Interval(m, None, None, len(xs), NO_INTERVAL)
    from scipy.stats import t

    s = math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1))
    half = float(t.ppf((1 + level) / 2, len(xs) - 1)) * s / math.sqrt(len(xs))
    return Interval(m, m - half, m + half, len(xs), STUDENT_T)


def paired_differences(a: Sequence[float], b: Sequence[float]) -> list[float]:
    """A_i - B_i of pairs made together (the same seed, the same problems); the lists must pair one to one."""
    a, b = _finite(a, "paired_differences (A)"), _finite(b, "paired_differences (B)")
    if len(a) != len(b):
        raise RlmLabError(f"paired_differences: {len(a)} values of A against {len(b)} of B; they must pair")
    return [x - y for x, y in zip(a, b)]


def sign_word(iv: Interval, above: str = "higher", below: str = "lower") -> str:
    """For a difference: ``above`` when the whole interval is above 0, ``below`` when below, else ``undecided``."""
    return _side_word(iv, 0.0, above, below)


def at_least_word(iv: Interval, goal: float) -> str:
    """``met`` when the whole interval is at or above ``goal``, ``not met`` when it is wholly below, else
    ``undecided`` (a single run included)."""
    if not math.isfinite(goal):
        raise RlmLabError(f"at_least_word: the goal must be a finite number, not {goal}")
    if not iv.decided:
        return "undecided"
    if iv.lo >= goal:
        return "met"
    if iv.hi < goal:
        return "not met"
    return "undecided"


def overlap(a: Interval, b: Interval) -> bool | None:
    """Whether two intervals overlap; None when either is a single run (no interval)."""
    if not (a.decided and b.decided):
        return None
    return a.lo <= b.hi and b.lo <= a.hi


def largest(intervals: dict) -> tuple:
    """Which key's interval lies wholly above every other's: ``(key, why)``; ``(None, "undecided: why")`` when an
    interval is missing (a single run) or the top estimate's interval overlaps another's. What "the fastest" or
    "the largest gain" of several settings may say: the point estimates alone never decide it."""
    if not intervals:
        return None, "undecided: nothing measured"
    top = max(intervals, key=lambda k: intervals[k].estimate)
    single = [str(k) for k, iv in intervals.items() if not iv.decided]
    if single:
        return None, f"undecided: {', '.join(single)} {'is' if len(single) == 1 else 'are'} one run, no interval"
    iv = intervals[top]
    overlap_ = [str(k) for k, o in intervals.items() if k != top and o.hi >= iv.lo]
    if overlap_:
        return None, (f"undecided: the interval of {top} ({iv.text()}) overlaps "
                      + ", ".join(f"{k} ({intervals[k].text()})" for k in intervals if str(k) in overlap_))
    return top, f"{top} ({iv.text()}), its interval above every other"


def undecided_reason(iv: Interval) -> str:
    """Why a word is ``undecided``: too few values (no interval) or an interval that straddles the test."""
    if not iv.decided:
        return "one run, no interval" if iv.n <= 1 else f"{iv.n} values, too few for an interval"
    return f"the interval {iv.text()} does not decide"
