"""The survey <-> book registry (data/paper/crosswalk.yaml): it loads, its page is the generated one, it covers the
survey's 24 insight and rule items, the files it names exist, and bad input is one line naming the field."""

import re
from pathlib import Path

import pytest

from rlm_lab import crosswalk as C
from rlm_lab.errors import RlmLabError

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def reg():
    return C.load()


def test_page_is_generated_from_the_registry(reg):
    assert C.PAGE.read_text(encoding="utf-8") == C.page(*reg), "run: rlm-lab crosswalk --write"


def test_page_is_in_the_book():
    from rlm_lab.book import CHAPTERS

    assert ("paper_crosswalk", None) in CHAPTERS


def test_coverage(reg):
    src, items = reg
    assert src["arxiv"] == "2608.27046"
    insights = [it for it in items if it.kind == "insight"]
    assert len(insights) == 24                      # 20 boxed items (Sec. 2.6, 3.8, 4.7) + 4 in-text rules
    assert sum(it.kind == "opportunity" for it in items) == 13
    assert {"t4-dpo", "t9-ac", "note-gap", "note-dpo-pairs", "cf-tok"} <= {it.id for it in items}


def test_counts_add_up(reg):
    _, items = reg
    for field in ("before", "verdict"):
        assert sum(C.counts(items, field).values()) == len(items)


def test_named_files_exist(reg):
    """Every repository path a row names (``rlm_lab/...py``, ``data/...``, ``tests/...``) exists."""
    _, items = reg
    paths = {m for it in items for m in re.findall(r"\b((?:rlm_lab|data|tests|configs)/[\w./-]+\.(?:py|yaml))",
                                                      it.book + " " + it.why)}
    paths |= {f"rlm_lab/cost/{m}" for it in items for m in re.findall(r"(?<![\w/])cost/(\w+\.py)", it.book + " " + it.why)}
    assert paths, "the rows name no files"
    missing = sorted(p for p in paths if not (REPO / p).exists())
    assert not missing, missing


def _write(tmp_path, text):
    p = tmp_path / "c.yaml"
    p.write_text(text)
    return p


ROW = "{id: a, kind: table, paper: T1, item: x, book: y, before: match, verdict: match, why: z}"


@pytest.mark.parametrize("text, msg", [
    ("source: {arxiv: '1', compared_at: x}\nitems: [" + ROW + ", " + ROW + "]", r"items\[1\]\.id: 'a' used twice"),
    ("source: {arxiv: '1', compared_at: x}\nitems: [" + ROW.replace("verdict: match", "verdict: same") + "]",
     r"items\[0\]\.verdict \(a\): must be one of"),
    ("source: {arxiv: '1', compared_at: x}\nitems: [" + ROW.replace(", why: z", "") + "]", r"missing why"),
    ("source: {arxiv: '1', compared_at: x}\nitems: [" + ROW.replace("kind: table", "kind: figure") + "]",
     r"items\[0\]\.kind"),
    ("items: []", "exactly source and items"),
    ("source: [", "not valid UTF-8 YAML"),
])
def test_bad_input(tmp_path, text, msg):
    with pytest.raises(RlmLabError, match=msg):
        C.load(_write(tmp_path, text))


def test_too_big(tmp_path, monkeypatch):
    monkeypatch.setattr(C, "MAX_BYTES", 10)
    with pytest.raises(RlmLabError, match="larger than 10 bytes"):
        C.load(_write(tmp_path, "source: {}\nitems: []\n"))


def test_every_insight_has_guideline_files_citing_the_survey(reg):
    """Each of the survey's 24 insight and rule items names guideline files (data/guidelines/gNN-*.yaml) that exist
    and cite the survey among their sources."""
    from rlm_lab.chapters.ch09_guidelines.cases import load_guidelines

    by_num = {g.id[:3]: g for g in load_guidelines()}
    _, items = reg
    for it in (i for i in items if i.kind == "insight"):
        named = re.findall(r"\bg(\d\d)\b", it.book)
        assert named, f"{it.id} names no guideline"
        for n in named:
            g = by_num[f"g{n}"]
            assert any("2608.27046" in s["url"] for s in g.sources), f"{g.id} does not cite the survey"
