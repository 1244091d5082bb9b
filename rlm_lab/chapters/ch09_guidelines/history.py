"""Chapter 9's verdicts before the interval rules of issue 36, for the closing note's before/after table.

At commit e9d4dbf every interval was the percentile bootstrap of the median (a bootstrap of 3 seeds is their
range, which holds the median 75 % of the time, not 95 %), two runs a side decided, the accuracy questions read
3 campaign seeds instead of chapter 6's pre-registered 10-seed test, and chapter 7's and chapter 5's single runs
were read although the reference window ``data/runs/cpu/reference/20261204T084630Z`` replaces them. These are the
words and the evidence that build printed: ``R.guideline_rows`` run at that commit, in a worktree of it, on its own
committed records (the rules cannot be re-run from this checkout: they are gone). The book computes today's words
from the records; :func:`changes` and :func:`count_rows` set the two side by side.
"""

from collections import Counter
from html import escape

from .compare import VERDICTS
from .report import interval_text, record_folders

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

# the evidence each word rested on at BEFORE_COMMIT (interval_text of that build) and the record folders it read
_BOOT = "percentile bootstrap of the median"
BEFORE_EVIDENCE = {
    "g01-one-step-off-faster": (f"1.6 [1.57, 1.83] (seeds, {_BOOT}, n = 3)", "ch06_*_tis_seed0-2"),
    "g02-one-step-off-hides": (f"0.792 [0.78, 0.834] (seeds, {_BOOT}, n = 3)", "ch06_one_step_off_tis_seed0-2"),
    "g03-colocate-small": ("1.48 (one run each, no interval)", "ch05_disaggregated, ch05_colocated"),
    "g04-generation-dominates": (f"0.553 [0.463, 0.632] (seeds, {_BOOT}, n = 3)", "ch06_sync_tis_seed0-2"),
    "g05-lora-sync-bytes": ("41.7 (exact count)", "ch05_disaggregated, ch05_disaggregated_lora"),
    "g06-lora-sync-time": (f"2.23 [1.73, 3.05] (runs, {_BOOT}, n = 2)",
                           "ch05_disaggregated, ch05_accuracy_full, ch05_disaggregated_lora, ch05_accuracy_lora"),
    "g07-dynamic-sampling-cost": ("1.19 (one run, no interval)", "ch07_dynamic_sampling"),
    "g08-is-correction": (f"0.106 [0.06, 0.354] (seeds, {_BOOT}, n = 3)", "ch06_eta8_{tis,none}_seed0-2"),
    "g09-staleness-accuracy": (f"-0.162 [-0.3, -0.014] (seeds, {_BOOT}, n = 3)", "ch06_{eta8,sync}_none_seed0-2"),
    "g10-areal-twice": (f"1.49 [1.12, 1.65] (seeds, {_BOOT}, n = 3)", "ch06_{sync,eta4}_tis_seed0-2"),
    "g11-capacity-bound": (f"1.03 [0.98, 1.19] (seeds, {_BOOT}, n = 3)", "ch06_{eta8,async}_tis_seed0-2"),
    "g12-hybrid-engine-first": (f"1.26 [1.04, 2] (seeds, {_BOOT}, n = 3)", "ch06_{trl_reference,sync_tis}_seed0-2"),
    "g13-async-throughput": (f"1.22 [0.748, 1.46] (seeds, {_BOOT}, n = 3)",
                             "ch06_{async_tis,trl_reference}_seed0-2"),
    "g14-packing": (f"1.26 [0.921, 1.89] (paired repeats, {_BOOT}, n = 5)", "ch07_packing"),
    "g15-overprovision": (f"2.27 [1.06, 2.86] (paired repeats, {_BOOT}, n = 10)", "ch07_overprovision"),
    "g16-tail-batching": (f"2.34 [0.27, 2.77] (paired repeats, {_BOOT}, n = 5)", "ch07_tail_batching"),
    "g17-dispatch": (f"0.988 [0.256, 1.94] (paired repeats, {_BOOT}, n = 5)", "ch07_dispatch"),
    "g18-fusion": (f"5.65 [2.36, 10.3] (paired repeats, {_BOOT}, n = 5)", "ch07_fusion"),
    "g19-reshard-volume": ("1 (exact count)", "ch05_hybrid_reshard"),
    "g20-zero3-volume": ("1.5 (exact count)", "ch04_dp2-zero3, ch04_dp2"),
    "g21-sync-negligible": (f"0.00746 [0.00677, 0.00871] (seeds, {_BOOT}, n = 3)", "ch06_sync_tis_seed0-2"),
    "g22-collective-sync": ("2.34 (one run each, no interval)", "ch05_disaggregated_object_store, ch05_disaggregated"),
    "g23-memory-fraction": ("no measurement", ""),
    "g24-rollout-tp": ("no measurement", ""),
    "g25-pp-bubble": ("0.224 (one run, no interval)", "ch04_e2_pp2-1f1b-m16-micro"),
}


