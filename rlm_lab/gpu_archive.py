"""``rlm-lab gpu-archive``: the GPU edition of the book's headline runs, in one prepared, time-boxed script.

    make gpu-archive                                   # on a CUDA machine: rlm-lab gpu-archive --budget-s 540
    rlm-lab gpu-archive --budget-s 540 --out DIR       # the same, into DIR
    rlm-lab gpu-archive --dry-run --budget-s 300       # the rehearsal on CPU at smoke size (what `make test` runs)

GPU time is lent rarely and briefly, so every GPU measurement of the book is one step of :data:`PLAN`, run in
order, each in its own process (a crash or a hang costs one step, not the archive) with a share of the time
budget; a step that would not fit in what is left is skipped and says so, and one that overruns is killed
(its process group) at its limit. Before each measured step the cost model's predictions are written
(``prediction.json``, with the time they were made): one from the reference profile (the GPU's datasheet, or
the committed CPU profile in the rehearsal) and one from the calibration this archive made first (a separate
micro-benchmark run, never the measured step itself). The archive ends with ``summary.json`` and
``summary.md`` (predicted against measured per step) and exits non-zero if any step failed; every record
that completed is kept.

Output (default ``_build/gpu-archive/<UTC time>/``, a new folder each time; never ``data/``)::

    hardware/<gpu>.json          the calibration (``rlm-lab calibrate --device cuda``)
    runs/gpu/<step>/             one run record per measured step (``runs/smoke/`` in the rehearsal)
    summary.json, summary.md     what ran, how long, predicted against measured

Adopting a GPU archive into the book is a deliberate act: ``rlm-lab gpu-archive --adopt DIR`` copies its
completed records into ``data/runs/gpu/``, its calibration into ``data/hardware/`` and its summary and
predictions into ``data/runs/gpu/archives/<created>/``, refusing to replace anything that exists.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from .device import pick_device
from .errors import RlmLabError, finite_number, number_arg
from .evidence import Interval, error_interval, mean_interval, sign_word
from .gpu_archive_steps import SKIP_EXIT  # a step's process that cannot run on this machine exits with it
from .record import atomic_write_text

REPO = Path(__file__).resolve().parent.parent
RESERVE_S = 5.0  # kept back from the budget for the summary


@dataclass(frozen=True)
class Step:
    """One measured step: ``kind`` selects its runner in :mod:`rlm_lab.gpu_archive_steps`."""

    name: str
    chapter: int
    kind: str
    share: float            # fraction of the budget this step may use
    min_s: float            # not started with less than this left (gpu); the rehearsal scales it
    args: dict = field(default_factory=dict)


# The plan, in the order of the book. Shares add to <= 1; the calibration comes first because every later
# prediction can use it.
PLAN: tuple[Step, ...] = (
    Step("calibration", 2, "calibrate", 0.20, 60),
    Step("ch01_grpo", 1, "train", 0.15, 45, {"algo": "grpo"}),
    Step("ch01_ppo", 1, "train", 0.15, 45, {"algo": "ppo"}),
    Step("ch02_grpo", 2, "anatomy", 0.12, 30, {"case": "grpo"}),
    Step("ch03_decode_knee", 3, "decode_knee", 0.12, 30),
    Step("ch03_long_tail", 3, "long_tail", 0.10, 25),
    Step("ch04_single", 4, "parallel_single", 0.08, 20),
    Step("ch05_placement", 5, "placement", 0.08, 20),
)


def plan_fits() -> None:
    total = sum(s.share for s in PLAN)
    if total > 1.0 + 1e-9:
        raise RlmLabError(f"the archive plan's shares add to {total:.2f} > 1")


def step_limit(step: Step, budget_s: float, left_s: float, min_scale: float = 1.0) -> float | None:
    """Seconds ``step`` may run, or None to skip it: its share of the budget, cut to what is left (less the
    reserve); skipped when that is under its minimum."""
    limit = min(step.share * budget_s, left_s - RESERVE_S)
    return limit if limit >= step.min_s * min_scale else None


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def run_step(step: Step, out: Path, size: str, device: str, limit_s: float) -> dict:
    """Run one step in its own process group with a hard limit; returns its summary row."""
    log = out / "logs" / f"{step.name}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    result = out / "steps" / f"{step.name}.json"
    result.parent.mkdir(parents=True, exist_ok=True)
    spec = json.dumps({"step": step.__dict__, "out": str(out), "size": size, "device": device})
    cmd = [sys.executable, "-m", "rlm_lab.cli", "_gpu-archive-step", spec]
    t0 = time.monotonic()
    with open(log, "w") as fh:
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, cwd=REPO, start_new_session=True)
        try:
            rc = proc.wait(timeout=limit_s)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            rc = None
    seconds = round(time.monotonic() - t0, 1)
    row = {"step": step.name, "chapter": step.chapter, "seconds": seconds, "limit_s": round(limit_s, 1),
           "log": str(log.relative_to(out))}
    if rc is None:
        return row | {"status": f"failed: over its {limit_s:.0f} s limit (killed)"}
    if rc == SKIP_EXIT:
        said = [ln for ln in log.read_text(errors="replace").splitlines() if ln.startswith("rlm-lab: skip:")]
        return row | {"status": "skipped: " + (said[0].split(":", 2)[2].strip() if said else "cannot run here")}
    if rc != 0 or not result.exists():
        lines = log.read_text(errors="replace").strip().splitlines()
        said = [ln for ln in lines if ln.startswith("rlm-lab: error:")]  # the one-line error, else the last line
        why = (said or lines[-1:] or ["no output"])[0]
        return row | {"status": f"failed: exit {rc}: {why[:200]}"}
    return row | json.loads(result.read_text()) | {"status": "completed"}


def archive(out: Path, budget_s: float, dry_run: bool, steps: list[str] | None = None) -> tuple[Path, int]:
    """Run the plan into ``out``; returns (summary path, number of failed steps)."""
    plan_fits()
    finite_number(budget_s, "--budget-s", minimum=RESERVE_S)  # NaN would skip every step and "succeed"
    device = "cpu" if dry_run else pick_device("cuda")
    size = "smoke" if dry_run else "gpu"
    chosen = [s for s in PLAN if steps is None or s.name in steps]
    if steps is not None and len(chosen) != len(set(steps)):
        raise RlmLabError(f"unknown step(s) {sorted(set(steps) - {s.name for s in PLAN})}; "
                          f"known: {', '.join(s.name for s in PLAN)}")
    if not chosen:  # `--steps ,` would write an empty archive and exit 0
        raise RlmLabError(f"--steps names no step; choose from: {', '.join(s.name for s in PLAN)}")
    scale = 0.1 if dry_run else 1.0
    if all(step_limit(s, budget_s, budget_s, scale) is None for s in chosen):
        # a step runs when min(share x B, B - reserve) >= its minimum: B >= max(min/share, min + reserve)
        need = min(max(s.min_s * scale / s.share, s.min_s * scale + RESERVE_S) for s in chosen)
        raise RlmLabError(f"--budget-s {budget_s:g} is too small for any step (every one would be skipped); "
                          f"the chosen steps need at least {math.ceil(need)} s")
    if out.exists() and any(out.iterdir()):
        raise RlmLabError(f"{out} exists and is not empty; an archive goes to a new folder")
    out.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    rows = []
    for step in chosen:
        left = budget_s - (time.monotonic() - start)
        limit = step_limit(step, budget_s, left, min_scale=scale)
        if limit is None:
            rows.append({"step": step.name, "chapter": step.chapter, "status": "skipped: not enough budget left",
                         "seconds": 0.0})
        else:
            rows.append(run_step(step, out, size, device, limit))
        print(f"[gpu-archive] {step.name:<18} {rows[-1]['status']} ({rows[-1]['seconds']} s)", flush=True)
    failed = sum(r["status"].startswith("failed") for r in rows)
    summary = {"created": datetime.now(timezone.utc).isoformat(timespec="seconds"), "dry_run": dry_run,
               "size": size, "device": device, "budget_s": budget_s,
               "wall_s": round(time.monotonic() - start, 1), "failed": failed, "steps": rows}

    atomic_write_text(out / "summary.json", json.dumps(summary, indent=1) + "\n")
    atomic_write_text(out / "summary.md", summary_markdown(summary))
    return out / "summary.json", failed


def _fmt(x, unit: str) -> str:
    if x is None:
        return "–"
    return f"{x * 1e3:.1f} ms" if unit == "s" and abs(x) < 1 else f"{x:.3g} {unit}".strip()


def summary_markdown(summary: dict) -> str:
    lines = [f"# GPU archive {summary['created']}" + (" (dry run on CPU, smoke size)" if summary["dry_run"] else ""),
             "", f"device {summary['device']}, size {summary['size']}, budget {summary['budget_s']:.0f} s, "
             f"wall {summary['wall_s']:.0f} s, failed steps: {summary['failed']}", "",
             "| step | status | s | quantity | predicted (reference) | predicted (calibrated) | measured | error (ref / cal) |",
             "|---|---|---|---|---|---|---|---|"]
    for r in summary["steps"]:
        lines.append(f"| {r['step']} | {r['status']} | {r['seconds']} | {compare_cells(r.get('compare') or {})} |")
    return "\n".join(lines) + "\n"


def compare_cells(c: dict) -> str:
    """One comparison as table cells: quantity | predicted (reference) | predicted (calibrated) | measured | errors."""
    unit = c.get("unit", "")
    errs = " / ".join(f"{e:+.0%}" if e is not None else "–"
                      for e in (c.get("error_reference"), c.get("error_calibrated"))) if c else ""
    return (f"{c.get('quantity', '')} | {_fmt(c.get('predicted_reference'), unit)} | "
            f"{_fmt(c.get('predicted_calibrated'), unit)} | {_fmt(c.get('measured'), unit)} | {errs}")


def adopt(src: Path, data: Path = REPO / "data", stamped: bool = False) -> list[Path]:
    """Copy a finished archive's completed records and calibration into ``data/``, all or nothing.

    ``stamped`` appends the archive's creation time to every record's name (``ch01_grpo-20261204T161537Z``) and
    keeps its calibration with the archive's account (``data/runs/gpu/archives/<created>/hardware/``, unchanged:
    a profile's name is its file's, and the first calibration of the GPU stays the one ``data/hardware/`` offers):
    a later window of the same steps is kept beside the earlier archive's records instead of being refused.

    Every path in ``summary.json`` is resolved and must lie inside the archive (no ``../``, no absolute path,
    no symbolic link out of it), every named record and profile must exist, and nothing in ``data/`` is
    replaced; any of these, or a damaged ``summary.json``, is one clear error before anything is copied. The
    copies are made beside their destinations under temporary names and renamed into place only when all
    of them succeeded; a failure removes every one."""
    src = Path(src)
    summary = src / "summary.json"
    if not summary.is_file():
        raise RlmLabError(f"{src} has no summary.json: not a finished gpu archive")
    try:
        s = json.loads(summary.read_bytes().decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise RlmLabError(f"{summary} is damaged (not JSON: {e}); nothing was adopted") from None
    if not isinstance(s, dict) or not isinstance(s.get("steps"), list):
        raise RlmLabError(f"{summary} is damaged: expected an object with a list of steps; nothing was adopted")
    if s.get("dry_run"):
        raise RlmLabError(f"{src} is a dry run on CPU; only a GPU archive is adopted into data/")
    pairs = _adoption_pairs(src, s["steps"], data, archive_stamp(s) if stamped else None)
    if pairs:  # what was predicted before each measurement, and the archive's own account, beside the records
        pairs += _archive_pairs(src, s, data)
    clash = [str(d) for _, d in pairs if d.exists() or d.is_symlink()]
    if clash:
        raise RlmLabError(f"would replace {', '.join(clash)}; move them first (nothing was copied)")
    _copy_all_or_nothing(pairs)
    return [d for _, d in pairs]


def _adoption_pairs(src: Path, steps: list, data: Path, stamp: str | None = None) -> list[tuple[Path, Path]]:
    """(resolved source inside the archive, destination in ``data/``) for every completed step's record and
    profile; one clear error for a path outside the archive, a missing one, or two with one destination."""
    summary, root = src / "summary.json", src.resolve()
    pairs: list[tuple[Path, Path]] = []
    for i, r in enumerate(steps):
        if not isinstance(r, dict) or not isinstance(r.get("status"), str):
            raise RlmLabError(f"{summary} is damaged: step {i} is not an object with a status; nothing was adopted")
        if r["status"] != "completed":
            continue
        name = r.get("step", f"#{i}")
        for key, dest_dir, kind in (("record", data / "runs" / "gpu", "folder"), ("profile", data / "hardware", "file")):
            rel = r.get(key)
            if rel in (None, ""):
                continue
            if not isinstance(rel, str) or "\0" in rel:   # a NUL byte: no file system path holds one
                raise RlmLabError(f"{summary} is damaged: step {name}'s {key} is {rel!r}, not a path")
            path = (src / rel).resolve()  # an absolute rel replaces src: caught by the containment test
            if Path(rel).is_absolute() or not path.is_relative_to(root) or path == root:
                raise RlmLabError(f"{summary}: step {name}'s {key} {rel!r} is outside the archive {src}; "
                                  f"nothing was adopted")
            if not (path.is_dir() if kind == "folder" else path.is_file()):
                raise RlmLabError(f"{summary}: step {name}'s {key} {rel!r} is not a {kind} in the archive; "
                                  f"nothing was adopted")
            if kind == "folder":
                out = [str(p.relative_to(root)) for p in path.rglob("*")
                       if p.is_symlink() and not p.resolve().is_relative_to(root)]
                if out:
                    raise RlmLabError(f"{summary}: step {name}'s record links out of the archive ({', '.join(out[:3])}); "
                                      f"nothing was adopted")
            if stamp is None:
                pairs.append((path, dest_dir / path.name))
            elif kind == "folder":
                pairs.append((path, dest_dir / f"{path.name}-{stamp}"))
            else:
                pairs.append((path, data / "runs" / "gpu" / "archives" / stamp / "hardware" / path.name))
    dests = [d for _, d in pairs]
    twice = sorted({str(d) for d in dests if dests.count(d) > 1})
    if twice:
        raise RlmLabError(f"{summary}: two steps would both become {', '.join(twice)}; nothing was adopted")
    return pairs


def archive_stamp(summary: dict) -> str:
    """The folder name of an adopted archive's account: its creation time, ``20261204T141934Z``."""
    try:
        t = datetime.fromisoformat(str(summary.get("created")))
    except ValueError:
        raise RlmLabError(f"summary.json's created {summary.get('created')!r} is not a time; nothing was adopted") from None
    if t.tzinfo is None:
        raise RlmLabError(f"summary.json's created {summary.get('created')!r} has no time zone; nothing was adopted")
    return t.astimezone(timezone.utc).strftime("%Y%m%dT%H%M%SZ")


