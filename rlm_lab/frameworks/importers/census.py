"""The census behind the corpus's selection rule (data/configs/corpus/SOURCES): every candidate file of the
frameworks' example folders imported by ``predict --from``, one row each (framework, file, outcome, reason).

The frameworks' examples are not shipped here (only the corpus's sample is); to rerun, extract each repository's
``examples/`` at the commit SOURCES names into ``ROOT/<framework>/examples/`` (``git archive COMMIT examples``) and

    rlm-lab chapter 8 census ROOT data/configs/corpus_census.tsv

Out of scope (counted apart, not as refusals of an RL run): files the importer refuses as SFT, DPO, reward-model,
generation, evaluation or distillation runs, or as running no trainer.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

from ...errors import RlmLabError
from ...records.files import atomic_write_text
from . import import_from
from .common import predict_imported

PATTERNS = {"verl": "verl/examples/**/*.sh", "openrlhf": "openrlhf/examples/scripts/train_*.sh",
            "nemo-rl": "nemo-rl/examples/configs/**/*grpo*.yaml", "areal": "areal/examples/**/*.yaml"}
NOT_RL = re.compile(r"an SFT|SFT \(|a DPO run|reward-model training|generation \(inference\)|an evaluation|"
                    r"distillation|no rollout or gconfig|runs no |'bash' follows")


def census(root: Path) -> list[dict]:
    rows = []
    for fw, pattern in PATTERNS.items():
        for f in sorted(root.glob(pattern)):
            if not f.is_file():
                continue
            try:
                ip = predict_imported(import_from(f"{fw}:{f}"))
                outcome, why = ("priced" if ip.fits else "does not fit"), ""
            except RlmLabError as e:
                outcome, why = "refused", str(e).replace(str(root) + "/", "").replace("\t", " ")
            rl = not NOT_RL.search(why)
            rows.append({"framework": fw, "file": str(f.relative_to(root)), "rl_run": rl, "outcome": outcome,
                         "why": why.splitlines()[0][:200] if why else ""})
    return rows


CENSUS = Path(__file__).resolve().parents[3] / "data" / "configs" / "corpus_census.tsv"


def read_census(path: Path = CENSUS) -> list[dict]:
    """The census record's rows (framework, file, rl_run, outcome, why), as :func:`main` wrote them."""
    rows = []
    for line in path.read_text().splitlines():
        if line and not line.startswith("#"):
            fw, f, rl, outcome, why = (line.split("\t") + [""])[:5]
            rows.append({"framework": fw, "file": f, "rl_run": rl == "true", "outcome": outcome, "why": why})
    return rows


def counts(rows: list[dict]) -> dict:
    """Per framework: files, RL runs, priced, does not fit."""
    out: dict = {}
    for r in rows:
        c = out.setdefault(r["framework"], Counter())
        c["files"] += 1
        c["rl_runs"] += r["rl_run"]
        c[r["outcome"]] += 1
    return out


def main(argv: list[str]) -> int:
    """``rlm-lab chapter 8 census ROOT OUT.tsv``: the census of the examples under ``ROOT`` into ``OUT.tsv``."""
    if len(argv) != 2:
        raise RlmLabError("give two arguments: rlm-lab chapter 8 census ROOT OUT.tsv (the module docstring says how)")
    root, dest = Path(argv[0]), Path(argv[1])
    rows = census(root)
    lines = ["# framework\tfile\trl_run\toutcome\twhy (first 200 characters)"]
    lines += [f"{r['framework']}\t{r['file']}\t{str(r['rl_run']).lower()}\t{r['outcome']}\t{r['why']}" for r in rows]
    atomic_write_text(dest, "\n".join(lines) + "\n")
    for fw, c in counts(rows).items():
        print(fw, dict(c))
    return 0
