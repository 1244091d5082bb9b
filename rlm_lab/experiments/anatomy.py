"""Chapter 2, "Anatomy of an iteration": traced PPO / GRPO / DAPO-style runs against the cost model.

What is measured (each a recorded run, ``data/runs/<size>/ch02_*``):

* ``run_case``: a TRL run (GRPO, DAPO-style GRPO with beta = 0, our PPO) of a random-init zoo model with
  **forced** completion lengths (``min_new_tokens = max_new_tokens = R``), so the workload the cost model
  is given is exactly the one that ran; the stage tracer times every stage; held-model bytes (weights,
  gradients just before the optimizer step, optimizer state just after it) are counted from the live
  tensors; the KV cache of one ``generate`` call is counted from its cache tensors.
* ``reward_calibration``: seconds per sample of the verifier, timed on synthetic completions (a
  calibration input of the cost model, measured apart from the runs it is judged on).
* ``tracer_overhead``: the same config with and without the tracer, alternated, median step times.

What is predicted: ``predict_case`` builds the cost model's ``Workload`` from the same case and calls
``rlm_lab.cost.predict`` with a calibrated hardware profile. ``time_table`` / ``memory_table`` join the
two on ``rlm_lab.stages.Stage`` keys and give the relative error (predicted - measured) / measured.

Ignores: learning (random-init models, rewards are ~0; stage times do not depend on the reward values),
and TRL bookkeeping outside the stages ("other", shown but not predicted).
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from ..errors import RlmLabError
from ..record import RunRecord, runs_root
from ..sizes import check_size
from ..stages import Stage
from .compare import (OTHER, STEP, median_abs_error, reference_dir, relative_error,  # noqa: F401 (re-exported)
                      step_summary, verdict)
from .memory_probes import Probe, measure_kv_cache, measured_memory

TASK = "arithmetic:digits=2"
# The calibrated profile of the machine the committed cpu runs were made on; $RLM_CPU_PROFILE points
# the notebooks at another one (a name in data/hardware/ or a path) after `rlm-lab calibrate` elsewhere.
CPU_PROFILE = os.environ.get("RLM_CPU_PROFILE", "cpu-2core-epyc")
PROMPT_LEN = 6  # "99+99=": TRL left-pads each batch to its longest prompt, and 8+ prompts almost always hold a 6


def profile_for(size: str):
    """The hardware profile predictions at ``size`` use: the calibrated CPU profile for smoke/cpu; for gpu
    ``$RLM_GPU_PROFILE``, else a calibrated profile of this GPU if one was written, else its datasheet."""
    if check_size(size) != "gpu":
        return CPU_PROFILE
    if os.environ.get("RLM_GPU_PROFILE"):
        return os.environ["RLM_GPU_PROFILE"]
    import torch

    from ..cost import known_profiles
    from ..cost.calibrate import default_name

    if not torch.cuda.is_available():
        return "h100-sxm"
    if default_name("cuda") in known_profiles():
        return default_name("cuda")
    name = torch.cuda.get_device_name(0).lower()
    for key, prof in (("h200", "h200"), ("h100", "h100-sxm"), ("a100", "a100-80gb"), ("l4", "l4"), ("t4", "t4")):
        if key in name:
            return prof
    raise RlmLabError(f"no hardware profile for GPU {name!r}; run `rlm-lab calibrate --device cuda` "
                      "or set RLM_GPU_PROFILE to a profile name or path")


@dataclass(frozen=True)
class Case:
    """One traced run. ``batch`` completions per optimizer step = batch / group prompts x group."""

    name: str
    algo: str = "grpo"       # grpo | ppo  (DAPO-style = grpo with beta 0)
    beta: float = 0.04
    model: str = "micro"
    batch: int = 64
    group: int = 8
    length: int = 16         # forced completion length R
    steps: int = 12
    warmup: int = 2          # traced steps left out of the summary (one-time costs)

    @property
    def label(self) -> str:
        kind = "DAPO-style" if self.algo == "grpo" and self.beta == 0 else self.algo.upper()
        return f"{kind} B={self.batch} R={self.length}"


_SIZE = {
    "smoke": dict(model="nano", batch=16, group=4, length=8, steps=3, warmup=1),
    "cpu": dict(model="micro", batch=64, group=8, length=16, steps=12, warmup=2),
    "gpu": dict(model="small", batch=512, group=16, length=64, steps=20, warmup=3),
}
_SWEEP = {  # (lengths at the base batch, batches at the base length)
    "smoke": ((), ()),  # smoke: the three algorithms only (CI time); the sweep is read from the cpu records
    "cpu": ((4, 64), (16, 256)),
    "gpu": ((16, 256), (128, 2048)),
}


def algorithm_cases(size: str) -> dict[str, Case]:
    """The three algorithms side by side: PPO (actor, critic, reference, verifier), GRPO (actor,
    reference), DAPO-style GRPO with beta = 0 (actor only)."""
    base = _SIZE[check_size(size)]
    return {"grpo": Case("grpo", "grpo", 0.04, **base),
            "dapo": Case("dapo", "grpo", 0.0, **base),
            "ppo": Case("ppo", "ppo", 0.04, **base)}


def sweep_cases(size: str) -> dict[str, Case]:
    """GRPO at other completion lengths and batch sizes (the base point is ``algorithm_cases()['grpo']``)."""
    base = algorithm_cases(size)["grpo"]
    lengths, batches = _SWEEP[size]
    out = {f"grpo_R{r}": replace(base, name=f"grpo_R{r}", length=r) for r in lengths}
    out.update({f"grpo_B{b}": replace(base, name=f"grpo_B{b}", batch=b) for b in batches})
    return out


def case_dir(case: Case, size: str) -> Path:
    return runs_root(size) / f"ch02_{case.name}"


# ---- measuring ---------------------------------------------------------------------------------

def run_case(case: Case, size: str, run_dir: Path | None = None, seed: int = 0, trace_on: bool = True,
             extra_callbacks=()) -> RunRecord:
    """Train ``case`` with the stage tracer and record spans, per-stage summary and memory counts."""
    from ..models import build_model, save
    from ..tasks import ensure_data, parse_task
    from ..train.config import RunConfig
    from ..train.rl import make_trainer
    from ..train.tracer import trace

    run_dir = Path(run_dir) if run_dir else case_dir(case, size)
    cfg = RunConfig(algo=case.algo, task=TASK, model=case.model, size=size, seed=seed, rl_steps=case.steps,
                    batch_size=case.batch, num_generations=case.group, max_completion_length=case.length,
                    beta=case.beta, sft_steps=0, eval_every=0, trace=trace_on, disable_tqdm=True,
                    extra={"generation_kwargs": {"min_new_tokens": case.length}})
    task = parse_task(TASK)
    record = RunRecord(run_dir, {"case": asdict(case), "run_config": cfg.to_dict(), "prompt_len": PROMPT_LEN},
                       command=f"rlm_lab.experiments.anatomy.run_case({case.name!r}, size={size!r})", seed=seed)
    from transformers.utils import logging as hf_logging

    import torch

    hf_logging.disable_progress_bar()  # weight-loading bars of every model load
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="rlm_ch02_") as tmp:
        model, tok = build_model(case.model, seed=seed)
        kv = measure_kv_cache(model, case.batch, PROMPT_LEN, case.length)
        model_dir = save(model, tok, Path(tmp) / "model")
        del model
        probe = Probe()
        trainer = make_trainer(cfg, model_dir, ensure_data(task)["train"], task, Path(tmp) / "out",
                               [probe, *extra_callbacks])
        _quiet(trainer)
        probe.memory = measured_memory(trainer)
        if trace_on:
            trace(trainer, record=record, warmup=case.warmup)
        t0 = time.perf_counter()
        trainer.train()
        seconds = time.perf_counter() - t0
    lengths = [h["completions/mean_length"] for h in trainer.state.log_history if "completions/mean_length" in h]
    memory = {**probe.memory, "kv_cache": kv}
    # The load average says whether the machine was quiet (jobs outside the lock still show up here).
    record.update(memory_measured=memory, train_seconds=round(seconds, 3), step_walls=probe.walls,
                  completion_mean_lengths=lengths, torch_threads=torch.get_num_threads(),
                  loadavg_before=load_before, loadavg_after=os.getloadavg())
    return record


def _quiet(trainer) -> None:
    """No per-step log dicts or bars on stdout: the record has them."""
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    trainer.remove_callback(PrinterCallback)
    trainer.remove_callback(ProgressCallback)


def reward_calibration(size: str, n: int = 4096, run_dir: Path | None = None, seed: int = 0) -> RunRecord:
    """Seconds per sample of the task's verifier rewards on synthetic completions (calibration input)."""
    import random

    from ..tasks import ensure_data, parse_task, reward_funcs

    task = parse_task(TASK)
    rows = ensure_data(task)["train"][:n]
    rng = random.Random(seed)
    length = _SIZE[size]["length"]
    completions = ["".join(rng.choice("0123456789+-= ") for _ in range(length)) for _ in rows]
    columns = {k: [r[k] for r in rows] for k in rows[0] if k != "prompt"}
    funcs = reward_funcs(task)

    def once():
        for f in funcs:
            f(completions=completions, prompts=[r["prompt"] for r in rows], **columns)

    once()
    times = []
    for _ in range(7):
        t0 = time.perf_counter()
        once()
        times.append(time.perf_counter() - t0)
    record = RunRecord(run_dir or runs_root(size) / "ch02_reward_calibration",
                       {"task": TASK, "samples": n, "completion_length": length},
                       command=f"rlm_lab.experiments.anatomy.reward_calibration(size={size!r})", seed=seed)
    record.update(reward_s_per_sample=statistics.median(times) / n, repeats_s=times)
    return record


