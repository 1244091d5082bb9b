"""Pages glue the results ledger's values (issue 36 item 1: one number per quantity).

The convention: a chapter module whose page glues measured or predicted numbers from the ledger declares
``LEDGER_GLUE`` (glue name -> (ledger id, format, scale)) and ``ledger_values(entries)``, the glued texts made by
``rlm_lab.tables.ledger_glue`` from ``rlm_lab.ledger.build`` entries; its page function glues those. Checked here
for every such module, found by walking ``rlm_lab/chapters``:

* each glued text shows its entry's value (and interval ends, where it prints them) to the digits it shows;
* moving an entry's value in the ledger moves the glued text (the page reads the ledger, not a copy);
* each glue name is shown by a page (``{glue:text}`name```).

And a static check that no page function reads a number straight from a record: every function a notebook cell
that glues calls (and the functions of the same module it calls) is scanned for record reads (``.results``,
``load_record``, ``runs_of``, ``json.loads``, ``read_text``, the chapters' record loaders); those that still do
are listed in :data:`STILL_READS` with why, a list that must stay true (a function that stops reading records
must leave it, so the list only shrinks).
"""

import ast
import importlib
import re
from dataclasses import replace
from pathlib import Path

import pytest

from rlm_lab import ledger as L

ROOT = Path(__file__).resolve().parents[1]
NUM = re.compile(r"[-+]?\d[\d,]*(?:\.\d+)?")


@pytest.fixture(scope="module")
def entries():
    return L.build("cpu")


def glue_modules() -> list:
    mods = []
    for p in sorted((ROOT / "rlm_lab" / "chapters").rglob("*.py")):
        if re.search(r"^LEDGER_GLUE\s*=", p.read_text(), re.M):
            mods.append(importlib.import_module(".".join(p.relative_to(ROOT).with_suffix("").parts)))
    return mods


def shown(text: str) -> list[tuple[float, float]]:
    """The numbers of a glued text with half a unit of their last digit."""
    out = []
    for t in NUM.findall(text):
        t = t.replace(",", "")
        digits = len(t.split(".")[1]) if "." in t else 0
        out.append((float(t), 0.5 * 10 ** -digits))
    return out


def test_there_are_ledger_glued_pages():
    assert {m.__name__.rsplit(".", 1)[-1] for m in glue_modules()} >= {"advised"}


@pytest.mark.parametrize("mod", glue_modules(), ids=lambda m: m.__name__)
def test_each_glued_value_is_its_ledger_entry(mod, entries):
    d = L.by_id(entries)
    got = mod.ledger_values(entries)
    assert set(got) == set(mod.LEDGER_GLUE)
    for name, (i, _fmt, scale) in mod.LEDGER_GLUE.items():
        assert i in d, f"{mod.__name__}: {name} names {i}, no ledger id"
        e, nums = d[i], shown(got[name])
        want = [e.value] + ([e.lo, e.hi] if "[" in got[name] else [])
        assert len(nums) >= len(want), (name, got[name])
        for (x, tol), w in zip(nums, want):
            assert abs(x - scale * w) <= tol * 1.0001, (name, got[name], i, w)
        moved = [replace(x, value=x.value * 1.37 + 1) if x.id == i else x for x in entries]
        assert mod.ledger_values(moved)[name] != got[name], f"{name} does not follow the ledger's {i}"


@pytest.mark.parametrize("mod", glue_modules(), ids=lambda m: m.__name__)
def test_each_ledger_glue_name_is_on_a_page(mod):
    pages = "".join(p.read_text() for p in (ROOT / "notebooks").glob("*.md"))
    assert not [n for n in mod.LEDGER_GLUE if f"`{n}`" not in pages]


# ---- no record read for a glued value ------------------------------------------------------------------------

CELL = re.compile(r"```\{code-cell\}[^\n]*\n(.*?)```", re.S)
READS = {"load_record", "load_records", "runs_of", "metric", "loads", "read_text", "latest", "latest_window",
         "reference_records", "load_finals"}

