"""The evidence module: hand-derived bootstrap intervals and the verdict words that follow them."""

import pytest

from rlm_lab.errors import RlmLabError
from rlm_lab.evidence import (Interval, at_least_word, bar_word, error_interval, median_interval, overlap,
                              paired_ratios, ratio_interval, ratio_word)


def test_two_values_span_their_own_range():
    # resampled medians of [a, b] are a, (a+b)/2, b with probabilities 1/4, 1/2, 1/4: the 2.5 and 97.5
    # percentiles are a and b
    iv = median_interval([1.2, 1.8])
    assert iv.estimate == pytest.approx(1.5)
    assert (iv.lo, iv.hi) == pytest.approx((1.2, 1.8))


def test_three_values():
    # P(resampled median = 1) = P(at least two 1s) = 7/27 > 2.5 %, likewise for 3: the interval is [1, 3]
    iv = median_interval([3.0, 1.0, 2.0])
    assert iv.estimate == 2.0 and (iv.lo, iv.hi) == (1.0, 3.0)


def test_interval_narrows_with_more_repeats_and_is_deterministic():
    xs = [1.0 + 0.01 * ((7 * i) % 11) for i in range(40)]
    a, b = median_interval(xs), median_interval(xs)
    assert a == b
    assert a.lo <= a.estimate <= a.hi
    wide = median_interval(xs[:6])
    assert (a.hi - a.lo) < (wide.hi - wide.lo)


def test_one_run_has_no_interval_and_decides_nothing():
    iv = median_interval([2.0])
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
    assert iv.estimate == 3.0
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
    assert mean_interval([0.3, 0.3]).lo == mean_interval([0.3, 0.3]).hi == pytest.approx(0.3)


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
