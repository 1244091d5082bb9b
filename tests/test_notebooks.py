"""Notebook conventions, checked without running anything (the book build runs them; nbval too: `make test-nbval`).

Each notebooks/<name>.md (jupytext MyST, the reviewed source) has a paired, output-free <name>.ipynb
with the same cells (Colab and nbval read the .ipynb); its first code cell is tagged `parameters` and
sets SIZE; a Colab install cell comes before anything imports rlm_lab; the book lists it.
"""

import ast
import re
from pathlib import Path

import jupytext
import pytest
import yaml

from rlm_lab import book

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.md"))
NAMES = [p.stem for p in NOTEBOOKS]
REPO_URL = yaml.safe_load((ROOT / "book" / "_config.yml").read_text())["repository"]["url"]


def code_cells(nb):
    return [c for c in nb.cells if c.cell_type == "code"]


def test_there_are_notebooks():
    assert "ch00_setup" in NAMES


@pytest.mark.parametrize("name", NAMES)
def test_ipynb_is_paired_and_has_the_same_cells(name):
    ipynb = ROOT / "notebooks" / f"{name}.ipynb"
    assert ipynb.exists(), f"notebooks/{name}.ipynb is missing: run `make notebooks`"
    md_nb, ipynb_nb = jupytext.read(ROOT / "notebooks" / f"{name}.md"), jupytext.read(ipynb)
    md_cells = [(c.cell_type, c.source) for c in md_nb.cells]
    ipynb_cells = [(c.cell_type, c.source) for c in ipynb_nb.cells]
    assert md_cells == ipynb_cells, f"notebooks/{name}.ipynb differs from its .md: run `make notebooks`"


@pytest.mark.parametrize("name", NAMES)
def test_ipynb_has_no_outputs(name):
    nb = jupytext.read(ROOT / "notebooks" / f"{name}.ipynb")
    dirty = [i for i, c in enumerate(code_cells(nb)) if c.get("outputs") or c.get("execution_count")]
    assert not dirty, f"notebooks/{name}.ipynb has outputs in code cells {dirty}: commit it output-free"


@pytest.mark.parametrize("name", NAMES)
def test_md_declares_a_kernel(name):
    # Without a kernelspec MyST-NB renders a .md notebook without executing it.
    nb = jupytext.read(ROOT / "notebooks" / f"{name}.md")
    assert nb.metadata.get("kernelspec", {}).get("name") == "python3"


@pytest.mark.parametrize("name", NAMES)
def test_first_code_cell_is_the_parameters_cell(name):
    first = code_cells(jupytext.read(ROOT / "notebooks" / f"{name}.md"))[0]
    assert "parameters" in first.metadata.get("tags", []), f"{name}: tag the first code cell `parameters`"
    assigned = {t.id: n.value.value for n in ast.parse(first.source).body if isinstance(n, ast.Assign)
                for t in n.targets if isinstance(t, ast.Name) and isinstance(n.value, ast.Constant)}
    assert assigned.get("SIZE") == "smoke", f"{name}: the parameters cell must set SIZE = \"smoke\""


@pytest.mark.parametrize("name", NAMES)
def test_size_follows_the_environment(name):
    source = "\n".join(c.source for c in code_cells(jupytext.read(ROOT / "notebooks" / f"{name}.md")))
    assert "SIZE = size_from_env(SIZE)" in source, f"{name}: add `SIZE = size_from_env(SIZE)` (reads $RLM_SIZE)"


@pytest.mark.parametrize("name", NAMES)
def test_colab_install_cell_comes_before_rlm_lab_is_imported(name):
    cells = [c.source for c in code_cells(jupytext.read(ROOT / "notebooks" / f"{name}.md"))]
    install = [i for i, s in enumerate(cells) if '"google.colab" in sys.modules' in s and "%pip install" in s]
    imports = [i for i, s in enumerate(cells) if re.search(r"^\s*(from|import) rlm_lab", s, re.M)]
    assert install, f"{name}: add the Colab install cell (copy it from notebooks/ch00_setup.md)"
    assert not imports or install[0] <= imports[0], f"{name}: the Colab install cell must precede `import rlm_lab`"
    cell = cells[install[0]]
    assert f"git clone -q --depth 1 {REPO_URL} " in cell, f"{name}: clone {REPO_URL} (book/_config.yml)"
    pip_lines = [line for line in cell.splitlines() if "%pip install" in line]
    # Colab's own torch and numpy must stay: pinning them breaks its CUDA build (d2l-ai/d2l-en#2638).
    assert not any(re.search(r"\b(torch|numpy)\b", line) for line in pip_lines), f"{name}: never pin torch/numpy"


@pytest.mark.parametrize("name", NAMES)
def test_the_book_lists_the_notebook(name):
    assert name in {nb for _, nb in book.CHAPTERS}, f"add {name} to CHAPTERS in rlm_lab/book.py"


