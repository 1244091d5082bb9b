"""The results ledger (``rlm_lab.ledger``, ``rlm-lab results``): one value per quantity id, nothing current read
from a record a newer one replaces, and no interval over fewer than 10 values labelled a bootstrap. The ledger is
built from the committed records; the replaced records are found again here from the windows' configs (no ledger
code), and one entry is recomputed by hand from its record."""

import json
import statistics
from pathlib import Path

import pytest

from rlm_lab import ledger as L
from rlm_lab.errors import RlmLabError

ROOT = Path(__file__).resolve().parents[1]
CPU = ROOT / "data" / "runs" / "cpu"


@pytest.fixture(scope="module")
def entries():
    return L.build("cpu")


def replaced_by_hand() -> set:
    """Every folder a completed committed window declares it replaces, read from the window records directly."""
    out = set()
    for rec in sorted((CPU / "reference").glob("*/record.json")):
        d = json.loads(rec.read_text())
        if d.get("status") != "completed":
            continue
        done = {r["name"] for r in d["results"].get("references", [])}
        for ref in d["config"].get("references", []):
            if ref["name"] in done:
                out.update(ref.get("replaces", []))
    return out


def test_every_chapter_with_records_has_entries(entries):
    assert len(entries) >= 150
    chapters = {e.chapter for e in entries}
    assert set(range(1, 11)) <= chapters   # chapters 1 to 10
    assert all(e.estimator in L.ESTIMATORS for e in entries), {e.estimator for e in entries} - set(L.ESTIMATORS)


def test_one_value_per_quantity_id(entries):
    ids = [e.id for e in entries]
    assert len(ids) == len(set(ids))


def test_two_values_for_one_id_is_an_error(monkeypatch):
    a = L.Entry("chX.q", 1, "q", "s", "one run", 1.0)
    monkeypatch.setattr(L, "_runs", lambda size, repo, replaced: [a, L.Entry("chX.q", 1, "q", "s", "one run", 2.0)])
    with pytest.raises(RlmLabError, match="chX.q has two entries"):
        L.build("cpu")


def test_no_current_value_reads_a_replaced_record(entries):
    replaced = replaced_by_hand()
    assert "ch07_fusion" in replaced and "ch05_colocated" in replaced   # the window 20261204T084630Z's own words

    def is_replaced(src: str) -> bool:
        parts = Path(src).parts
        rest = parts[3:] if parts[:2] == ("data", "runs") else parts
        return any("/".join(rest[:k]) in replaced for k in range(1, len(rest) + 1))

    # a window re-measures times: a counted quantity (bytes on the wire) or a formula's prediction read from a
    # folder whose times it replaced is unchanged by it
    bad = [(e.id, s) for e in entries if e.current and e.estimator not in ("exact count", "prediction")
           for s in e.records if is_replaced(s)]
    assert not bad
    old = [e for e in entries if not e.current]
    assert old and all(e.superseded_by for e in old)
    # the colocated run the issue found with three numbers: one current value, from the window; the single run
    # is kept as history beside it
    cur = next(e for e in entries if e.id == "ch05.colocated.measured")
    assert cur.current and cur.records == ("data/runs/cpu/reference/20261204T084630Z",)
    assert not next(e for e in entries if e.id == "ch05.colocated.measured.history").current


def test_no_bootstrap_over_fewer_than_ten_values(entries):
    assert not L.bootstrap_under(entries)
    assert L.bootstrap_under([L.Entry("x", 1, "x", "", "repeats", 1.0, 0.9, 1.1, "percentile bootstrap", 3)])
    # n <= 2 never has an interval
    assert all(e.lo is None for e in entries if e.n <= 2 and e.method != "exact")


def test_the_window_fusion_ratio_by_hand(entries):
    d = json.loads((CPU / "reference" / "20261204T084630Z" / "record.json").read_text())
    vals = next(r for r in d["results"]["references"] if r["name"] == "fusion")["summary"]["values"]
    ratios = [a / b for a, b in zip(vals["fused"], vals["after"])]
    e = next(e for e in entries if e.id == "ch07.window.fusion.ratio")
    assert len(ratios) < 10 and e.method == "Student-t" and e.n == len(ratios)
    assert e.value == pytest.approx(statistics.fmean(ratios)) and e.verdict == "slower"   # fused is slower


