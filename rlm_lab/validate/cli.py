"""``rlm-lab validate``: print the suite's comparison, or run the suite first (see :mod:`rlm_lab.validate`);
``--published``: the cost model against published cluster measurements (:mod:`.published_report`)."""

from __future__ import annotations

import sys
from pathlib import Path
from pathlib import Path as _P

from ..calibrate.quick import warn_machine
from ..cost import load_profile
from ..cost.hardware import same_machine
from ..errors import RlmLabError
from ..record import hardware, runs_root
from ..records.files import atomic_write_text, json_text
from ..records.read import read_record_file
from . import published_report
from .compare import STATISTICS, report, table
from .published import load_published
from .published_blind import record_blind, rounds_blind
from .published_advise import format_advise, judge_advise
from .published_predict import FIT_FILE, fit_efficiencies, fitted_values, load_fit
from .suite import SHARE_MIN, SUITE, run_dir, run_suite, workloads


def _print(rep: dict) -> None:
    s = rep["summary"]
    name = rep["profile"] if isinstance(rep["profile"], str) else rep["profile"].get("name", "?") + " (+ terms)"
    print(f"validation suite: {s['runs']} runs in {rep['root']}, profile {name}, measured {rep['statistic']} "
          "over the traced steps")
    print(f"{'run':28} {'stage':15} {'pred s':>9} {'meas s':>9} {'error':>8} {'share':>6} {'peak err':>9}")
    for r in table(rep["rows"]):
        print(f"{r['run']:28} {r['stage']:15} {r['predicted_s']:9.4f} {r['measured_s']:9.4f} {r['error']:+8.1%} "
              f"{r['share']:6.0%} {r['peak_error']:+9.1%}")
    print(f"whole step: median |error| {s['step_median']:.1%}, worst {s['step_worst']:.1%}, bias {s['bias']:+.1%} "
          f"({s['under_predicted']} of {s['runs']} under-predicted)")
    print(f"stages >= {SHARE_MIN:.0%} of a step: median |error| {s['stage_median']:.1%}, worst {s['stage_worst']:.1%} "
          f"({s['worst_stage']})")
    if "peak_median" in s:
        print(f"peak memory per stage: median |error| {s['peak_median']:.1%}, worst {s['peak_worst']:.1%}; "
              f"the part above the runtime baseline: median |error| {s['transient_median']:.1%}")
    for run, why in s.get("unpredicted", {}).items():
        print(f"not predicted with this profile (left out of the numbers above): {run}: {why}")
    for k, v in s["verdicts"].items():
        print(f"  {k}: {v}")
    c = rep.get("contention", {})
    if c:
        print(f"slowest / fastest traced step per run: {min(c.values()):.1f}x to {max(c.values()):.1f}x "
              "(about 1x on a quiet machine)")


def whose_line(rep: dict, origin_of) -> str:
    """One line: which machine made the records and whose the profile that priced them is (a committed
    profile of another machine is never called this machine's). ``origin_of``:
    ``rlm_lab.insitu.this_machine.origin``."""
    name = rep["profile"] if isinstance(rep["profile"], str) else rep["profile"].get("name", "?")
    o = origin_of(rep["profile"])
    made = (read_record_file(Path(rep["root"]) / SUITE).get("provenance") or {}).get("hardware") or {}
    here = "this machine" if same_machine(made, hardware()) else \
        f"another machine ({made.get('cpu_model')}, {made.get('cpu_count')} cores)"
    k = o.get("machine_key") or {}
    whose = ("no machine's measurement" if o["method"] in ("datasheet", "fitted") else "this machine's"
             if o["this_machine"] else f"another machine's ({k.get('cpu_model')}, {k.get('cores')} cores)")
    return f"rlm-lab: the records were made on {here}; profile {name} is {whose} ({o['method']})"


def register(subparsers) -> None:
    p = subparsers.add_parser("validate", help="the cost model against the validation suite (never fitted on)",
                              description=__doc__.split("\n\n")[0])
    p.add_argument("--size", default="cpu", help="suite size (smoke, cpu; default cpu)")
    p.add_argument("--run", action="store_true", help="run the suite now (else read its records)")
    p.add_argument("--out", help="records folder: where --run writes (default _build/runs/<size>) and what is "
                                 "read (default: the committed data/runs/<size>, else _build/runs/<size>)")
    p.add_argument("--only", nargs="+", metavar="NAME", help="with --run: only these workloads")
    p.add_argument("--profile", help="hardware profile name or path (default: with --run, this machine's, measured "
                                      "in situ, calibrating it first when it has none; else the in-situ profile of "
                                      "the chapters' machine, cpu-2core-epyc-insitu, which made the committed records)")
    p.add_argument("--statistic", default="median", choices=STATISTICS,
                   help="per stage and step over the traced steps: median (default) or min (least disturbed)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.add_argument("--published", action="store_true",
                   help="the cost model against the published cluster measurements of data/published/ (calibration "
                        "and validation cases, the fitted efficiencies, issue 21's bars); reads no CPU records")
    p.add_argument("--fit", action="store_true",
                   help="with --published: fit the named efficiencies on the calibration cases and write the fit "
                        "(default data/published/fit.json, or --fit-out)")
    p.add_argument("--fit-out", metavar="PATH", help="with --fit: where to write the fit record")
    p.add_argument("--write", action="store_true",
                   help="with --published: also write the prediction record the book reads "
                        "(data/published/validation.json)")
    p.add_argument("--note", metavar="TEXT",
                   help="with --write: one line saying what changed since the last validation (kept in the record "
                        "and in every later record's history)")
    p.add_argument("--assumed", action="store_true",
                   help="with --published: the profiles' assumed efficiencies, ignoring the committed fit")
    p.add_argument("--no-calibrate", action="store_true",
                   help="with --run and no --profile: never calibrate this machine in situ; use its cached or the "
                        "chapters' committed profile (said in one line)")
    p.add_argument("--check-machine", action="store_true",
                   help="time a few-second check of this machine against the profile even when its machine key "
                        "matches (a calibrated profile of another key is always checked)")
    p.set_defaults(func=_run)


