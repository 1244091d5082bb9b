"""Records are portable: no absolute path of the machine that wrote them (issue 35, item 7).

A record names files of the repository (a profile, a checkpoint under ``_build``, the interpreter in ``.venv``);
written as absolute paths they carry the builder's folder layout (``/work/main/...``) into a committed file and
mean nothing on a reader's machine. :func:`portable` rewrites every string of a record before it is written: a
path inside the repository becomes repository-relative, one under the user's home ``~/...``; other absolute
paths (``/tmp`` scratch) are kept, since they name no one's layout but the OS's. Only what is written changes:
the running process keeps its absolute paths.
"""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent.parent


def _prefixes(root: Path, home: Path | None) -> list[tuple[str, str]]:
    out = []
    for r in {str(root), str(root.resolve())}:
        out.append((r.rstrip("/") + "/", ""))
    if home is not None and str(home) not in ("", "/"):
        out.append((str(home).rstrip("/") + "/", "~/"))
    return sorted(out, key=lambda p: -len(p[0]))  # the repository before a home it lies in


def portable(obj, root: Path | None = None, home: Path | None = None):
    """``obj`` (dicts, lists, strings, numbers) with every path inside ``root`` (default the repository) made
    relative to it and every one under ``home`` (default ``$HOME``) made ``~/...``, inside longer strings
    (command lines) too. The repository's own folder alone becomes ``.``."""
    root = Path(root or REPO_ROOT)
    home = Path(os.environ["HOME"]) if home is None and os.environ.get("HOME") else home
    subs = _prefixes(root, home)
    bare = {str(root).rstrip("/"), str(root.resolve()).rstrip("/")}

    def fix(x):
        if isinstance(x, str):
            if x.rstrip("/") in bare:
                return "."
            for old, new in subs:
                if old in x:
                    x = x.replace(old, new)
            return x
        if isinstance(x, dict):
            return {k: fix(v) for k, v in x.items()}
        if isinstance(x, (list, tuple)):
            return [fix(v) for v in x]
        return x

    return fix(obj)
