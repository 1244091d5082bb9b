"""The results page: every number in it comes from a record. Each measured and predicted cell names its records,
those records exist under data/runs/cpu, and the number is derived again here from the record files by hand (no
chapter-9 code), so a cell that drifted from its record, or a record read from the wrong key, fails."""

import gzip
import json
import statistics
from pathlib import Path

import pytest

from rlm_lab.chapters.ch09_guidelines import report, run
from rlm_lab.chapters.ch09_guidelines.cases import ITEMS

ROOT = Path(__file__).resolve().parents[2]
CPU = ROOT / "data" / "runs" / "cpu"


@pytest.fixture(scope="module")
def rows():
    mp = pytest.MonkeyPatch()
    mp.setattr(run, "item_scale", lambda item, n=64: run.Cell("(prediction at scale: not under test here)"))
    try:
        yield {r["item"].key: r for r in report.results_rows()}
    finally:
        mp.undo()


def results(rel: str) -> dict:
    return json.loads((ROOT / rel / "record.json").read_text())["results"]


def newest(folder: Path) -> Path:
    return folder if (folder / "record.json").exists() else sorted(p.parent for p in folder.glob("*/record.json"))[-1]


WINDOW = "data/runs/cpu/reference/20261204T084630Z"


def from_window(item):
    """(measured, predicted) from the window that declares it replaces the item's folder, or None: the
    window's config names the folders; a time is the arm's values (all its references'), a long-tail gain baseline /
    technique per pair.
    The estimate of n values by the book's rule: the mean below 10 (Student-t), the median from 10 on."""
    win = json.loads((ROOT / WINDOW / "record.json").read_text())
    folder = f"ch{item.chapter[2:4]}_{item.record}"
    ref = next((c for c in win["config"]["references"] if folder in c["replaces"]), None)
    if ref is None or item.source in ("ch05_sync",):
        return None
    vals = next(r for r in win["results"]["references"] if r["name"] == ref["name"])["summary"]["values"]
    preds = {p["arm"]: p["predicted"] for p in win["results"]["predictions"] if p["name"] == ref["name"]}
    a, b = ref["arms"]
    if item.source == "ch07":
        v, pred = [y / x for x, y in zip(vals[a], vals[b])], preds[b] / preds[a]
    else:   # an arm's step: every repeat of it in the window, over all the references of its chapter that ran it
        v = [x for r in win["results"]["references"] if r["chapter"] == ref["chapter"]
             for x in r["summary"]["values"].get(item.record, [])]
        pred = preds[item.record]
    return (statistics.fmean(v) if len(v) < 10 else statistics.median(v)), pred


def by_hand(item) -> tuple[float, float]:
    """(measured, predicted) of an item, read from the record files directly."""
    if item.source in ("ch04", "ch05", "ch07") and from_window(item) is not None:
        return from_window(item)
    if item.source == "ch04":
        r = results(f"data/runs/cpu/ch04_{item.record}")
        return statistics.median(r["step_s"]), None   # chapter 4 predicts live with the calibrated profile
    folder = CPU / f"ch{item.chapter[2:4]}_{item.record}"
    if item.source == "ch05":
        runs = sorted(p.parent for p in folder.glob("*/record.json"))
        last = json.loads((runs[-1] / "record.json").read_text())["results"]
        if len(runs) > 1:
            meas = statistics.median(json.loads((p / "record.json").read_text())["results"]["step_seconds_median"]
                                     for p in runs)
        else:
            steps = [json.loads(line)["step_time"] for line in gzip.decompress((runs[0] / "metrics.jsonl.gz").read_bytes()).decode().splitlines()
                     if line.strip() and json.loads(line).get("step_time") is not None]
            meas = statistics.median(steps[1:])
        return meas, last["prediction"]["step_s"]
    if item.source == "ch05_sync":
        r = json.loads((newest(folder) / "record.json").read_text())["results"]
        return r["sync"]["seconds_mean"], r["prediction"]["sync_s"]
    if item.source == "ch05_reshard":
        r = json.loads((newest(folder) / "record.json").read_text())["results"]
        return r["measured_received_per_device"], r["formula_received_per_device"]
    if item.source == "ch06":
        meas, pred = [], []
        for k in (0, 1, 2):
            s = json.loads((newest(CPU / f"ch06_sync_tis_seed{k}") / "record.json").read_text())["results"]
            m = json.loads((newest(CPU / f"ch06_{item.record}_tis_seed{k}") / "record.json").read_text())["results"]
            meas.append(s["step_seconds_median"] / m["step_seconds_median"])
            pred.append(m["prediction"]["inputs"]["step_s"] / m["prediction"]["step_s"])
        return statistics.fmean(meas), statistics.median(pred)   # 3 seeds: the mean (Student-t)
    r = json.loads((newest(folder) / "record.json").read_text())["results"]
    key = "inflation" if item.record == "dynamic_sampling" else "speedup"
    reps = (r["measured"].get(f"{key}_spread") or {}).get("reps")
    est = (statistics.fmean(reps) if len(reps) < 10 else statistics.median(reps)) if reps else r["measured"][key]
    return est, r["predicted"][key]


