"""rlm_lab.chapters.your_machine: the reader's calibration is cached per machine key and a stale one is not
reused; each prediction is on disk before its measurement starts; smoke size does no work; bad input is one
error line before any work."""

import json
from datetime import datetime
from dataclasses import replace
from pathlib import Path

import pytest

from rlm_lab import cli
from rlm_lab.cost.spread import calibration_files
from rlm_lab.errors import RlmLabError
from rlm_lab.chapters import ch03_work_depth as W
from rlm_lab.chapters import your_machine as Y

KEY = {"host": "reader", "cpu_model": "CPU A", "cores": 2, "torch": "2.13.0+cpu", "threads": 2}
QUIET, BUSY = (lambda: (0.1, 0.1, 0.1)), (lambda: (9.0, 9.0, 9.0))


def fake_calibrate(calls: list, busy: bool = False):
    """Stands in for rlm-lab calibrate: writes a committed repeated calibration (it has a spread) as the profile."""
    src = next(p for p in reversed(calibration_files()) if (json.loads(p.read_text()).get("spread") or {}).get("repeats"))

    def calibrate(out, **kw):
        calls.append(kw | {"out": Path(out)})
        d = json.loads(src.read_text())
        d["load"] = (d.get("load") or {"before": {"per_core": 0.1}}) | {"busy": busy}
        Path(out).write_text(json.dumps(d))
        return Path(out)

    return calibrate


def boom(*a, **k):
    raise AssertionError("no work may be done here")


def test_calibration_is_cached_per_machine_key_and_a_stale_one_is_made_again(tmp_path):
    calls = []
    first = Y.ensure_calibration(KEY, tmp_path, fake_calibrate(calls), loadavg=QUIET)
    assert not first["reused"] and len(calls) == 1
    assert calls[0]["repeats"] >= 3 and calls[0]["allow_busy"] and calls[0]["out"].parent.is_relative_to(tmp_path)
    again = Y.ensure_calibration(dict(KEY), tmp_path, fake_calibrate(calls), loadavg=QUIET)
    assert again["reused"] and again["profile"] == first["profile"] and len(calls) == 1
    for change in ({"threads": 1}, {"cpu_model": "CPU B"}, {"torch": "2.14.0"}, {"host": "other"}):
        other = Y.ensure_calibration(KEY | change, tmp_path, fake_calibrate(calls), loadavg=QUIET)
        assert not other["reused"] and other["profile"] != first["profile"], change
    assert len(calls) == 5
    # a folder whose meta names another machine (copied over, or the key's hash collided) is not reused
    meta_path = Path(first["profile"]).parent / "meta.json"
    meta = json.loads(meta_path.read_text())
    meta_path.write_text(json.dumps(meta | {"machine_key": KEY | {"threads": 8}}))
    assert not Y.ensure_calibration(KEY, tmp_path, fake_calibrate(calls), loadavg=QUIET)["reused"] and len(calls) == 6
    # a calibration made on a busy machine is kept while it is busy and made again once it is quiet
    busy_key, waits = KEY | {"host": "busy"}, []
    made = Y.ensure_calibration(busy_key, tmp_path, fake_calibrate(calls, busy=True), loadavg=BUSY, sleep=waits.append)
    assert made["busy"] and made["waited_for_load_s"] == Y.calibration.SETTLE_S and len(calls) == 7
    assert Y.ensure_calibration(busy_key, tmp_path, fake_calibrate(calls), loadavg=BUSY)["reused"] and len(calls) == 7
    assert not Y.ensure_calibration(busy_key, tmp_path, fake_calibrate(calls), loadavg=QUIET)["busy"] and len(calls) == 8