def tracer_overhead(size: str, repeats: int = 3, run_dir: Path | None = None, seed: int = 0) -> RunRecord:
    """The GRPO case run ``repeats`` times with and ``repeats`` times without the tracer (alternating),
    median step time of each (first ``warmup`` steps left out). Run it on a quiet machine."""
    case = algorithm_cases(size)["grpo"]
    walls = {"traced": [], "plain": []}
    with tempfile.TemporaryDirectory(prefix="rlm_ch02_overhead_") as tmp:
        for i in range(repeats):
            for mode in ("plain", "traced"):
                rec = run_case(case, size, Path(tmp) / f"{mode}{i}", seed=seed, trace_on=mode == "traced")
                walls[mode].append(rec.results["step_walls"][case.warmup:])
    med = {m: statistics.median(w for run in runs for w in run) for m, runs in walls.items()}
    record = RunRecord(run_dir or runs_root(size) / "ch02_tracer_overhead", {"case": asdict(case), "repeats": repeats},
                       command=f"rlm_lab.experiments.anatomy.tracer_overhead(size={size!r})", seed=seed)
    record.update(step_walls=walls, median_step_s=med, overhead=med["traced"] / med["plain"] - 1)
    return record


def ensure_runs(size: str, force: bool = False) -> dict[str, RunRecord]:
    """The chapter's records: the committed ones of ``size`` (``data/runs/<size>``) when present, else this
    machine's earlier runs under ``runs_root(size)``, else run now (``force``: run everything again)."""
    out = {}
    ref = load_reference(size) if not force else {}
    cal = runs_root(size) / "ch02_reward_calibration"
    out["reward_calibration"] = ref.get("reward_calibration") or (
        RunRecord.load(cal) if (cal / "record.json").exists() and not force else reward_calibration(size))
    for name, case in {**algorithm_cases(size), **sweep_cases(size)}.items():
        d = case_dir(case, size)
        if name in ref and "trace" in ref[name].results:
            out[name] = ref[name]
            continue
        done = (d / "record.json").exists() and "trace" in RunRecord.load(d).results
        out[name] = RunRecord.load(d) if done and not force else run_case(case, size)
    return out


