"""The GPU archive: its budget arithmetic, its failure paths, and the whole rehearsal on CPU at smoke size
through the same `make gpu-archive` target a lent GPU runs (every path but the CUDA calls themselves)."""

import json
import os
import subprocess
import sys
import tarfile
import time
from datetime import datetime
from pathlib import Path

import pytest

from rlm_lab import gpu_archive as ga
from rlm_lab.errors import RlmLabError

REPO = Path(__file__).resolve().parent.parent


def test_step_limit_is_share_cut_to_what_is_left():
    step = ga.Step("x", 1, "train", share=0.25, min_s=30)
    assert ga.step_limit(step, budget_s=400, left_s=400) == 100          # its share
    assert ga.step_limit(step, budget_s=400, left_s=60) == 60 - ga.RESERVE_S  # what is left, less the reserve
    assert ga.step_limit(step, budget_s=400, left_s=30) is None          # under its minimum: skipped
    assert ga.step_limit(step, budget_s=400, left_s=30, min_scale=0.1) == 30 - ga.RESERVE_S


def test_plan_is_in_book_order_and_fits_its_budget():
    assert ga.PLAN[0].kind == "calibrate"  # every later prediction may use the fresh calibration
    chapters = [s.chapter for s in ga.PLAN[1:]]
    assert chapters == sorted(chapters)
    assert sum(s.share for s in ga.PLAN) <= 1.0
    # every step fits a 540 s lease on its own minimum, or `make gpu-archive` could never run it
    assert sum(s.min_s for s in ga.PLAN) <= 540 - ga.RESERVE_S
    from rlm_lab.gpu_archive_steps import RUNNERS

    assert {s.kind for s in ga.PLAN} <= set(RUNNERS)


def test_a_step_over_its_limit_is_killed_and_reported(tmp_path):
    step = ga.Step("calibration", 2, "calibrate", 0.5, 0)
    t0 = time.monotonic()
    row = ga.run_step(step, tmp_path, "smoke", "cpu", limit_s=1.0)  # a calibration cannot finish in 1 s
    assert time.monotonic() - t0 < 15
    assert row["status"].startswith("failed: over its 1 s limit")


def test_a_failing_step_fails_the_archive_but_keeps_going(tmp_path, monkeypatch, capsys):
    broken = ga.Step("broken", 1, "no-such-kind", 0.2, 0)
    skipped = ga.Step("late", 2, "calibrate", 0.2, 10_000)
    monkeypatch.setattr(ga, "PLAN", (broken, skipped))
    summary, failed = ga.archive(tmp_path / "a", budget_s=60, dry_run=True)
    rows = json.loads(summary.read_text())["steps"]
    assert failed == 1
    assert rows[0]["status"].startswith("failed: exit 1") and "KeyError" in rows[0]["status"]
    assert rows[1]["status"].startswith("skipped")
    assert "| broken | failed" in (tmp_path / "a" / "summary.md").read_text()


def test_bad_input_is_one_clear_error(tmp_path):
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("keep me")
    with pytest.raises(RlmLabError, match="not empty"):
        ga.archive(tmp_path / "full", 100, True)
    assert (tmp_path / "full" / "x").read_text() == "keep me"
    with pytest.raises(RlmLabError, match="unknown step"):
        ga.archive(tmp_path / "new", 100, True, ["ch01_grpo", "ch09_nothing"])
    with pytest.raises(RlmLabError, match="budget"):
        ga.archive(tmp_path / "new2", 1, True)


def _fake_archive(root: Path, dry_run: bool) -> Path:
    src = root / "archive"
    (src / "runs" / "gpu" / "ch01_grpo").mkdir(parents=True)
    (src / "runs" / "gpu" / "ch01_grpo" / "record.json").write_text("{}")
    (src / "hardware").mkdir()
    (src / "hardware" / "nvidia-h200-calibrated-20261201.json").write_text("{}")
    steps = [{"step": "calibration", "status": "completed", "profile": "hardware/nvidia-h200-calibrated-20261201.json"},
             {"step": "ch01_grpo", "status": "completed", "record": "runs/gpu/ch01_grpo"},
             {"step": "ch01_ppo", "status": "failed: exit 1: boom", "record": "runs/gpu/ch01_ppo"}]
    (src / "predictions").mkdir()
    (src / "predictions" / "ch01_grpo.json").write_text('{"made": "2026-12-01T10:00:00+00:00"}')
    (src / "summary.json").write_text(json.dumps({"created": "2026-12-01T10:00:00+00:00", "dry_run": dry_run,
                                                  "steps": steps}))
    return src


