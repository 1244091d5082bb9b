"""The runners behind :data:`rlm_lab.gpu_archive.PLAN`, one per step kind; each runs in its own process.

    python -m rlm_lab.cli _gpu-archive-step '<json spec>'   # what rlm_lab.gpu_archive.run_step launches

Every runner writes the cost model's predictions to ``predictions/<step>.json`` *before* it measures, then
runs the chapter's own experiment code (nothing here re-implements a measurement), and writes
``steps/<step>.json``: the record's folder and one predicted-against-measured comparison.
"""

from __future__ import annotations

import importlib.util
import json
import statistics
import sys
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path

from . import cli
from .chapters import ch03_work_depth as wd
from .chapters.ch02_anatomy.cases import algorithm_cases
from .chapters.ch05_placement.cases import configs
from .chapters.ch05_placement.run import _now, predict
from .device import datasheet_for, gpu_slug
from .errors import RlmLabError
from .placement.inprocess import run_inprocess
from .record import RunRecord, atomic_write_text
from .train.config import make_config
from .validate.traced_case import Case, predict_case, run_case

# GPU-size overrides that keep each step inside its share of a ten-minute lease (the presets are for hours).
TRAIN_GPU = ["rl_steps=40", "sft_steps=300", "eval_problems=256", "eval_every=0"]
ANATOMY_GPU_STEPS = dict(steps=8, warmup=2)
# Chapter 3 at gpu size is a sweep of hours (the first lease, 2026-12-04, killed both at their limits): the knee at
# four batches up to 2048 with 32 decode steps between k0 and k1, and the long tail at 256 sequences of mean 48, whose
# heaviest tail (8 x mean = 384, plus the prompt) stays inside the models' 512 positions.
DECODE_KNEE_GPU = dict(batches=(1, 16, 256, 2048), k1=34, reps=2)
LONG_TAIL_GPU = dict(n=256, mean=48)


def reference_profile(device: str) -> str:
    """The profile a prediction is made from before anything on this machine is measured: the committed CPU
    profile in the rehearsal, the GPU's datasheet profile on a GPU."""
    if device != "cuda":
        return "cpu-2core-epyc"
    import torch

    name = torch.cuda.get_device_name(0)
    prof = datasheet_for(name)
    if prof is None:
        raise RlmLabError(f"no datasheet profile for GPU {name.lower()!r}")
    return prof


def calibrated_profile(out: Path) -> str | None:
    """The calibration this archive wrote first, if its step completed."""
    found = sorted((out / "hardware").glob("*.json"))
    return str(found[0]) if found else None


def _error(predicted, measured):
    return None if predicted is None or not measured else (predicted - measured) / measured


def compare(quantity: str, unit: str, predicted: dict, measured: float) -> dict:
    ref, cal = predicted.get("reference"), predicted.get("calibrated")
    return {"quantity": quantity, "unit": unit, "predicted_reference": ref, "predicted_calibrated": cal,
            "measured": measured, "error_reference": _error(ref, measured), "error_calibrated": _error(cal, measured)}


def predict_both(fn, out: Path, step: dict, device: str) -> dict:
    """``fn(profile)`` with the reference and the fresh calibrated profile, written down before the run."""
    pred = {"made": datetime.now(timezone.utc).isoformat(timespec="seconds"), "reference_profile": reference_profile(device),
            "reference": fn(reference_profile(device))}
    cal = calibrated_profile(out)
    pred |= {"calibrated_profile": cal, "calibrated": fn(cal) if cal else None}
    atomic_write_text(out / "predictions" / f"{step['name']}.json", json.dumps(pred, indent=1) + "\n")
    return pred


# ---- runners ----------------------------------------------------------------------------------------

def run_calibrate(step, out, size, device) -> dict:
    name = "cpu-rehearsal-quick" if device == "cpu" else _gpu_profile_name()
    path = out / "hardware" / f"{name}.json"
    # --allow-busy: the lease is the only time there is; a busy host is recorded in the profile, not refused
    argv = ["calibrate", "--device", device, "--out", str(path), "--name", name, "--no-collectives", "--allow-busy"]
    if device == "cpu":
        argv.append("--quick")
    else:  # five repeats overran their 105 s on the first lease (2026-12-04); three give a median and quartiles
        argv += ["--repeats", "3"]
    if cli.main(argv) != 0:
        raise RlmLabError("calibration failed")
    return {"profile": str(path.relative_to(out))}


def _gpu_profile_name() -> str:
    import torch

    return f"{gpu_slug(torch.cuda.get_device_name(0))}-calibrated-{datetime.now(timezone.utc):%Y%m%d}"


def _runs(out: Path, size: str) -> Path:
    return out / "runs" / size


def run_train(step, out, size, device) -> dict:
    algo = step["args"]["algo"]
    overrides = TRAIN_GPU if size == "gpu" else []
    run_dir = _runs(out, size) / step["name"]
    cfg = make_config(algo, size, None, overrides=overrides, out=str(run_dir))
    # The step as the cost model sees it; completions are assumed to run to max_completion_length.
    case = Case(step["name"], algo, cfg.beta, cfg.model, cfg.batch_size, cfg.num_generations, cfg.max_completion_length)
    pred = predict_both(lambda prof: predict_case(case, prof).total_time, out, step, device)
    argv = ["train", "--algo", algo, "--size", size, "--out", str(run_dir)]
    for o in overrides:
        argv += ["--set", o]
    if cli.main(argv) != 0:
        raise RlmLabError(f"rlm-lab train --algo {algo} failed")
    measured = RunRecord.load(run_dir).results["rl_seconds_per_step"]
    return {"record": str(run_dir.relative_to(out)),
            "compare": compare("RL step (upper bound: full-length completions)", "s", pred, measured)}


