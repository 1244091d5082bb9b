"""The book builds at smoke size with warnings as errors, and its pages work offline.

Marked `notebook` (it executes every notebook): `make test` runs it as its own phase. The build goes
to _build/test-book/html so it never overwrites a book built with `make book`.
"""

import os
import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
import yaml

from rlm_lab import book

pytestmark = [pytest.mark.notebook, pytest.mark.slow]

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "_build" / "test-book" / "html"
REPO_URL = yaml.safe_load((ROOT / "book" / "_config.yml").read_text())["repository"]["url"]


def run_build(out: Path, *extra: str, timeout: int = 900) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "rlm_lab.cli", "book", "build", "--size", "smoke", "--out", str(out), *extra]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def site() -> Path:
    shutil.rmtree(OUT, ignore_errors=True)
    proc = run_build(OUT)
    assert proc.returncode == 0, f"book build failed:\n{proc.stdout[-6000:]}\n{proc.stderr[-6000:]}"
    return OUT


class Resources(HTMLParser):
    """Every URL a page makes the browser fetch on load (scripts, stylesheets, images, frames)."""

    def __init__(self):
        super().__init__()
        self.fetched, self.links = [], []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag in ("script", "img", "iframe", "source", "audio", "video", "embed") and a.get("src"):
            self.fetched.append(a["src"])
        if tag == "link" and a.get("href") and a.get("rel") not in ("canonical", None):
            self.fetched.append(a["href"])
        if tag == "a" and a.get("href"):
            self.links.append(a["href"])


def parse(page: Path) -> Resources:
    res = Resources()
    res.feed(page.read_text())
    return res


def pages(site: Path) -> list[Path]:
    # _static/ holds the theme's Jinja macro files, not pages.
    return sorted(p for p in site.rglob("*.html") if "_static" not in p.relative_to(site).parts)


def test_every_chapter_in_the_toc_has_a_page(site):
    toc = yaml.safe_load((site.parent / "toc.yml").read_text())
    files = [c["file"] for c in toc["chapters"]] + [s["file"] for c in toc["chapters"] for s in c.get("sections", [])]
    assert "notebooks/ch00_setup.md" in files
    for f in files:
        assert (site / f).with_suffix(".html").exists(), f


def test_no_page_fetches_anything_from_another_host(site):
    offenders = []
    for page in pages(site):
        for url in parse(page).fetched:
            if urlsplit(url).scheme in ("http", "https") or url.startswith("//"):
                offenders.append(f"{page.relative_to(site)}: {url}")
    for css in site.rglob("*.css"):
        offenders += [f"{css.relative_to(site)}: {u}" for u in re.findall(r"url\(['\"]?(https?://[^)'\"]+)", css.read_text())]
    assert not offenders, "pages load from a CDN:\n" + "\n".join(offenders)


def test_every_local_resource_exists(site):
    missing = []
    for page in pages(site):
        for url in parse(page).fetched:
            parts = urlsplit(url)
            if parts.scheme or not parts.path or url.startswith("//"):
                continue
            if not (page.parent / unquote(parts.path)).resolve().exists():
                missing.append(f"{page.relative_to(site)}: {url}")
    assert not missing, "\n".join(missing)


def test_mathjax_is_served_by_the_book(site):
    scripts = [u for u in parse(site / "intro.html").fetched if "tex-mml-chtml.js" in u]
    assert len(scripts) == 1
    assert (site / urlsplit(scripts[0]).path).resolve() == (site / "mathjax" / "tex-mml-chtml.js").resolve()
    assert (site / "mathjax" / "output" / "chtml" / "fonts" / "woff-v2").is_dir()


def test_notebook_pages_have_an_open_in_colab_badge(site):
    for nb in (site / "notebooks").glob("*.html"):
        res = parse(nb)
        url = f"https://colab.research.google.com/github/{REPO_URL.split('github.com/')[-1]}/blob/main/notebooks/{nb.stem}.ipynb"
        assert url in res.links, f"{nb.name}: no Colab badge pointing at notebooks/{nb.stem}.ipynb"
        assert (ROOT / "notebooks" / f"{nb.stem}.ipynb").exists()
        assert any(u.endswith("_static/colab-badge.svg") for u in res.fetched)


