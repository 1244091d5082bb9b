"""Records the process never ended explicitly: every open :class:`~rlm_lab.records.lifecycle.RunRecord` is
registered here, and at exit it is ended ``interrupted`` after SIGINT/SIGTERM, ``failed: <exception>`` after an
uncaught exception, ``completed`` if it holds results, ``failed`` otherwise. SIGTERM raises :class:`Terminated`
(a KeyboardInterrupt) while a record is open, so ``with`` blocks and ``finally`` run;
:func:`interruptible` makes that so whatever handlers were set before (Ray's, a shell's).
"""

from __future__ import annotations

import atexit
import os
import signal
import sys
import threading
from pathlib import Path

_OPEN: dict = {}  # records this process is writing (key: resolved folder)
_EXIT: dict = {"signal": None, "exception": None}


def _key(run_dir) -> Path:
    return Path(run_dir).resolve()


def register(rec) -> None:
    """``rec`` (a RunRecord) is open: this process ends it at exit if nothing else does."""
    install_hooks()
    _OPEN[_key(rec.dir)] = rec


def unregister(run_dir) -> None:
    """The record in ``run_dir`` was ended (or closed): nothing to do for it at exit."""
    _OPEN.pop(_key(run_dir), None)


def is_open(run_dir) -> bool:
    """Whether this process holds the record in ``run_dir`` open."""
    return _key(run_dir) in _OPEN


def install_hooks() -> None:
    """Install the exit hook, the excepthook and (main thread, handlers unset) SIGTERM/SIGINT handlers; once."""
    if _EXIT.get("installed"):
        return
    _EXIT["installed"] = True
    atexit.register(_end_open_records)
    previous = sys.excepthook

    def excepthook(exc_type, exc, tb):
        _EXIT["exception"] = exc if not issubclass(exc_type, KeyboardInterrupt) else None
        if issubclass(exc_type, KeyboardInterrupt):
            _EXIT["signal"] = "SIGINT"
        previous(exc_type, exc, tb)

    sys.excepthook = excepthook
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _on_sigterm)
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _on_sigint)


class Terminated(KeyboardInterrupt):
    """SIGTERM while a record was open: unwinds like Ctrl-C, so ``with`` blocks and ``finally`` run."""


def _on_sigterm(signum, frame):
    if not _OPEN:  # nothing of ours to close: behave as if we had never installed a handler
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)
        return
    _EXIT["signal"] = "SIGTERM"
    raise Terminated("SIGTERM")


def _raise_terminated(signum, frame):
    _EXIT["signal"] = "SIGTERM"
    raise Terminated("SIGTERM")


def interruptible():
    """From now on, in the main thread, SIGTERM raises :class:`Terminated` and SIGINT KeyboardInterrupt (open
    records end ``interrupted``, ``finally`` blocks run and stop what the run started), whatever was set
    before: ``ray.init`` installs a SIGTERM handler that calls ``sys.exit`` (a record would end ``failed``),
    and a run started in the background by a non-interactive shell inherits SIGINT ignored (POSIX), so
    that an interrupt meant for the run would not reach it. Call it for long runs the user may stop; returns
    the previous handlers (for :func:`restore_handlers`), or None off the main thread, where Python cannot
    set handlers."""
    if threading.current_thread() is not threading.main_thread():
        return None
    return (signal.signal(signal.SIGTERM, _raise_terminated), signal.signal(signal.SIGINT, _on_sigint))


def restore_handlers(previous) -> None:
    """Put back the handlers :func:`interruptible` replaced."""
    if previous is not None and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, previous[0])
        signal.signal(signal.SIGINT, previous[1])


def _on_sigint(signum, frame):
    _EXIT["signal"] = "SIGINT"
    raise KeyboardInterrupt


def _end_open_records() -> None:
    for rec in list(_OPEN.values()):
        try:
            if _EXIT["signal"]:
                rec.interrupt()
            elif _EXIT["exception"] is not None:
                rec.fail(_EXIT["exception"])
            elif rec.results:
                rec.complete()
            else:
                rec.fail("the process exited before recording any result")
        except Exception:  # at exit: never mask the process's own outcome
            pass
