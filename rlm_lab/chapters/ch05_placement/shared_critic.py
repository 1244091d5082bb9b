"""Chapter 5's shared actor-critic: PPO with a critic model of its own against PPO with a value head on the policy's
backbone (``PPOConfig(critic="shared")``, :mod:`rlm_lab.train.shared_critic`), on one workload; the survey's
model-structure (inter-model) technique, arXiv 2608.27046 Sec. 4.1 (AC sharing; the work it saves: Sec. 4.7).

    rlm-lab chapter 5 shared-critic --predict --size cpu                                   # 1. commit this first
    flock -x /tmp/rlm-lab-measure.lock rlm-lab chapter 5 shared-critic --measure --size cpu
    a = analysis("cpu")       # the prediction beside the paired repeats, the verdict

1. **Predicted first** (:func:`predict`, written by :func:`write_prediction` into ``prediction.json`` of the
   folder; it refuses to overwrite one): per arm, the cost model's step (stages + bookkeeping: the whole step the
   wall clock measures), model-state bytes (weights, gradients and AdamW state of every held model) and peak bytes
   at the peak stage, from the chapter's hardware profile; the step ratio shared / separate and the two savings.
2. **Measured** (:func:`measure`): chapter 2's traced PPO case (:mod:`rlm_lab.validate.traced_case`, the size's
   ``anatomy`` case) as the two arms, each repeat a fresh process under the measurement protocol
   (:func:`rlm_lab.protocol.compare`: paired, ABBA, load gate, the size's ``protocol_repeats``); each repeat reports
   its median step after the warm-up, the model-state bytes counted on the live trainer and the tracer's peak
   resident memory. It refuses to start without a prediction made before it.
3. **Judged** (:func:`analysis`): the paired ratio's Student-t interval (:mod:`rlm_lab.evidence`), the prediction's
   relative error at both ends of it and the verdict against :data:`rlm_lab.compare.BAR` (fixed before: the book's
   first goal); model states are exact counts (predicted = counted or not); the peak saving is the mean paired
   difference of the peak resident memory (Student-t), against the predicted peak saving.

Ignores: the process's runtime memory (the predictor prices model states and activations, not the interpreter and
libraries, so peaks are compared as the arms' difference); learning (accuracy is not compared here: the arms run
12 steps of chapter 2's timing case, no SFT).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import statistics
from pathlib import Path

from ...compare import BAR
from ...cost.hardware import profile_for
from ...errors import RlmLabError
from ...evidence import Interval, bar_word, error_interval, mean_interval, paired_differences
from ...protocol import Arm, child_main, compare
from ...record import RunRecord, load_record, reference_root, repo_relative, runs_root
from ...records.provenance import utc_now
from ...sizes import get
from ..registry import step_argv
from ...validate.traced_case import Case, predict_case, run_case

ARMS = ("shared", "separate")   # arm A, arm B: the ratio is shared / separate
FOLDER = "ch05_shared_critic"
PREDICTION = "prediction.json"
PROTOCOL = "protocol"           # the protocol's record (subfolder of FOLDER)
RUNS = "runs"                   # the arms' run records
STATE_KEYS = ("weights", "gradients", "optimizer")
STEP = (5, "shared-critic")     # rlm-lab chapter 5 shared-critic: this module's main, a repeat's command


def case(arm: str, size: str) -> Case:
    """Chapter 2's PPO case of ``size`` (``rlm_lab.sizes`` ``anatomy``) with the critic of ``arm``."""
    if arm not in ARMS:
        raise RlmLabError(f"unknown arm {arm!r}; choose one of: {', '.join(ARMS)}")
    return Case(f"ppo_{arm}_critic", "ppo", 0.04, critic=arm, **dict(get(size).anatomy))


def model_state_bytes(memory_measured: dict) -> int:
    """Weights, gradients and optimizer state of every held model, from a run's ``memory_measured`` counts."""
    return sum(v for k, v in memory_measured.items() if k.rsplit("_", 1)[-1] in STATE_KEYS)


def predict_arm(arm: str, size: str, profile) -> dict:
    """One arm's prediction: step seconds (stages + bookkeeping), its stages, model-state and peak bytes."""
    p = predict_case(case(arm, size), profile)
    state = p.persistent.weights + p.persistent.optimizer + p.memory.gradients  # all trainable gradients at the peak
    return {"step_s": p.total_time, "stages": {r.stage.value: r.seconds for r in p.rows},
            "model_state_bytes": int(state), "peak_bytes": int(p.memory.total)}


def predict(size: str, profile=None) -> dict:
    """The prediction as ``prediction.json`` keeps it (module docstring, step 1)."""
    profile = profile or profile_for(size)
    arms = {arm: predict_arm(arm, size, profile) for arm in ARMS}
    a, b = (arms[x] for x in ARMS)
    return {"made": utc_now(), "size": size, "profile": str(getattr(profile, "name", profile)),
            "arms": arms, "ratio": a["step_s"] / b["step_s"], "bar": BAR,
            "model_state_saving_bytes": b["model_state_bytes"] - a["model_state_bytes"],
            "peak_saving_bytes": b["peak_bytes"] - a["peak_bytes"]}