def test_notebooks_were_executed_at_smoke_size(site):
    text = (site / "notebooks" / "ch00_setup.html").read_text()
    assert "size: smoke" in text  # the output of the setup cell
    assert "Traceback" not in text


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium (apt-get install chromium): math typesetting not checked")
def test_math_is_typeset_offline_in_a_browser(site, tmp_path):
    # The flags keep Chromium from calling home; without the vendored MathJax the page keeps raw TeX.
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           f"--user-data-dir={tmp_path}", "--virtual-time-budget=15000", "--dump-dom",
           (site / "intro.html").as_uri()]
    dom = subprocess.run(cmd, capture_output=True, text=True, timeout=120).stdout
    assert "<mjx-container" in dom, "MathJax did not typeset intro.html"
    assert "\\[" not in dom, "raw TeX left on the page"


def test_a_notebook_that_fails_fails_the_build(tmp_path):
    # A copy of the book with one notebook whose second cell raises.
    src = tmp_path / "book"
    src.mkdir()
    for name in ("_config.yml", "intro.md", "references.bib"):
        shutil.copy(ROOT / "book" / name, src / name)
    for name in ("_static", "_vendor"):
        (src / name).symlink_to(ROOT / "book" / name)
    nbs = tmp_path / "notebooks"
    nbs.mkdir()
    (src / "notebooks").symlink_to(nbs)
    (nbs / "broken.md").write_text(
        "---\njupytext:\n  text_representation:\n    format_name: myst\nkernelspec:\n  name: python3\n"
        "  display_name: Python 3\n---\n\n# Broken\n\n"
        "```{code-cell} ipython3\nx = 1\n```\n\n```{code-cell} ipython3\nraise RuntimeError('cell fails on purpose')\n```\n")
    code = (
        "import sys; from pathlib import Path; from rlm_lab import book\n"
        f"sys.exit(book.build('smoke', Path({str(tmp_path / 'out' / 'html')!r}), book=Path({str(src)!r}),"
        f" notebooks=Path({str(nbs)!r}), chapters=[(None, 'broken')], cache=Path({str(tmp_path / 'cache')!r})))\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode != 0
    assert "cell fails on purpose" in proc.stdout + proc.stderr


def test_references_page_lists_what_the_chapters_cite(site):
    refs = (site / "references.html").read_text()
    assert "arXiv:1707.06347" in refs and "Proximal policy optimization" in refs  # PPO, cited in chapter 1
    cites = [u for u in parse(site / "ch01_rlm.html").links if u.startswith("references.html#")]
    assert cites, "chapter 1 cites nothing"
    anchors = set(re.findall(r'id="([^"]+)"', refs))
    assert all(u.split("#", 1)[1] in anchors for u in cites), "a citation points at no bibliography entry"


def test_numbers_in_prose_are_glued_from_the_records(site):
    # chapter 2's closing numbers come from the committed cpu records through MyST-NB glue
    text = (site / "notebooks" / "ch02_anatomy.html").read_text()
    pasted = re.findall(r'<span class="pasted-text">([^<]*)</span>', text)
    assert len(pasted) >= 10, pasted
    assert any(re.fullmatch(r"-?\d+(\.\d+)?%", p) for p in pasted), pasted
    assert any(p.startswith(("not met", "meets")) for p in pasted), pasted


def notebook_pages(site: Path) -> list[Path]:
    return sorted((site / "notebooks").glob("*.html"))


def test_no_machine_paths_host_names_or_torch_log_noise_on_any_page(site):
    import socket

    host = socket.gethostname()
    pats = [re.escape(str(ROOT)), r"/(?:root|home|tmp|work)/[\w.-]+/", r"\bhost\W{1,4}" + re.escape(host) + r"\b"]
    for page in pages(site):
        text = page.read_text()
        for pat in pats:
            m = re.search(pat, text)
            assert m is None, f"{page.name}: a machine path or host name is on the page: {text[max(0, m.start() - 80):m.end() + 40]!r}"
        assert "While redistributing" not in text, f"{page.name}: a DTensor redistribution log line is on the page"


class Cells(HTMLParser):
    """A notebook page's code cells: each cell's source text, its output text and how many images it shows."""

    def __init__(self):
        super().__init__()
        self.cells, self.stack = [], []

    def handle_starttag(self, tag, attrs):
        cls = (dict(attrs).get("class") or "").split()
        if tag == "div":
            kind = "cell" if "cell" in cls else "input" if "cell_input" in cls else "output" if "cell_output" in cls else None
            self.stack.append(kind)
            if kind == "cell":
                self.cells.append({"source": "", "output": "", "images": 0})
        if tag == "img" and self.cells and "output" in self.stack:
            self.cells[-1]["images"] += 1

    def handle_endtag(self, tag):
        if tag == "div" and self.stack:
            self.stack.pop()

    def handle_data(self, data):
        if self.cells and "cell" in self.stack:
            where = "source" if "input" in self.stack else "output" if "output" in self.stack else None
            if where:
                self.cells[-1][where] += data


FIGURE_CALL = re.compile(r"\b(timeline|gantt|plot\w*|curve|share_bars|predicted_vs_measured)\(")
WHY_NOT = re.compile(r"not (measured|run) yet|no record")


def test_every_figure_cell_shows_an_image(site):
    """A cell that calls a figure function shows an image, or says why not; no figure is shown as its text repr."""
    checked = 0
    for page in notebook_pages(site):
        cells = Cells()
        cells.feed(page.read_text())
        for c in cells.cells:
            assert "<Figure size" not in c["output"] and "matplotlib.figure.Figure" not in c["output"], \
                f"{page.name}: a figure printed as text (no %matplotlib inline?): {c['source'][:200]!r}"
            if FIGURE_CALL.search(c["source"]):
                checked += 1
                assert c["images"] or WHY_NOT.search(c["output"]), \
                    f"{page.name}: a figure cell shows no image: {c['source'][:300]!r}"
    assert checked >= 10, checked


SIZE_WORD = re.compile(r"\bAt `(smoke|cpu|gpu)` size")  # a sentence that says which size its numbers come from


def test_sentences_with_glued_numbers_name_only_the_built_size(site):
    """Prose that carries a number from this build's records never says it was made at another size."""
    bad = []
    for page in notebook_pages(site):
        html = page.read_text()
        html = re.sub(r'<code class="[^"]*literal[^"]*"><span class="pre">(\w+)</span></code>', r"`\1`", html)
        html = re.sub(r'<span class="pasted-text">([^<]*)</span>', lambda m: "\x00" + m.group(1) + "\x00", html)
        for para in re.findall(r"<p>(.*?)</p>", html, re.S):
            text = re.sub(r"<[^>]+>", "", para)
            for sentence in re.split(r"(?<=[.;:])\s+(?=[A-Z])", text):
                if "\x00" in sentence and any(w != "smoke" for w in SIZE_WORD.findall(sentence)):
                    bad.append(f"{page.name}: {sentence.replace(chr(0), '')[:200]}")
    assert not bad, "\n".join(bad)


def test_wide_outputs_scroll_instead_of_being_clipped(site):
    """A wide output (a long table row, a wide figure) scrolls inside its cell, never clipped at the column."""
    css = (site / "_static" / "outputs.css").read_text()
    for rule in ("div.cell_output { overflow-x: auto; }", "div.cell_output img { max-width: 100%; height: auto; }"):
        assert rule in css, rule
    for page in notebook_pages(site):
        assert "_static/outputs.css" in page.read_text(), f"{page.name} does not link the outputs' stylesheet"


POINT_VERDICT = re.compile(r"\b(largest gain|fastest η|fastest eta)\s*:\s*(?!undecided)\w", re.I)


def test_rank_words_on_a_page_come_with_their_interval(site):
    """"The largest gain" or "the fastest η" is said only with the interval that decides it (evidence.largest
    writes "<name> (<estimate> [lo, hi]), its interval above every other"), or as "undecided"."""
    for page in notebook_pages(site):
        text = re.sub(r"<[^>]+>", "", page.read_text())
        for m in POINT_VERDICT.finditer(text):
            tail = text[m.end() - 1:m.end() + 200]
            assert "interval above every other" in tail or "undecided" in tail, f"{page.name}: {text[m.start():m.end() + 120]!r}"


def test_markdown_tables_a_cell_prints_are_rendered_as_tables(site):
    """A cell's Markdown output with a table (the GPU sections) is a table on the page, not rows of pipes (MyST-NB
    reads such output as plain CommonMark unless nb_render_markdown_format says otherwise)."""
    pipes = re.compile(r"\|\s*(?:-{3}|—|–)\s*\|")      # a table's separator row, as typed or after the typographer
    for page in notebook_pages(site):
        text = page.read_text()
        assert not pipes.search(text), f"{page.name}: a Markdown table shown as text"
    ch01 = next(p for p in notebook_pages(site) if p.name == "ch01_quickstart.html").read_text()
    if (Path(__file__).resolve().parent.parent / "data/runs/gpu/ch01_grpo").is_dir():
        section = ch01[ch01.find("GPU records of chapter 1"):]
        assert "<table" in section[:5000], "chapter 1's GPU records are not a table"