# page function (module, function) -> why it still reads a record (issue 36 item 1: each should move to the ledger)
TODO = "not yet routed through the ledger (issue 36 item 1)"
STILL_READS = {
    ("rlm_lab.chapters.ch01_quickstart.advised", "section"):
        "words only (the advisor's pick, what was not applied, an earlier record's arm options); its numbers are LEDGER_GLUE's",
    ("rlm_lab.chapters.ch01_quickstart.report", "sweep_section"):
        TODO,
    ("rlm_lab.chapters.ch02_anatomy.dpo", "dpo_table"):
        TODO,
    ("rlm_lab.chapters.ch02_anatomy.dpo", "ensure_dpo"):
        "runs or loads this build's own DPO run (no committed quantity)",
    ("rlm_lab.chapters.ch02_anatomy.dpo", "glue_values"):
        TODO,
    ("rlm_lab.chapters.ch02_anatomy.report", "insitu_section"):
        TODO,
    ("rlm_lab.chapters.ch02_anatomy.report", "pairs_section"):
        TODO,
    ("rlm_lab.chapters.ch03_work_depth.report", "replica_section"):
        "the record's load averages (1, 5, 15 min) printed as kept; its measured numbers are LEDGER_GLUE's",
    ("rlm_lab.chapters.ch04_parallelism.report", "distributed_terms_section"):
        "the in-sample layout and sweep records (not yet ledger entries); the out-of-sample summary is LEDGER_GLUE's",
    ("rlm_lab.chapters.ch05_placement.report", "hybrid_memory_section"):
        TODO,
    ("rlm_lab.chapters.ch05_placement.report", "hybrid_section"):
        TODO,
    ("rlm_lab.chapters.ch05_placement.shared_critic", "analysis"):
        "the reader the ledger's ch05.shared_critic.* entries are made from (the page glues the same analysis)",
    ("rlm_lab.chapters.ch06_async.accuracy_test", "section"):
        "the pre-registered test the ledger's ch06.accuracy_test.* entries are made from",
    ("rlm_lab.chapters.ch06_async.overhead", "section"):
        TODO,
    ("rlm_lab.chapters.ch06_async.report", "interrupt_section"):
        TODO,
    ("rlm_lab.chapters.ch06_async.throughput", "section"):
        TODO,
    ("rlm_lab.chapters.ch07_long_tail.report", "learning_section"):
        TODO,
    ("rlm_lab.chapters.ch07_long_tail.report", "overprovision_values"):
        TODO,
    ("rlm_lab.chapters.ch07_long_tail.report", "runs_status"):
        'run status words (completed / missing), no number',
    ("rlm_lab.chapters.ch07_long_tail.report", "window_agreement"):
        TODO,
    ("rlm_lab.chapters.ch08_frameworks.report", "measured_html"):
        TODO,
    ("rlm_lab.chapters.ch10_open_directions.report", "md_values"):
        "counts and per-task words (seeds, problems, Brent's range, the matrix's words) from the records; at cpu "
        "its measured and predicted numbers are LEDGER_GLUE's",
    ("rlm_lab.chapters.ch10_open_directions.report", "parallel_values"):
        "counts and per-task words (seeds, problems, Brent's range, the matrix's words) from the records; at cpu "
        "its measured and predicted numbers are LEDGER_GLUE's",
    ("rlm_lab.chapters.ch10_open_directions.report", "plot_latency"):
        "a figure of this build's or the committed runs' curves (no glued value)",
    ("rlm_lab.chapters.ch10_open_directions.report", "plot_lengths"):
        "a figure of the runs' curves (no glued value)",
    ("rlm_lab.chapters.ch10_open_directions.report", "step_time_rows"):
        TODO,
    ("rlm_lab.chapters.ch10_open_directions.report", "systems_rows"):
        TODO,
    ("rlm_lab.reference_report", "section"):
        "the window reader the ledger's chNN.window.* entries are made from",
}


def _page_calls() -> set:
    """(module, function) of every rlm_lab function a glueing notebook cell calls."""
    out = set()
    for md in sorted((ROOT / "notebooks").glob("*.md")):
        aliases: dict = {}
        for cell in CELL.findall(md.read_text()):
            cell = "\n".join(ln for ln in cell.splitlines() if not ln.lstrip().startswith((":", "%", "!")))   # options, magics
            tree = ast.parse(cell)
            for n in ast.walk(tree):
                if isinstance(n, ast.ImportFrom) and (n.module or "").startswith("rlm_lab"):
                    aliases.update({a.asname or a.name: (n.module, a.name) for a in n.names})
                elif isinstance(n, ast.Import):
                    aliases.update({a.asname or a.name: (a.name, None) for a in n.names if a.name.startswith("rlm_lab")})
            if "glue" not in cell:
                continue
            for n in ast.walk(tree):
                if not isinstance(n, ast.Call):
                    continue
                f = n.func
                if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id in aliases:
                    mod, name = aliases[f.value.id]
                    out.add((f"{mod}.{name}" if name else mod, f.attr))
                elif isinstance(f, ast.Name) and f.id in aliases and aliases[f.id][1]:
                    out.add(aliases[f.id])
    return out


def _functions(module: str) -> dict:
    p = ROOT / Path(*module.split("."))
    p = p.with_suffix(".py") if p.with_suffix(".py").exists() else p / "__init__.py"
    if not p.exists():
        return {}
    return {n.name: n for n in ast.parse(p.read_text()).body if isinstance(n, ast.FunctionDef)}


def record_reads(module: str, func: str) -> set:
    """The record reads in ``func``'s body and in the same module's functions it calls (transitively)."""
    fns, hits, todo, seen = _functions(module), set(), [func], set()
    while todo:
        f = todo.pop()
        if f in seen or f not in fns:
            continue
        seen.add(f)
        for m in ast.walk(fns[f]):
            if isinstance(m, ast.Attribute) and m.attr == "results":
                hits.add(".results")
            if isinstance(m, ast.Call):
                name = m.func.attr if isinstance(m.func, ast.Attribute) else getattr(m.func, "id", None)
                if name in READS:
                    hits.add(f"{name}()")
                if isinstance(m.func, ast.Name):
                    todo.append(m.func.id)
    return hits


def test_record_reads_are_caught():
    assert record_reads("rlm_lab.chapters.ch01_quickstart.report", "summary_rows") == {".results"}
    assert not record_reads("rlm_lab.chapters.ch01_quickstart.advised", "ledger_values")


def test_no_page_function_reads_a_record_for_a_glued_value():
    calls = _page_calls()
    reading = {c for c in calls if c[0] != "rlm_lab.ledger" and record_reads(*c)}   # the ledger reads records
    assert not reading - set(STILL_READS), "reads a record: read the ledger, or list it with why"
    assert not set(STILL_READS) - reading, "no longer reads a record (or no page calls it): remove from STILL_READS"
