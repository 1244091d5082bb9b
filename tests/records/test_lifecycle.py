"""Record lifecycle: statuses, signals, SIGKILL, the at-exit fallback, scratch folders, --force, and the
legacy rule checked on every committed reference record. Child processes import only rlm_lab.record."""

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from rlm_lab.record import REPO_ROOT, RecordError, RunRecord, load_record, lock_holder, reference_root

CHILD = textwrap.dedent("""
    import os, sys, time
    sys.modules["torch"] = None  # provenance() asks torch for threads/GPUs if it can: not needed, 2 s saved
    from rlm_lab.record import RunRecord
    mode, run_dir = sys.argv[1], sys.argv[2]
    rec = RunRecord(run_dir, {"mode": mode}, command="child", seed=0)
    rec.log({"step": 1})
    if mode != "empty":
        rec.update(partial=1)
    (rec.scratch("work") / "big.bin").write_bytes(b"x" * 1000)
    if mode == "raise":
        raise ValueError("boom in the child")
    if mode in ("exit", "empty"):
        sys.exit(0)
    print("ready", flush=True)
    time.sleep(60)
""")


def child(mode, run_dir):
    """Start a writer process; return it once it holds the folder (or has ended)."""
    p = subprocess.Popen([sys.executable, "-c", CHILD, mode, str(run_dir)], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, cwd=REPO_ROOT)
    if mode in ("raise", "exit", "empty"):
        p.wait(timeout=60)
    else:
        assert p.stdout.readline().strip() == "ready", p.stderr.read()
    return p


def status(run_dir):
    return json.loads((Path(run_dir) / "record.json").read_text())["status"]


def scratch_dirs(run_dir):
    return sorted(p.name for p in Path(run_dir).glob(".scratch-*"))


def test_with_block_completes_fails_or_interrupts_with_times(tmp_path):
    with RunRecord(tmp_path / "ok", {}, command="x") as rec:
        assert status(rec.dir) == "running"
        rec.update(v=1)
    with pytest.raises(ZeroDivisionError), RunRecord(tmp_path / "bad", {}, command="x"):
        1 / 0
    with pytest.raises(KeyboardInterrupt), RunRecord(tmp_path / "int", {}, command="x"):
        raise KeyboardInterrupt
    assert [status(tmp_path / n) for n in ("ok", "bad", "int")] == \
        ["completed", "failed: ZeroDivisionError: division by zero", "interrupted"]
    data = json.loads((tmp_path / "ok" / "record.json").read_text())
    assert data["started"] <= data["ended"] and data["results"] == {"v": 1}
    assert load_record(tmp_path / "ok").results == {"v": 1}
    for name, pattern in (("bad", "did not complete.*ZeroDivisionError"), ("int", "interrupted")):
        with pytest.raises(RecordError, match=f"{name}: .*{pattern}"):
            load_record(tmp_path / name)
    assert lock_holder(tmp_path / "ok") is None  # the folder is free again


def test_sigterm_interrupts_sigkill_stays_running_and_is_refused_as_dead(tmp_path):
    term, kill = tmp_path / "term", tmp_path / "kill"
    p = child("sleep", term)
    with pytest.raises(RecordError, match="still running"):
        load_record(term)  # another process holds it: not a finished run
    p.send_signal(signal.SIGTERM)
    p.wait(timeout=30)
    assert status(term) == "interrupted" and scratch_dirs(term) == []  # the handler ran the clean-up

    p = child("sleep", kill)
    p.kill()
    p.wait(timeout=30)
    assert status(kill) == "running" and scratch_dirs(kill) != []  # SIGKILL: no chance to say anything
    with pytest.raises(RecordError, match="died"):
        load_record(kill)
    rec = RunRecord(kill, {}, command="again", force=True)  # the next run cleans the killed one's scratch
    old = next((tmp_path / ".replaced").glob("kill.*"))
    assert scratch_dirs(old) == [] and json.loads((old / "record.json").read_text())["results"] == {"partial": 1}
    rec.complete()


def test_writers_that_never_end_their_record_are_ended_at_exit(tmp_path):
    child("exit", tmp_path / "exit")
    child("raise", tmp_path / "raise")
    child("empty", tmp_path / "empty")
    assert status(tmp_path / "exit") == "completed"
    assert status(tmp_path / "raise") == "failed: ValueError: boom in the child"
    assert status(tmp_path / "empty") == "failed: the process exited before recording any result"
    assert all(scratch_dirs(tmp_path / n) == [] for n in ("exit", "raise", "empty"))