def write_prediction(size: str, folder: Path) -> Path:
    """Write :func:`predict` to ``<folder>/prediction.json``; an existing prediction is never overwritten."""
    path = Path(folder) / PREDICTION
    if path.exists():
        raise RlmLabError(f"{repo_relative(path)} exists: a prediction is made once, before the measurement")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(predict(size), indent=1, sort_keys=True) + "\n")
    return path


def load_prediction(folder: Path) -> dict:
    path = Path(folder) / PREDICTION
    try:
        pred = json.loads(path.read_text())
        _ = (pred["made"], pred["ratio"], pred["arms"][ARMS[0]]["step_s"], pred["arms"][ARMS[1]]["step_s"])
    except FileNotFoundError:
        raise RlmLabError(f"{repo_relative(path)}: no prediction; make it first (--predict)") from None
    except (ValueError, KeyError, TypeError) as e:
        raise RlmLabError(f"{repo_relative(path)}: not a shared-critic prediction ({e!r})") from None
    return pred


def run_arm(arm: str, size: str, out) -> dict:
    """One repeat of one arm (a protocol child): the traced case into ``<out>/<arm>/<UTC time>``; its median step
    after the warm-up, the model-state bytes counted on the live trainer, the peak resident memory."""
    c = case(arm, size)
    folder = Path(out) / arm / _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")
    rec = run_case(c, size, folder)
    return {"step_s": statistics.median(rec.results["step_walls"][c.warmup:]),
            "model_state_bytes": model_state_bytes(rec.results["memory_measured"]),
            "peak_bytes": rec.results["trace"]["peak_bytes"], "record": repo_relative(folder)}


def arm_command(arm: str, size: str, runs: Path) -> tuple:
    return (*step_argv(*STEP), "--arm", arm, "--size", size, "--out", str(runs))


def measure(size: str, folder: Path, say=print) -> dict:
    """The paired repeats (module docstring, step 2) into ``<folder>/protocol`` and ``<folder>/runs``."""
    folder = Path(folder)
    pred = load_prediction(folder)
    if pred["size"] != size:
        raise RlmLabError(f"{repo_relative(folder / PREDICTION)} predicts size {pred['size']}, not {size}")
    a, b = (Arm(arm, arm_command(arm, size, folder / RUNS)) for arm in ARMS)
    return compare(a, b, "step_s", folder / PROTOCOL, size=size, say=say)


def _values(record: RunRecord, key: str) -> dict:
    """arm name -> per-pair values of ``key`` of the children's reports, in pair order."""
    out = {arm: {} for arm in ARMS}
    for row in record.results["repeats"]:
        out[row["name"]][row["pair"]] = row["report"][key]
    return {arm: [v[i] for i in sorted(v)] for arm, v in out.items()}


def folder_of(size: str) -> Path:
    """The committed folder of ``size`` when it holds a finished protocol record, else this build's."""
    committed = reference_root(size) / FOLDER
    return committed if (committed / PROTOCOL / "record.json").exists() else runs_root(size) / FOLDER


def analysis(size: str, folder: Path | None = None) -> dict:
    """The prediction beside the measurement (module docstring, step 3)."""
    folder = Path(folder) if folder else folder_of(size)
    pred = load_prediction(folder)
    rec = load_record(folder / PROTOCOL, require=("summary", "repeats"))
    made, first = pred["made"], min(r["started"] for r in rec.results["repeats"])
    if _dt.datetime.fromisoformat(made) >= _dt.datetime.fromisoformat(first):
        raise RlmLabError(f"{repo_relative(folder)}: the prediction ({made}) was not made before the first repeat "
                          f"({first})")
    s = rec.results["summary"]["ratio"]
    ratio = Interval(s["estimate"], s["lo"], s["hi"], s["n"], s["method"])
    err = error_interval(pred["ratio"], ratio)
    state = _values(rec, "model_state_bytes")
    peaks = _values(rec, "peak_bytes")
    peak_saving = mean_interval(paired_differences(peaks[ARMS[1]], peaks[ARMS[0]]))
    loads = [r["load_before"]["per_core"] for r in rec.results["repeats"]]
    return {"prediction": pred, "ratio": ratio, "error": err, "verdict": bar_word(err, pred["bar"]),
            "word": rec.results["summary"]["word"], "n": ratio.n, "bar": pred["bar"],
            "state": {arm: sorted(set(v)) for arm, v in state.items()},
            "state_saving": state[ARMS[1]][0] - state[ARMS[0]][0],
            "state_exact": all(set(state[arm]) == {pred["arms"][arm]["model_state_bytes"]} for arm in ARMS),
            "state_off": sum(max(state[arm], key=lambda v: abs(v - pred["arms"][arm]["model_state_bytes"]))
                             - pred["arms"][arm]["model_state_bytes"] for arm in ARMS),
            "peaks": peaks, "peak_saving": peak_saving, "peak_word": _inside(peak_saving, pred["peak_saving_bytes"]),
            "load": (min(loads), max(loads)),
            "gate_timeouts": rec.results.get("gate_timeouts", 0), "record": repo_relative(folder),
            "window": rec.results.get("window", "")}


