"""Files of a run record, written so that a crash never leaves a torn or half-written one.

- :func:`atomic_write_text` / :func:`atomic_write_json`: temp file in the same folder, fsync, ``os.replace``
  (POSIX rename is atomic: readers see the old file or the new one). Written ``0644`` (``mkstemp``
  creates ``0600``; records and task files are meant to be read by others), minus the process umask.
- :func:`write_trace` / :func:`read_trace`: a Chrome/Perfetto trace, written gzipped (``trace.json.gz``; Perfetto
  and Chrome's trace viewer open it as it is: about a tenth of the bytes); read gzipped or plain, the decompressed
  size bounded.
- :func:`append_jsonl`: one ``write`` per line on an ``O_APPEND`` file, fsynced: a crash loses at most the
  line being written.
- :func:`stored` and :func:`read_jsonl` find a JSONL file plain or gzipped (committed records keep their finished
  JSONL files gzipped: ``lifecycle.compress_finished``).
- :func:`read_jsonl`: strict by default: a malformed line, even a torn last one, is a :class:`RecordError`
  naming the file and line. Only a reader that knows the writer died (resuming an interrupted run) asks
  for ``torn_tail="drop"``.

Standard library only.
"""

from __future__ import annotations

import gzip
import json
import math
import os
import tempfile
from pathlib import Path

from ..errors import RlmLabError


class RecordError(RlmLabError):
    """A run record (or one of its files) is missing, damaged, or not a completed run."""


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write_text(path: str | os.PathLike, text: str, mode: int = 0o644) -> Path:
    """Write ``text`` so that readers see the old file or the new one, never a torn one."""
    return atomic_write_bytes(path, text.encode("utf-8"), mode)


def atomic_write_bytes(path: str | os.PathLike, data: bytes, mode: int = 0o644) -> Path:
    """Write ``data`` so that readers see the old file or the new one, never a torn one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, mode & ~_umask())
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        if os.path.exists(tmp):
            os.unlink(tmp)
        if isinstance(e, OSError) and e.filename is None:  # a failed write (a full disk): name the file
            raise OSError(e.errno, e.strerror, str(path)) from e
        raise
    return path


def atomic_write_json(path: str | os.PathLike, obj) -> Path:
    return atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=_jsonable) + "\n")


TRACE_SUFFIXES = (".json.gz", ".json")  # written gzipped; plain traces (older records) are still read
MAX_TRACE_BYTES = 512 * 2**20  # decompressed: the largest committed trace is under 4 MB


def write_trace(folder: str | os.PathLike, trace: dict, name: str = "trace") -> Path:
    """``<folder>/<name>.json.gz``: the trace as compact JSON, gzipped with no timestamp (same trace, same bytes)."""
    text = json.dumps(trace, sort_keys=True, separators=(",", ":"), default=_jsonable)
    return atomic_write_bytes(Path(folder) / f"{name}.json.gz", gzip.compress(text.encode(), 9, mtime=0))


def trace_path(folder: str | os.PathLike, name: str = "trace") -> Path:
    """The folder's trace file (``<name>.json.gz``, else a plain ``<name>.json``); a RecordError if neither."""
    for suffix in TRACE_SUFFIXES:
        if (path := Path(folder) / f"{name}{suffix}").is_file():
            return path
    raise RecordError(f"{Path(folder) / name}.json.gz does not exist (nor a plain {name}.json)")


