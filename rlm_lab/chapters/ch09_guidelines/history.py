"""Chapter 9's verdicts before the interval rules of issue 36, for the closing note's before/after table.

At commit e9d4dbf every interval was the percentile bootstrap of the median (a bootstrap of 3 seeds is their
range, which holds the median 75 % of the time, not 95 %), two runs a side decided, the accuracy questions read
3 campaign seeds instead of chapter 6's pre-registered 10-seed test, and chapter 7's and chapter 5's single runs
were read although the reference window ``data/runs/cpu/reference/20261204T084630Z`` replaces them. These are the
words that build printed (``R.guideline_rows`` at that commit); the book computes today's from the records.
"""

BEFORE_COMMIT = "e9d4dbf"

BEFORE = {
    "g01-one-step-off-faster": "supported", "g02-one-step-off-hides": "undecided", "g03-colocate-small": "undecided",
    "g04-generation-dominates": "undecided", "g05-lora-sync-bytes": "supported", "g06-lora-sync-time": "contradicted",
    "g07-dynamic-sampling-cost": "undecided", "g08-is-correction": "supported", "g09-staleness-accuracy": "supported",
    "g10-areal-twice": "undecided", "g11-capacity-bound": "undecided", "g12-hybrid-engine-first": "supported",
    "g13-async-throughput": "undecided", "g14-packing": "undecided", "g15-overprovision": "supported",
    "g16-tail-batching": "undecided", "g17-dispatch": "undecided", "g18-fusion": "supported",
    "g19-reshard-volume": "supported", "g20-zero3-volume": "supported", "g21-sync-negligible": "supported",
    "g22-collective-sync": "undecided", "g23-memory-fraction": "not testable here", "g24-rollout-tp": "not testable here",
    "g25-pp-bubble": "undecided",
}


def changes(rows) -> list[dict]:
    """One row per guideline whose verdict changed since :data:`BEFORE_COMMIT`: id, before, after, and why
    (the evidence's basis and interval method now)."""
    out = []
    for r in rows:
        g, ev, v = r["guideline"], r["evidence"], r["verdict"]
        before = BEFORE.get(g.id, "(new)")
        if before != v.word:
            how = ev.basis + (f", {ev.interval.label}" if ev.interval is not None else "")
            out.append({"guideline": g.id, f"before ({BEFORE_COMMIT})": before, "now": v.word, "evidence now": how})
    return out
