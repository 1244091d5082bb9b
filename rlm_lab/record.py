"""Run records: config, per-step metrics, results and provenance of one run, on disk, with a lifecycle.

Layout of a run directory::

    <run_dir>/record.json    status (running -> completed | failed: why | interrupted), start/end times,
                             config + provenance + results (rewritten atomically)
    <run_dir>/metrics.jsonl  one JSON object per step (appended, one write per line)

The mechanics live in :mod:`rlm_lab.records` (``lifecycle``: :class:`RunRecord`; ``read``: which records
a reader accepts; ``lock``: one writer per folder; ``files``: atomic writes). This module is what the rest
of the package imports, plus where runs go:

- :func:`runs_root` -- where commands write by default: ``_build/runs/<size>/`` (not committed;
  ``$RLM_RUNS_DIR/<size>`` if set).
- :func:`reference_root` -- the committed reference runs, ``data/runs/<size>/``: read by the book, never
  a default output (writing there takes an explicit ``--out``).

Standard library only, so that the book can read records without torch.
"""

from __future__ import annotations

import os
from pathlib import Path

from .records.files import (RecordError, append_jsonl, atomic_write_json, atomic_write_text, read_jsonl,
                            read_text, read_trace, trace_path, write_trace)
from .records.lifecycle import SCHEMA_VERSION, RunRecord, Terminated, clean_scratch, set_aside
from .records.lock import lock_holder
from .records.provenance import PACKAGES, REPO_ROOT, git_commit, hardware, provenance, versions
from .records.read import check_completed, effective_status, read_record_file

__all__ = [
    "PACKAGES", "REPO_ROOT", "SCHEMA_VERSION", "RecordError", "RunRecord", "Terminated", "append_jsonl",
    "atomic_write_json", "atomic_write_text", "check_completed", "clean_scratch", "effective_status",
    "finished", "git_commit", "hardware", "load_record", "load_records", "lock_holder", "provenance", "read_jsonl",
    "read_record_file", "read_text", "read_trace", "reference_root", "repo_relative", "repo_root", "runs_root",
    "set_aside", "trace_path", "versions", "write_trace",
]


def repo_root() -> Path:
    """The repository's root, read at call time (a test that sets ``rlm_lab.record.REPO_ROOT`` moves every
    reader that asks through this function)."""
    return REPO_ROOT


def repo_relative(path) -> str:
    """``path`` as a page shows it: relative to the repository when inside it (no machine path on a page),
    else its name only."""
    root = REPO_ROOT.resolve()
    p = Path(path).resolve()
    return str(p.relative_to(root)) if p.is_relative_to(root) else p.name


def runs_root(size: str) -> Path:
    """Where runs of a size are written by default: ``_build/runs/<size>/`` (not committed), or
    ``$RLM_RUNS_DIR/<size>``. Never the committed reference runs (:func:`reference_root`)."""
    override = os.environ.get("RLM_RUNS_DIR")
    if override:
        return Path(override) / size
    return REPO_ROOT / "_build" / "runs" / size


def reference_root(size: str = "cpu") -> Path:
    """The committed reference runs of a size: ``data/runs/<size>/`` (read-only for commands)."""
    return REPO_ROOT / "data" / "runs" / size


def load_record(run_dir: str | os.PathLike, require=()) -> RunRecord:
    """A completed run's record, or a :class:`RecordError` naming the folder (missing, damaged, not
    finished, or without the result keys named in ``require``)."""
    return RunRecord.load(run_dir, require=require)


def finished(run_dir: str | os.PathLike, require=()) -> bool:
    """Does ``run_dir`` hold a completed run (with the results named in ``require``)? For "reuse this build's own
    run if it finished, else run again" (the new run moves an unfinished one aside and says so)."""
    try:
        load_record(run_dir, require)
        return True
    except RecordError:
        return False


def load_records(root: str | os.PathLike, names, require=()) -> dict[str, RunRecord]:
    """``{name: record}`` for every name under ``root``: a missing or unfinished one is an error (naming
    it), never a shorter table."""
    return {n: load_record(Path(root) / n, require) for n in names}