def read_trace(folder: str | os.PathLike, name: str = "trace") -> dict:
    """The folder's Chrome/Perfetto trace (gzipped or plain), at most MAX_TRACE_BYTES decompressed."""
    path = trace_path(folder, name)
    try:
        with (gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")) as f:
            data = f.read(MAX_TRACE_BYTES + 1)
        if len(data) > MAX_TRACE_BYTES:
            raise RecordError(f"{path} holds more than {MAX_TRACE_BYTES // 2**20} MiB of trace; not read")
        trace = json.loads(data)
    except (OSError, EOFError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise RecordError(f"{path} is not a readable trace ({e})") from None
    if not isinstance(trace, dict):
        raise RecordError(f"{path}: expected a JSON object (a Chrome trace), got {type(trace).__name__}")
    return trace


def append_jsonl(path: str | os.PathLike, obj) -> None:
    """Append one JSON line with a single ``write`` on an O_APPEND file and fsync it:
    a crash loses at most the line being written, never earlier lines."""
    line = json.dumps(obj, sort_keys=True, default=_jsonable) + "\n"
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
        os.fsync(fd)
    except OSError as e:  # a full disk: name the file (os.write's error does not)
        if e.filename is None:
            raise OSError(e.errno, e.strerror, str(path)) from e
        raise
    finally:
        os.close(fd)


def read_text(path: str | os.PathLike, what: str = "file") -> str:
    """The UTF-8 text of ``path``, or a RecordError that names the file (missing, a folder, binary)."""
    path = Path(path)
    if path.is_dir():
        raise RecordError(f"{path} is a folder, not a {what}")
    try:
        return path.read_bytes().decode("utf-8")
    except FileNotFoundError:
        raise RecordError(f"{path} does not exist") from None
    except UnicodeDecodeError:
        raise RecordError(f"{path} is not a text file (binary content); the {what} is damaged") from None
    except OSError as e:
        raise RecordError(f"cannot read {path}: {e.strerror}") from None


def stored(path: str | os.PathLike) -> Path | None:
    """``path`` if it exists, else its gzipped form ``<path>.gz`` if that exists, else None."""
    path = Path(path)
    gz = path.with_name(path.name + ".gz")
    return path if path.exists() else gz if gz.is_file() else None


MAX_JSONL_BYTES = 512 * 2**20  # decompressed


def _read_gzipped_text(path: Path) -> str:
    try:
        with gzip.open(path, "rb") as f:
            data = f.read(MAX_JSONL_BYTES + 1)
        if len(data) > MAX_JSONL_BYTES:
            raise RecordError(f"{path} holds more than {MAX_JSONL_BYTES // 2**20} MiB of rows; not read")
        return data.decode("utf-8")
    except (OSError, EOFError, UnicodeDecodeError) as e:
        raise RecordError(f"{path} is not a readable gzipped JSONL file ({e})") from None


def read_jsonl(path: str | os.PathLike, torn_tail: str = "error") -> list[dict]:
    """The rows of a JSONL file (or of its gzipped form, ``<path>.gz``, when only that exists). Any line that is
    not a JSON object is a RecordError naming the file and line; ``torn_tail="drop"`` instead drops a malformed
    *last* line without a newline (the line a killed writer was appending), for readers that know the writer died."""
    path = Path(path)
    if (found := stored(path)) is not None and found != path:
        path, text = found, _read_gzipped_text(found)
    else:
        text = read_text(path, "metrics file")
    lines = text.split("\n")
    rows = []
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            torn = i == len(lines)  # no newline after it: the write never finished
            if torn and torn_tail == "drop":
                break
            kind = "a torn last line (a writer killed mid-write)" if torn else f"not valid JSON ({e.msg})"
            raise RecordError(f"{path}:{i}: {kind}") from None
        if not isinstance(row, dict):
            raise RecordError(f"{path}:{i}: expected a JSON object per line, got {type(row).__name__}")
        rows.append(row)
    return rows


def _jsonable(o):
    if hasattr(o, "item"):
        return o.item()
    if isinstance(o, (set, tuple)):
        return list(o)
    if isinstance(o, Path):
        return str(o)
    if hasattr(o, "value"):  # enums
        return o.value
    return str(o)


def json_text(obj, indent: int | None = 2) -> str:
    """``obj`` as standard JSON for a reader's program (``rlm-lab ... --json``): a NaN or infinite float
    becomes ``null`` (Python's ``json`` would print a bare ``NaN``, which RFC 8259 JSON parsers refuse)."""
    def clean(o):
        if isinstance(o, float) and not math.isfinite(o):
            return None
        if isinstance(o, dict):
            return {k: clean(v) for k, v in o.items()}
        if isinstance(o, (list, tuple)):
            return [clean(v) for v in o]
        return o

    # round-trip through the default encoder first so numpy scalars, enums and paths become plain values
    plain = json.loads(json.dumps(obj, default=_jsonable))
    return json.dumps(clean(plain), indent=indent, allow_nan=False)
