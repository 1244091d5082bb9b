"""One record per chapter (rlm_lab.chapters.registry): the book's chapter list, the re-measurement registry and
``rlm-lab chapter N <step>`` all come from it, and every step it names runs something."""

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

from rlm_lab import book, reference
from rlm_lab.chapters import registry
from rlm_lab.chapters.cli import resolve
from rlm_lab.cli import INTERNAL, MAINS, main
from rlm_lab.errors import RlmLabError

REPO = Path(__file__).resolve().parents[2]
STEPS = [(c.number, s) for c in registry.CHAPTERS for s in c.steps]


def test_every_chapter_package_has_one_record_and_its_pages_exist():
    packages = sorted(p.name for p in (REPO / "rlm_lab/chapters").glob("ch[0-9][0-9]_*") if p.is_dir())
    assert sorted(c.package for c in registry.CHAPTERS if c.package) == packages
    numbers = [c.number for c in registry.CHAPTERS]
    assert numbers == sorted(set(numbers)) == list(range(11))
    for c in registry.CHAPTERS:
        for page, nb in c.pages:
            assert page is None or (REPO / "book" / f"{page}.md").exists(), page
            assert nb is None or (REPO / "notebooks" / f"{nb}.md").exists(), nb
        assert bool(c.steps) != c.report_only, c.number   # a chapter runs steps, or says it only reports


def test_book_and_reference_registry_are_generated_from_the_records():
    assert book.CHAPTERS == [p for c in registry.CHAPTERS for p in c.pages] + list(registry.CLOSING_PAGES)
    assert book.CHAPTERS[-1] == ("references", None)
    assert reference.REGISTRIES == {c.number: c.references for c in registry.CHAPTERS if c.references}
    for module in reference.REGISTRIES.values():
        assert importlib.import_module(module).REFERENCES


@pytest.mark.parametrize(("number", "step"), STEPS)
def test_every_step_resolves_to_a_function_of_argv(number, step):
    fn = resolve(number, step)
    assert callable(fn)


@pytest.mark.parametrize(("number", "step", "usage"), [(5, "run", "rlm-lab place"), (6, "campaign", "campaign"),
                                                      (2, "run", "--overhead"), (10, "run", "open-directions")])
def test_a_step_takes_its_own_arguments(number, step, usage, capsys):
    with pytest.raises(SystemExit) as e:
        main(["chapter", str(number), step, "--help"])
    out = capsys.readouterr().out
    assert e.value.code == 0 and usage in out.splitlines()[0] and "chapters and their steps" not in out


def test_chapter_help_lists_every_chapters_steps(capsys):
    with pytest.raises(SystemExit):
        main(["chapter", "--help"])
    out = capsys.readouterr().out
    for c in registry.CHAPTERS[1:]:
        assert f"{c.number:>2} {c.title}:" in out
        for s in c.steps:
            assert f"{s} (" in out


def test_unknown_chapter_or_step_is_one_clear_error():
    with pytest.raises(RlmLabError, match="chapter 9 has no step 'run'; its steps: none: it is report only"):
        resolve(9, "run")
    with pytest.raises(RlmLabError, match="chapter 8 has no step 'run'; its steps: census"):
        resolve(8, "run")
    with pytest.raises(RlmLabError, match="unknown chapter 12"):
        resolve(12, "run")


@pytest.mark.parametrize("target", [t for t, _ in MAINS.values()] + list(INTERNAL.values()))
def test_every_command_that_parses_its_own_arguments_is_a_function(target):
    module, _, fn = target.partition(":")
    assert callable(getattr(importlib.import_module(module), fn))


def test_a_child_process_runs_a_step_through_the_one_entry_point():
    argv = registry.step_argv(8, "census")
    assert argv == [sys.executable, "-m", "rlm_lab.cli", "chapter", "8", "census"]
    with pytest.raises(KeyError, match="no step 'nope'"):
        registry.step_argv(8, "nope")
    r = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=REPO)   # no arguments: one line, 2
    assert r.returncode == 2 and r.stderr == ("rlm-lab: error: give two arguments: rlm-lab chapter 8 census ROOT "
                                              "OUT.tsv (the module docstring says how)\n")
