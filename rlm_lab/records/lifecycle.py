"""A run record with a lifecycle: ``running`` -> ``completed`` | ``failed: <why>`` | ``interrupted``.

Layout of a run folder::

    <run_dir>/record.json     status, start/end times, config, provenance, results (rewritten atomically)
    <run_dir>/metrics.jsonl   one JSON object per step (appended, one write per line)
    <run_dir>/.lock           held (fcntl.flock) by the one process writing the folder
    <run_dir>/.scratch-*      temporary folders of the run: removed when it ends, and on the next start
                              (a SIGKILLed run cannot clean up after itself)

How a record ends:

- ``with RunRecord(...) as rec:`` (or ``rec.complete()`` / ``rec.fail(e)`` / ``rec.interrupt()``): the block
  ending normally completes it, KeyboardInterrupt (SIGINT) or SIGTERM marks it ``interrupted``, any other
  exception ``failed: <Type: message>``.
- Writers that never call these (scripts that just ``update()``): at interpreter exit a still-open record
  is ``interrupted`` after SIGINT/SIGTERM, ``failed: <exception>`` after an uncaught exception,
  ``completed`` if it holds results and ``failed`` if it holds none (:mod:`rlm_lab.records.exit_hooks`).
- SIGKILL: the record stays ``running`` and the kernel frees the lock; readers (``records.read``) see a
  ``running`` record nobody holds and refuse it as dead.

Rewriting a folder that holds a record needs ``force=True`` (``--force``): the old contents are moved to
``<parent>/.replaced/<name>.<UTC time>`` and the move is printed. The build tree (``_build/``: outputs every build
regenerates) is the exception: there the old run is moved aside the same way without ``force``.
Standard library only.
"""

from __future__ import annotations

import datetime as _dt
import gzip
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

from .exit_hooks import (Terminated, install_hooks, interruptible, is_open, register,  # noqa: F401 - Terminated,
                         restore_handlers, unregister)  # interruptible, restore_handlers: this module's API
from .files import (
    RecordError,
    append_jsonl,
    atomic_write_bytes,
    atomic_write_json,
    atomic_write_text,
    read_jsonl,
    stored,
)
from .lock import LOCK_NAME, FolderLock, lock_holder
from .portable import portable
from .provenance import REPO_ROOT, provenance, utc_now
from .read import RECORD_NAME, check_completed, effective_status, read_record_file

SCHEMA_VERSION = 2
SCRATCH_PREFIX = ".scratch-"
REPLACED = ".replaced"
BUILD_TREE = REPO_ROOT / "_build"