def _inside(iv: Interval, predicted: float) -> str:
    """Whether the predicted value lies in the measured interval (``undecided`` without one)."""
    if not iv.decided:
        return "undecided"
    return "inside" if iv.lo <= predicted <= iv.hi else "outside"


def _word(word: str) -> str:
    """The protocol's word on the ratio as a phrase about the shared head."""
    if word == "undecided":
        return "the interval holds 1, so neither arm is shown faster"
    return f"the shared head is {word} than the separate critic"


def _iv(iv: Interval, fmt: str, scale: float = 1.0) -> str:
    if not iv.decided:
        return f"{iv.estimate * scale:{fmt}} (no interval: n = {iv.n})"
    return f"{iv.estimate * scale:{fmt}} [{iv.lo * scale:{fmt}}, {iv.hi * scale:{fmt}}]"


def glue_values(a: dict) -> dict[str, str]:
    """The section's glued values (formatted)."""
    p, mib = a["prediction"], 1 / 2**20
    return {"ch05_ac_pred_ratio": f"{p['ratio']:.3f}", "ch05_ac_pred_made": p["made"][:16].replace("T", " "),
            "ch05_ac_profile": p["profile"], "ch05_ac_n": str(a["n"]),
            "ch05_ac_pred_shared_ms": f"{p['arms']['shared']['step_s'] * 1e3:.1f}",
            "ch05_ac_pred_separate_ms": f"{p['arms']['separate']['step_s'] * 1e3:.1f}",
            "ch05_ac_ratio": _iv(a["ratio"], ".3f"), "ch05_ac_method": a["ratio"].method,
            "ch05_ac_error": _iv(a["error"], "+.0%"), "ch05_ac_bar": f"{a['bar']:.0%}",
            "ch05_ac_verdict": a["verdict"], "ch05_ac_word": _word(a["word"]),
            "ch05_ac_pred_state_mib": f"{p['model_state_saving_bytes'] * mib:.2f}",
            "ch05_ac_state_mib": f"{a['state_saving'] * mib:.2f}",
            "ch05_ac_state_exact": "equal to the prediction, byte for byte" if a["state_exact"]
            else f"{a['state_off']:+,} B off the prediction",
            "ch05_ac_pred_peak_mib": f"{p['peak_saving_bytes'] * mib:.2f}",
            "ch05_ac_peak_mib": _iv(a["peak_saving"], ".1f", mib), "ch05_ac_peak_word": a["peak_word"],
            "ch05_ac_load": f"{a['load'][0]:.2f}-{a['load'][1]:.2f}", "ch05_ac_record": a["record"]}


def section_text(a: dict) -> str:
    """The section's table: per arm, predicted against measured (median over the pairs)."""
    p = a["prediction"]
    rows = []
    for arm in ARMS:
        rows.append(f"{arm:9s} predicted step {p['arms'][arm]['step_s'] * 1e3:7.1f} ms, model states "
                    f"{p['arms'][arm]['model_state_bytes']:>11,} B predicted, {', '.join(f'{v:,}' for v in a['state'][arm])}"
                    " B counted")
    for arm in ARMS:
        rows.append(f"{arm:9s} peak resident memory, median over the repeats: {statistics.median(a['peaks'][arm]) / 2**20:.1f}"
                    f" MiB measured; {p['arms'][arm]['peak_bytes'] / 2**20:.1f} MiB predicted (model states and "
                    "activations at the peak stage: no runtime)")
    rows.append(f"ratio shared / separate: predicted {p['ratio']:.3f}, measured {a['ratio'].text()} "
                f"({a['ratio'].method}, n = {a['n']} pairs): error {a['error'].text()}, "
                f"bar ±{a['bar']:.0%}: {a['verdict']}")
    return "\n".join(rows)


def main(argv=None) -> int:
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    ap = argparse.ArgumentParser(prog="rlm-lab chapter {} {}".format(*STEP),
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", default="smoke")
    ap.add_argument("--out", default=None, help="the folder (default: this build's runs folder of the size)")
    what = ap.add_mutually_exclusive_group(required=True)
    what.add_argument("--predict", action="store_true", help="write the prediction (once)")
    what.add_argument("--measure", action="store_true", help="the paired repeats (after the prediction)")
    what.add_argument("--arm", choices=ARMS, help="one repeat of one arm (the protocol's child)")
    args = ap.parse_args(argv)
    folder = Path(args.out) if args.out else runs_root(args.size) / FOLDER
    if args.arm:
        return child_main(lambda: run_arm(args.arm, args.size, folder),
                          lambda out: print(f"{args.arm}: step {out['step_s']:.4f} s"))
    if args.predict:
        return child_main(lambda: print(repo_relative(write_prediction(args.size, folder))) or 0, print)
    return child_main(lambda: measure(args.size, folder) and 0, print)