def _archive_pairs(src: Path, summary: dict, data: Path) -> list[tuple[Path, Path]]:
    """The archive's summary (json and markdown) and its predictions folder, to
    ``data/runs/gpu/archives/<created>/``: the predictions were written before each step measured, so they
    are the record that a GPU number was predicted and not fitted. Regular files and a plain folder only."""
    dest = data / "runs" / "gpu" / "archives" / archive_stamp(summary)
    root = src.resolve()
    pairs = []
    for name in ("summary.json", "summary.md", "predictions"):
        path = src / name
        if not path.exists() and name != "summary.json":
            continue
        if path.is_symlink() or not path.resolve().is_relative_to(root):
            raise RlmLabError(f"{path} links out of the archive; nothing was adopted")
        if path.is_dir() and any(q.is_symlink() or not q.is_file() for q in path.rglob("*")):
            raise RlmLabError(f"{path} holds something other than plain files; nothing was adopted")
        pairs.append((path.resolve(), dest / name))
    return pairs


def _copy_all_or_nothing(pairs: list[tuple[Path, Path]]) -> None:
    """Copy every (source, destination) or none: each to a hidden temporary name beside its destination first,
    then all renamed into place; any failure removes what this call made."""
    made_dirs = sorted({p for _, d in pairs for p in (d.parent, *d.parent.parents) if not p.exists()},
                       key=lambda p: len(p.parts), reverse=True)
    staged, placed = [], []
    try:
        for s_, d in pairs:
            d.parent.mkdir(parents=True, exist_ok=True)
            tmp = d.parent / f".{d.name}.adopting-{os.getpid()}"
            staged.append(tmp)
            (shutil.copytree if s_.is_dir() else shutil.copy2)(s_, tmp)
        for tmp, (_, d) in zip(staged, pairs):
            if d.exists() or d.is_symlink():
                raise RlmLabError(f"{d} appeared while adopting; nothing was adopted")
            os.rename(tmp, d)
            placed.append(d)
    except BaseException as e:
        for p in [*staged, *placed]:
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p, ignore_errors=True)
            elif p.exists():
                p.unlink()
        for p in made_dirs:
            with contextlib.suppress(OSError):
                p.rmdir()
        if isinstance(e, OSError):  # shutil.Error (copytree's list of failures) has no filename: say it here
            raise RlmLabError(f"adopting failed while copying ({e}); nothing was adopted") from None
        raise