class RunRecord:
    """One run on disk: ``record.json`` (status, config, provenance, results) and ``metrics.jsonl``."""

    def __init__(self, run_dir: str | os.PathLike, config: dict | None = None, command=None, seed=None, *,
                 force: bool = False, say=None):
        self.dir = Path(run_dir)
        self.replaced: Path | None = None
        install_hooks()  # before the record says "running": a SIGTERM from then on is seen
        replace = force or _in_build_tree(self.dir)
        if not replace:
            _refuse_existing(self.dir)  # first without touching anything (no lock file, no folder) ...
        elif not _in_build_tree(self.dir):
            _refuse_many_runs(self.dir)  # --force replaces one run, never a parent folder of many
        self._lock = open_folder(self.dir)
        try:
            if holds_run(self.dir):
                if not replace:
                    _refuse_existing(self.dir)  # ... then again under the lock (a run may have started since)
                self.replaced = set_aside(self.dir, say)
            self.data = {
                "schema_version": SCHEMA_VERSION,
                "status": "running",
                "started": utc_now(),
                "ended": None,
                "config": config or {},
                "provenance": provenance(command, seed),
                "results": {},
            }
            self.save()
        except BaseException:
            self._lock.release()
            raise
        register(self)

    # ---- reopening ------------------------------------------------------------------------------
    @classmethod
    def reopen(cls, run_dir: str | os.PathLike) -> "RunRecord":
        """Take over an unfinished run (``interrupted``, ``failed``, or ``running`` with its writer dead) to
        continue it: status back to ``running``, results and metrics kept (a torn last metrics line,
        the one a killed writer was appending, is dropped)."""
        run_dir = Path(run_dir)
        data = read_record_file(run_dir)
        status = effective_status(run_dir, data)
        if status == "completed" or (status == "legacy" and data["results"]):  # the legacy rule of records.read
            raise RecordError(f"{run_dir}: the run already completed; nothing to resume")
        obj = cls.__new__(cls)
        obj.dir, obj.replaced = run_dir, None
        obj._lock = open_folder(run_dir)
        try:
            obj.data = read_record_file(run_dir)  # again, under the lock
            if obj.metrics_path.exists():
                rows = read_jsonl(obj.metrics_path, torn_tail="drop")
                atomic_write_json_lines(obj.metrics_path, rows)
            obj.data.setdefault("resumed", []).append({"at": utc_now(), "from_status": status})
            obj.data.update(status="running", ended=None)
            obj.save()
        except BaseException:
            obj._lock.release()
            raise
        register(obj)
        return obj

    # ---- reading ---------------------------------------------------------------------------------
    @classmethod
    def load(cls, run_dir: str | os.PathLike, *, require=(), strict: bool = True) -> "RunRecord":
        """The record in ``run_dir``. ``strict`` (default): a RecordError unless the run completed (see
        ``rlm_lab.records.read`` for the rule, legacy records included) and its results hold ``require``."""
        run_dir = Path(run_dir)
        obj = cls.__new__(cls)
        obj.dir, obj.replaced, obj._lock = run_dir, None, None
        obj.data = read_record_file(run_dir)
        if strict:
            check_completed(run_dir, obj.data, require, own=is_open(run_dir))
        return obj

    @property
    def status(self) -> str:
        return effective_status(self.dir, self.data, own=self._lock is not None and self._lock.fd is not None)

    @property
    def path(self) -> Path:
        return self.dir / RECORD_NAME

    @property
    def metrics_path(self) -> Path:
        return self.dir / "metrics.jsonl"

    @property
    def results(self) -> dict:
        return self.data["results"]

    @property
    def config(self) -> dict:
        return self.data["config"]

    def metrics(self) -> list[dict]:
        return read_jsonl(self.metrics_path) if stored(self.metrics_path) else []

    # ---- writing ---------------------------------------------------------------------------------
    def log(self, metrics: dict) -> None:
        append_jsonl(self.metrics_path, metrics)

    def update(self, **results) -> None:
        self.data["results"].update(results)
        self.save()

    def save(self) -> None:
        atomic_write_json(self.path, portable(self.data))  # no absolute path of this machine on disk

    def scratch(self, prefix: str = "") -> Path:
        """A temporary folder inside the run folder: removed when the run ends or, after a SIGKILL, when
        the next run of this folder starts (a tempdir in /tmp would outlive a killed run)."""
        return Path(tempfile.mkdtemp(prefix=SCRATCH_PREFIX + prefix, dir=self.dir))

    # ---- ending ------------------------------------------------------------------------------------
    def complete(self, **results) -> None:
        self.data["results"].update(results)
        self._end("completed")

    def fail(self, why) -> None:
        if isinstance(why, BaseException):
            why = f"{type(why).__name__}: {why}"
        line = (str(why).strip().splitlines() or ["unknown error"])[0]
        self._end(f"failed: {line[:300]}")

    def interrupt(self) -> None:
        self._end("interrupted")

    def _end(self, status: str) -> None:
        if self._lock is None or self._lock.fd is None:
            raise RecordError(f"{self.dir}: this record is not open for writing")
        self.data.update(status=status, ended=utc_now())
        try:
            self.save()
        finally:
            self.close()

    def close(self) -> None:
        """Remove the scratch folders and free the folder (the status is left as it is)."""
        clean_scratch(self.dir)
        unregister(self.dir)
        if self._lock is not None:
            self._lock.release()

    def __enter__(self) -> "RunRecord":
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        if self._lock is None or self._lock.fd is None:
            return False
        if exc_type is None:
            self.complete()
        elif issubclass(exc_type, KeyboardInterrupt):
            self.interrupt()
        else:
            self.fail(exc)
        return False


def atomic_write_json_lines(path: Path, rows: list[dict]) -> None:
    atomic_write_text(path, "".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))


# ---- folders ------------------------------------------------------------------------------------------

def open_folder(run_dir: Path) -> FolderLock:
    """Create ``run_dir`` (a clear error if it is a file or not writable), lock it, clean a killed run's
    scratch folders and temp files."""
    if run_dir.exists() and not run_dir.is_dir():
        raise RecordError(f"run folder {run_dir} is a file, not a folder; choose another --out")
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise RecordError(f"cannot create the run folder {run_dir}: {e.strerror}") from None
    lock = FolderLock(run_dir).acquire()
    clean_scratch(run_dir)
    return lock


def clean_scratch(run_dir: Path) -> None:
    """Remove the run's scratch folders and half-written temp files (``.record.json.*.tmp``)."""
    for p in Path(run_dir).glob(".*"):
        if p.name.startswith(SCRATCH_PREFIX) and p.is_dir():
            shutil.rmtree(p, ignore_errors=True)
        elif p.name.endswith(".tmp") and p.is_file():
            p.unlink(missing_ok=True)


