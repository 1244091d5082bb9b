"""Committed records keep finished JSONL files and traces gzipped; every reader takes either form."""

import gzip
import json

import pytest

from rlm_lab.record import RecordError, RunRecord, read_jsonl, read_trace, write_trace
from rlm_lab.records import files
from rlm_lab.records.lifecycle import compress_finished


def _finished(folder, steps=3, complete=True):
    rec = RunRecord(folder, {"x": 1}, command="test")
    for i in range(steps):
        rec.log({"step": i + 1, "loss": 0.5 / (i + 1)})
    (folder / "spans.jsonl").write_text("".join(json.dumps({"step": i}) + "\n" for i in range(steps)))
    (folder / "trace.json").write_text(json.dumps({"traceEvents": [{"name": "generate", "ts": 0}]}))
    rec.update(done=True)
    if complete:
        rec.complete()
    else:
        rec.fail("stopped")
    return rec


def test_compress_finished_gzips_completed_records_only_and_readers_see_the_same_rows(tmp_path):
    done, failed = _finished(tmp_path / "a"), _finished(tmp_path / "b", complete=False)
    rows, spans = done.metrics(), read_jsonl(done.dir / "spans.jsonl")
    trace = read_trace(done.dir)
    written = compress_finished(tmp_path)
    assert sorted(p.name for p in written) == ["metrics.jsonl.gz", "spans.jsonl.gz", "trace.json.gz"]
    assert not (done.dir / "metrics.jsonl").exists() and (failed.dir / "metrics.jsonl").exists()
    assert RunRecord.load(done.dir).metrics() == rows and read_jsonl(done.dir / "spans.jsonl") == spans
    assert read_trace(done.dir) == trace
    assert json.loads(gzip.decompress((done.dir / "trace.json.gz").read_bytes())) == trace  # Perfetto's form
    again = (done.dir / "metrics.jsonl.gz").read_bytes()
    assert compress_finished(tmp_path) == [] and (done.dir / "metrics.jsonl.gz").read_bytes() == again


def test_write_trace_is_deterministic_and_read_back(tmp_path):
    trace = {"traceEvents": [{"name": "x", "ts": 1.5, "dur": 2}]}
    a, b = write_trace(tmp_path / "a", trace), write_trace(tmp_path / "b", trace)
    assert a.name == "trace.json.gz" and a.read_bytes() == b.read_bytes()
    assert read_trace(tmp_path / "a") == trace


def test_damaged_or_oversized_compressed_files_are_one_clear_error(tmp_path, monkeypatch):
    (tmp_path / "trace.json.gz").write_bytes(b"not gzip")
    with pytest.raises(RecordError, match=r"trace.json.gz is not a readable trace"):
        read_trace(tmp_path)
    (tmp_path / "metrics.jsonl.gz").write_bytes(gzip.compress(b'{"step": 1}\n' * 100))
    monkeypatch.setattr(files, "MAX_JSONL_BYTES", 50)
    with pytest.raises(RecordError, match=r"metrics.jsonl.gz holds more than"):
        read_jsonl(tmp_path / "metrics.jsonl")
    with pytest.raises(RecordError, match=r"trace.json.gz does not exist"):
        read_trace(tmp_path / "nothing")
