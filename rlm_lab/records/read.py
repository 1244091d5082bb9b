"""Reading run records: a number reaches a table only from a record of a run that finished.

The status of a record (``record.json``'s ``status``) and what a reader does with it:

================================  =========================================================================
``completed``                     accepted
``running``, folder lock held     refused: still being written (by another process) -- accepted only in the
                                  process that writes it (a live run looking at its own record)
``running``, lock free            refused: the writer died (SIGKILL, power loss) before it could say so
``interrupted``                   refused: SIGINT/SIGTERM ended the run (``rlm-lab train --resume DIR``)
``failed: <why>``                 refused, with the why
no ``status`` (legacy, schema 1)  records written before the lifecycle existed (the committed reference
                                  runs): accepted as completed only if ``results`` is non-empty (a run killed
                                  before the end left empty results: the old writers put every result in
                                  one final update) and holds every key the reader requires; else refused
================================  =========================================================================

Malformed files (binary, not JSON, ``[]``, missing ``config``/``provenance``/``results``) are a
:class:`~rlm_lab.records.files.RecordError` naming the file. Standard library only.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from .files import RecordError, read_text
from .lock import lock_holder

RECORD_NAME = "record.json"
REQUIRED_KEYS = ("config", "provenance", "results")
COMPLETED = "completed"


def read_record_file(run_dir: str | os.PathLike) -> dict:
    """The parsed ``record.json`` of ``run_dir``, checked for shape (not for status)."""
    run_dir = Path(run_dir)
    path = run_dir / RECORD_NAME
    if not run_dir.exists():
        raise RecordError(f"no run record at {run_dir}: the folder does not exist")
    if not path.exists():
        raise RecordError(f"no run record at {path}; pass the folder a run wrote")
    text = read_text(path, "run record")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise RecordError(f"{path} is not valid JSON ({e.msg} at line {e.lineno}); the run record is damaged") from None
    if not isinstance(data, dict):
        raise RecordError(f"{path} holds a JSON {type(data).__name__}, not a run record (an object with "
                          f"{', '.join(REQUIRED_KEYS)})")
    missing = [k for k in REQUIRED_KEYS if not isinstance(data.get(k), dict)]
    if missing:
        raise RecordError(f"{path} is missing {', '.join(missing)} (or they are not objects); the run record is damaged")
    status = data.get("status")
    if status is not None and not isinstance(status, str):
        raise RecordError(f"{path} has a non-text status {status!r}; the run record is damaged")
    return data


def effective_status(run_dir: str | os.PathLike, data: dict, own: bool = False) -> str:
    """``completed``, ``legacy`` (no status), ``running`` (writer alive), ``dead`` (``running`` but the lock
    is free), ``interrupted`` or ``failed: ...``. ``own``: this process holds the lock."""
    status = data.get("status")
    if status is None:
        return "legacy"
    if status == "running":
        return "running" if own or lock_holder(run_dir) is not None else "dead"
    return status


def check_completed(run_dir: str | os.PathLike, data: dict, require=(), own: bool = False) -> None:
    """Raise a RecordError naming ``run_dir`` unless its record counts as a completed run (rules above)."""
    status = effective_status(run_dir, data, own)
    missing = [k for k in require if k not in data["results"]]
    if status == "legacy":
        if not data["results"]:
            raise RecordError(f"{run_dir}: record without a status and with empty results: the run was killed "
                              "before it finished; rerun it")
        if missing:
            raise RecordError(f"{run_dir}: record without a status lacks result(s) {', '.join(missing)}: "
                              "not a finished run of this kind")
        return
    if status == "running" and own:
        return
    if status == "running":
        raise RecordError(f"{run_dir}: the run is still running (pid {lock_holder(run_dir) or '?'}); "
                          "wait for it to finish")
    if status == "dead":
        raise RecordError(f"{run_dir}: status 'running' but no process holds the folder: the run died "
                          "(killed) before it finished; rerun it or resume it with `rlm-lab train --resume`")
    if status == "interrupted":
        raise RecordError(f"{run_dir}: the run was interrupted before it finished; resume it with "
                          "`rlm-lab train --resume` or rerun it")
    if status != COMPLETED:
        raise RecordError(f"{run_dir}: the run did not complete (status {status!r})")
    if missing:
        raise RecordError(f"{run_dir}: completed record lacks result(s) {', '.join(missing)}")