def register(subparsers) -> None:
    p = subparsers.add_parser("gpu-archive", help="the book's headline GPU runs in one time-boxed script",
                              description=__doc__.split("\n\n")[0])
    p.add_argument("--budget-s", type=number_arg("--budget-s", minimum=RESERVE_S), default=540.0, help="wall-clock budget for all steps (default 540)")
    p.add_argument("--out", help="a new folder (default _build/gpu-archive/<UTC time>)")
    p.add_argument("--dry-run", action="store_true", help="rehearse on CPU at smoke size (no CUDA needed)")
    p.add_argument("--steps", help="comma-separated subset of: " + ", ".join(s.name for s in PLAN))
    p.add_argument("--adopt", metavar="DIR", help="copy a finished GPU archive's records into data/ (no overwrite)")
    p.add_argument("--stamped", action="store_true",
                   help="with --adopt: append the archive's creation time to each record's name and keep its "
                        "calibration with the archive's account, to keep a later window of the same steps beside "
                        "an earlier one")
    p.set_defaults(func=_run)


def _run(args) -> int:
    if args.stamped and not args.adopt:
        raise RlmLabError("--stamped names what --adopt copies; give --adopt DIR with it")
    if args.adopt:
        for d in adopt(Path(args.adopt), stamped=args.stamped):
            print(f"adopted {d}")
        return 0
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    out = Path(args.out) if args.out else REPO / "_build" / "gpu-archive" / (stamp + ("-dry-run" if args.dry_run else ""))
    steps = [s.strip() for s in args.steps.split(",") if s.strip()] if args.steps else None
    path, failed = archive(out, args.budget_s, args.dry_run, steps)
    print((path.parent / "summary.md").read_text(), end="")
    print(f"wrote {path}")
    return 1 if failed else 0


