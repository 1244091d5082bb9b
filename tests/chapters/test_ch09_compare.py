"""Chapter 9's verdict rule on hand-built intervals: every branch, and the edges where a bug would flip a word."""

import pytest

from rlm_lab.chapters.ch09_guidelines.cases import Check
from rlm_lab.chapters.ch09_guidelines.compare import check_text, holds, interval_word, verdict
from rlm_lab.chapters.ch09_guidelines.run import Evidence, Point
from rlm_lab.errors import RlmLabError
from rlm_lab.evidence import Interval

ABOVE1 = Check("above", 1.0)
BELOW0 = Check("below", 0.0)
WITHIN = Check("within", 0.25, 2.0)


@pytest.mark.parametrize("iv, word", [
    (Interval(1.5, 1.1, 1.9, 3), "for"),          # wholly above 1
    (Interval(1.1, 0.9, 1.3, 3), "undecided"),    # straddles 1
    (Interval(0.8, 0.7, 0.95, 3), "against"),     # wholly below
    (Interval(1.0, 1.0, 1.0, 1), "against"),      # an exact count equal to the threshold is not above it
    (Interval(1.5, None, None, 1), "undecided"),  # one run: no interval
])
def test_above(iv, word):
    assert interval_word(ABOVE1, iv) == word


@pytest.mark.parametrize("iv, word", [
    (Interval(-0.1, -0.2, -0.01, 3), "for"), (Interval(0.0, -0.1, 0.1, 3), "undecided"),
    (Interval(0.1, 0.0, 0.2, 3), "against"),     # lo = 0 is not below 0
])
def test_below(iv, word):
    assert interval_word(BELOW0, iv) == word


@pytest.mark.parametrize("iv, word", [
    (Interval(2.0, 1.6, 2.4, 5), "for"),          # error [-20 %, +20 %] inside the 25 % bar
    (Interval(2.0, 1.4, 2.4, 5), "undecided"),    # -30 % at the low end: reaches outside
    (Interval(1.2, 1.0, 1.4, 5), "against"),      # error [-50 %, -30 %]: wholly outside
    (Interval(3.0, 2.6, 3.2, 5), "against"),      # [+30 %, +60 %]
])
def test_within_is_the_bar_on_the_relative_error(iv, word):
    assert interval_word(WITHIN, iv, 2.0) == word


def test_within_needs_a_positive_target():
    with pytest.raises(RlmLabError, match="positive target"):
        interval_word(WITHIN, Interval(1, 0.9, 1.1, 3), 0.0)


def test_holds_on_points():
    assert holds(ABOVE1, 1.01) and not holds(ABOVE1, 1.0)
    assert holds(Check("within", 0.25, 1.5), 1.8) and not holds(Check("within", 0.25, 1.5), 1.9)
    assert check_text(WITHIN, 2.0) == "within 25% of 2" and check_text(None) == "-"


def _ev(iv, basis="seeds", note=""):
    return Evidence(iv, basis, note=note)


COND = {8: ABOVE1, 64: ABOVE1, 512: ABOVE1}


def _pts(*values):
    return [Point(n, v) for n, v in zip((8, 64, 512), values)]


def test_supported_needs_the_interval_and_the_scale():
    v = verdict(_ev(Interval(1.5, 1.2, 1.8, 3)), ABOVE1, None, _pts(1.2, 1.1, 1.05), COND)
    assert v.word == "supported" and v.failing_at == ()
    v = verdict(_ev(Interval(1.5, 1.2, 1.8, 3)), ABOVE1, None, _pts(1.2, 1.1, 0.9), COND)
    assert v.word == "undecided" and v.failing_at == (512,) and "fail at 512" in v.why
    # no prediction at scale: the measurement alone decides
    assert verdict(_ev(Interval(1.5, 1.2, 1.8, 3)), ABOVE1, None, [], {}).word == "supported"
    # a point the predictor could not price neither supports nor fails
    assert verdict(_ev(Interval(1.5, 1.2, 1.8, 3)), ABOVE1, None, [Point(8, None, "does not fit")], COND).word \
        == "supported"


def test_contradicted_whatever_the_prediction_says():
    v = verdict(_ev(Interval(0.8, 0.7, 0.9, 3)), ABOVE1, None, _pts(2, 2, 2), COND)
    assert v.word == "contradicted" and "wholly against" in v.why


def test_straddling_and_single_runs_are_undecided():
    assert verdict(_ev(Interval(1.1, 0.9, 1.3, 3)), ABOVE1, None, [], {}).word == "undecided"
    # the steps of one run have an interval, but it is not a repeat across runs: it does not decide
    v = verdict(_ev(Interval(1.5, 1.4, 1.6, 39), basis="steps of one run"), ABOVE1, None, [], {})
    assert v.word == "undecided"
    v = verdict(_ev(Interval(3.0, None, None, 1), basis="one run each", note="1 and 1 completed run(s)"),
                ABOVE1, None, [], {})
    assert v.word == "undecided" and v.why.startswith("1 and 1 completed run(s)")


def test_not_testable_here_says_why():
    v = verdict(Evidence(None, "not testable here", note="no vLLM here"), None, None, _pts(2, 2, 2), COND)
    assert v.word == "not testable here" and v.why.startswith("no vLLM here")


def test_an_exact_count_decides():
    v = verdict(_ev(Interval(1.5, 1.5, 1.5, 1), basis="exact count"), Check("within", 0.001, 1.5), 1.5, [], {})
    assert v.word == "supported"
    v = verdict(_ev(Interval(1.5, 1.5, 1.5, 1), basis="exact count"), Check("within", 0.001, 3.0), 3.0, [], {})
    assert v.word == "contradicted"