def test_the_prediction_is_on_disk_before_the_measurement_starts(tmp_path, monkeypatch):
    monkeypatch.setattr(Y.calibration, "SETTLE_S", 0.0)  # no waiting for a shared machine's load to fall
    base = Y.ch03_headline("nano", batches=(1, 2), tail_dists=(0,), size="smoke", reps=1)
    seen = []

    def measure(folder, prep):  # what the record held when the measurement began
        seen.append(json.loads((folder / "record.json").read_text())["results"])
        return base.measure(folder, prep)

    head, calls = replace(base, measure=measure), []
    out = Y.your_numbers("ch03", "cpu", root=tmp_path, calibrate_fn=fake_calibrate(calls), heads={"ch03": head},
                         key=KEY)
    (before,) = seen
    assert set(base.labels) == set(before["prediction"]) and "measured" not in before
    rec = json.loads((Path(out["record"]) / "record.json").read_text())
    res = rec["results"]
    assert rec["status"] == "completed" and res["predicted_at"] < res["measure_started"] < res["measure_ended"]
    assert datetime.fromisoformat(rec["started"]) <= datetime.fromisoformat(res["predicted_at"])
    profile = out["calibration"]["profile"]
    assert res["prediction"] == base.predict(profile, {}) == before["prediction"]  # the one made first is shown
    assert res["prediction"]["generate_fixed0"] == W.predicted_generate("nano", W.distributions("smoke")[0].values(0),
                                                                        profile)
    for row, k in zip(out["rows"], base.labels):
        assert row["your_predicted"] == res["prediction"][k] and row["your_measured"] == res["measured"][k] > 0
        assert row["your_low"] <= row["your_predicted"] <= row["your_high"]
        assert row["your_error"] == pytest.approx(row["your_predicted"] / row["your_measured"] - 1)
    assert out["reader"] and "before it ran" in out["note"] and out["seconds"]["workloads"] > 0
    again = Y.your_numbers("ch03", "cpu", root=tmp_path, calibrate_fn=fake_calibrate(calls), heads={"ch03": head},
                           key=KEY)  # the next build reuses both: no calibration, no measurement
    assert len(calls) == 1 and len(seen) == 1 and again["rows"] == out["rows"]
    assert again["seconds"] == {"calibration": 0.0, "workloads": 0.0}


def test_smoke_size_does_no_work_and_shows_the_committed_reference(tmp_path):
    heads = {c: replace(h, prepare=boom, predict=boom, measure=boom) for c, h in Y.headlines().items()}
    for chapter in ("ch02", "ch03"):
        out = Y.your_numbers(chapter, "smoke", root=tmp_path, calibrate_fn=boom, heads=heads)
        assert not out["reader"] and "SIZE=cpu" in out["note"] and out["calibration"] is None
        assert all(r["ref_measured"] > 0 and r["ref_profile"] and "your_measured" not in r for r in out["rows"])
        assert not any("your" in k for k in Y.table(out)[0])
    assert not list(tmp_path.iterdir())


def test_bad_input_is_one_error_line_before_any_work(tmp_path, capsys):
    with pytest.raises(RlmLabError, match="unknown size 'huge'"):
        Y.your_numbers("ch02", "huge", root=tmp_path, calibrate_fn=boom)
    with pytest.raises(RlmLabError, match="unknown chapter 'ch09'"):
        Y.your_numbers("ch09", "cpu", root=tmp_path, calibrate_fn=boom)
    assert not list(tmp_path.iterdir())
    for argv in (["your-numbers", "--size", "huge"], ["your-numbers", "--chapter", "ch09"]):
        assert cli.main(argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("rlm-lab: error: unknown"), err


def test_a_second_build_waits_for_the_calibration_lock(tmp_path):
    """Another process holding the folder's ``.calibration.lock`` (a plain flock, as filelock takes it) makes
    ensure_calibration wait until it lets go, then calibrate once."""
    import subprocess
    import sys
    import time

    from rlm_lab.chapters.your_machine.calibration import key_slug

    folder = tmp_path / key_slug(KEY)
    folder.mkdir(parents=True)
    holder = subprocess.Popen([sys.executable, "-c", (
        "import fcntl, sys, time\nf = open(sys.argv[1], 'w')\nfcntl.flock(f, fcntl.LOCK_EX)\n"
        "print('held', flush=True)\ntime.sleep(1.5)\n"), str(folder / ".calibration.lock")],
        stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    calls, t0 = [], time.perf_counter()
    meta = Y.ensure_calibration(KEY, tmp_path, fake_calibrate(calls), loadavg=QUIET)
    waited = time.perf_counter() - t0
    holder.wait(timeout=30)
    assert waited >= 1.0 and len(calls) == 1 and not meta["reused"], (waited, calls)
