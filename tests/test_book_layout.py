"""Tables a reader can read at 1280 px (issue 36 item 6): in headless Chromium, 1280 px wide, the last column of
every table on the results page, chapter 9 and chapter 8 lies inside the viewport, so no verdict or bar column
needs a sideways scroll.

Reads the book a build already wrote (``make book SIZE=smoke`` or ``make test-book``'s); skipped when Chromium or
the built pages are missing. Each page is copied beside itself with a small script appended that measures every
table's last column (``getBoundingClientRect``) after load and writes the numbers into the DOM, which Chromium's
``--dump-dom`` prints (https://developer.chrome.com/docs/chromium/headless#dom)."""

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.notebook

ROOT = Path(__file__).resolve().parent.parent
SITES = (ROOT / "_build" / "html", ROOT / "_build" / "test-book" / "html")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
WIDTH = 1280
PAGES = ("notebooks/ch09_results.html", "notebooks/ch09_guidelines.html", "notebooks/ch08_frameworks.html")

PROBE = """<script>
window.addEventListener("load", () => setTimeout(() => {
  const vw = document.documentElement.clientWidth, out = [];
  document.querySelectorAll("article table, main table").forEach((t, i) => {
    let right = 0, cells = 0;
    for (const row of t.rows) {
      const last = row.cells[row.cells.length - 1];
      if (!last) continue;
      cells += 1;
      right = Math.max(right, last.getBoundingClientRect().right);
    }
    const head = (t.rows[0] ? t.rows[0].innerText : "").replace(/\\s+/g, " ").slice(0, 80);
    out.push({table: i, cls: t.className, rows: cells, right: Math.round(right), head: head});
  });
  const pre = document.createElement("pre");
  pre.id = "rlm-layout-probe";
  pre.textContent = JSON.stringify({viewport: vw, tables: out});
  document.body.appendChild(pre);
}, 500));
</script>"""


def site() -> Path | None:
    built = [s for s in SITES if all((s / p).exists() for p in PAGES)]
    return max(built, key=lambda s: (s / PAGES[0]).stat().st_mtime) if built else None


def measure(page: Path, tmp: Path) -> dict:
    """The viewport width and, per table of ``page``, the right edge of its last column at 1280 px."""
    probe = page.with_name(f"_layout_probe_{page.name}")
    html = page.read_text()
    probe.write_text(html.replace("</body>", PROBE + "</body>") if "</body>" in html else html + PROBE)
    try:
        cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
               "--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-quic",
               f"--user-data-dir={tmp}", f"--window-size={WIDTH},900", "--virtual-time-budget=10000", "--dump-dom",
               probe.as_uri()]
        dom = subprocess.run(cmd, capture_output=True, text=True, timeout=180).stdout
    finally:
        probe.unlink(missing_ok=True)
    m = re.search(r'<pre id="rlm-layout-probe">(.*?)</pre>', dom, re.S)
    assert m, f"{page.name}: the probe wrote nothing (Chromium's output: {dom[-300:]!r})"
    return json.loads(m.group(1).replace("&quot;", '"').replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&"))


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium (apt-get install chromium): the layout is not checked")
@pytest.mark.parametrize("page", PAGES)
def test_every_tables_last_column_is_inside_the_viewport_at_1280px(page, tmp_path):
    root = site()
    if root is None:
        pytest.skip("no built book (make book SIZE=smoke): the layout is not checked")
    got = measure(root / page, tmp_path)
    assert got["viewport"] <= WIDTH and got["tables"], got
    off = [t for t in got["tables"] if t["right"] > got["viewport"]]
    assert not off, (f"{page}: the last column of {len(off)} table(s) ends past the {got['viewport']} px viewport: "
                     + "; ".join(f"table {t['table']} ({t['cls'] or 'no class'}, '{t['head']}') at {t['right']} px"
                                 for t in off))