def test_toc_lists_chapters_once_their_files_exist(tmp_path):
    pages, nbs = tmp_path / "book", tmp_path / "notebooks"
    pages.mkdir()
    nbs.mkdir()
    chapters = [(None, "a"), ("p1", "b"), ("p2", "c"), ("p3", None)]
    for path in (nbs / "a.md", pages / "p1.md", nbs / "b.md", nbs / "c.md"):
        path.write_text("# x\n")
    notes = []
    toc = book.toc(pages, nbs, chapters, say=notes.append)
    assert toc["root"] == "intro"
    assert toc["chapters"] == [
        {"file": "notebooks/a.md"},
        {"file": "p1.md", "sections": [{"file": "notebooks/b.md"}]},
        {"file": "notebooks/c.md"},  # its page is not written yet: the notebook stands alone
    ]
    assert notes == ["book: leaving out book/p2.md (not written yet)",
                     "book: leaving out book/p3.md (not written yet)"]


def test_colab_url_points_at_the_ipynb():
    assert book.colab_url("https://github.com/o/r.git/", "main", "notebooks/ch00_setup") == (
        "https://colab.research.google.com/github/o/r/blob/main/notebooks/ch00_setup.ipynb")


# ---- numbers in prose come from records; citations a reader can follow ------------------------------

# A measured or predicted figure in prose must be computed (MyST-NB glue), never typed. What may be typed:
# goals fixed in advance, tolerances of checks, factors of formulas, and figures quoted from a cited source.
NUMBER = re.compile(r"\b\d+(?:[.,]\d+)?\s?(?:%|ms\b|µs|MiB|GiB|GB\b|s/step|×|M param)")
TYPED_ON_PURPOSE = (
    "95 % accuracy", "aim of 95 %",            # ch01's aim, fixed before the sweep
    "(95 % confidence)", "95 % interval",       # the intervals' level (rlm_lab.evidence.LEVEL), fixed in advance
    "within 20 %", "(10 % timing",              # ch03's check tolerances
    "25 % first", "then 10 %", "≤ 25 %", "≤ 10 %",  # the goals (rlm_lab.compare.BAR, GOAL)
    "25 % bar", "10 % goal", "25% bar", "10% goal",
    "1.5× DDP", "1.5 × DP", "ZeRO-3 1.5×",      # ZeRO-3's factor, from its formula
    "80% of the time",                          # OpenRLHF, quoted and cited
    "up to 1.53× (its",                         # ThreadWeaver's abstract, quoted and cited (ch10)
    "a 1.26× shorter",                          # Parason's code release README, quoted and cited (ch10)
    "about 1.7× on",                            # the figure ch10 says it could not check
    "33.2 % of the GPU",                        # "To Mix or To Merge"'s project page, quoted and cited (ch10)
    "_reward` 1.0 × `",                         # Parason's reward factors, quoted from its released config (ch10)
)


def prose_texts():
    for p in NOTEBOOKS:
        for cell in jupytext.read(p).cells:
            if cell.cell_type == "markdown":
                yield p.name, cell.source
    for p in sorted((ROOT / "book").glob("*.md")):
        yield p.name, p.read_text()


def test_no_hand_typed_figure_in_prose():
    typed = []
    for name, text in prose_texts():
        for m in NUMBER.finditer(text):
            around = text[max(0, m.start() - 20):m.end() + 20]
            if not any(ok in around for ok in TYPED_ON_PURPOSE):
                typed.append(f"{name}: ...{around!r}...")
    assert not typed, "figures typed into prose (glue them from the records):\n" + "\n".join(typed)


def test_number_check_catches_a_typed_figure():
    assert NUMBER.search("the median error is 23.9 % with the committed profile")
    assert NUMBER.search("a step takes 227 ms") and NUMBER.search("a model of 0.5 M parameters")
    assert not NUMBER.search("the error is {glue:text}`ch02_step_error`")


def test_nothing_points_at_the_teams_private_notes():
    # Readers of the book and the code do not have the team's research notes (the folder beside the
    # checkout): cite arXiv ids, DOIs and documentation URLs instead. Spelled in pieces so that this test
    # is not itself a pointer.
    pointers = ("../" + "shared", "shared" + "/research", "paper-notes", "trl-on-cpu.md", "torch-dist-cpu.md")
    offenders = []
    for folder in ("rlm_lab", "book", "notebooks", "tests", "configs", "data/hardware"):
        for p in (ROOT / folder).rglob("*"):
            if p.suffix in (".py", ".md", ".ipynb", ".yml", ".yaml", ".bib", ".txt", ".json") and "_vendor" not in p.parts \
                    and p != Path(__file__).resolve():
                text = p.read_text(errors="ignore")
                offenders += [f"{p.relative_to(ROOT)}: {x}" for x in pointers if x in text]
    assert not offenders, offenders


def test_the_bibliography_parses_with_one_entry_per_key():
    """A merge that drops an entry's closing brace breaks every build; pybtex (what sphinxcontrib-bibtex reads
    with) finds it here in a second instead of in the book build."""
    import pybtex.database

    text = (ROOT / "book" / "references.bib").read_text()
    keys = re.findall(r"^@\w+\{([^,]+),", text, re.M)
    assert len(keys) == len(set(keys)), f"keys defined twice: {sorted({k for k in keys if keys.count(k) > 1})}"
    parsed = pybtex.database.parse_string(text, "bibtex")
    assert sorted(parsed.entries) == sorted(keys)


