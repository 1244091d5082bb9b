"""Chapter 2's runs: traced TRL runs of each case (with memory probes), the verifier's calibration and the
tracer's own overhead, each a RunRecord; the committed ones are loaded instead of re-run."""

from __future__ import annotations

import statistics
import time
from dataclasses import asdict
from pathlib import Path

from ...record import RunRecord, runs_root
from ...sizes import check_size
from ...compare import reference_dir
from ...train.memory_probes import Probe, measure_kv_cache, measured_memory
from .cases import PROMPT_LEN, TASK, Case, algorithm_cases, case_dir, sweep_cases
from ...host import load_average

def run_case(case: Case, size: str, run_dir: Path | None = None, seed: int = 0, trace_on: bool = True,
             extra_callbacks=()) -> RunRecord:
    """Train ``case`` with the stage tracer and record spans, per-stage summary and memory counts."""
    from ...models import build_model, save
    from ...tasks import ensure_data, parse_task
    from ...train.config import RunConfig
    from ...train.rl import make_trainer
    from ...train.tracer import trace

    run_dir = Path(run_dir) if run_dir else case_dir(case, size)
    cfg = RunConfig(algo=case.algo, task=TASK, model=case.model, size=size, seed=seed, rl_steps=case.steps,
                    batch_size=case.batch, num_generations=case.group, max_completion_length=case.length,
                    beta=case.beta, sft_steps=0, eval_every=0, trace=trace_on, disable_tqdm=True,
                    cpu_bf16=case.bf16, activation_checkpointing=case.checkpointing,  # TRL's defaults, if kept
                    extra={"generation_kwargs": {"min_new_tokens": case.length}})
    task = parse_task(TASK)
    record = RunRecord(run_dir, {"case": asdict(case), "run_config": cfg.to_dict(), "prompt_len": PROMPT_LEN},
                       command=f"rlm_lab.chapters.ch02_anatomy.run_case({case.name!r}, size={size!r})", seed=seed)
    from transformers.utils import logging as hf_logging

    import torch

    hf_logging.disable_progress_bar()  # weight-loading bars of every model load
    load_before = load_average()
    # Ends completed, or failed: / interrupted if the block raises. The scratch folder (the saved model, the
    # Trainer's output) lives in the run folder: removed at the end, or by the next start after a SIGKILL.
    with record:
        tmp = record.scratch("ch02")
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
                      loadavg_before=load_before, loadavg_after=load_average())
    return record


def _quiet(trainer) -> None:
    """No per-step log dicts or bars on stdout: the record has them."""
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    trainer.remove_callback(PrinterCallback)
    trainer.remove_callback(ProgressCallback)


def reward_calibration(size: str, n: int = 4096, run_dir: Path | None = None, seed: int = 0) -> RunRecord:
    """Seconds per sample of the task's verifier rewards on synthetic completions (calibration input)."""
    import random

    from ...tasks import ensure_data, parse_task, reward_funcs

    task = parse_task(TASK)
    rows = ensure_data(task)["train"][:n]
    rng = random.Random(seed)
    length = algorithm_cases(size)["grpo"].length
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
                       command=f"rlm_lab.chapters.ch02_anatomy.reward_calibration(size={size!r})", seed=seed)
    record.complete(reward_s_per_sample=statistics.median(times) / n, repeats_s=times)
    return record


def tracer_overhead(size: str, repeats: int = 3, run_dir: Path | None = None, seed: int = 0) -> RunRecord:
    """The GRPO case run ``repeats`` times with and ``repeats`` times without the tracer (alternating),
    median step time of each (first ``warmup`` steps left out). Run it on a quiet machine."""
    case = algorithm_cases(size)["grpo"]
    walls = {"traced": [], "plain": []}
    record = RunRecord(run_dir or runs_root(size) / "ch02_tracer_overhead", {"case": asdict(case), "repeats": repeats},
                       command=f"rlm_lab.chapters.ch02_anatomy.tracer_overhead(size={size!r})", seed=seed)
    tmp = record.scratch("overhead_")  # inside the run folder: a killed run's leftovers are cleaned by the next
    for i in range(repeats):
        for mode in ("plain", "traced"):
            rec = run_case(case, size, tmp / f"{mode}{i}", seed=seed, trace_on=mode == "traced")
            walls[mode].append(rec.results["step_walls"][case.warmup:])
    med = {m: statistics.median(w for run in runs for w in run) for m, runs in walls.items()}
    record.complete(step_walls=walls, median_step_s=med, overhead=med["traced"] / med["plain"] - 1)
    return record


def ensure_runs(size: str, force: bool = False) -> dict[str, RunRecord]:
    """The chapter's records: the committed ones of ``size`` (``data/runs/<size>``) when present, else this
    build's own finished runs under ``runs_root(size)``, else run now (an unfinished or damaged build run is
    run again; ``force``: run everything again)."""
    ref = load_reference(size) if not force else {}
    out = {"reward_calibration": ref.get("reward_calibration")
           or _own(runs_root(size) / "ch02_reward_calibration", force, ("reward_s_per_sample",))
           or reward_calibration(size)}
    for name, case in {**algorithm_cases(size), **sweep_cases(size)}.items():
        if name in ref and "trace" in ref[name].results:
            out[name] = ref[name]
        else:
            out[name] = _own(case_dir(case, size), force, ("trace",)) or run_case(case, size)
    return out


def _own(run_dir: Path, force: bool, require) -> RunRecord | None:
    """This build's finished record in ``run_dir`` holding ``require``, or None (missing, unfinished, damaged)."""
    from ...record import RecordError, load_record

    if force or not (run_dir / "record.json").exists():
        return None
    try:
        return load_record(run_dir, require=require)
    except RecordError:
        return None


def load_reference(size: str = "cpu") -> dict[str, RunRecord]:
    """The committed records of this chapter at ``size`` (empty if none were committed). Every ``ch02_*``
    folder there must hold a completed run: a damaged or unfinished one is a RecordError naming it."""
    out = {}
    root = reference_dir(size)
    for d in sorted(p for p in root.glob("ch02_*") if p.is_dir()):
        out[d.name.removeprefix("ch02_")] = RunRecord.load(d)
    return out


def main(argv=None) -> int:
    """``python -m rlm_lab.chapters.ch02_anatomy --size cpu [--force] [--overhead]``: make the chapter's records."""
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
            print("recorded", name, f"load {load_average()[0]:.1f}", flush=True)
        return 0
    ensure_runs(size, force=args.force)
    if args.overhead:
        tracer_overhead(size)
    return 0
