"""The survey arXiv 2608.27046 against the book, item by item: the registry ``data/paper/crosswalk.yaml`` (every
section, table, formula, insight and research opportunity of the survey, where the book covers it, and a verdict
then and now), its loader and the book page generated from it (``book/paper_crosswalk.md``).

    rlm-lab crosswalk            # print the page
    rlm-lab crosswalk --write    # write book/paper_crosswalk.md

Bad input is one line naming the file and the field, before anything is written; the file is read only up to
:data:`MAX_BYTES`.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

import yaml

from .errors import RlmLabError

REPO = Path(__file__).resolve().parent.parent
REGISTRY = REPO / "data" / "paper" / "crosswalk.yaml"
PAGE = REPO / "book" / "paper_crosswalk.md"
MAX_BYTES = 1 << 20
KINDS = ("section", "table", "formula", "insight", "opportunity", "note")
VERDICTS = ("match", "differs", "partial", "beyond", "missing")
FIELDS = ("id", "kind", "paper", "item", "book", "before", "verdict", "why")
KIND_TITLES = {"section": "Sections", "table": "Tables", "formula": "Formulas", "insight": "Insights and rules",
               "opportunity": "Research opportunities (Sec. 7)", "note": "Points inside the survey"}


@dataclass(frozen=True)
class CrosswalkItem:
    id: str
    kind: str
    paper: str
    item: str
    book: str
    before: str
    verdict: str
    why: str


def load(path: Path | str = REGISTRY) -> tuple[dict, list[CrosswalkItem]]:
    """(source, items) of the registry; raises RlmLabError naming the file and the field."""
    p = Path(path)
    if not p.is_file():
        raise RlmLabError(f"{p}: crosswalk registry not found")
    with p.open("rb") as f:
        raw = f.read(MAX_BYTES + 1)
    if len(raw) > MAX_BYTES:
        raise RlmLabError(f"{p}: larger than {MAX_BYTES} bytes; a crosswalk registry is a few hundred lines")
    try:
        doc = yaml.safe_load(raw.decode("utf-8"))
    except (UnicodeDecodeError, yaml.YAMLError) as e:
        raise RlmLabError(f"{p}: not valid UTF-8 YAML ({str(e).splitlines()[0]})") from None
    if not isinstance(doc, dict) or set(doc) != {"source", "items"}:
        raise RlmLabError(f"{p}: must be a mapping with exactly source and items")
    src = doc["source"]
    if not isinstance(src, dict) or not isinstance(src.get("arxiv"), str) or not src.get("compared_at"):
        raise RlmLabError(f"{p}: source needs arxiv (a string) and compared_at")
    if not isinstance(doc["items"], list) or not doc["items"]:
        raise RlmLabError(f"{p}: items must be a non-empty list")
    items, seen = [], set()
    for i, row in enumerate(doc["items"]):
        where = f"{p}: items[{i}]"
        if not isinstance(row, dict):
            raise RlmLabError(f"{where} must be a mapping of {', '.join(FIELDS)}")
        missing, extra = [k for k in FIELDS if k not in row], sorted(set(map(str, row)) - set(FIELDS))
        if missing or extra:
            raise RlmLabError(f"{where} ({row.get('id', '?')}): " + "; ".join(
                ([f"missing {', '.join(missing)}"] if missing else []) + ([f"unknown {', '.join(extra)}"] if extra else [])))
        for k in FIELDS:
            if not isinstance(row[k], str) or not row[k].strip():
                raise RlmLabError(f"{where}.{k} ({row['id']}): must be a non-empty string, got {row[k]!r}")
        if row["id"] in seen:
            raise RlmLabError(f"{where}.id: {row['id']!r} used twice")
        seen.add(row["id"])
        if row["kind"] not in KINDS:
            raise RlmLabError(f"{where}.kind ({row['id']}): must be one of {', '.join(KINDS)}, got {row['kind']!r}")
        for k in ("before", "verdict"):
            if row[k] not in VERDICTS:
                raise RlmLabError(f"{where}.{k} ({row['id']}): must be one of {', '.join(VERDICTS)}, got {row[k]!r}")
        items.append(CrosswalkItem(**{k: row[k].strip() for k in FIELDS}))
    return src, items


def counts(items: list[CrosswalkItem], field: str = "verdict") -> dict[str, int]:
    """How many items carry each verdict (``field``: "verdict" now, "before" when first compared)."""
    return {v: sum(getattr(it, field) == v for it in items) for v in VERDICTS}


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def page(src: dict, items: list[CrosswalkItem]) -> str:
    """The book page: counts before and now, then one table per kind."""
    def line(c):
        return ", ".join(f"{v} {c[v]}" for v in VERDICTS)

    moved = [it for it in items if it.before != it.verdict]
    out = ["# The survey and the book, item by item", "",
           f"This page compares the survey {{cite:p}}`besta2026performance` (arXiv {src['arxiv']}) with this book: "
           "every section, table, formula, insight and research opportunity, where the book covers it and how. "
           "**match**: the same claim or formula (formulas checked by a test in the survey's own convention, "
           "`rlm_lab/cost/paper.py`); **differs**: both sides, with which is right and why; **partial**: part of "
           "it is covered; **beyond**: the book goes further; **missing**: not in the book. *Before* is the verdict "
           f"when the survey's full text was first compared with the book (commit {src['compared_at']}). The page is "
           "generated from `data/paper/crosswalk.yaml` by `rlm-lab crosswalk --write`; a test fails when "
           "the two disagree.", "",
           f"{len(items)} items. Before: {line(counts(items, 'before'))}. Now: {line(counts(items))}. "
           f"{len(moved)} items changed verdict.", ""]
    for kind in KINDS:
        rows = [it for it in items if it.kind == kind]
        if not rows:
            continue
        out += [f"## {KIND_TITLES[kind]}", "", "| paper | item | book | before | now | why |", "|---|---|---|---|---|---|"]
        out += [f"| {_cell(it.paper)} | {_cell(it.item)} | {_cell(it.book)} | {it.before} | **{it.verdict}** | "
                f"{_cell(it.why)} |" for it in rows]
        out.append("")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="rlm-lab crosswalk", description="render data/paper/crosswalk.yaml into book/paper_crosswalk.md")
    ap.add_argument("--write", action="store_true", help="write book/paper_crosswalk.md (default: print it)")
    args = ap.parse_args(argv)
    text = page(*load())
    if args.write:
        tmp = PAGE.with_suffix(".md.tmp")
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(PAGE)
    else:
        print(text)
    return 0
