"""The package's structure: no import loops inside ``rlm_lab``, and its subpackages import only down the layers
of ``rlm_lab.LAYERS`` (the torch-free cost model among them).

The import graph is built from the source with ``ast`` (nothing is imported): one node per module, one
edge per ``import``/``from ... import`` that names another ``rlm_lab`` module, whether at module level or
inside a function (a function-level import is still a dependency; moving an import into a function only
hides a loop from Python, not from a reader). ``from .pkg import name`` counts as an edge to
``pkg.name`` when that is a module, else to ``pkg`` (its ``__init__``). A package's ``__init__`` is
not an edge of its submodules (Python runs it first, but it is no dependency of theirs).
The loops are found as strongly connected components (Tarjan), and every one is named with a cycle
through it, so a failure says which files to untangle.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "rlm_lab"


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules(root: Path = ROOT, package: str = PACKAGE) -> dict[str, Path]:
    return {module_name(p, root): p for p in sorted((root / package).rglob("*.py"))}


def _resolve(name: str, known: set[str]) -> str | None:
    """The longest prefix of dotted ``name`` that is a module of the package."""
    parts = name.split(".")
    for n in range(len(parts), 0, -1):
        cand = ".".join(parts[:n])
        if cand in known:
            return cand
    return None


def imports_of(mod: str, path: Path, known: set[str], package: str = PACKAGE) -> set[str]:
    """The package modules ``mod`` imports anywhere in its source (function bodies included)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    is_pkg = path.name == "__init__.py"
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = mod.split(".") if is_pkg else mod.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                stem = ".".join(base + ([node.module] if node.module else []))
            else:
                stem = node.module or ""
            targets = [f"{stem}.{a.name}" for a in node.names]
        else:
            continue
        for t in targets:
            if t == package or t.startswith(package + "."):
                r = _resolve(t, known)
                if r is not None and r != mod:
                    out.add(r)
    return out


