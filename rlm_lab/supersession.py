"""Which committed records a newer one replaces: never shown as current.

A reference window (``rlm-lab reference``, :mod:`rlm_lab.reference`) declares in its config, per reference, the
run folders under ``data/runs/<size>/`` it re-measures (``references[].replaces``: e.g. the window
``data/runs/cpu/reference/20261204T084630Z`` replaces ``ch07_fusion`` and chapter 5's single runs). Such a folder
is **superseded**: a page may keep it for history, labelled so, but a current value never reads it.

    replaced = superseded("cpu")          # {"ch07_fusion": Replacement(window, reference), ...}
    by = superseded_by("data/runs/cpu/ch07_fusion/20261201T..", replaced)   # the replacement, or None
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .errors import RlmLabError
from .record import RunRecord, reference_root, repo_root


@dataclass(frozen=True)
class Replacement:
    """A window's reference that re-measured a folder: the window folder (relative to the repository), its
    reference's name and the arms it measured (A, B)."""

    window: str
    reference: str
    arms: tuple


def _windows(size: str, root: Path | None) -> list:
    base = Path(root) if root is not None else reference_root(size) / "reference"
    out = []
    for d in sorted((p for p in base.iterdir() if p.is_dir()), reverse=True) if base.is_dir() else []:
        try:
            out.append(RunRecord.load(d))
        except RlmLabError:
            continue   # an interrupted or damaged window replaces nothing
    return out


def superseded(size: str = "cpu", root: Path | None = None) -> dict:
    """``{folder: Replacement}`` for every folder (a name under ``data/runs/<size>/``, possibly ``a/b``) that a
    completed window declares it replaces; the newest window wins where two replace the same folder."""
    out: dict = {}
    for rec in _windows(size, root):
        done = {r.get("name") for r in rec.results.get("references", [])}
        window = Path(rec.dir).resolve()
        where = str(window.relative_to(repo_root())) if window.is_relative_to(repo_root()) else window.name
        for ref in rec.config.get("references", []):
            if ref.get("name") not in done:
                continue   # asked but not measured: it replaces nothing
            for folder in ref.get("replaces", []):
                out.setdefault(str(folder), Replacement(where, ref["name"], tuple(ref.get("arms", ()))))
    return out


def superseded_by(path: str, replaced: dict) -> Replacement | None:
    """The replacement of the record at ``path`` (``data/runs/<size>/<folder>[/...]`` or a bare folder name), or
    None when no window replaces it."""
    parts = Path(path).parts
    if len(parts) > 3 and parts[:2] == ("data", "runs"):
        parts = parts[3:]
    for k in range(len(parts), 0, -1):
        hit = replaced.get("/".join(parts[:k]))
        if hit is not None:
            return hit
    return None
