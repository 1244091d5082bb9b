"""A traced case: one TRL run of a zoo model whose completion lengths are *forced* (``min_new_tokens =
max_new_tokens = R``), timed stage by stage by the tracer (:class:`Case`, :func:`run_case`), the cost model's
prediction of the same workload (:func:`predict_case`) and the join of the two (:func:`time_table`).

Chapter 2's cases (:mod:`rlm_lab.chapters.ch02_anatomy.cases`), the validation suite (:mod:`.suite`) and the
in-situ calibration suite (:mod:`rlm_lab.insitu`) are lists of these, so the definition sits here, below all
three: the suites never import a chapter.

    rec = run_case(Case("grpo", model="nano", batch=8, group=4, length=4, steps=3), "smoke", "_build/tmp/grpo")
    rows = time_table(rec, predict_case(case_of(rec), "cpu-2core-epyc"))
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from pathlib import Path

from .. import models
from ..compare import OTHER, STEP, relative_error
from ..cost import predict
from ..cost.run_input import from_run
from ..errors import RlmLabError
from ..host import load_average
from ..record import RunRecord
from ..stages import Stage
from ..tasks import ensure_data, parse_task
from ..train.config import RunConfig
from ..train.memory_probes import Probe, measure_kv_cache, measured_memory
from ..train.rl import make_trainer
from ..train.tracer import trace

TASK = "arithmetic:digits=2"
PROMPT_LEN = 6  # "99+99=": TRL left-pads each batch to its longest prompt, and 8+ prompts almost always hold a 6


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
    bf16: bool = False       # TRL's default bf16=True kept: bf16 autocast on CPU (accelerate)
    checkpointing: bool = False  # TRL's default gradient_checkpointing=True kept
    critic: str = "separate"     # PPO: a value model of its own, or "shared" (a value head on the policy's backbone)

    @property
    def label(self) -> str:
        kind = "DAPO-style" if self.algo == "grpo" and self.beta == 0 else self.algo.upper()
        return f"{kind} B={self.batch} R={self.length}"


def run_config(case: Case, size: str, seed: int = 0, trace_on: bool = True):
    """The :class:`rlm_lab.train.config.RunConfig` that :func:`run_case` trains for ``case``: lengths forced to
    ``case.length`` (``min_new_tokens``), no SFT, no evaluation; a shared critic is PPOConfig's ``critic``."""
    extra = {"generation_kwargs": {"min_new_tokens": case.length}}
    if case.critic != "separate":
        extra["critic"] = case.critic
    return RunConfig(algo=case.algo, task=TASK, model=case.model, size=size, seed=seed, rl_steps=case.steps,
                     batch_size=case.batch, num_generations=case.group, max_completion_length=case.length,
                     beta=case.beta, sft_steps=0, eval_every=0, trace=trace_on, disable_tqdm=True,
                     cpu_bf16=case.bf16, activation_checkpointing=case.checkpointing,  # TRL's defaults, if kept
                     extra=extra)


def run_case(case: Case, size: str, run_dir: Path, seed: int = 0, trace_on: bool = True,
             extra_callbacks=()) -> RunRecord:
    """Train ``case`` with the stage tracer and record spans, per-stage summary and memory counts in
    ``run_dir`` (chapter 2's folder for a case is :func:`rlm_lab.chapters.ch02_anatomy.cases.case_dir`)."""
    run_dir = Path(run_dir)
    cfg = run_config(case, size, seed, trace_on)
    task = parse_task(TASK)
    record = RunRecord(run_dir, {"case": asdict(case), "run_config": cfg.to_dict(), "prompt_len": PROMPT_LEN},
                       command=f"rlm_lab.validate.traced_case.run_case({case.name!r}, size={size!r})", seed=seed)
    import torch
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # weight-loading bars of every model load
    load_before = load_average()
    # Ends completed, or failed: / interrupted if the block raises. The scratch folder (the saved model, the
    # Trainer's output) lives in the run folder: removed at the end, or by the next start after a SIGKILL.
    with record:
        tmp = record.scratch("ch02")
        model, tok = models.build_model(case.model, seed=seed)
        kv = measure_kv_cache(model, case.batch, PROMPT_LEN, case.length)
        model_dir = models.save(model, tok, Path(tmp) / "model")
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


def predict_case(case: Case, profile, reward_s_per_sample: float = 0.0):
    """The cost model's prediction for ``case``: its run config (:func:`run_config`, what :func:`run_case` trains)
    through :func:`rlm_lab.cost.run_input.from_run`, the one path from a run to the predictor."""
    algo, wl = from_run(run_config(case, "cpu"), PROMPT_LEN, reward_s_per_sample=reward_s_per_sample)
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


def case_of(record: RunRecord) -> Case:
    return Case(**record.config["case"])