def import_graph(root: Path = ROOT, package: str = PACKAGE) -> dict[str, set[str]]:
    mods = modules(root, package)
    known = set(mods)
    return {m: imports_of(m, p, known, package) for m, p in mods.items()}


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm (iterative); components with more than one node are import loops."""
    index, low, on, stack, comps, counter = {}, {}, set(), [], [], [0]

    def visit(v):
        work = [(v, iter(sorted(graph.get(v, ()))))]
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        while work:
            node, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                    break
                if w in on:
                    low[node] = min(low[node], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        comp.append(w)
                        if w == node:
                            break
                    comps.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return [c for c in comps if len(c) > 1]


def a_cycle(graph: dict[str, set[str]], comp: list[str]) -> list[str]:
    """One cycle through the first module of a strongly connected component (breadth-first)."""
    members, start = set(comp), comp[0]
    prev, frontier = {start: None}, [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(graph[v] & members):
                if w == start:
                    path = [v]
                    while prev[path[-1]] is not None:
                        path.append(prev[path[-1]])
                    return path[::-1] + [start]
                if w not in prev:
                    prev[w] = v
                    nxt.append(w)
        frontier = nxt
    return comp


def loops(graph: dict[str, set[str]]) -> list[str]:
    return [" -> ".join(a_cycle(graph, c)) + f"   (component: {', '.join(c)})" for c in strongly_connected(graph)]


# ---- the checker checked on hand-made packages ------------------------------------------------------

def _write(tmp_path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        p = tmp_path / "pkg" / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return tmp_path


def test_finds_a_loop_through_a_function_level_relative_import(tmp_path):
    root = _write(tmp_path, {
        "__init__.py": "",
        "a.py": "from .b import f\n",
        "sub/__init__.py": "",
        "b.py": "def f():\n    from .sub import c\n",
        "sub/c.py": "import pkg.a\n",
    })
    g = import_graph(root, "pkg")
    assert g["pkg.a"] == {"pkg.b"} and g["pkg.b"] == {"pkg.sub.c"} and g["pkg.sub.c"] == {"pkg.a"}
    (found,) = loops(g)
    assert found.startswith("pkg.a -> pkg.b -> pkg.sub.c -> pkg.a"), found


def test_no_loop_in_a_chain_and_parent_package_relative_imports(tmp_path):
    root = _write(tmp_path, {
        "__init__.py": "from . import a\n",
        "a.py": "from .sub.c import x\n",
        "sub/__init__.py": "",
        "sub/c.py": "from ..errors import E\nx = 1\n",
        "errors.py": "E = 1\n",
    })
    g = import_graph(root, "pkg")
    assert g["pkg.sub.c"] == {"pkg.errors"} and g["pkg.a"] == {"pkg.sub.c"} and g["pkg"] == {"pkg.a"}
    assert loops(g) == []


# ---- the package itself -----------------------------------------------------------------------------

def test_rlm_lab_has_no_import_loop():
    graph = import_graph()
    assert len(graph) > 30 and "rlm_lab.cli" in graph  # the walk found the package
    found = loops(graph)
    assert not found, "import loops in rlm_lab (break them by moving code to where it belongs):\n" + "\n".join(found)


@pytest.mark.parametrize("mod", ["rlm_lab.errors", "rlm_lab.sizes"])
def test_leaf_modules_import_nothing_heavy(mod):
    """The error and size registries are read by everything, so they import no other rlm_lab module
    but each other (errors <- sizes)."""
    graph = import_graph()
    assert graph[mod] <= {"rlm_lab.errors"}, graph[mod]


def test_what_a_size_means_is_said_in_one_place_only():
    """No module but ``rlm_lab/sizes.py`` keeps a table keyed by the size names (the registry is the one
    place every chapter reads); a dict literal with two or more of the size names as keys is such a table."""
    names = {"smoke", "cpu", "gpu"}
    found = []
    for mod, path in modules().items():
        if mod == "rlm_lab.sizes":
            continue
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Dict):
                keys = {k.value for k in node.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)}
                if len(keys & names) >= 2:
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not found, "size tables outside rlm_lab/sizes.py (read rlm_lab.sizes.get(size) instead): " + ", ".join(found)


# ---- layers: subpackages import only downward ---------------------------------------------------------
#
# A unit is a top-level subpackage or module of the package (``rlm_lab.cost.spec`` -> ``cost``); every
# ``__main__`` module is an entry point (nothing imports it; it may start any command). The layers, bottom
# first, are ``rlm_lab.LAYERS`` (read from the source, so that the checker imports nothing); the package
# docstring and the README's "Architecture" section say the same in words.

ENTRY = "entry points"

# Imports against the order that are known and not yet moved: (from unit, to unit) -> why. The test fails
# when one of them disappears, so that this list only ever shrinks.
KNOWN_UPWARD: dict[tuple[str, str], str] = {}


def layers_of(root: Path = ROOT, package: str = PACKAGE) -> tuple:
    """``LAYERS`` as written in the package's ``__init__.py`` (a literal), without importing it."""
    tree = ast.parse((root / package / "__init__.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "LAYERS" for t in node.targets):
            return ast.literal_eval(node.value)
    raise AssertionError(f"{package}/__init__.py defines no LAYERS")


def unit_of(mod: str, package: str = PACKAGE) -> str | None:
    parts = mod.split(".")
    if parts[-1] == "__main__":
        return ENTRY
    return parts[1] if len(parts) > 1 and parts[0] == package else None  # None: the package's own __init__


def unit_edges(graph: dict[str, set[str]], package: str = PACKAGE) -> dict[tuple[str, str], list[str]]:
    """``{(unit a, unit b): ["module -> module", ...]}`` for every import between two different units."""
    out: dict[tuple[str, str], list[str]] = {}
    for a, targets in graph.items():
        for b in targets:
            ua, ub = unit_of(a, package), unit_of(b, package)
            if ua and ub and ua != ub and ub != ENTRY:
                out.setdefault((ua, ub), []).append(f"{a} -> {b}")
    return out


def layer_problems(graph: dict[str, set[str]], layers, package: str = PACKAGE, known=()) -> list[str]:
    """Every unit not in a layer, every import from a lower layer to a higher one (not in ``known``), and
    every loop between units (also inside one layer)."""
    rank = {u: i for i, (_, units) in enumerate(layers) for u in units}
    rank[ENTRY] = len(layers)
    names = [n for n, _ in layers] + [ENTRY]
    units = {unit_of(m, package) for m in graph} - {None}
    problems = [f"{package}.{u} is in no layer: add it to LAYERS in {package}/__init__.py"
                for u in sorted(units - set(rank))]
    edges = unit_edges(graph, package)
    for (a, b), via in sorted(edges.items()):
        if a in rank and b in rank and rank[a] < rank[b] and (a, b) not in known:
            problems.append(f"{a} ({names[rank[a]]}) imports {b} ({names[rank[b]]}), a higher layer: "
                            + "; ".join(sorted(via)))
    problems += [f"loop between subpackages: {c}" for c in loops({u: {b for (a, b) in edges if a == u} for u in units})]
    return problems


def test_layer_checker_finds_an_upward_import_and_a_loop_inside_a_layer(tmp_path):
    root = _write(tmp_path, {
        "__init__.py": 'LAYERS = (("core", ("errors",)), ("mid", ("a", "b")), ("top", ("c",)))\n',
        "errors.py": "def f():\n    from .c import x\n",          # core -> top, inside a function
        "a/__init__.py": "", "a/m.py": "from ..b import y\n",
        "b.py": "def g():\n    from .a.m import z\n",              # a <-> b: a loop inside one layer
        "c/__init__.py": "", "c/__main__.py": "from ..c import q\nfrom .. import errors\n",
        "c/run.py": "from ..a import m\n",                          # top -> mid: fine
        "d.py": "",                                                  # in no layer
    })
    found = layer_problems(import_graph(root, "pkg"), layers_of(root, "pkg"), "pkg")
    assert [p for p in found if p.startswith("errors (core) imports c (top)")] == [
        "errors (core) imports c (top), a higher layer: pkg.errors -> pkg.c"], found
    assert "pkg.d is in no layer: add it to LAYERS in pkg/__init__.py" in found
    assert [p for p in found if p.startswith("loop")] == [
        "loop between subpackages: a -> b -> a   (component: a, b)"], found
    assert len(found) == 3, found  # c/run.py -> a and the __main__ module are no problem


def test_every_import_goes_down_the_layers_and_no_subpackages_loop():
    graph = import_graph()
    layers = layers_of()
    assert {"cost", "calibrate", "chapters", "cli"} <= {u for _, us in layers for u in us}
    found = layer_problems(graph, layers, known=KNOWN_UPWARD)
    assert not found, ("imports against the layers of rlm_lab/__init__.py (move the code to the layer it "
                       "belongs to):\n" + "\n".join(found))
    edges = unit_edges(graph)
    gone = sorted(k for k in KNOWN_UPWARD if k not in edges)
    assert not gone, f"no longer imported, drop from KNOWN_UPWARD: {gone}"


HEAVY = ("torch", "transformers", "trl", "accelerate", "ray", "deepspeed", "peft")


def heavy_imports(path: Path) -> list[str]:
    """``file:line module`` for every import of a heavy library anywhere in ``path`` (function bodies too)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                 else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
        found += [f"{path.name}:{node.lineno} {n}" for n in names if n.split(".")[0] in HEAVY]
    return found


def test_heavy_import_finder_sees_imports_inside_functions(tmp_path):
    p = tmp_path / "m.py"
    p.write_text("import os\nfrom . import torch_free\n\ndef f():\n    import torch.nn as nn\n"
                 "    from transformers import AutoModel\n    from torchvision import x\n")
    assert heavy_imports(p) == ["m.py:5 torch.nn", "m.py:6 transformers"]


def test_cost_imports_no_torch():
    """The cost model is formulas: no module of ``rlm_lab/cost`` imports torch or a library built on it,
    anywhere in its source; and importing all of them (and what they import) in a fresh process loads none."""
    files = sorted((ROOT / PACKAGE / "cost").rglob("*.py"))
    assert len(files) > 15
    found = [f for p in files for f in heavy_imports(p)]
    assert not found, "heavy imports in rlm_lab/cost (they belong in rlm_lab/calibrate): " + ", ".join(found)
    code = ("import importlib, pkgutil, sys\nimport rlm_lab.cost as c\n"
            "for m in pkgutil.walk_packages(c.__path__, 'rlm_lab.cost.'): importlib.import_module(m.name)\n"
            f"print(sorted(k for k in {HEAVY!r} if k in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def readme_layout_units(text: str) -> list[str]:
    """The units named in the first column of the README's "Layout" table, in row order
    (``rlm_lab/models/``, ``rlm_lab/{cli,book}.py`` and ``records/`` style cells)."""
    import re

    section = text.split("## Layout", 1)[1].split("\n## ", 1)[0]
    out = []
    for line in section.splitlines():
        cells = line.split("|")
        if len(cells) < 3 or "rlm_lab/" not in cells[1]:
            continue
        for path in re.findall(r"`([^`]+)`", cells[1]):
            path = path.removeprefix("rlm_lab/").rstrip("/")
            names = re.match(r"\{([^}]*)\}", path)
            for name in (names.group(1).split(",") if names else [path]):
                name = name.strip().removesuffix(".py").split("/")[0]
                if name:
                    out.append(name)
    return out


def test_readme_layout_table_lists_every_subpackage_in_layer_order():
    layers = layers_of()
    rank = {u: i for i, (_, units) in enumerate(layers) for u in units}
    named = readme_layout_units((ROOT / "README.md").read_text())
    assert set(rank) - set(named) == set(), f"README's Layout table misses {sorted(set(rank) - set(named))}"
    unknown = [n for n in named if n not in rank]
    assert not unknown, f"README's Layout table names what is in no layer: {unknown}"
    ranks = [rank[n] for n in named]
    assert ranks == sorted(ranks), f"README's Layout table is not in layer order: {named}"


def test_readme_layout_reader_on_a_table():
    text = ("## Layout\n| path | what |\n|---|---|\n| `rlm_lab/{errors,host}.py`, `records/` | core |\n"
            "| `rlm_lab/cost/` | cost |\n| `notebooks/` | not the package |\n## Next\n| `rlm_lab/x/` | |\n")
    assert readme_layout_units(text) == ["errors", "host", "records", "cost"]


# ---- one package per chapter, one shape ---------------------------------------------------------------------
#
# Every chapter's experiment is a package ``rlm_lab/chapters/chNN_<slug>/`` with the modules ``cases`` -> ``run`` ->
# ``compare`` -> ``report``. A chapter without one of them says so in its package docstring ("there is no
# ``compare`` module: ..."), and the docstring names every module the package has (``:mod:`.sweeps```), so that a
# reader finds each one from the package.

SHAPE = ("cases", "run", "compare", "report")


def chapter_packages(root: Path = ROOT, package: str = PACKAGE) -> list[Path]:
    import re

    base = root / package / "chapters"
    return sorted(p for p in base.iterdir() if p.is_dir() and re.match(r"ch\d\d_\w+$", p.name))


def shape_problems(pkg: Path) -> list[str]:
    """What keeps the chapter package ``pkg`` from the shape: a step neither present nor said to be absent, a
    module its docstring does not name, no ``__init__.py`` (the docstring) at all."""
    import re

    init = pkg / "__init__.py"
    if not init.exists():
        return [f"{pkg.name}: no __init__.py (its docstring says what the chapter holds and what it lacks)"]
    doc = ast.get_docstring(ast.parse(init.read_text())) or ""
    mods = {p.stem for p in pkg.glob("*.py")} | {p.name for p in pkg.iterdir() if (p / "__init__.py").exists()}
    mods -= {"__init__", "__main__"}
    problems = [f"{pkg.name}: no {step}.py, and its docstring does not say why (\"there is no ``{step}`` module: ...\")"
                for step in SHAPE
                if step not in mods and not re.search(rf"\bno\s+(``\w+``(?:,\s+|\s+or\s+|\s+and\s+))*``{step}``", doc)]
    problems += [f"{pkg.name}: its docstring does not name :mod:`.{m}`" for m in sorted(mods)
                 if f":mod:`.{m}`" not in doc]
    return problems


def test_shape_checker_on_hand_made_chapters(tmp_path):
    def chapter(name, doc, modules):
        pkg = tmp_path / name
        pkg.mkdir()
        (pkg / "__init__.py").write_text(f'"""{doc}"""\n')
        for m in modules:
            (pkg / f"{m}.py").write_text("")
        return pkg

    whole = chapter("ch01_a", "Its :mod:`.cases`, :mod:`.run`, :mod:`.compare`, :mod:`.report`.", SHAPE + ("__main__",))
    assert shape_problems(whole) == []
    said = chapter("ch02_b", "Its :mod:`.report`. There is no ``cases``, ``run`` or ``compare`` module: it measures "
                             "nothing.", ("report",))
    assert shape_problems(said) == []
    silent = chapter("ch03_c", "Its :mod:`.cases`, :mod:`.run`, :mod:`.report`; and a sweep.", ("cases", "run", "report",
                                                                                             "sweeps"))
    assert shape_problems(silent) == [
        "ch03_c: no compare.py, and its docstring does not say why (\"there is no ``compare`` module: ...\")",
        "ch03_c: its docstring does not name :mod:`.sweeps`"]
    (tmp_path / "ch04_d").mkdir()
    assert shape_problems(tmp_path / "ch04_d") == [
        "ch04_d: no __init__.py (its docstring says what the chapter holds and what it lacks)"]


def test_every_chapter_package_has_the_shape():
    packages = chapter_packages()
    assert {"ch01_quickstart", "ch02_anatomy", "ch08_frameworks"} <= {p.name for p in packages}
    found = [p for pkg in packages for p in shape_problems(pkg)]
    assert not found, "chapter packages out of shape (cases -> run -> compare -> report):\n" + "\n".join(found)


# ---- one entry point: no module but rlm_lab.cli runs under ``python -m`` -------------------------------------
ENTRY_POINT = "rlm_lab/cli.py"


def _is_main_guard(node) -> bool:
    """``if __name__ == "__main__":`` (either side of the ``==``)."""
    if not (isinstance(node, ast.If) and isinstance(node.test, ast.Compare) and len(node.test.ops) == 1
            and isinstance(node.test.ops[0], ast.Eq)):
        return False
    sides = [node.test.left, *node.test.comparators]
    return (any(isinstance(x, ast.Name) and x.id == "__name__" for x in sides)
            and any(isinstance(x, ast.Constant) and x.value == "__main__" for x in sides))


def runs_as_main(root: Path = ROOT, package: str = PACKAGE) -> list[str]:
    """The package's files that do something under ``python -m``: a ``__main__`` guard anywhere in them (ast), or
    a ``__main__.py`` (which runs whole under ``python -m pkg``)."""
    out = []
    for p in sorted((root / package).rglob("*.py")):
        tree = ast.parse(p.read_text(), filename=str(p))
        if p.name == "__main__.py" or any(_is_main_guard(n) for n in ast.walk(tree)):
            out.append(p.relative_to(root).as_posix())
    return out


def test_the_main_finder_sees_guards_and_main_modules_and_not_strings(tmp_path):
    root = _write(tmp_path, {
        "__init__.py": "",
        "a.py": 'def f():\n    pass\n\n\nif __name__ == "__main__":\n    f()\n',
        "b.py": "if '__main__' == __name__:\n    pass\n",
        "c.py": 'X = \'if __name__ == "__main__"\'  # a string, not a guard\nif __name__ == "x":\n    pass\n',
        "sub/__init__.py": "",
        "sub/__main__.py": "print(1)\n",
    })
    assert runs_as_main(root, "pkg") == ["pkg/a.py", "pkg/b.py", "pkg/sub/__main__.py"]


def test_no_module_but_the_cli_runs_under_python_m():
    found = runs_as_main()
    assert found == [ENTRY_POINT], ("only rlm_lab/cli.py may have a __main__ block (route a command through "
                                    "rlm_lab.cli: a chapter step, a subcommand, or an INTERNAL child): "
                                    f"{[f for f in found if f != ENTRY_POINT]}")
    # an independent count, by text: a guard at the start of a line, however quoted
    by_text = [p.relative_to(ROOT).as_posix() for p in sorted((ROOT / PACKAGE).rglob("*.py"))
               if re.search(r"^if\s+(__name__\s*==\s*[\"']__main__[\"']|[\"']__main__[\"']\s*==\s*__name__)\s*:",
                            p.read_text(), re.M) or p.name == "__main__.py"]
    assert by_text == found
