"""The standard library's privates (read from CPython 3.11; the version policy is :mod:`rlm_lab.compat`'s)."""

from __future__ import annotations

from multiprocessing.connection import Connection

from . import fail


def simple_queue_reader(queue) -> Connection:
    """``queue._reader``: the read end of a ``multiprocessing`` ``SimpleQueue``, a ``Connection`` that
    ``multiprocessing.connection.wait`` can wait on beside process sentinels (``rlm_lab.parallel.launch``: wake on
    the first result or the first dead rank, whichever comes first); the queue offers no public handle for it."""
    reader = getattr(queue, "_reader", None)
    if not isinstance(reader, Connection):
        raise fail("python", f"{type(queue).__name__}._reader (its read Connection) is missing")
    return reader