# ---- the book's GPU sections --------------------------------------------------------------------------

HEADLINES = (("rl_seconds_per_step", "s/RL step", "{:.3f}"), ("accuracy_after", "accuracy after", "{:.3f}"),
             ("train_seconds", "train s", "{:.1f}"))


def gpu_records(prefix: str, data: Path = REPO / "data") -> list[dict]:
    """The committed GPU run records of one chapter (``data/runs/gpu/<prefix>*``): name, GPU, date, status."""
    rows = []
    for d in sorted((data / "runs" / "gpu").glob(f"{prefix}*")):
        if not (d / "record.json").is_file():
            continue
        rec = json.loads((d / "record.json").read_text())
        prov, res = rec.get("provenance", {}), rec.get("results", {})
        head = next(((label, fmt.format(res[k])) for k, label, fmt in HEADLINES if isinstance(res.get(k), (int, float))),
                    ("", ""))
        rows.append({"run": d.name, "gpu": ", ".join(prov.get("hardware", {}).get("gpus", [])) or "?",
                     "date": str(prov.get("date", "?"))[:10], "status": rec.get("status", "completed (legacy)"),
                     "headline": f"{head[0]} {head[1]}".strip()})
    return rows


def gpu_section(prefix: str, chapter: int, data: Path = REPO / "data") -> str:
    """Markdown for a chapter's "On a GPU" section: its GPU records beside the CPU ones, or a plain statement
    that none exists yet."""
    rows = gpu_records(prefix, data)
    if not rows:
        return (f"**No GPU run of chapter {chapter} exists yet.** Every measured number on this page comes from "
                "the CPU records. On a CUDA machine, `make gpu-archive` runs this chapter's headline experiments "
                "(sized for ten minutes on one GPU), and `rlm-lab gpu-archive --adopt DIR` adds its records here.")
    lines = [f"GPU records of chapter {chapter} (`data/runs/gpu/`), beside the CPU records above:", "",
             "| run | GPU | date | status | headline |", "|---|---|---|---|---|"]
    lines += [f"| {r['run']} | {r['gpu']} | {r['date']} | {r['status']} | {r['headline']} |" for r in rows]
    compared = archive_comparisons(chapter, data)
    if compared:
        lines += ["", "Predicted before each run (the archive's `predictions/`, written before the step measured) against "
                  "measured; the reference prediction uses the GPU's datasheet profile, the calibrated one the micro-"
                  "benchmarks the archive ran first (none where that step had not completed):", "",
                  "| run | archive | quantity | predicted (datasheet) | predicted (calibrated) | measured | error (datasheet / calibrated) |",
                  "|---|---|---|---|---|---|---|"]
        lines += [f"| {r['step']} | {a} | {compare_cells(r['compare'])} |" for a, r in compared]
    windows = window_rows(chapter, data)
    if any(w["n"] > 1 for w in windows):
        lines += ["", "Across archives (each its own lease window and processes; the same step, the same quantity and "
                  "the same datasheet prediction): the mean of the measurements with its Student-t 95 % interval (few "
                  "archives: a bootstrap's interval would be their range, which at three holds the median only 75 % of "
                  "the time), and the datasheet prediction's error over that interval. The words follow the interval: an upper "
                  "bound is *contradicted* only when every value of the interval lies above it; a point prediction is "
                  "*too low* or *too high* only when the whole error interval is on one side of 0:", "",
                  "| run | archives | measured, mean [95 % interval] | predicted (datasheet) | error [interval] | verdict | "
                  "calibrated error per archive |", "|---|---|---|---|---|---|---|"]
        lines += [f"| {w['step']} | {w['n']} | {_fmt_interval(w['measured'])} | {_fmt(w['predicted'], 's')} | "
                  f"{w['error'].text('{:+.0%}') if w['error'] else '–'} | {w['word']} | "
                  f"{', '.join(f'{e:+.0%}' for e in w['calibrated_errors']) or '–'} |" for w in windows]
    return "\n".join(lines)


