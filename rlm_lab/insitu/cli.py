"""``rlm-lab insitu``: run the calibration suite (``--run``) and fit the profile's per-call terms on it."""

from __future__ import annotations

from pathlib import Path

from ..cost.hardware import save_profile
from ..errors import RlmLabError, number_arg
from ..host import machine_load
from ..record import repo_root, runs_root
from ..validate.suite import SUITE as VAL_SUITE
from ..validate.suite import run_dir
from .fit import check_base
from .run import NAME, PREFIX, SUITE, _repo_relative, base_path, calibrate, calibration_cases, run


def register(subparsers) -> None:
    p = subparsers.add_parser("insitu", help="fit the per-call terms on traced TRL runs (the calibration suite)",
                              description=__doc__.split("\n\n")[0])
    p.add_argument("--size", default="cpu", help="suite size (smoke, cpu; default cpu)")
    p.add_argument("--run", action="store_true", help="run the calibration suite now (else read its records)")
    p.add_argument("--out", nargs="+", help="records folder: where --run writes and what is read (default "
                                            "_build/runs/<size>); several folders (repeated suites) are fitted pooled")
    p.add_argument("--base", help="profile whose kernel rates are kept (default: the committed full calibration "
                                  "of the chapters' machine)")
    p.add_argument("--write", help=f"fitted profile path (default _build/insitu/{NAME}.json)")
    p.add_argument("--name", default=NAME, help=f"the fitted profile's name (default {NAME})")
    p.add_argument("--bootstrap", type=int, default=None, help="bootstrap resamples for the spread (default 200)")
    p.add_argument("--max-load", type=number_arg("--max-load", inclusive=True), default=0.5, help="with --run: refuse above this 1-minute load per core")
    p.add_argument("--allow-busy", action="store_true", help="with --run: measure on a busy machine anyway")
    p.add_argument("--validation-root", help="the validation suite measured on the same machine in the same "
                                             "session (a folder with validation_suite/): what `rlm-lab validate` "
                                             "judges this profile on by default")
    p.add_argument("--force", action="store_true", help="replace an existing profile at --write")
    p.set_defaults(func=_run)


def _run(args) -> int:
    cases = calibration_cases(args.size)  # an unknown size: one clear error, before any work
    check_base(base_path(args.base))        # an unknown or unusable base profile: one clear error
    if args.bootstrap is not None and args.bootstrap < 0:
        raise RlmLabError("--bootstrap must be >= 0")
    if not args.max_load >= 0:  # NaN too
        raise RlmLabError("--max-load must be >= 0")
    out = Path(args.write) if args.write else repo_root() / "_build" / "insitu" / f"{args.name}.json"
    if out.exists() and not args.force:
        raise RlmLabError(f"{out} already exists; pass --force to replace it, or --write another path")
    roots = [Path(o) for o in args.out] if args.out else [runs_root(args.size)]
    if args.run and len(roots) > 1:
        raise RlmLabError("--run writes one folder: give --out one folder")
    root = roots[0]
    if args.validation_root:
        if not (Path(args.validation_root) / VAL_SUITE).is_dir():
            raise RlmLabError(f"--validation-root {args.validation_root} holds no {VAL_SUITE}/")
    if args.run:
        load = machine_load()
        if load["per_core"] > args.max_load and not args.allow_busy:
            raise RlmLabError(f"the machine is busy: 1-minute load {load['loadavg'][0]:.2f} on {load['cores']} cores "
                              f"(> {args.max_load} per core); run on a quiet machine or pass --allow-busy")
        if not str(root.resolve()).startswith(str(runs_root(args.size).resolve())):
            for d in [root / SUITE] + [run_dir(root, c, PREFIX) for c in cases]:
                if d.is_dir() and any(d.iterdir()):
                    raise RlmLabError(f"{d} already holds a run; write to another folder (--out)")
        run(args.size, root)
    prof = calibrate(args.size, roots, args.base, args.name, args.bootstrap)
    if args.validation_root:
        prof["insitu"]["validation_root"] = _repo_relative(args.validation_root)
    out.parent.mkdir(parents=True, exist_ok=True)
    save_profile(prof, out)
    fit = prof["insitu"]
    print(f"in-situ fit over {fit['rows']} stage rows of {len(fit['records'])} runs (relative rms {fit['rms_relative']:.1%}) "
          f"on {fit['base_source']}:")
    for g, f in fit["factors"].items():
        keys = fit["groups"][g]
        vals = ", ".join(f"{k} {prof['overhead'][k] * 1e3:.4g} ms" for k in keys) or "every kernel's microbenchmarked time x factor"
        print(f"  {g:22} factor {f:7.3f}   {vals}")
    ret = fit.get("rss_retained")
    if ret:
        print(f"  resident-set floor of every stage: {ret['base_bytes'] / 2**20:.1f} MiB + {ret['factor']:.3f} x the "
              f"largest predicted stage ({len(ret['points'])} runs)")
    for g, b in fit.get("at_bound", {}).items():
        print(f"  {g}: held at its {b['side']} bound {b['bound']:.4g} (the unbounded fit gave {b['unbounded']:.4g}): "
              f"{b['reason']}")
    if fit["unexercised"]:
        print(f"  not exercised by any calibration run (the base profile's value kept; a free term 0): "
              f"{', '.join(fit['unexercised'])}")
    ho = fit.get("held_out")
    if ho:
        w = ho["worst_stage"]
        print(f"  held out (each of {len(ho['runs'])} runs predicted by the fit on the other workloads): step median |error| "
              f"{ho['median_abs_step_error']:.1%}, bias {ho['bias']:+.1%}; worst stage {w['stage']} of {w['run']} "
              f"{w['error']:+.1%}" if w["error"] is not None else "")
    print(f"wrote {out}")
    return 0