def test_a_second_writer_of_a_folder_is_refused_while_the_first_runs(tmp_path):
    p = child("sleep", tmp_path / "run")
    try:
        with pytest.raises(RecordError, match=rf"{tmp_path / 'run'} is in use by another run \(pid {p.pid}\)"):
            RunRecord(tmp_path / "run", {}, command="second", force=True)  # even --force waits its turn
        assert json.loads((tmp_path / "run" / "record.json").read_text())["config"] == {"mode": "sleep"}
    finally:
        p.kill()
        p.wait()


def test_rlm_lab_train_second_writer_is_refused_and_sigterm_leaves_interrupted(tmp_path):
    """Two real `rlm-lab train` processes on one folder: the second gets one error line (exit 2) while the
    first holds it; SIGTERM then ends the first as interrupted (exit 130, no traceback)."""
    d = tmp_path / "run"
    env = {**os.environ, "RLM_CACHE_DIR": str(tmp_path / "cache")}
    argv = [sys.executable, "-m", "rlm_lab.cli", "train", "--size", "smoke", "--model", "nano", "--out", str(d)]
    first = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO_ROOT)
    try:
        deadline = time.monotonic() + 60
        while not (d / "record.json").exists() and time.monotonic() < deadline and first.poll() is None:
            time.sleep(0.1)
        assert status(d) == "running"
        second = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=REPO_ROOT, timeout=60)
        assert second.returncode == 2 and "Traceback" not in second.stderr
        assert second.stderr.strip().splitlines()[-1].startswith("rlm-lab: error: ")
        assert second.stderr.count("rlm-lab: error:") == 1
        assert f"{d} is in use by another run (pid {first.pid})" in second.stderr
        first.send_signal(signal.SIGTERM)
        _, err = first.communicate(timeout=60)
    finally:
        if first.poll() is None:
            first.kill()
    assert first.returncode == 130 and "Traceback" not in err and "rlm-lab: interrupted" in err
    assert status(d) == "interrupted" and scratch_dirs(d) == [] and lock_holder(d) is None


def test_never_overwrite_without_force_and_force_moves_the_old_run_aside(tmp_path, capsys):
    d = tmp_path / "run"
    with RunRecord(d, {"n": 1}, command="x") as rec:
        rec.log({"step": 1})
        rec.update(v=1)
    before = {p.name: p.read_bytes() for p in d.iterdir() if p.name != ".lock"}
    with pytest.raises(RecordError, match=r"already holds a run \(status completed.*--force"):
        RunRecord(d, {"n": 2}, command="x")
    assert {p.name: p.read_bytes() for p in d.iterdir() if p.name != ".lock"} == before  # refused, untouched
    with RunRecord(d, {"n": 2}, command="x", force=True) as rec:
        rec.update(v=2)
    old = next((tmp_path / ".replaced").glob("run.*"))
    assert {p.name: p.read_bytes() for p in old.iterdir()} == before  # nothing lost
    assert f"replaced the run in {d} (status completed" in capsys.readouterr().err
    assert load_record(d).results == {"v": 2} and not (d / "metrics.jsonl").exists()


def test_the_build_tree_sets_the_old_run_aside_without_force(tmp_path, monkeypatch, capsys):
    from rlm_lab.records import lifecycle

    monkeypatch.setattr(lifecycle, "BUILD_TREE", tmp_path)
    RunRecord(tmp_path / "r", {}, command="x").complete(v=1)
    RunRecord(tmp_path / "r", {}, command="x").complete(v=2)
    assert load_record(next((tmp_path / ".replaced").glob("r.*"))).results == {"v": 1}
    assert "replaced the run" in capsys.readouterr().err


