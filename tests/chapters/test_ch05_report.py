"""Chapter 5's figure of the published cases: every priced case under a bar drawn once, where it belongs."""

from dataclasses import replace

from matplotlib.collections import PathCollection

from rlm_lab import ledger
from rlm_lab.chapters.ch05_placement.report import lora_sync_text, published_figure
from rlm_lab.chapters.ch05_placement.run import latest
from rlm_lab.record import reference_root
from rlm_lab.validate.published_report import FRESH_SOURCES, record_report


def test_the_published_figure_draws_every_priced_case_under_a_bar_once():
    rep = record_report()
    fig = published_figure(rep)
    for ax, group in zip(fig.axes, ("ratio", "step")):
        dots = {c.get_label(): [tuple(p) for p in c.get_offsets()] for c in ax.collections if isinstance(c, PathCollection)}
        priced = [r for r in rep["rows"] if r["group"] == group and r["error_value"] is not None]
        assert sum(len(v) for v in dots.values()) == len(priced)
        n_fresh = sum(r["split"] == "validation" and r["source"] in FRESH_SOURCES for r in priced)
        fresh = next((v for k, v in dots.items() if k.startswith("validation, fresh")), [])
        assert len(fresh) == n_fresh
        # each case at (published, predicted); predicted by hand from the published value and the error
        for r in priced:
            x, y = r["published_value"], r["published_value"] * (1 + r["error_value"])
            assert any(abs(px - x) < 1e-9 * x and abs(py - y) < 1e-9 * y for v in dots.values() for px, py in v)


def test_the_lora_section_prints_the_ledgers_values_not_the_records():
    """The sync seconds and the step of the LoRA section come from the ledger (one value per quantity across the
    book): an entry changed here shows on the page, a replaced record is labelled history, the window's repeats
    are printed as the current step."""
    recs = {k: latest(reference_root("cpu"), k) for k in ("disaggregated", "disaggregated_lora")}
    entries = ledger.build("cpu")
    d = ledger.by_id(entries)
    sync = d["ch05.run.ch05_disaggregated_lora.sync.seconds_mean"]
    assert sync.value == recs["disaggregated_lora"].results["sync"]["seconds_mean"]
    text = lora_sync_text(recs, entries)
    assert f"LoRA {sync.value * 1e3:.2f} ms (one run, history)" in text and "did not re-measure the sync" in text
    assert "window's repeats (current)" in text
    full = d["ch05.window.disaggregated.measured"]   # the arm over all its repeats in the window, one value
    assert f"full {full.value * 1e3:.2f} ms" in text and full.n == 12
    moved = [replace(e, value=0.123) if e.id == sync.id else e for e in entries]
    assert "LoRA 123.00 ms" in lora_sync_text(recs, moved)
