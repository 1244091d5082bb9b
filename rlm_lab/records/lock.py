"""An exclusive lock on a run folder: ``fcntl.flock`` on ``<run_dir>/.lock``.

flock locks belong to the open file and are released by the kernel when the process dies (even by
SIGKILL), so a ``running`` record whose lock is free was left by a dead writer. The lock file holds the
writer's pid for error messages. The file stays after the run (hidden, git-ignored): unlinking it on release
would let a process that opened it just before lock the unlinked inode while another locks a new file.
Standard library only.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from .files import RecordError

LOCK_NAME = ".lock"


class FolderLock:
    """``acquire()`` or a RecordError naming the folder and the pid that holds it; ``release()`` frees it."""

    def __init__(self, folder: str | os.PathLike):
        self.folder = Path(folder)
        self.path = self.folder / LOCK_NAME
        self.fd: int | None = None

    def acquire(self) -> "FolderLock":
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as e:
            raise RecordError(f"cannot write to the run folder {self.folder}: {e.strerror}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pid = _pid_in(fd)
            os.close(fd)
            raise RecordError(f"{self.folder} is in use by another run (pid {pid or '?'}); wait for it to end "
                              "or write to another folder") from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self.fd = fd
        return self

    def release(self) -> None:
        if self.fd is None:
            return
        os.ftruncate(self.fd, 0)  # no pid: nobody holds it
        fcntl.flock(self.fd, fcntl.LOCK_UN)
        os.close(self.fd)
        self.fd = None


def lock_holder(folder: str | os.PathLike) -> int | None:
    """The pid holding ``folder``'s lock (0 if unknown), or None when nobody holds it."""
    path = Path(folder) / LOCK_NAME
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return _pid_in(fd) or 0
    finally:
        os.close(fd)  # closing drops a shared lock we may have taken
    return None


def _pid_in(fd: int) -> int | None:
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        return int(os.read(fd, 32).decode().strip() or 0) or None
    except (OSError, ValueError):
        return None