def _run_published(args) -> int:
    """``--published`` (see :mod:`rlm_lab.validate.published_report`); every argument checked before any work."""
    suite_only = [f"--{k}" for k in ("run", "only", "profile", "out") if getattr(args, k)]
    if suite_only:
        raise RlmLabError(f"{', '.join(suite_only)} belong(s) to the CPU validation suite, not to --published")
    if args.fit and args.assumed:
        raise RlmLabError("--fit writes a fit and --assumed ignores it; give one of them")
    if args.write and (args.assumed or args.fit_out):
        raise RlmLabError("--write records the committed fit's predictions; it does not go with --assumed or --fit-out")
    if args.note is not None and not args.write:
        raise RlmLabError("--note is kept in the prediction record; give --write with it")
    if args.note is not None and (not args.note.strip() or "\n" in args.note or len(args.note) > 300):
        raise RlmLabError("--note must be one non-empty line of at most 300 characters")
    target = _P(args.fit_out) if args.fit_out else FIT_FILE
    if args.fit_out and not args.fit:
        raise RlmLabError("--fit-out needs --fit")
    if args.fit and (target.is_dir() or not target.parent.is_dir()):
        raise RlmLabError(f"--fit-out {target}: not a file in an existing folder")
    registry = load_published()
    fit = None
    if args.fit:
        fit = fit_efficiencies(registry)
        atomic_write_text(target, json_text(fit, indent=1) + "\n")   # a full disk names the file, leaves none torn
        print(f"fit written to {target}")
    elif not args.assumed:
        fit = load_fit()
    def picks_of(rep: dict) -> list:   # the advisor on the published settings, judged with this validation's band
        return judge_advise(registry, fitted_values(fit), band=rep["summary"]["validation"]["ratio"]["median_abs_error"])

    if args.write:
        rep = published_report.write_record(registry, fit, note=args.note, advise=picks_of)
        print("prediction record written to data/published/validation.json")
    else:
        rep = published_report.report(registry, fit, use_fit=not args.assumed)
        rep["advise"] = None if args.json else picks_of(rep)
    if args.json:
        print(json_text({k: rep[k] for k in ("cases", "sources", "projects", "split", "efficiencies", "fit",
                                             "summary", "bars")} | {"rows": [{k: v for k, v in r.items() if k != "error_value"}
                                                                     for r in rep["rows"]]}, indent=1))
    else:
        print(published_report.format_report(rep))
        print("\n" + "\n".join(format_advise(rep["advise"], rep["efficiencies"])))
        print(_blind_lines())
    return 0


def _blind_lines() -> str:
    """Which fresh rounds are blind evidence: as first priced, and for the current record (issue 39 deliverable 4,
    :mod:`.published_blind`)."""
    first, now = rounds_blind(), record_blind()
    word = {True: "blind", False: "post-hoc", None: "undecided"}
    lines = ["", "blind rounds (calibration cases, fitted parameters and fit rule predate the round's cases; git):"]
    for a, b in zip(first, now):
        why = f" ({'; '.join(b['changed'])})" if b["changed"] else f" ({b['why']})" if b.get("why") else ""
        lines.append(f"  round {a['round']} ({a['cases']} cases): as first priced {word[a['blind']]}; "
                     f"the current record {word[b['blind']]}{why}")
    return "\n".join(lines)


def _run(args) -> int:
    if args.published:
        return _run_published(args)
    for flag in ("fit", "fit_out", "assumed", "write", "note"):
        if getattr(args, flag):
            raise RlmLabError(f"--{flag.replace('_', '-')} needs --published")

    cases = workloads(args.size)  # an unknown size: one clear error
    if args.only and not args.run:
        raise RlmLabError("--only needs --run")
    if args.profile:
        load_profile(args.profile)
    root = Path(args.out) if args.out else None
    if args.run:
        root = root or runs_root(args.size)
        for d in [root / SUITE] + [run_dir(root, c) for c in cases]:
            if d.is_dir() and any(d.iterdir()) and not str(d.resolve()).startswith(str(runs_root(args.size).resolve())):
                raise RlmLabError(f"{d} already holds a run; write to another folder (--out)")
        if not args.profile and getattr(args, "default_profile", None):  # this machine's, in situ (rlm_lab.cli)
            args.profile, _ = args.default_profile()
        run_suite(args.size, root, args.only)
        if args.only:
            return 0
    rep = report(args.size, root, args.profile, args.statistic)
    if getattr(args, "origin_of", None):  # whose profile priced whose records (rlm_lab.cli gives origin_of)
        print(whose_line(rep, args.origin_of), file=sys.stderr)
    if args.json:
        print(json_text({k: rep[k] for k in ("root", "profile", "summary", "load")}, indent=1))
    else:
        _print(rep)

    name = rep["profile"] if isinstance(rep["profile"], str) else rep["profile"].get("name")
    if name:  # one line when the profile's machine is not this one (rlm_lab.calibrate.quick)
        warn_machine(args.profile or name, args.check_machine)
    return 0
