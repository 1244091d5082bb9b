"""One error type for bad input: the CLI prints its message as one line and exits 2."""


class RlmLabError(Exception):
    """A user-facing error: the message says what was wrong and how to fix it."""


def unknown(kind: str, name: object, known) -> RlmLabError:
    """Build the standard 'unknown X' error that lists the valid choices."""
    choices = ", ".join(sorted(str(k) for k in known))
    return RlmLabError(f"unknown {kind} {name!r}; choose one of: {choices}")