def test_adopt_copies_completed_records_and_never_replaces(tmp_path):
    src, data = _fake_archive(tmp_path, dry_run=False), tmp_path / "data"
    got = ga.adopt(src, data)
    assert sorted(p.relative_to(data).as_posix() for p in got) == [
        "hardware/nvidia-h200-calibrated-20261201.json", "runs/gpu/archives/20261201T100000Z/predictions",
        "runs/gpu/archives/20261201T100000Z/summary.json", "runs/gpu/ch01_grpo"]  # the failed step is left out
    assert (data / "runs/gpu/archives/20261201T100000Z/predictions/ch01_grpo.json").is_file()
    with pytest.raises(RlmLabError, match="would replace"):
        ga.adopt(src, data)


def test_adopt_refuses_an_archive_account_that_links_out(tmp_path):
    src, data = _fake_archive(tmp_path, dry_run=False), tmp_path / "data"
    (tmp_path / "secret.json").write_text("{}")
    (src / "predictions" / "ch01_ppo.json").symlink_to(tmp_path / "secret.json")
    with pytest.raises(RlmLabError, match="other than plain files"):
        ga.adopt(src, data)
    assert not data.exists()  # nothing copied


def test_adopt_refuses_a_dry_run(tmp_path):
    with pytest.raises(RlmLabError, match="dry run"):
        ga.adopt(_fake_archive(tmp_path, dry_run=True), tmp_path / "data")


REHEARSED = ("calibration", "ch03_decode_knee")


