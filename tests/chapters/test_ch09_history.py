"""Chapter 9's before/after table (``ch09_guidelines.history``): the words then are kept with the evidence they
rested on; a word that moved is a row with its reason, one that did not is none; the counts add up; and the words
now are the ledger's (the page glues both)."""

from types import SimpleNamespace as NS

import pytest

from rlm_lab import ledger as L
from rlm_lab.chapters.ch09_guidelines import history as H
from rlm_lab.chapters.ch09_guidelines import report as R
from rlm_lab.chapters.ch09_guidelines.compare import VERDICTS
from rlm_lab.evidence import Interval


def row(gid, word, basis="seeds", iv=None, sources=()):
    ev = NS(basis=basis, interval=iv, sources=list(sources), note="")
    return {"guideline": NS(id=gid), "evidence": ev, "verdict": NS(word=word)}


def test_every_word_then_has_its_evidence():
    assert set(H.BEFORE) == set(H.BEFORE_EVIDENCE)
    assert set(H.BEFORE.values()) <= set(VERDICTS)


def test_a_moved_word_is_a_row_with_its_reason_and_a_kept_or_new_one_is_not():
    t = Interval(1.43, 0.19, 2.68, 3, "Student-t")
    rows = [row("g12-hybrid-engine-first", "undecided", iv=t),             # was supported
            row("g01-one-step-off-faster", "supported", iv=t),             # kept
            row("g99-new", "supported", iv=t),                             # added since: no word then
            row("g18-fusion", "contradicted", "paired repeats", Interval(0.66, 0.51, 0.82, 4, "Student-t"),
                ["data/runs/cpu/reference/20261204T084630Z"])]
    got = {c["guideline"]: c for c in H.changes(rows)}
    assert set(got) == {"g12-hybrid-engine-first", "g18-fusion"}
    g12 = got["g12-hybrid-engine-first"]
    assert g12[f"before ({H.BEFORE_COMMIT})"] == "supported" and g12["now"] == "undecided"
    assert "Student-t" in g12["why"] and "n = 3" in g12["why"] and "bootstrap" in g12["evidence then"]
    assert "reference window" in got["g18-fusion"]["why"] and got["g18-fusion"]["read now"].startswith("reference/")
    html = H.changes_html(list(got.values()))
    assert html.count("<tr>") == 3 and "supported → <b>undecided</b>" in html


def test_counts_add_up_then_and_now():
    rows = [row(g, "undecided") for g in H.BEFORE] + [row("g99-new", "not testable here")]
    c = {r["verdict"]: list(r.values())[1:] for r in H.count_rows(rows)}
    assert set(c) == set(VERDICTS)
    assert sum(v[0] for v in c.values()) == len(H.BEFORE)
    assert c["undecided"][1:] == [len(H.BEFORE), len(H.BEFORE)] and c["not testable here"][2] == 1


@pytest.mark.slow
def test_the_words_now_are_the_ledgers():
    rows = R.guideline_rows()
    d = L.by_id(L.build("cpu"))
    assert all(d[f"ch09.{r['guideline'].id}"].verdict == r["verdict"].word for r in rows)
    moved = {c["guideline"] for c in H.changes(rows)}
    assert moved == {g for g, w in H.BEFORE.items() if d[f"ch09.{g}"].verdict != w}
