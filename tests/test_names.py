"""One name, one meaning (GLOSSARY.md): no two public classes in the package share a name, at any nesting (a
class built inside a factory counts too), so that a name in a traceback, a docstring or the glossary points at one
thing."""

import ast
from collections import defaultdict
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "rlm_lab"
GLOSSARY = PACKAGE.parent / "GLOSSARY.md"

# A shared name still to be removed, with the reason it is still here. Entries must stay true (checked).
KNOWN_SHARED: dict[str, set[str]] = {}


def public_classes() -> dict[str, set[str]]:
    where = defaultdict(set)
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                where[node.name].add(path.relative_to(PACKAGE.parent).as_posix())
    return where


def shared(where: dict[str, set[str]]) -> dict[str, set[str]]:
    return {name: files for name, files in where.items() if len(files) > 1}


def test_no_two_public_classes_share_a_name():
    extra = {n: f for n, f in shared(public_classes()).items() if KNOWN_SHARED.get(n) != f}
    assert not extra, f"public classes sharing a name (rename one; GLOSSARY.md): {extra}"


def test_known_shared_names_are_still_shared():
    where = public_classes()
    stale = [n for n, files in KNOWN_SHARED.items() if where.get(n) != files]
    assert not stale, f"no longer shared (remove from KNOWN_SHARED): {stale}"


def test_the_scan_finds_classes_built_inside_functions(tmp_path):
    src = "def factory():\n    class Metrics:\n        pass\n    return Metrics\n\nclass _Private:\n    pass\n"
    names = {n.name for n in ast.walk(ast.parse(src)) if isinstance(n, ast.ClassDef) and not n.name.startswith("_")}
    assert names == {"Metrics"}
    assert shared({"A": {"x.py", "y.py"}, "B": {"x.py"}}) == {"A": {"x.py", "y.py"}}


def test_the_glossary_exists_and_names_the_renamed_words():
    text = GLOSSARY.read_text()
    for word in ("reference", "baseline", "window", "split", "glue", "RolloutFunc", "ZeRO-2", "PublishedCase"):
        assert word in text, word