# ---- predicting and comparing ----------------------------------------------------------------------

def predict_case(case: Case, profile, reward_s_per_sample: float = 0.0):
    """The cost model's prediction for ``case`` (same model, algorithm, batch shape and lengths)."""
    from ..cost import Algorithm, Workload, algorithm, predict
    from ..cost.workload import ResponseLengths

    if case.algo == "ppo":  # our PPO scores with the verifier, not a reward model: actor, critic, reference
        algo = Algorithm("ppo", ("actor", "critic") + (("reference",) if case.beta else ()) + ("verifier",), "gae")
    else:
        algo = algorithm(case.algo, case.beta)
    wl = Workload(prompts=case.batch // case.group, group_size=case.group, prompt_len=PROMPT_LEN,
                  response=ResponseLengths("fixed", length=case.length), micro_batch=case.batch,
                  gen_batch=case.batch, recompute_old=case.algo == "ppo" and case.beta > 0, precision="fp32",
                  padding="batch", engine="static", logits="completion",
                  reward_s_per_sample=reward_s_per_sample, weight_sync="none")
    return predict(case.model, algo, wl, profile)


MEASURED_STAGES = (Stage.GENERATE, Stage.OLD_LOGPROB, Stage.REF_LOGPROB, Stage.REWARD, Stage.VALUES,
                   Stage.ADVANTAGE, Stage.ACTOR_FORWARD, Stage.ACTOR_BACKWARD, Stage.CRITIC_UPDATE, Stage.OPTIMIZER)


