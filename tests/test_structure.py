"""The package's structure: no import loops inside ``rlm_lab``.

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
