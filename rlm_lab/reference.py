"""``rlm-lab reference``: re-measure a chapter's committed references in one window on this machine (issue 20, item 2).

    rlm-lab reference --chapter 5 --size cpu --out _build/reference/cpu          # one chapter
    rlm-lab reference --chapter 2 --chapter 5 --chapter 6 --size cpu             # several, one window
    make reference                                                               # every chapter with references
    flock -x /tmp/rlm-lab-measure.lock rlm-lab reference --chapter 5 --size cpu --out data/runs/cpu/reference/<window>

A *reference* is a comparison whose committed records a chapter's page reads for its verdicts; each chapter lists
its own in ``rlm_lab/chapters/chNN_<slug>/cases.py: REFERENCES`` (:class:`rlm_lab.protocol.Reference`, one shape
for all). One call is one **window** (its id in ``$RLM_WINDOW`` for every process it starts, so every record a
child writes carries it beside the machine key):

1. after the protocol's load gate (:func:`start_gate`, its result in the record), the window's **in-situ
   calibration** (:mod:`rlm_lab.insitu`: the size's calibration suite, each run in a fresh process, fitted on the
   committed microbenchmark base), written to ``<out>/insitu/profile.json``: the
   profile of this machine in this window. The window's **predictions** are made from it next, before any
   repeat runs: each reference's ``predict`` function on both arms (:class:`rlm_lab.protocol.Reference`), kept
   in the window's record under ``predictions``; and every child the window starts sees the profile as
   ``$RLM_CPU_PROFILE`` and ``$RLM_INSITU_PROFILE`` (:mod:`rlm_lab.cost.hardware`), so what a run predicts
   of itself (chapter 5's placements store a prediction in their records) comes from the same profile. Without
   the calibration (``--no-insitu``) the predictions use the committed profile, ``cost.hardware.CPU_PROFILE``;
2. then every reference of every chapter asked, in order, under the measurement protocol
   (:func:`rlm_lab.protocol.compare`: paired repeats interleaved ABBA, each a fresh process behind the load gate),
   with the size's ``reference_repeats`` pairs (:mod:`rlm_lab.sizes`, fixed before measuring); a repeat is
   ``python -m rlm_lab.cli _reference-arm CHAPTER REFERENCE ARM --size S --out DIR`` (:func:`child`), which calls the
   reference's
   ``run`` function once and hands its metric to the protocol;
3. the window's own record, ``<out>/record.json``: window id, machine key, load at the start and the end, the
   profile, and per reference the protocol's summary (per-arm values, the median of the paired ratios with its
   bootstrap 95 % interval, the verdict word). The protocol's records are ``<out>/chNN/<reference>/``, the arms'
   own run records ``<out>/chNN/runs/``.

Budget (2 cores, ``cpu`` size, 4 pairs a reference, the estimate printed by ``--plan``): the in-situ calibration
about 3 min once per window, then chapter 2 about 7 min, chapter 4 about 8 min, chapter 5 about 15 min, chapter 6 about
15 min, chapter 7 about 11 min (64 min for ``make reference``); every chapter at most 20 min and the whole book at most 90 min (tests/test_reference.py
checks the estimates). Chapter 3 has no registry yet (:data:`NOT_YET` says why; the command says so). At
``smoke`` size each chapter runs its first reference only, 2 pairs: it proves the command runs end to end and
decides nothing.

Bad input is one ``rlm-lab: error:`` line before any work: an unknown chapter, a chapter that has no references
(its page reads no timing comparison, or its references are not registered yet: the message says which), an
``--out`` that already holds records (pass ``--force``: they are moved to ``<parent>/.replaced/``). Ctrl-C or
SIGTERM stops the running repeat, marks the protocol's record and the window's record ``interrupted``, and leaves
no process behind. How long that takes is bounded by the stops, not by a promise: the repeat's process group gets
SIGTERM, SIGKILL after ``protocol.STOP_WAIT_S`` (10 s) and 5 s more to go; a repeat's local Ray nodes get
``placement.session.STOP_WAIT_S`` (6 s) inside that; then the interpreters exit. About 15 s at worst on an idle
machine; 19-23 s were measured from SIGINT to exit at load 6-16 on 2 cores (issue 42), the time a loaded machine
takes to schedule the exits. No process outlives the SIGKILL.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from pathlib import Path

from .chapters.registry import reference_registries
from .cost.hardware import CPU_PROFILE, save_profile
from .errors import RlmLabError
from .host import machine_key, machine_load
from .insitu.run import calibrate, run
from .protocol import GATE_TIMEOUT_S, WINDOW_ENV, Arm, Reference, child_main, compare, gate, new_window
from .record import RunRecord, repo_root
from .records.lifecycle import interruptible, restore_handlers
from .sizes import check_size, get

# chapter -> the module whose REFERENCES it reads (its cases module); chapters 2-7 are the measured ones
REGISTRIES = reference_registries()  # chapter -> its cases module (rlm_lab.chapters.registry)
NOT_YET = {3: "its work/depth sweeps are single runs per point, not yet arms of the protocol"}
BOOK_BUDGET_S = 90 * 60
CHAPTER_BUDGET_S = 20 * 60
INSITU_CPU_S = 180.0  # the cpu calibration suite: 10 traced runs, 176 s on 2 cores (data/runs/cpu/insitu/A)


def check_chapter(chapter) -> int:
    """``chapter`` as an int that has references; one clear error otherwise."""
    try:
        n = int(chapter)
    except (TypeError, ValueError):
        raise RlmLabError(f"unknown chapter {chapter!r}; chapters are 1-10") from None
    if not 1 <= n <= 10:
        raise RlmLabError(f"unknown chapter {n}; chapters are 1-10")
    if n not in REGISTRIES:
        why = NOT_YET.get(n) or "its page reads no timing comparison of its own"
        have = ", ".join(str(c) for c in REGISTRIES)
        raise RlmLabError(f"chapter {n} has no references to re-measure ({why}); chapters with references: {have}")
    return n


def references(chapter: int) -> tuple[Reference, ...]:
    """The chapter's registry (``cases.REFERENCES``)."""
    return tuple(importlib.import_module(REGISTRIES[check_chapter(chapter)]).REFERENCES)


