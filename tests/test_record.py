"""Run records: provenance, atomic writes (0644), safe appends, torn lines, default output roots."""

import json
import os

import pytest

from rlm_lab.errors import RlmLabError
from rlm_lab.record import (RecordError, RunRecord, append_jsonl, atomic_write_json, provenance, read_jsonl,
                            reference_root, runs_root)


def test_provenance_has_what_a_number_needs():
    p = provenance(command=["rlm-lab", "train"], seed=7)
    assert p["command"] == "rlm-lab train" and p["seed"] == 7
    assert p["hardware"]["cpu_count"] >= 1 and "gpus" in p["hardware"]
    assert p["versions"]["torch"] and p["versions"]["trl"] and p["versions"]["python"]
    assert len(p["git"]["commit"] or "") == 40
    assert p["date"].endswith("+00:00")


def test_record_round_trip(tmp_path):
    rec = RunRecord(tmp_path / "run", config={"algo": "grpo"}, command="x", seed=1)
    rec.log({"step": 1, "reward": 0.5})
    rec.log({"step": 2, "reward": 0.7})
    rec.update(accuracy_before=0.4, accuracy_after=0.6)
    back = RunRecord.load(tmp_path / "run")
    assert back.config == {"algo": "grpo"}
    assert back.results == {"accuracy_before": 0.4, "accuracy_after": 0.6}
    assert [m["reward"] for m in back.metrics()] == [0.5, 0.7]


def test_torn_last_line_is_an_error_unless_the_reader_drops_it_and_a_torn_middle_line_always_is(tmp_path):
    path = tmp_path / "m.jsonl"
    append_jsonl(path, {"a": 1})
    with open(path, "a") as f:
        f.write('{"a": 2')  # a crash in the middle of the last write
    with pytest.raises(RecordError, match=r"m.jsonl:2: a torn last line"):
        read_jsonl(path)
    assert read_jsonl(path, torn_tail="drop") == [{"a": 1}]  # a resume, which knows the writer died
    with open(path, "a") as f:
        f.write('\n{"a": 3}\n')
    with pytest.raises(RecordError, match=r"m.jsonl:2: not valid JSON"):
        read_jsonl(path, torn_tail="drop")


def test_atomic_write_leaves_old_file_on_failure(tmp_path):
    path = tmp_path / "r.json"
    atomic_write_json(path, {"v": 1})
    with pytest.raises(TypeError):
        atomic_write_json(path, {"v": object.__new__(type("X", (), {"__str__": None}))})
    assert json.loads(path.read_text()) == {"v": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]  # no temp files left behind


def test_load_errors_are_clear(tmp_path):
    with pytest.raises(RecordError, match="no run record"):
        RunRecord.load(tmp_path)
    (tmp_path / "record.json").write_text("{")
    with pytest.raises(RlmLabError, match="damaged"):
        RunRecord.load(tmp_path)


def test_records_and_atomic_files_are_world_readable(tmp_path):
    old = os.umask(0o022)
    try:
        rec = RunRecord(tmp_path / "run", config={}, command="x")
        rec.log({"step": 1})
        atomic_write_json(tmp_path / "plain.json", {"v": 1})
    finally:
        os.umask(old)
    for p in (rec.path, rec.metrics_path, tmp_path / "plain.json"):
        assert oct(os.stat(p).st_mode & 0o777) == "0o644", p  # mkstemp alone gives 0600


def test_default_outputs_are_never_the_committed_reference_runs(monkeypatch, tmp_path):
    monkeypatch.delenv("RLM_RUNS_DIR", raising=False)
    assert runs_root("cpu").parts[-3:] == ("_build", "runs", "cpu")
    assert runs_root("smoke").parts[-3:] == ("_build", "runs", "smoke")
    assert reference_root("cpu").parts[-3:] == ("data", "runs", "cpu")
    from rlm_lab.train.config import make_config

    # `rlm-lab train --size cpu` without --out: under _build, never data/runs (issue 8: data loss)
    assert make_config("grpo", "cpu").run_dir.parent == runs_root("cpu")
    monkeypatch.setenv("RLM_RUNS_DIR", str(tmp_path))
    assert runs_root("gpu") == tmp_path / "gpu"