def run_anatomy(step, out, size, device) -> dict:
    case = algorithm_cases(size)[step["args"]["case"]]
    if size == "gpu":
        case = replace(case, **ANATOMY_GPU_STEPS)
    pred = predict_both(lambda prof: predict_case(case, prof).total_time, out, step, device)
    run_dir = _runs(out, size) / step["name"]
    record = run_case(case, size, run_dir)
    walls = record.results["step_walls"][case.warmup:]
    return {"record": str(run_dir.relative_to(out)),
            "compare": compare("traced step (median)", "s", pred, statistics.median(walls))}


def run_decode_knee(step, out, size, device) -> dict:
    over = DECODE_KNEE_GPU if size == "gpu" else None
    p = wd.sweep(size, over)
    model = p["models"][0]
    pred = predict_both(lambda prof: wd.predicted_decode_steps(model, p["batches"], p["k0"], p["k1"], prof)[-1],
                        out, step, device)
    run_dir = _runs(out, size) / step["name"]
    record = wd.decode_knee(size, run_dir, overrides=over)
    return {"record": str(run_dir.relative_to(out)),
            "compare": compare(f"{model} decode step at batch {p['batches'][-1]}", "s", pred,
                               record.results["step_s"][model][-1])}


def run_long_tail(step, out, size, device) -> dict:
    over = LONG_TAIL_GPU if size == "gpu" else None
    p = wd.sweep(size, over)
    dists = [d.values(0) for d in wd.distributions(size, p)]
    pred = predict_both(lambda prof: sum(wd.predicted_generate(p["tail_model"], ls, prof) for ls in dists),
                        out, step, device)
    run_dir = _runs(out, size) / step["name"]
    record = wd.long_tail(size, run_dir, reps=1 if size == "smoke" else 3, overrides=over)  # the rehearsal needs the path, not a median
    return {"record": str(run_dir.relative_to(out)),
            "compare": compare("generate, all length distributions", "s", pred,
                               sum(r["seconds"] for r in record.results["rows"]))}


def run_parallel_single(step, out, size, device) -> dict:
    run_dir = _runs(out, size) / step["name"]
    model = "micro" if size == "smoke" else "small"
    if cli.main(["parallel", "--dp", "1", "--model", model, "--size", size, "--out", str(run_dir)]) != 0:
        raise RlmLabError("rlm-lab parallel --dp 1 failed")
    steps = RunRecord.load(run_dir).results["step_s"]
    return {"record": str(run_dir.relative_to(out)),
            "compare": compare("one-device training step (median)", "s", {}, statistics.median(steps[1:]))}


class StepSkipped(Exception):
    """A step that cannot run on this machine, said why (not a failure of the archive)."""


SKIP_EXIT = 3  # the exit status a skipped step's process ends with


def run_placement(step, out, size, device) -> dict:
    """Chapter 5 on one device: the colocated placement through ``rlm-lab place`` (Ray), which predicts the step
    itself before it runs and keeps that prediction in its record; where Ray is not installed (a lent GPU's image
    has none, and its wheel is larger than the device tool carries) the same placement in this process
    (:mod:`rlm_lab.placement.inprocess`: one set, the same trainer code, no Ray), predicted first as well."""
    root = _runs(out, size) / step["name"]
    if importlib.util.find_spec("ray") is None:
        cfgs, chosen = configs(size, ("colocated",))
        prediction = predict(chosen["colocated"], cfgs["colocated"])  # before the run
        run_inprocess(chosen["colocated"], cfgs["colocated"], root / "ch05_colocated" / _now(), prediction=prediction,
                      command=["gpu-archive", step["name"]])
        label = "colocated GRPO step in-process, no Ray (median)"
    else:
        if cli.main(["place", "--placement", "colocated", "--size", size, "--out", str(root)]) != 0:
            raise RlmLabError("rlm-lab place --placement colocated failed")
        label = "colocated GRPO step on Ray (median)"
    run_dir = sorted(root.glob("ch05_colocated/*/record.json"))[-1].parent
    res = RunRecord.load(run_dir).results
    made = datetime.strptime(res["prediction"]["made"], "%Y%m%dT%H%M%SZ").replace(tzinfo=timezone.utc)
    pred = {"made": made.isoformat(), "source": f"{run_dir}: made by rlm-lab place before its run",
            "reference_profile": res["prediction"].get("profile"), "reference": res["prediction"]["step_s"],
            "calibrated_profile": None, "calibrated": None}
    atomic_write_text(out / "predictions" / f"{step['name']}.json", json.dumps(pred, indent=1) + "\n")
    return {"record": str(run_dir.relative_to(out)),
            "compare": compare(label, "s", pred, res["step_seconds_median"])}


RUNNERS = {"calibrate": run_calibrate, "train": run_train, "anatomy": run_anatomy, "decode_knee": run_decode_knee,
           "long_tail": run_long_tail, "parallel_single": run_parallel_single, "placement": run_placement}


def main(argv: list[str] | None = None) -> int:
    spec = json.loads((argv or sys.argv[1:])[0])
    step, out = spec["step"], Path(spec["out"])
    try:
        row = RUNNERS[step["kind"]](step, out, spec["size"], spec["device"])
    except StepSkipped as e:
        print(f"rlm-lab: skip: {e}", file=sys.stderr)
        return SKIP_EXIT
    except RlmLabError as e:
        print(f"rlm-lab: error: {e}", file=sys.stderr)
        return 1
    atomic_write_text(out / "steps" / f"{step['name']}.json", json.dumps(row, indent=1) + "\n")
    return 0