def test_a_file_in_place_of_the_run_folder_is_a_clear_error(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(RecordError, match="is a file, not a folder"):
        RunRecord(tmp_path / "file", {}, command="x")
    assert (tmp_path / "file").read_text() == "x"


def committed_records():
    return sorted(p.parent for p in reference_root("cpu").rglob("record.json"))


def test_legacy_rule_accepts_every_committed_reference_record_and_refuses_a_killed_copy(tmp_path):
    dirs = committed_records()
    legacy = []
    for d in dirs:
        if json.loads((d / "record.json").read_text()).get("status") == "interrupted":
            # a run killed or stopped is kept, marked, only beside a newer completed run of the same folder that
            # replaces it; the reader refuses it
            with pytest.raises(RecordError, match="interrupted"):
                load_record(d)
            newer = [s for s in d.parent.iterdir() if s.is_dir() and s.name > d.name and (s / "record.json").is_file()]
            assert any(json.loads((s / "record.json").read_text()).get("status") == "completed" for s in newer), d
            continue
        rec = load_record(d)
        assert rec.results, d  # every other committed record is accepted by the reader, with its results
        if "status" in rec.data:
            assert rec.data["status"] == "completed", d  # a record written with the lifecycle: finished
        else:
            legacy.append(d)  # written before the lifecycle: accepted by the rule, contents untouched
    assert len(legacy) >= 50  # data/runs/cpu holds the book's reference runs made before the lifecycle
    train = reference_root("cpu") / "ch01_grpo"
    assert load_record(train, require=("accuracy_after", "total_seconds")).results["accuracy_after"] >= 0
    killed = tmp_path / "ch01_grpo"
    shutil.copytree(train, killed)
    data = json.loads((killed / "record.json").read_text())
    (killed / "record.json").write_text(json.dumps({**data, "results": {}}))
    with pytest.raises(RecordError, match="without a status and with empty results"):
        load_record(killed)
    (killed / "record.json").write_text(json.dumps({**data, "results": {"sft_seconds": 1.0}}))
    with pytest.raises(RecordError, match="lacks result.*total_seconds"):
        load_record(killed, require=("accuracy_after", "total_seconds"))


@pytest.mark.parametrize("content, pattern", [
    (b"\x89PNG\r\n\x1a\n\x00\x00\xff", "not a text file"),
    (b"[]", "holds a JSON list, not a run record"),
    (b'{"config": {}, "results": {}}', "missing provenance"),
    (b'{"config": {}, "provenance": {}, "results": [1]}', "missing results"),
    (b'{"config": {}, "provenance": {}, "res', "not valid JSON"),
])
def test_malformed_records_are_a_record_error_naming_the_file(tmp_path, content, pattern):
    (tmp_path / "record.json").write_bytes(content)
    with pytest.raises(RecordError, match=f"{tmp_path / 'record.json'}.*{pattern}"):
        RunRecord.load(tmp_path, strict=False)


def test_a_run_set_aside_in_the_repository_is_named_relative_to_it(capsys):
    """The message can land on a book page (a notebook's unfinished run set aside in _build/): no machine path."""
    import shutil

    from rlm_lab.record import REPO_ROOT, RunRecord

    d = REPO_ROOT / "_build" / "test-lifecycle" / "run"
    shutil.rmtree(d.parent, ignore_errors=True)
    try:
        RunRecord(d, {}).complete(x=1)
        RunRecord(d, {}).complete(x=2)  # the build tree: moved aside without force, and said so
        err = capsys.readouterr().err
        assert "replaced the run in _build/test-lifecycle/run (status completed" in err
        assert str(REPO_ROOT) not in err and "now in _build/test-lifecycle/.replaced/run." in err
    finally:
        shutil.rmtree(d.parent, ignore_errors=True)


def test_force_refuses_a_parent_folder_of_several_runs_and_replaces_a_named_one(tmp_path):
    """issue 42: `reference --out data/runs/cpu --force` moved all 2,766 committed files to .replaced/. --force on a
    folder that holds the records of more than one run is refused, saying how many files it would move; the exact run
    folder, named, is replaced as before; a window's own nested records are one run."""
    parent = tmp_path / "cpu"
    for name in ("a", "b"):
        RunRecord(parent / name, {"n": name}, command="x").complete()
        (parent / name / "metrics.jsonl").write_text('{"step": 1}\n')
    before = sorted(str(p.relative_to(parent)) for p in parent.rglob("*"))
    with pytest.raises(RecordError, match=rf"{parent} holds the records of 2 runs \(\d+ files, e\.g\. a\); --force "
                                          rf"would move all \d+ to .*\. --force replaces one run: name"):
        RunRecord(parent, {}, command="x", force=True)
    assert sorted(str(p.relative_to(parent)) for p in parent.rglob("*")) == before and not (tmp_path / ".replaced").exists()
    RunRecord(parent / "a", {"n": "again"}, command="x", force=True).complete()   # the exact run folder: replaced
    assert load_record(parent / "a").config == {"n": "again"} and load_record(parent / "b").config == {"n": "b"}
    window = tmp_path / "window"                      # a run with nested records of its own (a reference window)
    RunRecord(window, {}, command="x").complete()
    for name in ("insitu", "ch05/runs/r1"):
        RunRecord(window / name, {}, command="x").complete()
    RunRecord(window, {"again": 1}, command="x", force=True).complete()
    assert load_record(window).config == {"again": 1}
