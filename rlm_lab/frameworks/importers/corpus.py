"""The corpus: real configs and run scripts from the frameworks' repositories at pinned commits, unedited, under
``data/configs/corpus/<framework>/<path there>`` (``SOURCES`` names repository, commit and path of each;
``corpus.yaml`` what ``predict --from`` does with each, refusals with their reason checked by hand once).

:func:`corpus_predictions` imports and predicts every entry: one row each (framework, file, commit, priced or the
one-line reason, step, critical stage, memory per device), for chapter 8's corpus table. All predictions.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from ...errors import RlmLabError
from . import import_from
from .common import REPO, predict_imported

CORPUS = REPO / "data" / "configs" / "corpus"


def sources() -> dict:
    """file (under the corpus) -> {repository, commit, date, path}."""
    out = {}
    for line in (CORPUS / "SOURCES").read_text().splitlines():
        if line and not line.startswith("#"):
            f, repo, commit, date, path = line.split("\t")
            out[f] = {"repository": repo, "commit": commit, "date": date, "path": path}
    return out


def entries() -> list[dict]:
    """corpus.yaml's entries: file (``A+B``: a TRL config and its accelerate config), outcome, reason, checked."""
    return yaml.safe_load((CORPUS / "corpus.yaml").read_text())["entries"]


def spec(entry: dict) -> str:
    """The ``--from`` value of an entry (its folder names the framework; ``openrlhf-2025`` is OpenRLHF)."""
    fw = entry["file"].split("/")[0].removesuffix("-2025")
    return f"{fw}:" + "+".join(str(CORPUS / part) for part in entry["file"].split("+"))


def corpus_predictions(hardware: str | None = None) -> list[dict]:
    src = sources()
    rows = []
    for e in entries():
        first = e["file"].split("+")[0]
        row = {"framework": first.split("/")[0].removesuffix("-2025"), "file": e["file"],
               "repository": src[first]["repository"], "commit": src[first]["commit"][:12], "expected": e["outcome"],
               "outcome": "priced", "why": None, "step_s": None, "critical": None, "memory_per_device_bytes": None,
               "fits": None}
        try:
            ip = predict_imported(import_from(spec(e), hardware=hardware))
        except RlmLabError as err:
            row |= {"outcome": "refused", "why": str(err).replace(str(CORPUS) + "/", "")}
        else:
            row |= {"fits": ip.fits, "memory_per_device_bytes": ip.memory_per_device(),
                    "step_s": ip.step_s if ip.fits else None, "critical": ip.critical() if ip.fits else None}
        rows.append(row)
    return rows
