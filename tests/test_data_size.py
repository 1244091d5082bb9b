"""The repository a reader clones (and a Colab install cell downloads) stays light: ``data/`` under 30 MB, no
committed data file over 1 MB, and only kinds of file that code reads. Task files are generated
(``data/tasks/*/SHA256SUMS`` only), traces and finished JSONL files are committed gzipped
(``records.lifecycle.compress_finished``), Gantt charts are drawn from the traces on demand, and only the newest
re-measurement window is in the tree (git history keeps the older ones)."""

import json
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
MAX_DATA_BYTES = 30 * 10**6
MAX_FILE_BYTES = 10**6
FIX = ("gzip the finished records' JSONL files: .venv/bin/python -c \"from rlm_lab.records.lifecycle import "
       "compress_finished; compress_finished('data/runs')\"")

# every kind of committed data file -> (a module that reads it, a string that module holds for it)
READERS = {
    ".json": ("rlm_lab/records/read.py", "json.loads"),
    ".json.gz": ("rlm_lab/records/files.py", ".json.gz"),   # traces (read_trace; Perfetto opens them as they are)
    ".jsonl.gz": ("rlm_lab/records/files.py", '".gz"'),     # finished metrics.jsonl / spans.jsonl (read_jsonl)
    ".jsonl": ("rlm_lab/records/files.py", "def read_jsonl"),  # a record that did not complete keeps its live file
    ".yaml": ("rlm_lab/frameworks/registry.py", "yaml"),
    "SHA256SUMS": ("rlm_lab/tasks/__init__.py", "SHA256SUMS"),
    ".md": ("rlm_lab/gpu_archive.py", "summary.md"),         # a GPU archive's summary; README.md files for people
    ".sh": ("rlm_lab/frameworks/importers/shell.py", "bash"),  # upstream run scripts of the config corpus
    "SOURCES": ("rlm_lab/frameworks/importers/corpus.py", '"SOURCES"'),
    ".tsv": ("rlm_lab/frameworks/importers/census.py", "corpus_census.tsv"),  # the corpus census's record  # the corpus' repository, commit, path
}


def kind(path: str) -> str:
    name = Path(path).name
    if "." not in name:
        return name
    suffixes = Path(name).suffixes
    return "".join(suffixes[-2:]) if suffixes[-1] == ".gz" else suffixes[-1]


@pytest.fixture(scope="module")
def committed() -> dict[str, int]:
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    names = subprocess.run(["git", "ls-files", "-z", "data"], cwd=REPO, capture_output=True, check=True,
                           text=True).stdout.split("\0")
    return {n: (REPO / n).stat().st_size for n in names if n and (REPO / n).is_file()}


def test_data_is_under_30_mb(committed):
    total = sum(committed.values())
    assert total <= MAX_DATA_BYTES, f"data/ holds {total / 1e6:.1f} MB in git (at most 30): {FIX}"


def test_no_committed_data_file_over_1_mb(committed):
    big = {n: s for n, s in committed.items() if s > MAX_FILE_BYTES}
    assert not big, f"over 1 MB: {big}; {FIX}"


def test_every_kind_of_data_file_is_read_by_code(committed):
    kinds = {kind(n) for n in committed}
    assert not kinds - set(READERS), f"kinds no code reads: {sorted(kinds - set(READERS))}"
    for k, (module, token) in READERS.items():
        assert token in (REPO / module).read_text(), f"{module} no longer reads {k} files"


def test_generated_and_drawn_files_are_not_committed(committed):
    assert not [n for n in committed if n.endswith((".png", "/trace.json"))]
    assert not [n for n in committed if n.startswith("data/tasks/") and n.endswith(".jsonl")]


def test_every_window_in_the_tree_is_some_chapters_newest(committed):
    # reference_report.latest_window reads the newest window per chapter; a window no chapter reads is history
    windows = sorted({Path(n).parts[4] for n in committed if n.startswith("data/runs/cpu/reference/")}, reverse=True)
    assert windows
    seen: set = set()
    for w in windows:
        record = json.loads((REPO / "data/runs/cpu/reference" / w / "record.json").read_text())
        chapters = {r["chapter"] for r in record["results"]["references"]}
        assert chapters - seen, f"window {w} is superseded for chapters {sorted(chapters)}: remove it (history keeps it)"
        seen |= chapters


def test_kind_names_compound_suffixes():
    assert kind("a/trace.json.gz") == ".json.gz" and kind("a/record.json") == ".json"
    assert kind("data/tasks/x/SHA256SUMS") == "SHA256SUMS" and kind("a/metrics.jsonl.gz") == ".jsonl.gz"
