"""The guideline registry of chapter 9 (data/guidelines/*.yaml) given files it cannot use: one RlmLabError line
each, naming the file and what is wrong; a record folder named in a file never leaves data/runs/<size>/."""

from pathlib import Path

import yaml
from fault_matrix import Case

REPO = Path(__file__).resolve().parents[2]
SAMPLE = "g01-one-step-off-faster"
CASES = []


def _copy(tmp, mutate, name=SAMPLE):
    doc = yaml.safe_load((REPO / "data" / "guidelines" / f"{SAMPLE}.yaml").read_text())
    mutate(doc)
    (tmp / f"{name}.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))


def _loader(doc):
    def call(tmp):
        from rlm_lab.chapters.ch09_guidelines.cases import load_guidelines

        load_guidelines(tmp)
    call.__doc__ = doc
    return call


def row(id, what, mutate, doc, message):
    CASES.append(Case(id, what, call=_loader(doc), setup=lambda tmp: _copy(tmp, mutate), message=message))


row("record-path-escapes", "a guideline whose evidence names a record folder outside data/runs/<size>/",
    lambda d: d["evidence"].update(a="../../etc"), "evidence.a: '../../etc'",
    r"guideline g01-one-step-off-faster\.yaml: evidence\.a '\.\./\.\./etc' is not a folder name or glob")
row("record-absolute-path", "a guideline whose evidence names an absolute path",
    lambda d: d["evidence"].update(b="/tmp/x"), "evidence.b: '/tmp/x'",
    r"guideline g01-one-step-off-faster\.yaml: evidence\.b '/tmp/x' is not a folder name or glob")
row("source-undated", "a source without the date it was read", lambda d: d["sources"][0].update(read="recently"),
    "sources[0].read: 'recently'", r"g01-one-step-off-faster\.yaml: sources\[0\]\.read must be the date read")
row("source-not-https", "a source whose URL is not https", lambda d: d["sources"][0].update(url="ftp://x.org/a"),
    "sources[0].url: 'ftp://x.org/a'", r"g01-one-step-off-faster\.yaml: sources\[0\]\.url 'ftp://x\.org/a' is not an https URL")
row("unknown-evidence-kind", "an evidence kind the chapter does not know", lambda d: d["evidence"].update(kind="vibes"),
    "evidence.kind: vibes", r"g01-one-step-off-faster\.yaml: evidence\.kind must be one of paired, per_run")
row("test-without-target", "a within-test without its target", lambda d: d.update(test={"within": 0.25}),
    "test: {within: 0.25}", r"g01-one-step-off-faster\.yaml: test has keys \['within'\]")
row("unknown-prediction", "a scale prediction the chapter does not have",
    lambda d: d["scale"].update(predict="crystal_ball"), "scale.predict: crystal_ball",
    r"g01-one-step-off-faster\.yaml: scale\.predict 'crystal_ball' is not a prediction of this chapter")
row("holds-missing-scale", "a per-GPU-count condition that leaves out one of 8, 64, 512",
    lambda d: d["scale"].update(holds={8: {"above": 1}, 64: {"above": 1}}), "scale.holds: {8: ..., 64: ...}",
    r"g01-one-step-off-faster\.yaml: scale\.holds per device count must name exactly 8, 64, 512")
row("id-not-file-name", "a guideline whose id is not its file's name", lambda d: d.update(id="g99-other"),
    "id: g99-other in g01-one-step-off-faster.yaml", r"id 'g99-other' must be the file's name")


def _not_yaml(tmp):
    (tmp / "g01-bad.yaml").write_text("id: [unclosed\n")


CASES.append(Case("not-yaml", "a guideline file that is not YAML", setup=_not_yaml,
                  call=_loader("load_guidelines(folder) with g01-bad.yaml holding 'id: [unclosed'"),
                  message=r"guideline g01-bad\.yaml: is not valid YAML"))
CASES.append(Case("empty-folder", "a guideline folder with no file", call=_loader("load_guidelines(an empty folder)"),
                  message=r"no guideline files \(\*\.yaml\) in "))


# ---- issue 42: keys YAML reads as integers, a list where a name belongs, a FIFO, a chapter outside the book --------

def _raw(text, name=SAMPLE):
    """Setup: the sample file with ``text`` appended (YAML keys that safe_dump would quote)."""
    def setup(tmp):
        src = (REPO / "data" / "guidelines" / f"{SAMPLE}.yaml").read_text()
        (tmp / f"{name}.yaml").write_text(src + text)
    return setup


def raw_row(id, what, text, doc, message):
    CASES.append(Case(id, what, call=_loader(doc), setup=_raw(text), message=message))


raw_row("integer-top-key", "a top-level key YAML reads as an integer (7: x)", "7: x\n",
        "load_guidelines(folder) with '7: x' appended",
        r"guideline g01-one-step-off-faster\.yaml: the file has key 7 \(int\); its keys must be text")


def _int_beside_text(tmp):
    (tmp / "g01-ints.yaml").write_text("id: g01-ints\n7: x\ntitle: t\n")


CASES.append(Case("integer-key-beside-text", "an integer key beside text keys in a file missing others",
                  setup=_int_beside_text, call=_loader("load_guidelines(folder) with g01-ints.yaml: {id, 7, title}"),
                  message=r"guideline g01-ints\.yaml: the file has key 7 \(int\); its keys must be text"))
row("evidence-kind-list", "evidence.kind given as a list ([paired])", lambda d: d["evidence"].update(kind=["paired"]),
    "evidence.kind: [paired]",
    r"guideline g01-one-step-off-faster\.yaml: evidence\.kind must be one of paired, .*, not \['paired'\]")
row("evidence-integer-key", "an integer key inside evidence", lambda d: d["evidence"].update({3: "x"}),
    "evidence: {..., 3: x}", r"guideline g01-one-step-off-faster\.yaml: evidence has key 3 \(int\); its keys must be text")
row("chapter-escapes-book", "chapter: ../README (a file outside book/, which the old check found)",
    lambda d: d.update(chapter="../README"), "chapter: ../README",
    r"guideline g01-one-step-off-faster\.yaml: chapter '\.\./README' is no page of the book")
row("chapter-list", "chapter given as a list", lambda d: d.update(chapter=["ch06_async"]), "chapter: [ch06_async]",
    r"guideline g01-one-step-off-faster\.yaml: chapter \['ch06_async'\] is no page of the book")


def _fifo(tmp):
    import os

    os.mkfifo(tmp / "g00-pipe.yaml")


CASES.append(Case("fifo-named-yaml", "a FIFO named *.yaml in the folder (no writer: a plain read blocks for ever)",
                  setup=_fifo, call=_loader("load_guidelines(folder) holding a FIFO g00-pipe.yaml"),
                  message=r"guideline g00-pipe\.yaml: is a FIFO, not a regular file"))


def _huge(tmp):
    with open(tmp / "g00-huge.yaml", "wb") as f:
        f.truncate(50_000_000)   # sparse: no disk used


CASES.append(Case("file-too-large", "a 50 MB guideline file (read bounded, not loaded)", setup=_huge,
                  call=_loader("load_guidelines(folder) holding a 50 MB g00-huge.yaml"),
                  message=r"guideline g00-huge\.yaml: is 50,000,000 bytes, more than the 200,000"))