def time_table(record: RunRecord, prediction) -> list[dict]:
    """Per stage: predicted and measured seconds per step (median over traced steps), relative error;
    a last row "step" compares the predicted iteration with the measured step wall time."""
    summary = record.results.get("trace")
    if not summary or not summary.get("stages"):
        raise RlmLabError(f"{record.dir} has no tracer summary; re-run it with the tracer on")
    rows = []
    predicted_stages = {r.stage for r in prediction.rows}
    for stage in MEASURED_STAGES:
        pred_has = stage in predicted_stages or (stage == Stage.GENERATE and Stage.DECODE in predicted_stages)
        meas = summary["stages"].get(stage.value)
        if not pred_has and meas is None:
            continue
        p = prediction.seconds(stage) if pred_has else 0.0
        m = meas["median_s"] if meas else 0.0
        rows.append({"stage": stage.value, "predicted": p, "measured": m, "rel_error": relative_error(p, m)})
    other = summary["stages"].get("other", {}).get("median_s", 0.0)
    rows.append({"stage": OTHER, "predicted": 0.0, "measured": other, "rel_error": float("nan")})
    step_p, step_m = sum(r.seconds for r in prediction.rows), summary["step_wall_s"]["median"]
    rows.append({"stage": STEP, "predicted": step_p, "measured": step_m, "rel_error": relative_error(step_p, step_m)})
    return rows


def memory_table(record: RunRecord, prediction) -> list[dict]:
    """Bytes per held model and kind, predicted (cost model) against counted from the live tensors."""
    from ..cost import memory as M
    from ..cost import scalar_head

    meas = record.results["memory_measured"]
    spec, prec = prediction.spec, prediction.workload.precision
    actor = M.model_memory(spec, True, prec)
    pred = {"actor_weights": actor.weights, "actor_gradients": actor.gradients, "actor_optimizer": actor.optimizer}
    if prediction.algo.reference:
        pred["reference_weights"] = M.model_memory(spec, False, prec).weights
    if prediction.algo.critic:
        critic = M.model_memory(scalar_head(spec), True, prec)
        pred.update(critic_weights=critic.weights, critic_gradients=critic.gradients, critic_optimizer=critic.optimizer)
    wl = prediction.workload
    pred["kv_cache"] = M.kv_cache_bytes(spec, wl.gen * M.generate_kv_tokens(wl.prompt_len, wl.response.length),
                                        wl.dtype_bytes)
    rows = []
    for key, p in pred.items():
        m = meas.get(key)
        rows.append({"item": key, "predicted": p, "measured": m,
                     "rel_error": relative_error(p, m) if m is not None else float("nan")})
    return rows


def share_row(record: RunRecord, prediction, label: str) -> dict:
    """Per stage: predicted FLOP share, predicted time share and measured time share of one step
    (generation = prefill + decode; "other" is measured only)."""
    flops: dict[str, float] = {}
    secs: dict[str, float] = {}
    for r in prediction.rows:
        key = Stage.GENERATE.value if r.stage in (Stage.PREFILL, Stage.DECODE) else r.stage.value
        flops[key] = flops.get(key, 0.0) + r.flops
        secs[key] = secs.get(key, 0.0) + r.seconds
    total_f, total_s = sum(flops.values()) or 1.0, sum(secs.values()) or 1.0
    stages = record.results["trace"]["stages"]
    wall = record.results["trace"]["step_wall_s"]["median"]
    return {"label": label, "flop_share": {k: v / total_f for k, v in flops.items() if v},
            "time_share_predicted": {k: v / total_s for k, v in secs.items() if v},
            "time_share": {k: v["median_s"] / wall for k, v in stages.items()}}


# ---- what the notebook shows ---------------------------------------------------------------------------

def case_of(record: RunRecord) -> Case:
    return Case(**record.config["case"])


def algorithms_table(size: str, profile=CPU_PROFILE) -> list[dict]:
    """Per algorithm: models held, stages run, predicted model-state bytes (weights + grads + AdamW)."""
    from ..stages import MODELS_HELD

    rows = []
    for name, case in algorithm_cases(size).items():
        pred = predict_case(case, profile)
        held = pred.algo.models
        m = pred.memory
        rows.append({"run": name, "algorithm": case.label.split(" ")[0], "models": ", ".join(held),
                     "stages": ", ".join(str(r.stage) for r in pred.rows),
                     "model_state_MiB": round((m.weights + m.gradients + m.optimizer) / 2**20, 3),
                     "paper_notes": ", ".join(MODELS_HELD["dapo" if case.beta == 0 and case.algo == "grpo"
                                                         else case.algo])})
    return rows