def test_cli_prints_json(capsys):
    from rlm_lab.cli import main

    assert main(["results", "--json", "--chapter", "7"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got and all(e["chapter"] == 7 and {"estimator", "method", "n", "records", "current"} <= set(e) for e in got)


def test_the_results_figure_reads_current_entries_only(entries):
    from rlm_lab.chapters.ch09_guidelines.cases import ITEMS

    pts = L.predicted_measured(entries, ITEMS)
    d = L.by_id(entries)
    assert pts and all(d[f"ch{int(next(i for i in ITEMS if i.key == p['label']).chapter[2:4]):02d}.{p['label']}"
                         ".measured"].current for p in pts)
    assert "sync_collective" not in {p["label"] for p in pts}   # replaced, not re-measured: no current value
    colo = next(p for p in pts if p["label"] == "colocated")
    assert colo["measured"] == d["ch05.colocated.measured"].value and colo["predicted"] == d["ch05.colocated.predicted"].value


def test_an_arm_of_a_window_has_one_value(entries):
    """Chapter 5's disaggregated arm is the partner of three references of one window (83.3 ms in one, 90.2 ms in
    another, as separate entries before): one arm, one config, one quantity, so every entry that gives its step (the
    window's arm entries, the results page's item) shows one value, over all its repeats in the window."""
    from rlm_lab.chapters.ch09_guidelines.cases import ITEMS

    rec = CPU / "reference" / "20261204T084630Z"
    d = json.loads((rec / "record.json").read_text())
    pooled: dict = {}
    for r in d["results"]["references"]:
        for arm, vals in r["summary"]["values"].items():
            pooled.setdefault((r["chapter"], arm), []).extend(vals)
    assert len(pooled[(5, "disaggregated")]) == 12   # three references x 4 pairs
    win = str(rec.relative_to(ROOT))
    for (ch, arm), vals in pooled.items():
        shown = [e for e in entries if e.id.startswith(f"ch{ch:02d}.window.") and e.id.endswith(f".{arm}.measured")]
        shown += [e for e in entries for it in ITEMS if it.source in ("ch04", "ch05") and it.record == arm
                  and e.id == f"ch{ch:02d}.{it.key}.measured" and e.records == (win,)]
        assert shown, (ch, arm)
        assert len({e.value for e in shown}) == 1, [(e.id, e.value) for e in shown]
        assert all(e.n == len(vals) for e in shown), [(e.id, e.n, len(vals)) for e in shown]
    e = next(e for e in entries if e.id == "ch05.disaggregated.measured")
    assert e.value == pytest.approx(statistics.median(pooled[(5, "disaggregated")]))   # 12 values: the median


def test_chapter_1s_committed_runs_read_the_ledger(entries):
    """Chapter 1's table of committed runs shows each run's accuracies and seconds per step as the ledger holds
    them (its id in the row): an entry changed in the ledger changes the page."""
    from dataclasses import replace

    from rlm_lab.chapters.ch01_quickstart import report as R1

    refs = R1.reference_records()
    d = L.by_id(entries)
    rows = R1.summary_rows(refs, entries)
    assert [r["ledger id"] for r in rows] == [f"ch01.run.{r.dir.name}" for r in refs]
    for r in rows:
        for col, key in R1.LEDGER_KEYS.items():
            assert r[col] == d[f"{r['ledger id']}.{key}"].value, (r["run"], col)
    moved = [replace(e, value=0.5) if e.id == "ch01.run.ch01_grpo.accuracy_after" else e for e in entries]
    got = next(r for r in R1.summary_rows(refs, moved) if r["ledger id"] == "ch01.run.ch01_grpo")
    assert got["acc_after"] == 0.5 and got["gain_points"] == round(100 * (0.5 - got["acc_before"]), 1)