def plan(chapters, size: str) -> list[tuple[int, Reference]]:
    """(chapter, reference) in the order they run: every reference at cpu and gpu size, the first one per chapter
    at smoke size (the size's ``reference_all``)."""
    every = get(size).reference_all
    return [(c, r) for c in chapters for i, r in enumerate(references(c)) if every or i == 0]


def estimate_s(chapter: int, size: str = "cpu") -> float:
    """The chapter's estimated seconds at ``size`` on 2 cores: every repeat's estimate (``cpu_run_s``) times
    2 arms times the size's pairs; the window's calibration is counted once per window (:data:`INSITU_CPU_S`)."""
    pairs = get(size).reference_repeats
    return sum(2 * pairs * r.cpu_run_s for c, r in plan([chapter], size))


def _find(chapter: int, name: str) -> Reference:
    for r in references(chapter):
        if r.name == name:
            return r
    raise RlmLabError(f"chapter {chapter} has no reference {name!r}; it has "
                      f"{', '.join(r.name for r in references(chapter))}")


def arm_command(chapter: int, ref: Reference, arm: str, size: str, runs: Path) -> tuple:
    """The argv of one repeat: this interpreter, the package's entry point (:func:`child`), one arm."""
    return (sys.executable, "-m", "rlm_lab.cli", "_reference-arm", str(chapter), ref.name, arm, "--size", size,
            "--out", str(runs))


def run_arm(chapter: int, name: str, arm: str, size: str, out) -> dict:
    """In a repeat's process: the reference's ``run`` function on one arm; its result must hold the metric."""
    ref = _find(check_chapter(chapter), name)
    if arm not in ref.arms:
        raise RlmLabError(f"reference {name!r} has arms {', '.join(ref.arms)}, not {arm!r}")
    module, func = ref.run.split(":")
    res = getattr(importlib.import_module(module), func)(arm, size, out)
    if ref.metric not in res:
        raise RlmLabError(f"{ref.run} returned no {ref.metric!r} for arm {arm!r}")
    return res