def reason(ev) -> str:
    """Why a guideline's word moved, from the evidence it rests on now: a replaced record no longer read as current,
    the reference window read in its place, chapter 6's pre-registered test, or the interval's method (Student-t
    over a few repeats in place of the bootstrap of their range)."""
    iv = ev.interval
    n = "" if iv is None else f"n = {iv.n}"
    if ev.basis == "superseded":
        return (f"its record is replaced by a reference window that did not re-measure the quantity: not current"
                + (f"; and {n} decides nothing" if iv is not None and iv.n <= 2 else ""))
    if any("/reference/" in s for s in ev.sources):
        return f"reads the reference window that replaced its single runs ({n} {ev.basis}, {iv.method})"
    if ev.basis == "pre-registered test":
        return "chapter 6's pre-registered sign-flip test decides (one verdict per question)"
    if iv is not None and iv.method:
        return f"{iv.method} over {n} {ev.basis} in place of a bootstrap of {iv.n} values (their range)"
    return ev.basis


def changes(rows) -> list[dict]:
    """One row per guideline of :data:`BEFORE` whose verdict changed since :data:`BEFORE_COMMIT`: id, the word and
    evidence then, the word and evidence now, and why it moved (:func:`reason`). Guidelines added since are not
    rows (:func:`count_rows` counts them)."""
    out = []
    for r in rows:
        g, ev, v = r["guideline"], r["evidence"], r["verdict"]
        if g.id in BEFORE and BEFORE[g.id] != v.word:
            then, read = BEFORE_EVIDENCE[g.id]
            now = ", ".join(record_folders(ev.sources))
            out.append({"guideline": g.id, f"before ({BEFORE_COMMIT})": BEFORE[g.id], "evidence then": then,
                        "read then": read, "now": v.word, "evidence now": interval_text(ev), "read now": now,
                        "why": reason(ev)})
    return out


def count_rows(rows) -> list[dict]:
    """Verdict word x count: at :data:`BEFORE_COMMIT` (its guidelines), now on the same guidelines, and now on every
    guideline of the registry (those added since included)."""
    then = Counter(BEFORE.values())
    same = Counter(r["verdict"].word for r in rows if r["guideline"].id in BEFORE)
    every = Counter(r["verdict"].word for r in rows)
    out = [{"verdict": w, f"before ({BEFORE_COMMIT}, {len(BEFORE)} guidelines)": then.get(w, 0),
            f"now, the same {sum(same.values())}": same.get(w, 0), f"now, all {len(rows)}": every.get(w, 0)}
           for w in VERDICTS]
    return out


def changes_html(changed: list[dict]) -> str:
    """:func:`changes` as a four-column table that fits a 1280 px page: the guideline, the word then and now, the
    evidence then and now (with the folders read), and why it moved."""
    head = "<tr><th>guideline</th><th>verdict then → now</th><th>evidence then → now</th><th>why</th></tr>"
    then = f"before ({BEFORE_COMMIT})"
    body = "".join(
        f"<tr><td><b>{escape(c['guideline'])}</b></td><td>{escape(c[then])} → <b>{escape(c['now'])}</b></td>"
        f"<td><small>{escape(c['evidence then'])}; read {escape(c['read then'] or '-')}<br>→ "
        f"{escape(c['evidence now'])}; read {escape(c['read now'] or '-')}</small></td>"
        f"<td><small>{escape(c['why'])}</small></td></tr>" for c in changed)
    return f'<table class="rlm-history">{head}{body}</table>'