def _refuse_existing(run_dir: Path) -> None:
    """A RecordError if ``run_dir`` is being written (its lock is held) or holds a run or files."""
    if not run_dir.is_dir():
        return
    pid = lock_holder(run_dir)
    if pid is not None:
        raise RecordError(f"{run_dir} is in use by another run (pid {pid or '?'}); wait for it to end "
                          "or write to another folder")
    if holds_run(run_dir):
        what = "a run" if (run_dir / RECORD_NAME).exists() else "files"
        raise RecordError(f"{run_dir} already holds {what} ({_describe(run_dir)}); pass --force to "
                          "replace them (they are moved aside) or write to another folder")


def runs_under(run_dir: Path) -> tuple[list[Path], int]:
    """(the folders of the runs ``run_dir`` holds, the files under it). A run is a folder with a record.json that no
    folder between it and ``run_dir`` has (a window's or a sweep's nested records belong to their run); ``run_dir``
    itself with a record.json is one run, whatever it nests."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        return [], 0
    if (run_dir / RECORD_NAME).exists():
        return [run_dir], sum(1 for p in run_dir.rglob("*") if not p.is_dir())
    runs, files = [], 0
    for root, dirs, names in os.walk(run_dir):
        files += len(names)
        if RECORD_NAME in names and Path(root) != run_dir:
            runs.append(Path(root))
    runs = [r for r in runs if not any(o != r and r.is_relative_to(o) for o in runs)]
    return sorted(runs), files


def _refuse_many_runs(run_dir: Path) -> None:
    """--force on a folder that holds the records of more than one run (a mistyped parent: ``data/runs/cpu``) is
    refused, saying how much it would move; the exact run folder is named instead."""
    runs, files = runs_under(run_dir)
    if len(runs) > 1:
        raise RecordError(f"{run_dir} holds the records of {len(runs)} runs ({files:,} files, e.g. "
                          f"{runs[0].relative_to(run_dir)}); --force would move all {files:,} to "
                          f"{run_dir.parent / REPLACED}/. --force replaces one run: name that run's own folder")


def holds_run(run_dir: Path) -> bool:
    """Does ``run_dir`` hold anything of a run (a record, metrics, or any visible file)?"""
    return any(not p.name.startswith(".") for p in Path(run_dir).iterdir())


def set_aside(run_dir: Path, say=None) -> Path:
    """Move everything in ``run_dir`` (but its lock) to ``<parent>/.replaced/<name>.<UTC time>``; say so.
    A hidden folder, so that readers that list ``<parent>`` (``ch04_*``) never take an old run for a new one."""
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")
    dest = run_dir.parent / REPLACED / f"{run_dir.name}.{stamp}"
    what = _describe(run_dir)
    dest.mkdir(parents=True)
    for p in run_dir.iterdir():
        if p.name != LOCK_NAME:
            os.replace(p, dest / p.name)
    (say or _stderr)(f"rlm-lab: replaced the run in {_shown(run_dir)} ({what}); the old one is now in {_shown(dest)}")
    return dest


def _shown(path: Path) -> str:
    """A folder as a message shows it: relative to the repository when inside it (the message may land on a book
    page, where no machine path belongs: a notebook's run set aside in the build tree), else as given."""
    p, root = Path(path).resolve(), REPO_ROOT.resolve()
    return str(p.relative_to(root)) if p.is_relative_to(root) else str(path)


def _describe(run_dir: Path) -> str:
    try:
        data = read_record_file(run_dir)
    except RecordError:
        return "no readable record.json" if (run_dir / RECORD_NAME).exists() else "no record.json"
    return f"status {effective_status(run_dir, data)}, started {data.get('started') or data['provenance'].get('date')}"


def _in_build_tree(run_dir: Path) -> bool:
    try:
        run_dir.resolve().relative_to(BUILD_TREE.resolve())
        return True
    except ValueError:
        return False


def _stderr(msg: str) -> None:
    print(msg, file=sys.stderr)


# a finished record's append-only files, and traces an older writer left plain
GZIPPED = ("metrics.jsonl", "spans.jsonl", "spans.rank*.jsonl", "trace.json", "trace.rank*.json")


def compress_finished(root: str | os.PathLike) -> list[Path]:
    """Gzip (no timestamp: same rows, same bytes) the JSONL files and plain traces of every *completed* record
    under ``root``, for committing; readers take either form (``files.stored``, ``files.read_trace``). Returns the
    files written."""
    done = []
    for rec in sorted(Path(root).rglob("record.json")):
        folder = rec.parent
        try:
            data = read_record_file(folder)
        except RecordError:
            continue
        status = effective_status(folder, data)
        if not (status == "completed" or (status == "legacy" and data.get("results"))):  # the rule of records.read
            continue
        for pattern in GZIPPED:
            for plain in sorted(folder.glob(pattern)):
                gz = plain.with_name(plain.name + ".gz")
                done.append(atomic_write_bytes(gz, gzip.compress(plain.read_bytes(), 9, mtime=0)))
                plain.unlink()
    return done