def test_every_taxonomy_item_has_a_row(rows):
    assert set(rows) == {i.key for i in ITEMS}
    assert {i.taxonomy for i in ITEMS} == {"intra-model parallelism", "placement", "weight sync", "asynchrony",
                                           "long tail"}


@pytest.mark.parametrize("item", ITEMS, ids=[i.key for i in ITEMS])
def test_every_number_comes_from_its_record(rows, item):
    row = rows[item.key]
    meas, pred = row["measured"], row["predicted"]
    assert meas.sources, f"{item.key}: a measured number without a record"
    for src in meas.sources + pred.sources:
        path = (ROOT / src).resolve()
        assert path.is_relative_to(CPU.resolve()) and (path / "record.json").exists(), f"{item.key}: {src}"
    if from_window(item) is not None:   # never the replaced record as current; kept as history beside it
        assert meas.sources == pred.sources == (WINDOW,) and row["history"].sources, item.key
    if item.source == "ch05_sync":   # the window replaced these runs and measured no sync time: nothing current
        assert meas.basis == "superseded" and row["bar"].value == "undecided" and row["history"].sources, item.key
        return
    want_meas, want_pred = by_hand(item)
    assert meas.value == pytest.approx(want_meas, rel=1e-12), item.key
    if want_pred is not None:
        assert pred.sources and pred.value == pytest.approx(want_pred, rel=1e-12), item.key
    else:
        assert not pred.sources and "cost model" in pred.note, item.key   # a live prediction says so
    if isinstance(pred.value, float):
        assert row["error"].value == pytest.approx(pred.value / meas.value - 1, rel=1e-9), item.key


def test_the_bar_is_decided_only_by_repeats(rows):
    for key, row in rows.items():
        if row["measured"].basis not in run.DECIDING:
            assert row["bar"].value == "undecided", key
    # the seeds of chapter 6 and the exact reshard count do decide
    assert rows["reshard"]["bar"].value == "met"
    assert rows["one_step_off"]["bar"].value in ("met", "not met", "undecided")


def test_the_table_shows_what_the_cells_hold(rows):
    table = report.results_table(list(rows.values()))
    assert len(table) == len(ITEMS)
    t = next(t for t in table if t["item"] == "hybrid-engine reshard")
    assert t["measured here"].endswith("(exact count)") and t["records"] == ["ch05_hybrid_reshard"]
    html = report.results_html(table)
    assert html.count("<tr>") == len(ITEMS) + 1 and str(ROOT) not in html


def test_no_gpu_record_reads_none(rows, tmp_path):
    assert all(r["gpu"] is run.NONE for r in rows.values())   # data/runs/gpu is absent in this checkout
    # a GPU record of the same cell is read the same way
    src = CPU / "ch05_hybrid_reshard"
    dst = tmp_path / "gpu" / "ch05_hybrid_reshard"
    dst.mkdir(parents=True)
    run_dir = newest(src)
    (dst / "record.json").write_text((run_dir / "record.json").read_text())
    item = next(i for i in ITEMS if i.key == "reshard")
    row = run.item_row(item, gpu_root=tmp_path / "gpu")
    assert row["gpu"].value == row["measured"].value and row["gpu"].sources[0].endswith("ch05_hybrid_reshard")