def test_every_citation_is_in_the_bibliography():
    keys = set(re.findall(r"^@\w+\{([^,]+),", (ROOT / "book" / "references.bib").read_text(), re.M))
    cited = set()
    for _, text in prose_texts():
        for group in re.findall(r"\{cite(?::\w+)?\}`([^`]+)`", text):
            cited |= {k.strip() for k in group.split(",")}
    assert cited, "no page cites anything"
    assert cited <= keys, f"cited but not in book/references.bib: {sorted(cited - keys)}"


# ---- thin notebooks: short cells, one chapter package ---------------------------------------------------------

MAX_CELL_LINES = 15
# What a chapter's notebook may import besides its own chapter package: the book's helpers (glue, tables, the
# size), the GPU edition's section, and what a chapter is about (chapter 1 teaches rlm_lab.train's two calls;
# chapters 2 and 3 end with the reader's own numbers; chapters 4 and 5 end with the cluster lines of
# ``rlm-lab launches``, an entry point whose checks parse with rlm-lab's own parser, so no chapter package can
# import it: the layers go downward).
HELPERS = ("rlm_lab.book", "rlm_lab.sizes", "rlm_lab.tables", "rlm_lab.gpu_archive",
           "rlm_lab.reference_report",  # a committed reference window, the same section on four pages
           "rlm_lab.ledger")  # the results ledger: the one value of each quantity, which every page reads
SUBJECT = {"ch01_quickstart": ("rlm_lab.train",), "ch02_anatomy": ("rlm_lab.chapters.your_machine",),
           "ch03_work_depth": ("rlm_lab.chapters.your_machine",), "ch04_parallelism": ("rlm_lab.launches",),
           "ch05_placement": ("rlm_lab.launches",)}
CHAPTER_NOTEBOOKS = [n for n in NAMES if re.match(r"ch\d\d_", n) and not n.startswith("ch00")]


def rlm_lab_imports(source: str) -> set[str]:
    """The rlm_lab modules a cell's source imports (``from rlm_lab.x import y`` counts ``rlm_lab.x.y`` when that is
    a module, else ``rlm_lab.x``); IPython's magics are turned into Python first."""
    from IPython.core.inputtransformer2 import TransformerManager

    def is_module(name: str) -> bool:
        path = ROOT.joinpath(*name.split("."))
        return path.with_suffix(".py").exists() or (path / "__init__.py").exists()

    out = set()
    for node in ast.walk(ast.parse(TransformerManager().transform_cell(source))):
        names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                 [f"{node.module}.{a.name}" for a in node.names] if isinstance(node, ast.ImportFrom) and node.module
                 else [])
        for name in names:
            if name.split(".")[0] != "rlm_lab":
                continue
            out.add(name if isinstance(node, ast.Import) or is_module(name) else name.rsplit(".", 1)[0])
    return out


def test_import_reader_on_a_cell():
    cell = ("import sys\nif x:\n    %pip install -q y\nfrom rlm_lab.book import glue_all\n"
            "from rlm_lab.chapters import ch02_anatomy as A, your_machine\nimport numpy\n")
    assert rlm_lab_imports(cell) == {"rlm_lab.book", "rlm_lab.chapters.ch02_anatomy", "rlm_lab.chapters.your_machine"}


@pytest.mark.parametrize("name", NAMES)
def test_no_code_cell_is_over_15_lines(name):
    cells = code_cells(jupytext.read(ROOT / "notebooks" / f"{name}.md"))
    long = [(i, len(c.source.splitlines())) for i, c in enumerate(cells) if len(c.source.splitlines()) > MAX_CELL_LINES]
    assert not long, (f"{name}: code cells (index, lines) over {MAX_CELL_LINES} lines: {long}; move the logic into "
                      f"rlm_lab/chapters/{name}/report.py (with a unit test)")


@pytest.mark.parametrize("name", CHAPTER_NOTEBOOKS)
def test_a_chapter_notebook_imports_its_chapter_package_and_the_helpers_only(name):
    # A chapter's second page (chapter 9's results page) belongs to the one package of its chapter number.
    packages = [p.parent.name for p in (ROOT / "rlm_lab" / "chapters").glob(f"{name[:4]}_*/__init__.py")]
    assert name in packages or len(packages) == 1, f"no chapter package rlm_lab/chapters/{name}"
    own = f"rlm_lab.chapters.{name if name in packages else packages[0]}"
    allowed = HELPERS + SUBJECT.get(name, ())
    imported = set().union(*(rlm_lab_imports(c.source) for c in code_cells(jupytext.read(ROOT / "notebooks" / f"{name}.md"))))
    others = sorted(m for m in imported if not (m == own or m.startswith(own + ".")) and not m.startswith(allowed))
    assert own in imported or any(m.startswith(own + ".") for m in imported), f"{name} does not import {own}"
    assert not others, f"{name} imports {others}: reach them through {own} (its report), not from the notebook"