PROFILE_ENVS = ("RLM_CPU_PROFILE", "RLM_INSITU_PROFILE")  # what a child's cost.hardware reads at import


def predictions(todo, size: str, profile: str) -> list[dict]:
    """Each reference's prediction of both arms' metric from ``profile`` (before any repeat): one row per
    (chapter, reference, arm) with ``predicted`` (None where the reference predicts nothing, and ``why``)."""
    rows = []
    for chapter, ref in todo:
        for arm in ref.arms:
            row = {"chapter": chapter, "name": ref.name, "arm": arm, "metric": ref.metric, "predicted": None}
            if not ref.predict:
                rows.append(row | {"why": "the chapter predicts no number for this comparison"})
                continue
            module, func = ref.predict.split(":")
            try:
                value = getattr(importlib.import_module(module), func)(arm, size, profile)
            except RlmLabError as e:    # the window still measures; the page says why there is no prediction
                rows.append(row | {"why": str(e)})
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise RlmLabError(f"{ref.predict} predicted {value!r} for arm {arm!r}: not a positive number")
            rows.append(row | {"predicted": float(value)})
    return rows


def insitu_window(size: str, folder: Path, say=print) -> Path:
    """The window's in-situ calibration into ``folder`` (runs, then the fitted profile ``folder/profile.json``)."""
    run(size, folder, say=say)
    prof = calibrate(size, folder, name=f"insitu-{folder.parent.name}")
    return save_profile(prof, folder / "profile.json")


def start_gate(timeout_s: float) -> dict:
    """The protocol's load gate before the window's first run (:func:`rlm_lab.protocol.gate`)."""
    return gate(timeout_s=timeout_s)


def run_window(chapters, size: str, out, force: bool = False, insitu: bool = True, say=print,
               gate_timeout_s: float | None = None) -> dict:
    """The whole window (module docstring); returns the window record's results. ``gate_timeout_s``: the load
    gate's longest wait before a repeat (default the protocol's; a repeat started past it is marked)."""
    size = check_size(size)
    chapters = [check_chapter(c) for c in chapters]
    if not chapters:
        raise RlmLabError("name a chapter (--chapter N) or --all")
    todo = plan(chapters, size)
    pairs = get(size).reference_repeats
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise RlmLabError(f"--out {out} is a file, not a folder for run records")
    window = new_window()
    config = {"chapters": chapters, "size": size, "pairs": pairs, "window": window,
              "references": [{"chapter": c, "name": r.name, "arms": list(r.arms), "metric": r.metric,
                              "higher_is_better": r.higher_is_better, "replaces": list(r.replaces),
                              "predict": r.predict} for c, r in todo],
              "estimate_s": {c: estimate_s(c, size) for c in chapters}, "insitu": insitu}
    handlers = interruptible()
    saved = {k: os.environ.get(k) for k in (WINDOW_ENV, *PROFILE_ENVS)}
    os.environ[WINDOW_ENV] = window  # every child (calibration runs, repeats) stamps it on its records
    try:
        record = RunRecord(out, config, command=sys.argv, force=force)  # an --out holding records: refused here
        with record:
            # the window starts behind the same load gate as every repeat: the calibration's runs are timings too
            started = start_gate(GATE_TIMEOUT_S if gate_timeout_s is None else gate_timeout_s)
            record.update(window=window, machine_key=machine_key(), load_start=started["load"],
                          gate_start={k: started[k] for k in ("passed", "waited_s")})
            if not started["passed"]:
                say(f"window {window}: the load gate gave up after {started['waited_s']:.0f} s (load per core "
                    f"{started['load']['per_core']:.2f}); starting anyway, marked in the record")
            if insitu:
                say(f"window {window}: in-situ calibration at {size} size")
                path = insitu_window(size, out / "insitu", say)
                record.update(profile=str(path.relative_to(out)))
                profile = str(path.resolve())
                for k in PROFILE_ENVS:   # the repeats' own predictions come from the window's profile too
                    os.environ[k] = profile
            else:
                profile = CPU_PROFILE
            record.update(predictions=predictions(todo, size, profile), predicted_from=Path(profile).name)
            done = []
            for chapter, ref in todo:
                folder = out / f"ch{chapter:02d}"
                runs = folder / "runs"
                a, b = (Arm(arm, arm_command(chapter, ref, arm, size, runs)) for arm in ref.arms)
                say(f"chapter {chapter}: {ref.name} ({ref.arms[0]} / {ref.arms[1]}, {ref.metric}, {pairs} pairs)")
                res = compare(a, b, ref.metric, folder / ref.name, repeats=pairs, size=size,
                              higher_is_better=ref.higher_is_better, window=window, say=say,
                              gate_timeout_s=GATE_TIMEOUT_S if gate_timeout_s is None else gate_timeout_s)
                done.append({"chapter": chapter, "name": ref.name, "dir": str(Path(res["dir"]).relative_to(out)),
                             "summary": res["summary"], "gate_timeouts": res["gate_timeouts"],
                             "replaces": list(ref.replaces)})
                record.update(references=done)
            record.update(load_end=machine_load())
        return record.results | {"dir": str(out)}
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        restore_handlers(handlers)


