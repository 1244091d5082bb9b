"""Issue 39's bars over the published validation cases: what the predictor is for, aggregated by source, beside the
no-information constant (fixed before the next validation; written out in ``data/published/README.md``).

    b = judge(outcomes)            # outcomes: rlm_lab.validate.published_predict.Outcome of the validation split
    b["gain"]["verdict"]           # the speed-ups' gain error
    format_bars(b)                 # the lines ``rlm-lab validate --published`` prints

**Gain error** (speed-ups). A speed-up's use is its gain, s - 1: predicting 1.11x as 1.00x is 100 % wrong about the
gain and only 10 % wrong about the ratio. The gain error is (predicted - 1) / (published - 1) - 1; its |value| is
what the bar reads (0 right, 1 "no gain predicted", > 1 a gain of the wrong sign or more than twice too large).

**Decisive direction** (speed-ups and shares). A ratio's direction is judged only where the published value is
decisively away from its reference (:data:`DECISIVE`): a share at least 0.05 from one half, a speed-up at least 5 %
away from 1 (above 1.05 or below 1/1.05). Beside the predictor's count stands the **no-information constant's**: a
constant prediction on one side of every reference (a speed-up of 1 + e, a share of 1/2 + e; or the other side), the
better of the two sides scored on the same cases. The predictor must beat it: the exact McNemar test (a binomial
test of the discordant cases, ``scipy.stats.binomtest``) says whether it does at 95 %.

**By source.** Cases from one page share its reading, its lengths and its hardware; they are not independent draws.
Each error bar's number is the **median of the per-source medians**, and its 95 % interval the distribution-free
order-statistic interval of a median over the sources (:func:`median_ci_exact`: the k-th smallest and largest
per-source medians, k the largest for which the binomial coverage is still >= 95 %; exact for any number of
sources, undecided when there are too few sources for any such interval: fewer than 6). The direction share's
interval is the wider of the case-level exact (Clopper-Pearson) interval and the **cluster bootstrap by source**
(sources resampled with replacement; every one of the C(2k-1, k) resamples enumerated with its multinomial weight
when k <= :data:`EXACT_SOURCES`, else :data:`RESAMPLES` seeded draws).

**Bars** (:data:`BARS`, issue 39's goals): gain median |error| <= 30 %; decisive direction >= 90 % and ahead of the
constant; step-time median |error| <= 20 %. Each is ``met`` only when its whole interval is on the bar's side,
``not met`` when wholly on the other, else ``undecided``; fewer than :data:`MIN_SOURCES` sources decide nothing.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections import Counter

import numpy as np

from .published import DIRECTION_REFERENCE

BARS = {"gain_median": 0.30, "direction": 0.90, "step_median": 0.20}   # issue 39, fixed before the next validation
# how far a published ratio must lie from its reference for its direction to be judged: an absolute distance for a
# share, a relative one (a factor) for a speed-up
DECISIVE = {"stage_share": 0.05, "speedup": 0.05}
LEVEL = 0.95
MIN_SOURCES = 3
EXACT_SOURCES = 8
RESAMPLES = 20000
SEED = 39
CONSTANT_EPS = 1e-4


def gain_error(predicted: float, published: float) -> float:
    """(predicted - 1) / (published - 1) - 1 for a speed-up (published != 1)."""
    return (predicted - 1.0) / (published - 1.0) - 1.0


def decisive(published: float, quantity: str) -> bool:
    """Is a published ratio far enough from its reference for its direction to be judged (:data:`DECISIVE`)?"""
    if quantity == "stage_share":
        return abs(published - DIRECTION_REFERENCE[quantity]) >= DECISIVE[quantity] - 1e-12
    if quantity == "speedup":
        band = 1.0 + DECISIVE[quantity]
        return published >= band - 1e-12 or published <= 1.0 / band + 1e-12
    return False


def _side(value: float, quantity: str) -> bool:
    return value > DIRECTION_REFERENCE[quantity]


def median_ci_exact(values, level: float = LEVEL) -> tuple[float | None, float | None, float]:
    """(lo, hi, coverage): the distribution-free interval of a population median from a sample, [x_(k), x_(n-k+1)]
    with the largest k whose coverage 1 - 2 P(Bin(n, 1/2) < k) is still >= ``level``; (None, None, best coverage)
    when even [min, max] falls short (n < 6 at 95 %)."""
    from scipy.stats import binom

    xs = sorted(values)
    n = len(xs)
    best = None
    for k in range(1, n // 2 + 1):
        cover = 1.0 - 2.0 * float(binom.cdf(k - 1, n, 0.5))
        if cover >= level:
            best = (xs[k - 1], xs[n - k], cover)
        else:
            break
    if best is None:
        return None, None, (1.0 - 2.0 * 0.5 ** n) if n else 0.0
    return best


def widest(values) -> list | None:
    """[min, max] of ``values`` (None when empty): the widest order-statistic interval, shown with its coverage when
    it falls short of the level."""
    return [min(values), max(values)] if values else None


def per_source(items: list[tuple[str, float]]) -> dict:
    """{source: median of its values} of (source, value) pairs."""
    by: dict = {}
    for s, v in items:
        by.setdefault(s, []).append(v)
    return {s: statistics.median(v) for s, v in sorted(by.items())}


def median_of_sources(items: list[tuple[str, float]], level: float = LEVEL) -> dict:
    """The median of per-source medians of (source, value) pairs, with its exact interval over the sources."""
    meds = per_source(items)
    if not meds:
        return {"value": None, "interval": None, "coverage": None, "sources": 0, "cases": 0, "per_source": {}}
    lo, hi, cover = median_ci_exact(list(meds.values()), level)
    return {"value": statistics.median(meds.values()), "interval": None if lo is None else [lo, hi],
            "widest": widest(list(meds.values())),
            "coverage": cover, "sources": len(meds), "cases": len(items), "per_source": meds,
            "pooled_median": statistics.median(v for _, v in items)}


def cluster_share_interval(hits: list[tuple[str, bool]], level: float = LEVEL) -> tuple[float, float]:
    """The percentile interval of the pooled share of hits when the sources are resampled with replacement (the
    cluster bootstrap); exact enumeration of every resample for up to :data:`EXACT_SOURCES` sources."""
    by: dict = {}
    for s, h in hits:
        k, n = by.get(s, (0, 0))
        by[s] = (k + bool(h), n + 1)
    clusters = list(by.values())
    m = len(clusters)
    dist: list[tuple[float, float]] = []          # (share, weight)
    if m <= EXACT_SOURCES:
        total = 0
        for combo in itertools.combinations_with_replacement(range(m), m):
            counts = Counter(combo)
            w = math.factorial(m)
            for c in counts.values():
                w //= math.factorial(c)
            k = sum(clusters[i][0] * c for i, c in counts.items())
            n = sum(clusters[i][1] * c for i, c in counts.items())
            dist.append((k / n, w))
            total += w
        dist = [(s, w / total) for s, w in dist]
    else:
        rng = np.random.default_rng(SEED)
        ks = np.array([c[0] for c in clusters])
        ns = np.array([c[1] for c in clusters])
        idx = rng.integers(0, m, size=(RESAMPLES, m))
        shares = ks[idx].sum(axis=1) / ns[idx].sum(axis=1)
        dist = [(float(s), 1.0 / RESAMPLES) for s in shares]
    dist.sort()
    a = (1.0 - level) / 2.0
    cum, lo, hi = 0.0, None, None
    for s, w in dist:
        cum += w
        if lo is None and cum >= a - 1e-12:
            lo = s
        if hi is None and cum >= 1.0 - a - 1e-12:
            hi = s
    return lo, hi if hi is not None else dist[-1][0]


def share_interval(k: int, n: int, level: float = LEVEL) -> tuple[float, float]:
    """The exact (Clopper-Pearson) interval of a share of k in n."""
    from scipy.stats import binomtest

    ci = binomtest(k, n).proportion_ci(confidence_level=level, method="exact")
    return float(ci.low), float(ci.high)


def mcnemar_exact(pred: list[bool], const: list[bool]) -> float:
    """The one-sided exact McNemar p-value that the predictor is right more often than the constant on the same
    cases (a binomial test of the discordant pairs; 1.0 when there are none)."""
    from scipy.stats import binomtest

    b = sum(p and not c for p, c in zip(pred, const))    # predictor right, constant wrong
    c = sum(c and not p for p, c in zip(pred, const))
    if b + c == 0:
        return 1.0
    return float(binomtest(b, b + c, 0.5, alternative="greater").pvalue)


def _verdict(value, interval, bar: float, sources: int, at_least: bool = False, extra: str = "") -> str:
    if value is None or sources < MIN_SOURCES:
        return f"undecided ({sources} source{'s' if sources != 1 else ''}, {MIN_SOURCES} needed)"
    if interval is None:
        return f"undecided ({value:.0%}; {sources} sources are too few for a {LEVEL:.0%} interval of a median)"
    lo, hi = interval
    if at_least:
        word, rel = ("met", ">=") if lo >= bar else ("not met", "<") if hi < bar else ("undecided", "straddles")
    else:
        word, rel = ("met", "<=") if hi <= bar else ("not met", ">") if lo > bar else ("undecided", "straddles")
    return f"{word} ({value:.0%} [{lo:.0%}, {hi:.0%}] {rel} {bar:.0%}, {sources} sources{extra})"


def judge(outcomes) -> dict:
    """Issue 39's three bars over ``outcomes`` (the validation split's :class:`Outcome` s, priced or not)."""
    priced = [o for o in outcomes if o.predicted is not None]
    # gain error of the speed-ups
    gains = [(o.case.source, abs(gain_error(o.predicted, o.case.published.value))) for o in priced
             if o.case.quantity == "speedup"]
    signed = [gain_error(o.predicted, o.case.published.value) for o in priced if o.case.quantity == "speedup"]
    g = median_of_sources(gains)
    g["under"] = sum(e < 0 for e in signed)
    g["constant"] = 1.0 if gains else None                # a speed-up of 1 predicts no gain: |gain error| 1
    g["verdict"] = _verdict(g["value"], g["interval"], BARS["gain_median"], g["sources"])
    # decisive direction, beside the constant
    ratios = [o for o in priced if o.case.quantity in DECISIVE]
    dec = [o for o in ratios if decisive(o.case.published.value, o.case.quantity)]
    right = [(o.predicted > DIRECTION_REFERENCE[o.case.quantity]) == _side(o.case.published.value, o.case.quantity)
             and o.predicted != DIRECTION_REFERENCE[o.case.quantity] for o in dec]
    above = [_side(o.case.published.value, o.case.quantity) for o in dec]
    const_side = "above" if sum(above) >= len(above) - sum(above) else "below"
    const = above if const_side == "above" else [not a for a in above]
    d = {"ratios": len(ratios), "decisive": len(dec), "right": sum(right), "constant_right": sum(const),
         "constant_side": const_side, "sources": len({o.case.source for o in dec})}
    if dec:
        d["share"] = sum(right) / len(dec)
        d["constant_share"] = sum(const) / len(dec)
        lo, hi = share_interval(sum(right), len(dec), LEVEL)
        clo, chi = cluster_share_interval([(o.case.source, r) for o, r in zip(dec, right)])
        d["interval"] = [min(lo, clo), max(hi, chi)]
        d["case_interval"], d["cluster_interval"] = [lo, hi], [clo, chi]
        d["p_beats_constant"] = mcnemar_exact(right, const)
        ahead = d["p_beats_constant"] < 1.0 - LEVEL
        d["verdict"] = _verdict(d["share"], d["interval"], BARS["direction"], d["sources"], at_least=True,
                                extra=f"; constant {sum(const)} of {len(dec)}, predictor ahead "
                                      f"{'decided' if ahead else 'undecided'} (p {d['p_beats_constant']:.2f})")
        if d["verdict"].startswith("met") and not ahead:
            d["verdict"] = "undecided" + d["verdict"][3:]
    else:
        d.update(share=None, constant_share=None, interval=None, p_beats_constant=None,
                 verdict=_verdict(None, None, BARS["direction"], 0))
    d["cases"] = [o.case.id for o in dec]
    # step times
    s = median_of_sources([(o.case.source, abs(o.error)) for o in priced if o.case.quantity == "step_time"])
    s["verdict"] = _verdict(s["value"], s["interval"], BARS["step_median"], s["sources"])
    # shares' error (no bar): reported
    sh = median_of_sources([(o.case.source, abs(o.error)) for o in priced if o.case.quantity == "stage_share"])
    return {"gain": g, "direction": d, "step": s, "share": sh}


def _pct(v) -> str:
    return "-" if v is None else f"{v:.0%}"


def _iv(x: dict) -> str:
    if x.get("interval") is None:
        w = x.get("widest")
        return "no 95 % interval" if w is None else \
            f"(no 95 % interval: [{_pct(w[0])}, {_pct(w[1])}] covers {x['coverage']:.1%})"
    return f"[{_pct(x['interval'][0])}, {_pct(x['interval'][1])}] (coverage {x['coverage']:.1%})"


def format_bars(b: dict) -> list[str]:
    """The lines ``rlm-lab validate --published`` prints for issue 39's bars."""
    g, d, s, sh = b["gain"], b["direction"], b["step"], b["share"]
    out = ["issue 39's bars (data/published/README.md): medians of per-source medians, exact intervals over sources"]
    out.append(f"  speed-up gain |error|: {_pct(g['value'])} {_iv(g)} over {g['cases']} cases from {g['sources']} "
               f"sources (pooled median {_pct(g.get('pooled_median'))}; {g.get('under', 0)} under-predicted); "
               f"constant (no gain): {_pct(g['constant'])}")
    out.append(f"    bar gain_median: {g['verdict']}")
    if d["decisive"]:
        out.append(f"  decisive direction: {d['right']} of {d['decisive']} = {_pct(d['share'])} "
                   f"[{_pct(d['interval'][0])}, {_pct(d['interval'][1])}] (wider of exact by case "
                   f"[{_pct(d['case_interval'][0])}, {_pct(d['case_interval'][1])}] and cluster bootstrap by source "
                   f"[{_pct(d['cluster_interval'][0])}, {_pct(d['cluster_interval'][1])}]); of {d['ratios']} ratios "
                   f"{d['ratios'] - d['decisive']} lie within the band and are not judged")
        out.append(f"    constant ({d['constant_side']} every reference): {d['constant_right']} of {d['decisive']} = "
                   f"{_pct(d['constant_share'])}; predictor beats it: exact McNemar p = {d['p_beats_constant']:.2f}")
    out.append(f"    bar direction: {d['verdict']}")
    out.append(f"  step time |error|: {_pct(s['value'])} {_iv(s)} over {s['cases']} cases from {s['sources']} sources "
               f"(pooled median {_pct(s.get('pooled_median'))})")
    out.append(f"    bar step_median: {s['verdict']}")
    out.append(f"  share |error| (no bar): {_pct(sh['value'])} {_iv(sh)} over {sh['cases']} cases from "
               f"{sh['sources']} sources")
    return out