def comparison(records: dict, names, profile=CPU_PROFILE) -> list[dict]:
    """Predicted against measured per stage for the named runs, one row per (run, stage)."""
    reward_s = records["reward_calibration"].results["reward_s_per_sample"]
    out = []
    for name in names:
        rec = records[name]
        for row in time_table(rec, predict_case(case_of(rec), profile, reward_s)):
            out.append({"run": name, **row})
    return out


def generation_shares(records: dict, names, profile=CPU_PROFILE) -> list[dict]:
    """Generation's share of the FLOPs (predicted) and of the step time (predicted, measured) per run."""
    reward_s = records["reward_calibration"].results["reward_s_per_sample"]
    out = []
    for name in names:
        rec = records[name]
        case = case_of(rec)
        share = share_row(rec, predict_case(case, profile, reward_s), case.label)
        g = Stage.GENERATE.value
        out.append({"run": name, "B": case.batch, "R": case.length, "gen_flop_share": share["flop_share"].get(g, 0.0),
                    "gen_time_share_pred": share["time_share_predicted"].get(g, 0.0),
                    "gen_time_share_meas": share["time_share"].get(g, 0.0), "share": share})
    return out


ALGORITHMS = ("grpo", "dapo", "ppo")


def headline(records: dict, profile=CPU_PROFILE) -> dict:
    """The chapter's comparison as the numbers its prose quotes: the per-stage rows of the three
    algorithms, then (``compare.step_summary``) the whole-step error first and the per-stage median
    second, their verdicts against the goals, and generation's own signed error (median over runs)."""
    rows = comparison(records, ALGORITHMS, profile)
    summary = step_summary(rows)
    gen = [r["rel_error"] for r in rows if r["stage"] == Stage.GENERATE.value]
    return {"rows": rows, **summary, "step_verdict": verdict(summary["step_error"]),
            "stage_verdict": verdict(summary["stage_error"]), "generate_error": statistics.median(gen)}


def errors_by_calibration(records: dict, name: str = "cpu-2core-epyc") -> list[dict]:
    """The chapter's headline errors under every committed calibration of machine ``name``
    (``data/hardware/calibrations/<name>-<date>.json``, see ``rlm_lab.cost.spread``), so that the spread
    of the machine's calibrations shows as a spread of the verdict. ``kernels``: whether that calibration
    measured the kernel terms (elementwise, attention, log-prob head, weight streaming)."""
    import json

    from ..cost.spread import calibration_files

    rows = []
    for path in calibration_files(name):
        h = headline(records, str(path))
        prof = json.loads(path.read_text())
        rows.append({"calibration": path.stem, "kernels": bool(prof.get("kernels")),
                     "step_error": h["step_error"], "stage_error": h["stage_error"],
                     "step_verdict": h["step_verdict"], "stage_verdict": h["stage_verdict"]})
    return rows


def load_reference(size: str = "cpu") -> dict[str, RunRecord]:
    """The committed records of this chapter at ``size`` (empty if none were committed)."""
    out = {}
    root = reference_dir(size)
    for d in sorted(root.glob("ch02_*")):
        if (d / "record.json").exists():
            out[d.name.removeprefix("ch02_")] = RunRecord.load(d)
    return out


def main(argv=None) -> int:
    """``python -m rlm_lab.experiments.anatomy --size cpu [--force] [--overhead]``: make the chapter's records."""
    import argparse

    ap = argparse.ArgumentParser(description=main.__doc__)
    ap.add_argument("--size", default="cpu")
    ap.add_argument("--force", action="store_true", help="re-run records that exist")
    ap.add_argument("--overhead", action="store_true", help="also measure the tracer's overhead")
    ap.add_argument("--only", nargs="*", help="case names to (re-)run, e.g. grpo ppo")
    args = ap.parse_args(argv)
    size = check_size(args.size)
    if args.only:
        cases = {**algorithm_cases(size), **sweep_cases(size)}
        for name in args.only:
            if name == "reward_calibration":
                reward_calibration(size)
            elif name == "tracer_overhead":
                tracer_overhead(size)
            else:
                run_case(cases[name], size)
            print("recorded", name, f"load {os.getloadavg()[0]:.1f}", flush=True)
        return 0
    ensure_runs(size, force=args.force)
    if args.overhead:
        tracer_overhead(size)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
