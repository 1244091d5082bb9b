"""Run records: provenance, atomic writes, safe appends, torn-line tolerance."""

import json
import os

import pytest

from rlm_lab.errors import RlmLabError
from rlm_lab.record import RunRecord, append_jsonl, atomic_write_json, provenance, read_jsonl, runs_root


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


def test_torn_last_line_is_skipped_but_torn_middle_line_raises(tmp_path):
    path = tmp_path / "m.jsonl"
    append_jsonl(path, {"a": 1})
    with open(path, "a") as f:
        f.write('{"a": 2')  # a crash in the middle of the last write
    assert read_jsonl(path) == [{"a": 1}]
    with open(path, "a") as f:
        f.write('\n{"a": 3}\n')
    with pytest.raises(json.JSONDecodeError):
        read_jsonl(path)


def test_atomic_write_leaves_old_file_on_failure(tmp_path):
    path = tmp_path / "r.json"
    atomic_write_json(path, {"v": 1})
    with pytest.raises(TypeError):
        atomic_write_json(path, {"v": object.__new__(type("X", (), {"__str__": None}))})
    assert json.loads(path.read_text()) == {"v": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]  # no temp files left behind


def test_load_errors_are_clear(tmp_path):
    with pytest.raises(RlmLabError, match="no run record"):
        RunRecord.load(tmp_path)
    (tmp_path / "record.json").write_text("{")
    with pytest.raises(RlmLabError, match="damaged"):
        RunRecord.load(tmp_path)


def test_runs_root(monkeypatch, tmp_path):
    monkeypatch.delenv("RLM_RUNS_DIR", raising=False)
    assert runs_root("cpu").parts[-3:] == ("data", "runs", "cpu")
    assert runs_root("smoke").parts[-3:] == ("_build", "runs", "smoke")
    monkeypatch.setenv("RLM_RUNS_DIR", str(tmp_path))
    assert runs_root("gpu") == tmp_path / "gpu"
