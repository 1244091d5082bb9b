"""Chapter 10 end to end at ``smoke`` size (the book shows the committed cpu records and trains nothing, so this
is where the chapter's run code and its report meet): every record made, then every table, value and verdict
of the notebook computed from them (rlm_lab.chapters.ch10_open_directions)."""

import pytest

from rlm_lab.chapters.ch10_open_directions import cases, compare, report

pytestmark = pytest.mark.slow  # SFT and GRPO of both parts on the nano model: about half a minute on 2 cores


def test_the_smoke_campaign_makes_every_record_and_the_report_reads_them(tmp_path, monkeypatch):
    monkeypatch.setenv("RLM_RUNS_DIR", str(tmp_path))
    runs = report.ensure_runs("smoke", make=True)
    assert sorted(runs) == sorted(n for part in report.names("smoke").values() for n in part)
    assert all(r is not None and r.status == "completed" for r in runs.values()), report.status(runs, "smoke")
    assert all(str(r.dir).startswith(str(tmp_path)) for r in runs.values())
    assert report.parallel_ready(runs, "smoke") and report.md_ready(runs, "smoke")
    par, md = report.parallel_values(runs, "smoke"), report.md_values(runs, "smoke")
    assert set(par) == set(report.PARALLEL_GLUE) and set(md) == set(report.MD_GLUE)
    assert report.NOT_YET not in {*par.values(), *md.values()}
    seeds = cases.parallel("smoke")["seeds"]
    assert len(report.training_rows(runs, "smoke")) == len(seeds) * len(cases.ARMS)
    measure = runs[cases.name("par", "measure")].results
    predicted = runs[cases.name("par", "predict")].results["predicted"]
    assert len(compare.parallel_rows(measure, predicted, seeds)) == 4
    recs = report.matrix_records(runs, "smoke")
    assert report.against_rows(recs) and report.transfer_rows(recs)
    assert report.systems_rows(runs, "smoke") and report.step_time_rows(runs, "smoke")
    again = report.ensure_runs("smoke", make=True)  # made once: the second call reuses them
    assert {n: r.dir for n, r in again.items()} == {n: r.dir for n, r in runs.items()}