def _fmt_interval(iv) -> str:
    """A measured interval in the units of :func:`_fmt` (the comparisons table's)."""
    if not iv.decided:
        return f"{_fmt(iv.estimate, 's')} (one run, no interval)"
    return f"{_fmt(iv.estimate, 's')} [{_fmt(iv.lo, 's')}, {_fmt(iv.hi, 's')}]"


def window_rows(chapter: int, data: Path = REPO / "data") -> list[dict]:
    """One row per (step, quantity, datasheet prediction) of ``chapter`` over every adopted archive: the
    measurements' mean with its Student-t interval (:func:`rlm_lab.evidence.mean_interval`; each archive is its
    own lease window, so the values are independent runs, and three is too few for a bootstrap), the datasheet
    prediction's error over it and the word it allows. A quantity labelled an upper bound is judged as a bound
    (``contradicted`` when the whole measured interval lies above it, ``holds`` when wholly at or below); any
    other as a point (``too low`` / ``too high`` when the error interval excludes 0); else ``undecided``."""
    groups: dict[tuple, list[dict]] = {}
    for _, r in archive_comparisons(chapter, data):
        c = r["compare"]
        ref = c.get("predicted_reference")
        groups.setdefault((r["step"], c["quantity"], None if ref is None else round(ref, 12)), []).append(c)
    out = []
    for (step, quantity, ref), cs in groups.items():
        measured = mean_interval([c["measured"] for c in cs])
        if ref is None:
            err = None
        elif measured.decided and measured.lo <= 0:  # a wide interval reaching 0: the error is unbounded above
            err = Interval(ref / measured.estimate - 1, ref / measured.hi - 1, math.inf, measured.n)
        else:
            err = error_interval(ref, measured)
        if err is None or not err.decided:
            word = "undecided" if err is not None else "no prediction"
        elif "upper bound" in quantity:
            word = "contradicted" if measured.lo > ref else ("holds" if measured.hi <= ref else "undecided")
        else:
            word = sign_word(err, above="too high", below="too low")
        out.append({"step": step, "quantity": quantity, "n": len(cs), "measured": measured, "predicted": ref,
                    "error": err, "word": word,
                    "calibrated_errors": [c["error_calibrated"] for c in cs if c.get("error_calibrated") is not None]})
    return out


def archive_comparisons(chapter: int, data: Path = REPO / "data") -> list[tuple[str, dict]]:
    """(archive, summary row) of every adopted archive's completed step of ``chapter`` that compares a prediction
    with a measurement (``data/runs/gpu/archives/<created>/summary.json``), oldest archive first."""
    out = []
    for summary in sorted((data / "runs" / "gpu" / "archives").glob("*/summary.json")):
        try:
            rows = json.loads(summary.read_text(encoding="utf-8")).get("steps", [])
        except (ValueError, UnicodeDecodeError, AttributeError):
            raise RlmLabError(f"{summary} is damaged; restore it from git") from None
        out += [(summary.parent.name, r) for r in rows if isinstance(r, dict) and r.get("chapter") == chapter
                and r.get("status") == "completed" and isinstance(r.get("compare"), dict)
                and r["compare"].get("measured") is not None]
    return out
