"""The chapter-1 tuning sweep: named settings on top of the ``cpu`` preset, each a recorded run.

Two questions per setting (issue 2, item 6): does GRPO add >= 10 points of greedy held-out accuracy
over its own SFT start, and how close does the whole run get to the longer-term aim (>= 95 % on
2-digit addition within 3 minutes on 2 cores)? Each setting writes a full run record to
``<root>/ch01_sweep_<name>/`` (``_build/runs/cpu`` by default; the committed ones are in
``data/runs/cpu``, written only with ``--root data/runs/cpu``); :func:`summarize` reads the committed ones
back into one table (``data/runs/cpu/ch01_sweep.json``), so no number in the table is typed by hand.

    rlm-lab chapter 1 sweep base t07 g16 --root data/runs/cpu   # run some settings (wrap in `flock -s`)
    rlm-lab chapter 1 sweep --summarize                          # rebuild the table from the records

Wall times in the sweep were measured on 2 cores *shared with other jobs* (tuning runs); only the
reference runs (``ch01_grpo`` etc.) were timed on a quiet machine. Sweep records keep ``record.json``
(with the stage-time summary when traced), and ``metrics.jsonl``; the raw span files
are not committed for them.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from ..errors import unknown
from ..record import atomic_write_json, load_record, reference_root, repo_root, runs_root
from .config import make_config, parse_overrides
from .run import run

AIM_ACCURACY, AIM_SECONDS = 0.95, 180.0

# name -> (what it tests, overrides of the cpu preset)
SETTINGS: dict[str, tuple[str, dict]] = {
    "base": ("cpu preset as first set (constant RL lr)", {"lr_scheduler": "constant"}),
    "t07": ("sampling temperature 0.7", {"temperature": 0.7, "lr_scheduler": "constant"}),
    "g16": ("16 completions per prompt (4 prompts per step)", {"num_generations": 16}),
    "iter2": ("2 optimizer steps per generation batch", {"num_iterations": 2}),
    "bs128": ("128 completions per step", {"batch_size": 128}),
    "lr2e4": ("RL lr 2e-4", {"rl_lr": 2e-4}),
    "lr5e5": ("RL lr 5e-5", {"rl_lr": 5e-5}),
    "linear": ("RL lr decays linearly to 0", {"lr_scheduler": "linear"}),
    "t07_linear": ("temperature 0.7, RL lr decays linearly to 0", {"temperature": 0.7, "lr_scheduler": "linear"}),
    "beta04": ("KL to the reference, beta 0.04", {"beta": 0.04}),
    "grpo_loss": ("loss_type grpo (per-sequence mean)", {"loss_type": "grpo"}),
    "noformat": ("no format reward", {"format_weight": 0.0}),
    "steps600": ("600 RL steps", {"rl_steps": 600, "lr_scheduler": "constant"}),
    "sft300": ("SFT 300 steps (weaker start)", {"sft_steps": 300}),
    "sft600": ("SFT 600 steps", {"sft_steps": 600}),
    "sft1000": ("SFT 1000 steps (toward the 95 % aim)", {"sft_steps": 1000, "lr_scheduler": "constant"}),
    "aim": ("SFT 1000 steps + RL lr decaying linearly (toward the 95 % aim)", {"sft_steps": 1000,
                                                                             "lr_scheduler": "linear"}),
    "sft1500": ("SFT 1500 steps (toward the 95 % aim)", {"sft_steps": 1500}),
    "mini": ("mini model (3.5M params)", {"model": "mini", "sft_lr": 5e-4}),
    "ppo": ("PPO instead of GRPO (cpu ppo preset: beta 0.05)", {"algo": "ppo", "beta": 0.05}),
    "rloo": ("RLOO instead of GRPO", {"algo": "rloo"}),
}


def sweep_dir(name: str, root: Path | None = None) -> Path:
    """``<root>/ch01_sweep_<name>``; by default under ``_build/runs/cpu`` (to refresh the committed records,
    pass ``root=reference_root("cpu")``: never a default output)."""
    return (root or runs_root("cpu")) / f"ch01_sweep_{name}"


def run_setting(name: str, extra: dict | None = None, root: Path | None = None, algo: str = "grpo"):
    """Run one named setting (plus ``extra`` overrides) at cpu size and return its record."""
    if name not in SETTINGS:
        raise unknown("sweep setting", name, SETTINGS)
    overrides = {**SETTINGS[name][1], **(extra or {})}
    algo = overrides.pop("algo", algo)
    overrides.setdefault("trace", False)  # the per-span trace files (~2 MB a run) are kept for reference runs only
    cfg = make_config(algo, "cpu", out=str(sweep_dir(name, root)), name=f"ch01_sweep_{name}",
                      disable_tqdm=True, **overrides)
    return run(cfg, command=["rlm-lab", "chapter", "1", "sweep", name])


def summarize(root: Path | None = None) -> list[dict]:
    """One row per recorded sweep run, read from the run records."""
    root = root or reference_root("cpu")
    rows = []
    for d in sorted(p for p in root.glob("ch01_sweep_*") if p.is_dir()):
        # an unfinished or damaged run folder is an error naming it, not a row silently left out
        rec = load_record(d, require=("accuracy_before", "accuracy_after", "accuracy_gain"))
        r, name = rec.results, d.name.removeprefix("ch01_sweep_")
        total = r.get("total_seconds")
        if total is not None and r.get("sft_cached") and r.get("sft_seconds"):
            total += r["sft_seconds"]  # the SFT phase was trained by an earlier run: count its time too
        rows.append({
            "setting": name,
            "algo": rec.config.get("algo"),
            "what": SETTINGS.get(name, ("?", {}))[0],
            "overrides": SETTINGS.get(name, ("", {}))[1],
            "accuracy_sft": r["accuracy_before"],
            "accuracy_rl": r["accuracy_after"],
            "gain_points": round(100 * r["accuracy_gain"], 1),
            "meets_gain_bar": r["accuracy_gain"] >= 0.10,
            "sft_seconds": r.get("sft_seconds"),
            "rl_seconds": r.get("rl_seconds"),
            "end_to_end_seconds": None if total is None else round(total, 1),
            # CPU seconds (1 torch thread) ~ wall time on an idle machine; None for runs recorded before it was
            "end_to_end_cpu_seconds": _cpu_total(r),
            "load_average": r.get("load_average"),
            "meets_aim": r["accuracy_after"] >= AIM_ACCURACY and _cpu_total(r) is not None
            and _cpu_total(r) <= AIM_SECONDS,
            "shared_machine": True,
            "record": str(d.relative_to(repo_root())) if d.is_relative_to(repo_root()) else str(d),
            "commit": rec.data["provenance"]["git"]["commit"],
        })
    atomic_write_json(root / "ch01_sweep.json", {"aim": {"accuracy": AIM_ACCURACY, "seconds": AIM_SECONDS},
                                                 "rows": rows})
    return rows


def _cpu_total(r: dict) -> float | None:
    total = r.get("total_cpu_seconds")
    if total is None:
        return None
    if r.get("sft_cached"):
        if r.get("sft_cpu_seconds") is None:
            return None  # the cached SFT run predates CPU-time recording: no honest total
        total += r["sft_cpu_seconds"]
    return round(total, 1)


def main(argv=None):
    p = argparse.ArgumentParser(prog="rlm-lab chapter 1 sweep", description=__doc__.splitlines()[0])
    p.add_argument("names", nargs="*", help=f"settings to run: {', '.join(SETTINGS)}")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--summarize", action="store_true", help="only rebuild ch01_sweep.json from the records")
    p.add_argument("--root", default=None, metavar="DIR",
                   help="where the runs go (default _build/runs/cpu; the committed ones: data/runs/cpu) and "
                        "which folder is summarized (default data/runs/cpu)")
    args = p.parse_args(argv)

    extra = parse_overrides(args.overrides)
    root = Path(args.root) if args.root else None
    for name in [] if args.summarize else args.names:
        rec = run_setting(name, extra, root)
        r = rec.results
        print(f"{name}: {r['accuracy_before']:.3f} -> {r['accuracy_after']:.3f} in {r['total_seconds']:.0f} s",
              flush=True)
    for row in summarize(root):
        print(json.dumps({k: row[k] for k in ("setting", "accuracy_sft", "accuracy_rl", "gain_points",
                                              "end_to_end_seconds")}))