def register(sub) -> None:
    p = sub.add_parser("reference", help="re-measure a chapter's committed references in one window on this machine "
                                         "(in-situ calibration, then the protocol)",
                       description=__doc__.split("\n\n")[0])
    p.add_argument("--chapter", action="append", default=[], help="chapter number (repeat for several, one window)")
    p.add_argument("--all", action="store_true", help=f"every chapter with references ({', '.join(map(str, REGISTRIES))})")
    p.add_argument("--size", default="cpu", help="smoke | cpu | gpu (default cpu)")
    p.add_argument("--out", default=None, help="the window's folder (default _build/reference/<size>)")
    p.add_argument("--force", action="store_true", help="replace records already in --out (moved to .replaced/)")
    p.add_argument("--no-insitu", action="store_true", help="skip the window's in-situ calibration")
    p.add_argument("--plan", action="store_true", help="print the references and the time estimate, run nothing")
    p.add_argument("--gate-timeout", type=float, default=None,
                   help="longest wait of the load gate before a repeat, in seconds (default the protocol's 300); a "
                        "repeat started past it is marked in the record")
    p.set_defaults(func=main)


def main(args) -> int:
    size = check_size(args.size)
    chapters = list(REGISTRIES) if args.all else [check_chapter(c) for c in args.chapter]
    if args.all and args.chapter:
        raise RlmLabError("give --chapter N or --all, not both")
    if args.plan:
        for c in chapters:
            print(f"chapter {c}: about {estimate_s(c, size) / 60:.0f} min at {size} size (2 cores, from the cpu "
                  f"repeats' times)")
            for ch, r in plan([c], size):
                print(f"  {r.name}: {r.arms[0]} / {r.arms[1]} ({r.metric}); replaces {', '.join(r.replaces)}")
        return 0
    out = Path(args.out) if args.out else repo_root() / "_build" / "reference" / size
    if args.gate_timeout is not None and not args.gate_timeout > 0:
        raise RlmLabError(f"--gate-timeout must be a positive number of seconds, not {args.gate_timeout}")
    res = run_window(chapters, size, out, force=args.force, insitu=not args.no_insitu,
                     gate_timeout_s=args.gate_timeout)
    for r in res.get("references", []):
        print(f"chapter {r['chapter']} {r['name']}: {r['summary']['statement']}")
    print(f"window {res['window']} -> {res['dir']}")
    return 0


def child(argv: list[str]) -> int:
    """``python -m rlm_lab.cli _reference-arm CHAPTER REFERENCE ARM --size S --out DIR``: one repeat (a protocol
    child)."""
    ap = argparse.ArgumentParser(prog="python -m rlm_lab.cli _reference-arm", description=child.__doc__)
    ap.add_argument("arm", nargs=3, metavar=("CHAPTER", "REFERENCE", "ARM"))
    ap.add_argument("--size", default="smoke")
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    return child_main(lambda: run_arm(a.arm[0], a.arm[1], a.arm[2], a.size, a.out),
                      lambda res: print(f"{a.arm[2]}: {res}"))
