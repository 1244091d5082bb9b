"""Chapter 9's verdicts: each guideline judged from its measured interval and its prediction at scale.

The rule, fixed before any verdict was computed (tests/chapters/test_ch09_compare.py checks every branch):

1. no measurement here is possible -> **not testable here** (with why);
2. the interval does not decide (one run, or only the steps of one run: see :mod:`.run`) -> **undecided**;
3. the interval decides against the claim (wholly on the wrong side of its threshold, or wholly outside its bar)
   -> **contradicted**, whatever the prediction at scale says (it is reported beside it);
4. the interval straddles the threshold or the bar -> **undecided**;
5. the interval decides for the claim -> **supported**, unless the predictor says the claim fails at one of the
   device counts it is predicted at: then **undecided** (supported on 2 CPU cores, predicted to fail at scale).

A test's words on an interval (:func:`interval_word`): ``above x`` is for the claim when the whole interval lies
above x and against it when the whole interval lies at or below x; ``below x`` mirrors it; ``within bar of
target`` is :func:`rlm_lab.evidence.bar_word` on the relative error (measured / target - 1): met is for, not met
against. A prediction is a point and is judged by the same conditions (:func:`holds`).
"""

from __future__ import annotations

from dataclasses import dataclass

from ...errors import RlmLabError
from ...evidence import Interval, bar_word
from . import run
from .cases import Check

VERDICTS = ("supported", "contradicted", "undecided", "not testable here")


def interval_word(test: Check, iv: Interval, target: float | None = None) -> str:
    """``for``, ``against`` or ``undecided``: what ``iv`` says of ``test`` (``target``: a within-test's target,
    resolved to a number)."""
    if not iv.decided:
        return "undecided"
    if test.kind == "above":
        return "for" if iv.lo > test.value else "against" if iv.hi <= test.value else "undecided"
    if test.kind == "below":
        return "for" if iv.hi < test.value else "against" if iv.lo >= test.value else "undecided"
    if test.kind == "within":
        if target is None or not target > 0:
            raise RlmLabError(f"a within-test needs a positive target, got {target!r}")
        err = Interval(iv.estimate / target - 1, iv.lo / target - 1, iv.hi / target - 1, iv.n)
        return {"met": "for", "not met": "against"}.get(bar_word(err, test.value), "undecided")
    raise RlmLabError(f"unknown test kind {test.kind!r}")


def holds(test: Check, value: float) -> bool:
    """Whether a predicted point meets the claim's condition."""
    if test.kind == "above":
        return value > test.value
    if test.kind == "below":
        return value < test.value
    if test.kind == "within":
        return abs(value / float(test.target) - 1) <= test.value
    raise RlmLabError(f"unknown test kind {test.kind!r}")


def check_text(test: Check | None, target: float | None = None) -> str:
    """The test in words (the target resolved to a number when it came from a record)."""
    if test is None:
        return "-"
    if test.kind in ("above", "below"):
        return f"{test.kind} {test.value:g}"
    t = target if target is not None else test.target
    return f"within {test.value:.0%} of {t:.4g}" if isinstance(t, (int, float)) else f"within {test.value:.0%} of {t}"


@dataclass(frozen=True)
class Verdict:
    word: str              # one of VERDICTS
    why: str
    measured: str          # for | against | undecided | - (what the interval alone says)
    failing_at: tuple = ()  # device counts where the prediction fails the claim


def verdict(ev, test: Check | None, target: float | None, points, conditions: dict) -> Verdict:
    """The rule of the module docstring. ``ev``: a :class:`.run.Evidence`; ``points``: :class:`.run.Point` s;
    ``conditions``: devices -> :class:`Check` the prediction must meet."""
    priced = [(p.devices, holds(conditions[p.devices], p.value)) for p in points
              if p.value is not None and p.devices in conditions]
    failing = tuple(n for n, ok in priced if not ok)
    scale = (f"predicted to fail at {', '.join(map(str, failing))} GPUs" if failing else
             f"predicted to hold at {', '.join(str(n) for n, _ in priced)} GPUs" if priced else
             "no prediction at scale")
    if ev.interval is None or test is None:
        return Verdict("not testable here", f"{ev.note} ({scale})", "-", failing)
    if not ev.decides:
        why = ev.note or f"{ev.basis}: the interval does not decide"
        return Verdict("undecided", f"{why}; {scale}", "undecided", failing)
    m = ev.decision if ev.decision is not None else interval_word(test, ev.interval, target)
    if ev.decision is not None:
        if m == "for" and not failing:
            return Verdict("supported", f"{ev.note}: it decides for the claim; {scale}", m, failing)
        return Verdict("undecided", f"{ev.note}: {'it decides nothing' if m != 'for' else 'supported here, but'}; "
                       f"{scale}", m, failing)
    if m == "against":
        return Verdict("contradicted", f"the interval ({ev.basis}) lies wholly against the claim; {scale}", m, failing)
    if m == "undecided":
        return Verdict("undecided", f"the interval ({ev.basis}) straddles the test; {scale}", m, failing)
    if failing:
        return Verdict("undecided", f"supported here ({ev.basis}), but {scale}", m, failing)
    return Verdict("supported", f"the interval ({ev.basis}) lies wholly for the claim; {scale}", m, failing)


def judge(g, root=None) -> dict:
    """Everything chapter 9 shows of one guideline: its evidence, the resolved target, the predictions at scale
    and the verdict (a row of the guideline table)."""
    root = run.records_root() if root is None else root
    ev = run.evidence(g, root)
    target, target_sources = (None, ())
    if g.test is not None and g.test.kind == "within" and g.test.target == "window":
        _, src, target = run.window_values(g.evidence["reference"], g.evidence["stat"], root)
        target_sources = (src,)
    elif g.test is not None and g.test.kind == "within":
        target, target_sources = run.target_value(g.test.target, root)
    points = run.predict_at_scale(g)
    v = verdict(ev, g.test, target, points, g.holds)
    return {"guideline": g, "evidence": ev, "target": target, "target_sources": target_sources, "points": points,
            "verdict": v}
