"""One error type for bad input: the CLI prints its message as one line and exits 2."""
import math
import numbers
import os
import stat
import tempfile
from pathlib import Path


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


def finite_number(value, what: str, *, minimum: float = 0.0, inclusive: bool = False, maximum: float | None = None,
                  integer: bool = False):
    """``value`` if it is a finite number above ``minimum`` (``>=`` with ``inclusive``) and at most ``maximum``
    (an int when ``integer``); else one :class:`RlmLabError` naming ``what``. NaN fails every comparison, so a
    plain ``v <= 0`` check lets it through: this one refuses NaN and infinities first."""
    kind = "an integer" if integer else "a number"
    if isinstance(value, bool) or not isinstance(value, numbers.Integral if integer else numbers.Real):
        raise RlmLabError(f"{what} must be {kind}, got {value!r}")
    if not math.isfinite(value):
        raise RlmLabError(f"{what} must be a finite number, got {value!r}")
    low_ok = value >= minimum if inclusive else value > minimum
    if not low_ok or (maximum is not None and value > maximum):
        low = f"{'>=' if inclusive else '>'} {minimum:g}"
        rng = f"{low} and <= {maximum:,g}" if maximum is not None else low
        raise RlmLabError(f"{what} must be {rng}, got {value!r}")
    return value


def number_arg(what: str = "value", **limits):
    """An argparse ``type=`` that parses a float (or an int, ``integer=True``) and checks it with
    :func:`finite_number`, so ``--link-gbps nan`` is refused while the command line is parsed, before any work."""

    def parse(text: str):
        integer = limits.get("integer", False)
        try:
            value = int(text) if integer else float(text)
        except ValueError:
            raise RlmLabError(f"{what} must be {'an integer' if integer else 'a number'}, got {text!r}") from None
        return finite_number(value, what, **limits)

    parse.__name__ = "integer" if limits.get("integer") else "number"
    return parse


def read_input_text(path, label: str, limit: int = 1_000_000) -> str:
    """The UTF-8 text of an input file, read in bounded time and memory, or one :class:`RlmLabError`
    ``"<label>: <what is wrong>"``. The file's type is checked with ``stat`` before it is opened (a FIFO or a
    device named ``*.yaml`` would block ``read`` for ever), opened non-blocking and checked again on the open
    descriptor (so a file swapped between the two checks is refused too), and at most ``limit`` bytes are
    read (the bound is in the message)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise RlmLabError(f"{label}: does not exist") from None
    except (OSError, ValueError) as e:  # ValueError: a NUL byte in the path
        raise RlmLabError(f"{label}: cannot be read ({getattr(e, 'strerror', None) or e})") from None
    kinds = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
             (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))

    def refuse_unless_regular(mode):
        if not stat.S_ISREG(mode):
            kind = next((name for test, name in kinds if test(mode)), "not a regular file")
            raise RlmLabError(f"{label}: is {kind}, not a regular file")

    refuse_unless_regular(st.st_mode)
    if st.st_size > limit:
        raise RlmLabError(f"{label}: is {st.st_size:,} bytes, more than the {limit:,} an input file may hold")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as e:
        raise RlmLabError(f"{label}: cannot be read ({e.strerror})") from None
    try:
        refuse_unless_regular(os.fstat(fd).st_mode)
        chunks, size = [], 0
        while size <= limit:
            chunk = os.read(fd, min(1 << 20, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as e:
        raise RlmLabError(f"{label}: cannot be read ({e.strerror})") from None
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if len(data) > limit:
        raise RlmLabError(f"{label}: is more than the {limit:,} bytes an input file may hold")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise RlmLabError(f"{label}: is not a text file (byte {e.start} is not UTF-8)") from None
