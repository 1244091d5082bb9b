"""The evidence module: hand-derived bootstrap intervals and the verdict words that follow them."""

import pytest

from rlm_lab.errors import RlmLabError
from rlm_lab.evidence import (Interval, at_least_word, bar_word, error_interval, median_interval, overlap,
                              paired_ratios, ratio_interval, ratio_word, repeat_interval)


def test_two_values_decide_nothing():
    iv = repeat_interval([1.2, 1.8])
    assert iv.estimate == pytest.approx(1.5)
    assert not iv.decided and iv.method == "none"
    assert ratio_word(iv) == "undecided"


def test_three_to_nine_values_get_student_t_against_scipy():
    from scipy import stats

    for xs in ([3.0, 1.0, 2.0], [1.1, 1.9, 1.4, 1.6, 2.5], [0.9, 1.3, 1.1, 1.2, 1.0, 1.6, 1.4, 1.05, 1.25]):
        iv = repeat_interval(xs)
        lo, hi = stats.t.interval(0.95, len(xs) - 1, loc=stats.tmean(xs), scale=stats.sem(xs))
        assert iv.method == "Student-t" and iv.n == len(xs)
        assert iv.estimate == pytest.approx(sum(xs) / len(xs))
        assert (iv.lo, iv.hi) == pytest.approx((lo, hi))
    # three values: the t-interval is wider than their range (a bootstrap would give the range: 75 %, not 95 %)
    iv = repeat_interval([3.0, 1.0, 2.0])
    assert iv.lo < 1.0 and iv.hi > 3.0


def test_ten_or_more_values_get_the_bootstrap_of_the_median_against_scipy():
    import numpy as np
    from scipy import stats

    xs = [1.0 + 0.01 * ((7 * i) % 11) for i in range(12)]
    iv = repeat_interval(xs)
    ref = stats.bootstrap((np.asarray(xs),), np.median, confidence_level=0.95, n_resamples=2000,
                          method="percentile", rng=np.random.default_rng(0)).confidence_interval
    assert iv.method == "percentile bootstrap" and iv.estimate == pytest.approx(float(np.median(xs)))
    assert (iv.lo, iv.hi) == pytest.approx((ref.low, ref.high))


def test_student_t_holds_its_level_where_a_bootstrap_of_three_does_not():
    # coverage of the true mean 0 over normal samples of 3: the t-interval holds ~95 %, the range ~75 %
    import numpy as np

    rng = np.random.default_rng(1)
    hits_t = hits_range = 0
    trials = 2000
    for _ in range(trials):
        xs = rng.normal(0.0, 1.0, 3)
        iv = repeat_interval(list(xs))
        hits_t += iv.lo <= 0.0 <= iv.hi
        hits_range += xs.min() <= 0.0 <= xs.max()
    assert 0.93 < hits_t / trials < 0.97
    assert 0.72 < hits_range / trials < 0.78


def test_interval_narrows_with_more_repeats_and_is_deterministic():
    xs = [1.0 + 0.01 * ((7 * i) % 11) for i in range(40)]
    a, b = repeat_interval(xs), repeat_interval(xs)
    assert a == b
    assert a.lo <= a.estimate <= a.hi
    wide = repeat_interval(xs[:12])
    assert (a.hi - a.lo) < (wide.hi - wide.lo)


def test_one_run_has_no_interval_and_decides_nothing():
    iv = repeat_interval([2.0])
    assert not iv.decided and iv.text().endswith("(one run, no interval)")
    assert ratio_word(iv) == "undecided"
    assert bar_word(error_interval(2.0, iv), 0.25) == "undecided"


def test_ratio_words_follow_the_interval():
    assert ratio_word(Interval(1.3, 1.05, 1.6, 8)) == "faster"
    assert ratio_word(Interval(0.7, 0.5, 0.95, 8)) == "slower"
    assert ratio_word(Interval(1.3, 0.98, 1.6, 8)) == "undecided"  # the point alone would say faster
    assert ratio_word(Interval(1.3, 1.05, 1.6, 8), "larger", "smaller") == "larger"


def test_paired_ratios_pair_one_to_one():
    assert paired_ratios([2.0, 3.0], [1.0, 2.0]) == [2.0, 1.5]
    iv = ratio_interval([2.0, 3.0, 4.0], [1.0, 1.0, 1.0])
    assert iv.estimate == 3.0 and iv.method == "Student-t"
    with pytest.raises(RlmLabError, match="pair"):
        paired_ratios([1.0, 2.0], [1.0])
    with pytest.raises(RlmLabError, match="finite"):
        paired_ratios([float("nan")], [1.0])
    with pytest.raises(RlmLabError, match="positive"):
        paired_ratios([1.0], [0.0])


def test_error_interval_swaps_ends_and_bar_words():
    # predicted 2 against measured 2 [1.6, 2.5]: error 0 [2/2.5 - 1, 2/1.6 - 1] = [-0.2, +0.25]
    err = error_interval(2.0, Interval(2.0, 1.6, 2.5, 5))
    assert err.estimate == pytest.approx(0.0)
    assert (err.lo, err.hi) == pytest.approx((-0.2, 0.25))
    assert bar_word(err, 0.25) == "met"
    assert bar_word(err, 0.2) == "undecided"  # the point is inside, the interval is not
    far = error_interval(4.0, Interval(2.0, 1.6, 2.5, 5))  # [0.6, 1.5]: wholly above
    assert bar_word(far, 0.25) == "not met"
    low = error_interval(1.0, Interval(2.0, 1.6, 2.5, 5))  # [-0.6, -0.375]: wholly below
    assert bar_word(low, 0.25) == "not met"
    with pytest.raises(RlmLabError, match="bar"):
        bar_word(err, float("nan"))