@pytest.mark.slow
@pytest.mark.extended  # CI budget; make test-extended
def test_rehearsal_through_make_gpu_archive(tmp_path):
    """`make gpu-archive` as a lent GPU runs it, with --dry-run: CPU, smoke size, the calibration and one chapter
    step (short, so that it also passes on a busy machine; every step's runner is checked to exist above, and each
    chapter's smoke experiment has its own tests)."""
    arch, out = tmp_path / "archive", tmp_path / "out"
    out.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("RLM_SIZE", "MAKEFLAGS")}
    started = datetime.now().astimezone()
    proc = subprocess.run(["make", "--no-print-directory", "gpu-archive", f"GPU_PY={sys.executable}",
                           f"GPU_ARGS=--dry-run --steps {','.join(REHEARSED)}", "GPU_BUDGET_S=1800", "GPU_WHEELS_DIR=", f"GPU_ARCHIVE_DIR={arch}", f"GPU_OUT={out}"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = json.loads((arch / "summary.json").read_text())
    assert summary["dry_run"] and summary["device"] == "cpu" and summary["size"] == "smoke"
    assert [r["step"] for r in summary["steps"]] == list(REHEARSED)
    assert all(r["status"] == "completed" for r in summary["steps"]), summary["steps"]
    for r in summary["steps"][1:]:
        record = json.loads((arch / r["record"] / "record.json").read_text())
        assert record["results"], r["step"]  # a finished run, not an empty shell
        c = r["compare"]
        assert c["measured"] > 0
        pred_file = arch / "predictions" / f"{r['step']}.json"
        if c["predicted_reference"] is not None:
            made = datetime.fromisoformat(json.loads(pred_file.read_text())["made"])
            assert made <= datetime.fromtimestamp((arch / r["record"] / "record.json").stat().st_mtime).astimezone()
            assert made >= started.replace(microsecond=0)
    with tarfile.open(out / "gpu-archive.tgz") as tar:  # what the device tool brings back: one file
        names = tar.getnames()
    assert f"{arch.name}/summary.md" in names and any(n.endswith("record.json") for n in names)


def test_gpu_section_says_plainly_when_there_is_no_gpu_run(tmp_path):
    text = ga.gpu_section("ch01", 1, data=tmp_path)
    assert "No GPU run of chapter 1 exists yet" in text


def test_gpu_section_lists_the_chapters_gpu_records(tmp_path):
    for name, gpus, res in (("ch01_grpo", ["NVIDIA H200"], {"rl_seconds_per_step": 0.0421}),
                            ("ch02_grpo", ["NVIDIA H200"], {}), ("ch01_ppo", ["NVIDIA H100"], {"accuracy_after": 0.9})):
        d = tmp_path / "runs" / "gpu" / name
        d.mkdir(parents=True)
        (d / "record.json").write_text(json.dumps({"status": "completed", "results": res, "provenance": {
            "date": "2026-12-01T04:00:00+00:00", "hardware": {"gpus": gpus}}}))
    (tmp_path / "runs" / "gpu" / "ch01_empty").mkdir()  # a folder without a record is not a run
    text = ga.gpu_section("ch01", 1, data=tmp_path)
    assert "| ch01_grpo | NVIDIA H200 | 2026-12-01 | completed | s/RL step 0.042 |" in text
    assert "| ch01_ppo | NVIDIA H100 |" in text and "accuracy after 0.900" in text
    assert "ch02_grpo" not in text and "ch01_empty" not in text and "No GPU run" not in text


def test_a_step_that_cannot_run_here_is_skipped_with_its_reason(tmp_path, monkeypatch, capsys):
    from rlm_lab import gpu_archive_steps as steps

    def cannot(step, out, size, device):
        raise steps.StepSkipped("no such device here")

    monkeypatch.setitem(steps.RUNNERS, "placement", cannot)
    spec = {"step": {"name": "ch05_placement", "chapter": 5, "kind": "placement", "share": 0.1, "min_s": 0,
                     "args": {}}, "out": str(tmp_path), "size": "smoke", "device": "cpu"}
    assert steps.main([json.dumps(spec)]) == ga.SKIP_EXIT
    assert "rlm-lab: skip: no such device here" in capsys.readouterr().err
    assert not (tmp_path / "steps" / "ch05_placement.json").exists()


@pytest.mark.slow  # a smoke-size GRPO run (~1 min on 2 cores)
def test_chapter_5_runs_without_ray_on_a_gpu_image_that_has_none(tmp_path, monkeypatch):
    """Issue 40: the lent GPU image has no Ray; the placement step runs the colocated placement in-process,
    predicted first, its record saying so."""
    import importlib.util

    from rlm_lab import gpu_archive_steps as steps
    from rlm_lab.record import RunRecord

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "ray" else real(name, *a))
    step = {"name": "ch05_placement", "chapter": 5, "kind": "placement", "share": 0.1, "min_s": 0, "args": {}}
    row = steps.run_placement(step, tmp_path, "smoke", "cpu")
    rec = RunRecord.load(tmp_path / row["record"])
    res = rec.results
    assert rec.data["status"] == "completed" and res["nodes"]["strategy"] == "in-process (no Ray)"
    assert rec.config["runtime"] == "in-process (no Ray)" and "ray" not in str(res["pids"])
    assert res["prediction"]["step_s"] > 0 and res["steps"] == len(res["rewards"]) > 0
    assert row["compare"]["quantity"] == "colocated GRPO step in-process, no Ray (median)"
    assert row["compare"]["measured"] == res["step_seconds_median"] > 0
    assert json.loads((tmp_path / "predictions" / "ch05_placement.json").read_text())["reference"] == res["prediction"]["step_s"]


def test_gpu_section_puts_each_prediction_beside_its_measurement(tmp_path):
    data = tmp_path / "data"
    rec = data / "runs" / "gpu" / "ch03_decode_knee"
    rec.mkdir(parents=True)
    (rec / "record.json").write_text(json.dumps({"status": "completed", "provenance": {"hardware": {"gpus": ["H"]}}}))
    arch = data / "runs" / "gpu" / "archives" / "20261204T142553Z"
    arch.mkdir(parents=True)
    steps = [{"step": "ch03_decode_knee", "chapter": 3, "status": "completed",
              "compare": {"quantity": "decode step", "unit": "s", "predicted_reference": 0.005, "predicted_calibrated": None,
                          "measured": 0.010, "error_reference": -0.5, "error_calibrated": None}},
             {"step": "ch03_long_tail", "chapter": 3, "status": "failed: over its 52 s limit (killed)"},
             {"step": "ch01_grpo", "chapter": 1, "status": "completed",
              "compare": {"quantity": "RL step", "unit": "s", "measured": 0.5}}]
    (arch / "summary.json").write_text(json.dumps({"steps": steps}))
    text = ga.gpu_section("ch03", 3, data=data)
    assert "| ch03_decode_knee | 20261204T142553Z | decode step | 5.0 ms | – | 10.0 ms | -50% / – |" in text
    assert "ch03_long_tail" not in text and "RL step" not in text   # a failed step, another chapter
    (arch / "summary.json").write_text("{")
    with pytest.raises(RlmLabError, match="damaged"):
        ga.gpu_section("ch03", 3, data=data)


def test_a_later_window_is_adopted_beside_the_earlier_one_when_stamped(tmp_path):
    src, data = _fake_archive(tmp_path, dry_run=False), tmp_path / "data"
    ga.adopt(src, data)
    s = json.loads((src / "summary.json").read_text())
    s["created"] = "2026-12-01T11:30:00+00:00"   # the same steps in a later lease window
    (src / "summary.json").write_text(json.dumps(s))
    with pytest.raises(RlmLabError, match="would replace"):
        ga.adopt(src, data)
    got = sorted(p.relative_to(data).as_posix() for p in ga.adopt(src, data, stamped=True))
    assert got == ["runs/gpu/archives/20261201T113000Z/hardware/nvidia-h200-calibrated-20261201.json",
                   "runs/gpu/archives/20261201T113000Z/predictions", "runs/gpu/archives/20261201T113000Z/summary.json",
                   "runs/gpu/ch01_grpo-20261201T113000Z"]   # a profile's name is its file's: kept with the archive
    assert (data / "runs/gpu/ch01_grpo/record.json").is_file()   # the earlier window untouched
    r = subprocess.run([sys.executable, "-m", "rlm_lab.cli", "gpu-archive", "--stamped"], capture_output=True, text=True)
    assert r.returncode != 0 and "give --adopt DIR" in r.stderr and "Traceback" not in r.stderr


def _window_archives(data: Path, measured: list[float], quantity: str, predicted: float | None) -> None:
    for i, m in enumerate(measured):
        arch = data / "runs" / "gpu" / "archives" / f"2026120{i + 1}T100000Z"
        arch.mkdir(parents=True)
        step = {"step": "ch01_grpo", "chapter": 1, "status": "completed",
                "compare": {"quantity": quantity, "unit": "s", "predicted_reference": predicted,
                            "predicted_calibrated": None, "measured": m, "error_reference": None,
                            "error_calibrated": -0.1 * (i + 1)}}
        (arch / "summary.json").write_text(json.dumps({"steps": [step]}))


@pytest.mark.parametrize("quantity, predicted, word", [
    ("RL step (upper bound)", 0.5, "contradicted"),   # below the whole interval [0.7516, 1.2484]
    ("RL step (upper bound)", 0.8, "undecided"),      # inside it
    ("RL step (upper bound)", 1.3, "holds"),          # above it
    ("RL step", 0.5, "too low"),
    ("RL step", 1.3, "too high"),
    ("RL step", 1.1, "undecided"),
])
def test_windows_are_judged_by_their_t_interval(tmp_path, quantity, predicted, word):
    data = tmp_path / "data"
    _window_archives(data, [0.9, 1.0, 1.1], quantity, predicted)
    (row,) = ga.window_rows(1, data)
    # by hand: mean 1.0, s = 0.1, t_{0.975, 2} = 4.302653 -> half width 4.302653 * 0.1 / sqrt(3) = 0.24841
    assert row["n"] == 3 and row["measured"].estimate == pytest.approx(1.0)
    assert (row["measured"].lo, row["measured"].hi) == pytest.approx((0.75159, 1.24841), abs=1e-5)
    assert row["error"].lo == pytest.approx(predicted / 1.24841 - 1, abs=1e-5)
    assert row["word"] == word
    assert row["calibrated_errors"] == pytest.approx([-0.1, -0.2, -0.3])


def test_windows_of_different_work_are_not_pooled_and_a_wide_interval_stays_undecided(tmp_path):
    data = tmp_path / "data"
    _window_archives(data, [0.1, 1.0, 3.0], "RL step", 0.5)   # the t-interval reaches below 0
    rows = ga.window_rows(1, data)
    assert len(rows) == 1 and rows[0]["measured"].lo < 0 and rows[0]["word"] == "undecided"
    arch = data / "runs" / "gpu" / "archives" / "20261209T100000Z"
    arch.mkdir()
    (arch / "summary.json").write_text(json.dumps({"steps": [{"step": "ch01_grpo", "chapter": 1, "status": "completed",
        "compare": {"quantity": "RL step", "unit": "s", "predicted_reference": 0.7, "measured": 1.0}}]}))
    rows = ga.window_rows(1, data)   # another datasheet prediction means another workload: its own row
    assert sorted(r["n"] for r in rows) == [1, 3]
    (data / "runs" / "gpu" / "ch01_grpo").mkdir()
    (data / "runs" / "gpu" / "ch01_grpo" / "record.json").write_text('{"status": "completed"}')
    text = ga.gpu_section("ch01", 1, data=data)
    assert "| ch01_grpo | 3 | 1.37 s [-2.32 s, 5.05 s] | 500.0 ms | -63% [-90%, +inf%] | undecided |" in text
