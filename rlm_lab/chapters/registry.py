"""One record per chapter: its number, package, book pages, re-measured references and the steps it runs.

The book's chapter list (:data:`rlm_lab.book.CHAPTERS`), the re-measurement registry
(:data:`rlm_lab.reference.REGISTRIES`) and ``rlm-lab chapter N <step>`` (:mod:`.cli`) are generated from
:data:`CHAPTERS`; nothing else lists chapters. A step is ``"module:function"`` (a ``main(argv) -> int``) or
``"rlm-lab <command>"`` (an ``rlm-lab`` subcommand the chapter owns). A chapter with no step of its own is
``report_only``: its page reads records other chapters make. Strings only: importing this module imports no
chapter. A child process that runs a step is ``python -m rlm_lab.cli chapter N <step>`` (:func:`step_argv`): no
module of the package but :mod:`rlm_lab.cli` runs under ``python -m``.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Chapter:
    number: int
    package: str | None                                # rlm_lab.chapters.<package>
    pages: tuple[tuple[str | None, str | None], ...]   # (book/<page>.md, notebooks/<notebook>.md), in book order
    references: str | None = None                      # the module whose REFERENCES `rlm-lab reference` re-measures
    steps: dict[str, str] = field(default_factory=dict)
    report_only: bool = False

    @property
    def title(self) -> str:
        return (self.package or self.pages[0][1] or "").split("_", 1)[-1].replace("_", " ")


def _m(package: str, module: str, fn: str = "main") -> str:
    return f"rlm_lab.chapters.{package}.{module}:{fn}"


CHAPTERS: tuple[Chapter, ...] = (
    Chapter(0, None, ((None, "ch00_setup"),), report_only=True),
    Chapter(1, "ch01_quickstart", (("ch01_rlm", "ch01_quickstart"),),
            steps={"train": "rlm-lab train", "sweep": "rlm_lab.train.sweep:main",
                   "advised": _m("ch01_quickstart", "advised")}),
    Chapter(2, "ch02_anatomy", (("ch02_anatomy", "ch02_anatomy"),), "rlm_lab.chapters.ch02_anatomy.cases",
            steps={"run": _m("ch02_anatomy", "run"), "loop-benchmarks": "rlm_lab.calibrate.loop_benchmarks:main",
                   "step-benchmarks": "rlm_lab.calibrate.step_benchmarks:main",
                   "autocast-benchmarks": "rlm_lab.calibrate.autocast_benchmarks:main"}),
    Chapter(3, "ch03_work_depth", (("ch03_work_depth", "ch03_work_depth"),),
            steps={"run": _m("ch03_work_depth", "run")}),
    Chapter(4, "ch04_parallelism", (("ch04_intra_model", "ch04_parallelism"),), "rlm_lab.chapters.ch04_parallelism.cases",
            steps={"run": "rlm-lab parallel", "out-of-sample": _m("ch04_parallelism", "out_of_sample"),
                   "e2e": "rlm_lab.parallel.bench.e2e:main",
                   "dist-benchmarks": "rlm_lab.calibrate.dist_benchmarks:main"}),
    Chapter(5, "ch05_placement", (("ch05_placement", "ch05_placement"),), "rlm_lab.chapters.ch05_placement.cases",
            steps={"run": "rlm-lab place", "sync-calibration": _m("ch05_placement", "sync_calibration"),
                   "shared-critic": _m("ch05_placement", "shared_critic")}),
    Chapter(6, "ch06_async", (("ch06_async", "ch06_async"),), "rlm_lab.chapters.ch06_async.cases",
            steps={"run": _m("ch06_async", "run"), "campaign": _m("ch06_async", "campaign"),
                   "accuracy-test": _m("ch06_async", "accuracy_test"), "overhead": _m("ch06_async", "overhead"),
                   "throughput": _m("ch06_async", "throughput"), "interrupt": _m("ch06_async", "interrupt"),
                   "generation-options": _m("ch06_async", "generation_options")}),
    Chapter(7, "ch07_long_tail", (("ch07_long_tail", "ch07_long_tail"),), "rlm_lab.chapters.ch07_long_tail.cases",
            steps={"run": "rlm-lab longtail", "learning": _m("ch07_long_tail", "learning")}),
    Chapter(8, "ch08_frameworks", (("ch08_frameworks", "ch08_frameworks"),),
            steps={"census": "rlm_lab.frameworks.importers.census:main"}),
    Chapter(9, "ch09_guidelines", (("ch09_guidelines", "ch09_guidelines"), ("results", "ch09_results")),
            report_only=True),
    Chapter(10, "ch10_open_directions", (("ch10_open_directions", "ch10_open_directions"),),
            steps={"run": "rlm-lab open-directions"}),
)
# pages after the chapters: the survey item by item (generated from data/paper/crosswalk.yaml), what happens when
# things go wrong (generated from tests/faults), the bibliography (last)
CLOSING_PAGES: tuple[tuple[str | None, str | None], ...] = (("paper_crosswalk", None), ("faults", None),
                                                           ("references", None))


def book_pages() -> list[tuple[str | None, str | None]]:
    """(page, notebook) of every page in book order: the chapters', then :data:`CLOSING_PAGES`."""
    return [p for c in CHAPTERS for p in c.pages] + list(CLOSING_PAGES)


def reference_registries() -> dict[int, str]:
    """chapter number -> the module holding its ``REFERENCES``."""
    return {c.number: c.references for c in CHAPTERS if c.references}


def chapter(number: int) -> Chapter:
    for c in CHAPTERS:
        if c.number == number:
            return c
    raise KeyError(number)


def step_argv(number: int, step: str) -> list[str]:
    """The command line of a child process that runs chapter ``number``'s ``step`` (its arguments follow):
    ``python -m rlm_lab.cli chapter N <step>``, the package's one entry point, under this interpreter."""
    if step not in chapter(number).steps:
        raise KeyError(f"chapter {number} has no step {step!r}")
    return [sys.executable, "-m", "rlm_lab.cli", "chapter", str(number), step]
