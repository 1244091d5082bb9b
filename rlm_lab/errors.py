"""One error type for bad input: the CLI prints its message as one line and exits 2."""


class RlmLabError(Exception):
    """A user-facing error: the message says what was wrong and how to fix it."""


def unknown(kind: str, name: object, known) -> RlmLabError:
    """Build the standard 'unknown X' error that lists the valid choices."""
    choices = ", ".join(sorted(str(k) for k in known))
    return RlmLabError(f"unknown {kind} {name!r}; choose one of: {choices}")


def check_output_location(path, what: str = "output location") -> None:
    """Refuse, before any work, a folder that cannot be written: ``path`` must be a folder (or not exist yet)
    under a writable one. Checked by creating and removing a temporary file in the nearest existing ancestor,
    because ``os.access`` says yes to root on a read-only folder."""
    import os
    import tempfile
    from pathlib import Path

    path = Path(path)
    if path.exists() and not path.is_dir():
        raise RlmLabError(f"{what} {path} is a file, not a folder")
    probe = path
    while not probe.exists() and probe.parent != probe:
        probe = probe.parent
    if not probe.is_dir():
        raise RlmLabError(f"{what} {path}: {probe} is a file, so no folder can be made under it")
    try:
        fd, tmp = tempfile.mkstemp(prefix=".rlm-write-probe-", dir=probe)
        os.close(fd)
        os.unlink(tmp)
    except OSError as e:
        raise RlmLabError(f"{what} {path} is not writable ({probe}: {e.strerror or e})") from None