def test_mean_interval_by_hand():
    from rlm_lab.evidence import mean_interval

    iv = mean_interval([0.5, 0.6, 0.7])
    half = 4.302652729911275 * 0.1 / 3 ** 0.5  # t_{0.975, 2} s / sqrt(n), s = 0.1
    assert iv.estimate == pytest.approx(0.6) and iv.lo == pytest.approx(0.6 - half) and iv.hi == pytest.approx(0.6 + half)
    assert not mean_interval([0.4]).decided
    assert mean_interval([0.3, 0.3, 0.3]).lo == mean_interval([0.3, 0.3, 0.3]).hi == pytest.approx(0.3)


def test_sign_word_and_paired_differences():
    from rlm_lab.evidence import Interval, paired_differences, sign_word

    assert paired_differences([3, 5], [1, 2]) == [2, 3]
    assert sign_word(Interval(0.1, 0.02, 0.2, 3)) == "higher" and sign_word(Interval(-0.1, -0.2, -0.01, 3)) == "lower"
    assert sign_word(Interval(0.1, -0.02, 0.2, 3)) == "undecided" and sign_word(Interval(0.1, None, None, 1)) == "undecided"
    with pytest.raises(RlmLabError, match="they must pair"):
        paired_differences([1], [1, 2])


def test_at_least_words_and_overlap():
    assert at_least_word(Interval(2.3, 2.0, 2.6, 6), 2.0) == "met"  # the whole interval at or above 2
    assert at_least_word(Interval(2.3, 1.9, 2.6, 6), 2.0) == "undecided"  # the point is above, the interval is not
    assert at_least_word(Interval(1.2, 1.1, 1.3, 6), 2.0) == "not met"
    assert at_least_word(Interval(3.0, None, None, 1), 2.0) == "undecided"  # one run decides nothing
    with pytest.raises(RlmLabError, match="goal"):
        at_least_word(Interval(1, 0, 2, 2), float("inf"))
    assert overlap(Interval(0.5, 0.4, 0.6, 6), Interval(0.62, 0.6, 0.7, 6))  # touching ends overlap
    assert overlap(Interval(0.5, 0.4, 0.59, 6), Interval(0.62, 0.6, 0.7, 6)) is False
    assert overlap(Interval(0.5, None, None, 1), Interval(0.62, 0.6, 0.7, 6)) is None


def test_largest_needs_an_interval_above_every_other():
    from rlm_lab.evidence import Interval, largest

    apart = {"a": Interval(2.0, 1.8, 2.2, 3), "b": Interval(1.5, 1.2, 1.7, 3), "c": Interval(1.0, 0.9, 1.1, 3)}
    assert largest(apart)[0] == "a"
    touching = dict(apart, b=Interval(1.7, 1.5, 1.8, 3))  # b's top reaches a's bottom: not decided
    key, why = largest(touching)
    assert key is None and why.startswith("undecided") and "b (1.70 [1.50, 1.80])" in why
    single = dict(apart, c=Interval(1.0, None, None, 1))  # a single run anywhere decides nothing
    assert largest(single) == (None, "undecided: c is one run, no interval")
    assert largest({})[0] is None


def test_mean_interval_of_two_decides_nothing():
    from rlm_lab.evidence import mean_interval

    iv = mean_interval([0.5, 0.7])
    assert iv.estimate == pytest.approx(0.6) and not iv.decided


def test_a_median_gets_the_exact_order_statistic_interval_against_scipy():
    import numpy as np
    from scipy import stats

    for xs in ([0.3, 0.1, 0.25, 0.2, 0.4, 0.15], [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0]):
        iv = median_interval(xs)
        ci = stats.quantile_test(np.asarray(xs), q=float(np.median(xs)), p=0.5).confidence_interval(0.95)
        assert iv.method == "exact order statistics" and iv.estimate == pytest.approx(float(np.median(xs)))
        assert (iv.lo, iv.hi) == pytest.approx((ci.low, ci.high))
    # by hand for 9: P(Binom(9, 1/2) <= 1) = 10/512 < 2.5 %, <= 2: 46/512 > 2.5 %: [x_(2), x_(8)]
    assert (median_interval(list(range(1, 10))).lo, median_interval(list(range(1, 10))).hi) == (2.0, 8.0)
    # five values: [min, max] holds the median 1 - 2/32 = 94 % of the time, under 95 %: no interval
    assert not median_interval([1.0, 2.0, 3.0, 4.0, 5.0]).decided
    assert median_interval([1.0, 2.0, 3.0, 4.0, 5.0]).estimate == 3.0
    assert median_interval([float(i) for i in range(12)]).method == "percentile bootstrap"


def test_an_interval_reaching_zero_leaves_the_error_unbounded_above():
    err = error_interval(1.5, Interval(1.33, -0.56, 3.23, 3, "Student-t"))
    assert err.hi == float("inf") and err.lo == pytest.approx(1.5 / 3.23 - 1)
    assert bar_word(err, 0.25) == "undecided"
    with pytest.raises(RlmLabError, match="at or below 0"):
        error_interval(1.5, Interval(0.5, -2.0, -0.5, 3, "Student-t"))
