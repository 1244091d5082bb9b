"""The fault matrix: one row per bad input or fault, each either a clear error or a correct result.

How to add rows
---------------
Put them in ``tests/faults/cases_<area>.py`` as a list named ``CASES`` of :class:`Case` objects
(``from fault_matrix import Case``; ``tests/faults/conftest.py`` puts this folder on ``sys.path``).
Every ``cases_*.py`` file here is collected; the area is the part of the file name after ``cases_``.

A row is

- ``id``: short and unique within its area (``area:id`` is the pytest id; a row of ``book/faults.md``);
- ``what``: the input or fault in words, for the book page;
- ``cls``: ``"clear-error"`` (exit 2, exactly one ``rlm-lab: error:`` line on stderr, no traceback, the
  message matches ``message``, and nothing on disk changed) or ``"correct-result"`` (the expected exit code,
  no traceback, ``message`` found in stdout+stderr, and ``check`` passes);
- ``argv``: the ``rlm-lab`` arguments, run in-process through ``rlm_lab.cli.main`` (fast), or in a fresh
  process when ``subprocess=True`` (only where the process boundary matters). ``{tmp}`` in an argument is
  replaced by the row's temporary folder; ``argv`` may also be a callable ``f(tmp) -> list``;
- or ``call``: a callable ``f(tmp)`` for an API-level row; an :class:`rlm_lab.errors.RlmLabError` it raises
  is printed the way the CLI prints it (one line, exit 2), so CLI and API rows are checked alike;
- ``setup``: optional ``f(tmp)`` that creates the row's input files before the snapshot;
- ``unchanged``: extra paths (repository-relative, or containing ``{tmp}``) that must not change. The
  row's temporary folder is always snapshotted: a clear error must leave it exactly as ``setup`` made it;
- ``check``: optional ``f(tmp, out) -> None`` for a correct result (asserts; ``out`` is stdout+stderr).

Run one area: ``pytest -p no:cacheprovider -q tests/faults -k config``. After adding rows, regenerate the
book page with ``python tests/faults/fault_matrix.py --write`` (a test fails while it is out of date).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import io
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
PAGE = REPO / "book" / "faults.md"
CLASSES = ("clear-error", "correct-result")


@dataclass
class Case:
    id: str
    what: str
    cls: str = "clear-error"
    argv: list | Callable | None = None
    call: Callable | None = None
    message: str = ""
    exit: int | None = None
    setup: Callable | None = None
    unchanged: tuple = ()
    check: Callable | None = None
    subprocess: bool = False
    area: str = ""
    env: dict = field(default_factory=dict)

    def __post_init__(self):
        if self.cls not in CLASSES:
            raise ValueError(f"{self.id}: cls must be one of {CLASSES}")
        if (self.argv is None) == (self.call is None):
            raise ValueError(f"{self.id}: give exactly one of argv and call")
        if self.exit is None:
            self.exit = 2 if self.cls == "clear-error" else 0

    @property
    def command(self) -> str:
        """How the row is run, for the book page."""
        if self.call is not None:
            return f"API: {self.call.__doc__ or self.call.__name__}".strip()
        if callable(self.argv):
            return "rlm-lab " + (self.argv.__doc__ or "...").strip()
        return "rlm-lab " + " ".join(str(a) for a in self.argv)


def call_case(id: str, what: str, fn: Callable, doc: str, message: str) -> Case:
    """A clear-error row whose call runs ``fn(tmp)`` (the API rows of several areas); ``doc`` is what the page shows
    as its command."""
    def call(tmp):
        fn(tmp)
    call.__doc__ = doc
    return Case(id, what, call=call, message=message)


def collect() -> list[Case]:
    """Every ``CASES`` row of every ``cases_*.py`` next to this file, area from the file name."""
    if str(HERE) not in sys.path:
        sys.path.insert(0, str(HERE))
    cases: list[Case] = []
    for path in sorted(HERE.glob("cases_*.py")):
        area = path.stem.removeprefix("cases_")
        spec = importlib.util.spec_from_file_location(f"fault_cases_{area}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        for case in module.CASES:
            case.area = case.area or area
            cases.append(case)
    ids = [f"{c.area}:{c.id}" for c in cases]
    dup = sorted({i for i in ids if ids.count(i) > 1})
    if dup:
        raise ValueError(f"duplicate fault-matrix ids: {dup}")
    return cases


# ---- running one row ----------------------------------------------------------------------------

def _fill(value, tmp: Path):
    return str(value).replace("{tmp}", str(tmp))


def snapshot(paths) -> dict:
    """Path -> (size, mtime_ns, sha256) for every file under ``paths`` (and the set of entries)."""
    snap = {}
    for root in paths:
        root = Path(root)
        if not root.exists() and not root.is_symlink():
            snap[str(root)] = None
            continue
        items = [root] if not root.is_dir() else [root, *sorted(root.rglob("*"))]
        for p in items:
            try:
                st = p.lstat()
            except OSError:
                continue
            digest = ""
            if p.is_file() and not p.is_symlink() and st.st_size < 4_000_000:
                try:
                    digest = hashlib.sha256(p.read_bytes()).hexdigest()
                except OSError:
                    digest = "unreadable"
            snap[str(p)] = (p.is_dir(), st.st_mode, None if p.is_dir() else st.st_size,
                            None if p.is_dir() else st.st_mtime_ns, digest)
    return snap


def _run_inprocess(argv: list[str]) -> tuple[int, str, str]:
    from rlm_lab.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as e:  # argparse's --help (exit 0); anything else is a finding
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        except BaseException:  # noqa: BLE001 - a traceback is what the matrix exists to catch
            import traceback

            traceback.print_exc(file=err)
            code = 1
    return code, out.getvalue(), err.getvalue()


def _run_call(fn, tmp: Path) -> tuple[int, str, str]:
    from rlm_lab.errors import RlmLabError

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            fn(tmp)
            code = 0
        except RlmLabError as e:
            print(f"rlm-lab: error: {e}", file=err)
            code = 2
        except BaseException:  # noqa: BLE001
            import traceback

            traceback.print_exc(file=err)
            code = 1
    return code, out.getvalue(), err.getvalue()


def _run_subprocess(argv: list[str], env: dict) -> tuple[int, str, str]:
    r = subprocess.run([sys.executable, "-m", "rlm_lab.cli", *argv], capture_output=True, text=True,
                       cwd=REPO, env={**os.environ, **env}, timeout=120)
    return r.returncode, r.stdout, r.stderr


def run_case(case: Case, tmp: Path) -> dict:
    """Run one row in ``tmp``; return what happened (code, out, err, changed paths)."""
    tmp = Path(tmp)
    if case.setup is not None:
        case.setup(tmp)
    watched = [tmp, *(REPO / _fill(p, tmp) if "{tmp}" not in str(p) else Path(_fill(p, tmp))
                      for p in case.unchanged)]
    before = snapshot(watched)
    env = {k: _fill(v, tmp) for k, v in case.env.items()}
    old_env = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        if case.call is not None:
            code, out, err = _run_call(case.call, tmp)
        else:
            argv = case.argv(tmp) if callable(case.argv) else case.argv
            argv = [_fill(a, tmp) for a in argv]
            code, out, err = (_run_subprocess(argv, env) if case.subprocess else _run_inprocess(argv))
    finally:
        for k, v in old_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    after = snapshot(watched)
    changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
    return {"code": code, "out": out, "err": err, "changed": changed}


def verify(case: Case, result: dict, tmp: Path) -> None:
    """Assert that ``result`` is what ``case`` promises (the checks listed in the module docstring)."""
    code, out, err = result["code"], result["out"], result["err"]
    shown = f"\n--- stdout ---\n{out[-2000:]}\n--- stderr ---\n{err[-3000:]}"
    assert "Traceback" not in err and "Traceback" not in out, f"{case.id}: traceback{shown}"
    assert code == case.exit, f"{case.id}: exit {code}, expected {case.exit}{shown}"
    if case.cls == "clear-error":
        lines = [ln for ln in err.splitlines() if ln.startswith("rlm-lab: error:")]
        assert len(lines) == 1, f"{case.id}: expected one 'rlm-lab: error:' line, got {len(lines)}{shown}"
        assert "\n" not in lines[0]
        assert re.search(case.message, lines[0]), f"{case.id}: message {lines[0]!r} !~ {case.message!r}"
        assert not result["changed"], f"{case.id}: a clear error changed files: {result['changed']}"
    else:
        assert "rlm-lab: error:" not in err, f"{case.id}: a correct result printed an error{shown}"
        if case.message:
            assert re.search(case.message, out + err), f"{case.id}: {case.message!r} not in output{shown}"
        if case.check is not None:
            case.check(tmp, out + err)


# ---- the book page ------------------------------------------------------------------------------

def _cell(text: str) -> str:
    # repository paths are shown relative to it: the page is the same in every checkout and shows no machine path
    text = str(text).replace(str(REPO) + "/", "").replace(str(REPO), ".")
    return text.replace("|", "\\|").replace("\n", " ")


def render(cases: list[Case] | None = None) -> str:
    """``book/faults.md``: the matrix as a reader's page, grouped by area, with counts by class."""
    cases = collect() if cases is None else cases
    areas = sorted({c.area for c in cases})
    by_class = {k: sum(c.cls == k for c in cases) for k in CLASSES}
    lines = [
        "# What happens when things go wrong",
        "",
        "Every row below is a test: `tests/faults/` runs it in `make test` (the concurrent writers in `make test-slow`) and checks the promise made here.",
        "A **clear error** exits with status 2 after printing exactly one line `rlm-lab: error: ...` (no",
        "traceback), before any work starts, and leaves every file it was given, and the folder it was run in,",
        "exactly as they were. A **correct result** is an edge case that is valid input and gives the right",
        "answer. The table is generated from the test cases by `python tests/faults/fault_matrix.py --write`;",
        "a test fails when this page and the cases disagree.",
        "",
        f"{len(cases)} cases: " + ", ".join(f"{n} {k}" for k, n in by_class.items()) + "; by area: "
        + ", ".join(f"{a} {sum(c.area == a for c in cases)}" for a in areas) + ".",
        "",
    ]
    for area in areas:
        lines += [f"## {area}", "", "| id | input or fault | command | outcome | message (pattern) |",
                  "|---|---|---|---|---|"]
        for c in (c for c in cases if c.area == area):
            outcome = f"{c.cls}, exit {c.exit}"
            msg = f"`{_cell(c.message)}`" if c.message else ""
            lines.append(f"| `{c.id}` | {_cell(c.what)} | `{_cell(c.command)}` | {outcome} | {msg} |")
        lines.append("")
    return "\n".join(lines)


def main(argv=None) -> int:
    import argparse

    p = argparse.ArgumentParser(description="render the fault matrix into book/faults.md")
    p.add_argument("--write", action="store_true", help="write book/faults.md (default: print it)")
    args = p.parse_args(argv)
    text = render()
    if args.write:
        PAGE.write_text(text)
        print(f"wrote {PAGE} ({len(collect())} cases)")
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
