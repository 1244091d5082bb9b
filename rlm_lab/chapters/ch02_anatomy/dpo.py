"""Chapter 2's DPO case: TRL's ``DPOTrainer`` on the verifiable task's preference pairs (:mod:`rlm_lab.train.dpo`),
predicted first, then traced stage by stage like the GRPO and PPO cases (the survey's third family, arXiv
2608.27046 Sec. 2.4 and Algorithm 4; DPO: arXiv 2305.18290).

    rec = run_dpo_case(dpo_case("smoke"), "smoke", "_build/runs/smoke/ch02_dpo")
    rows = dpo_table(rec)      # the prediction written into the record before training, beside the measurement

The case scores as many sequences per optimizer step as the chapter's GRPO case (``batch``): ``batch / 2`` pairs of
two completions. The prediction is made after TRL has tokenized the pairs (their lengths are the workload) and
before the first step, with the chapter's hardware profile, and written into the record (``results.prediction``,
with the time it was made) before ``train()`` starts; the measurement cannot change it.

Workload: ``pairs`` prompts x 2 completions, every row padded to the longest prompt + completion of the data set
(TRL pads each batch to its longest row, and a batch of 8+ pairs of this task almost always holds one), logits
over every position (TRL's DPO forward scores the whole sequence), fp32, one epoch, one micro-batch per step.
Ignores: TRL's bookkeeping between the stages (the tracer's ``other``: shown, not predicted, as for GRPO/PPO).
"""

from __future__ import annotations

import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from ...compare import OTHER, STEP, reference_dir, relative_error
from ...cost import predict as cost_predict
from ...cost.hardware import load_profile, profile_for
from ...cost.workload import ResponseLengths, Workload
from ...errors import RlmLabError
from ...host import load_average
from ...models import build_model
from ...record import RunRecord, load_record, runs_root
from ...records.provenance import utc_now
from ...sizes import get
from ...stages import Stage
from ...tasks import ensure_data, parse_task
from ...train.dpo import dpo_trainer, preference_pairs
from ...train.memory_probes import Probe
from ...train.tracer import trace
from ...validate.traced_case import TASK, _quiet

STAGES = (Stage.REF_LOGPROB, Stage.ACTOR_FORWARD, Stage.ACTOR_BACKWARD, Stage.OPTIMIZER)


@dataclass(frozen=True)
class DpoCase:
    """One traced DPO run: ``pairs`` preference pairs (2 sequences each) per optimizer step."""

    name: str = "dpo"
    model: str = "micro"
    pairs: int = 32
    steps: int = 12
    warmup: int = 2
    beta: float = 0.1
    learning_rate: float = 1e-4


def dpo_case(size: str) -> DpoCase:
    """The DPO case of ``size``: the chapter's base case (``rlm_lab.sizes``: model, steps, warm-up) with as many
    sequences per step as its GRPO case (``batch // 2`` pairs)."""
    base = get(size).anatomy
    return DpoCase(model=base["model"], pairs=base["batch"] // 2, steps=base["steps"], warmup=base["warmup"])


def shapes(trainer) -> tuple[int, int]:
    """``(prompt_len, completion_len)`` of the padded rows: the longest prompt and the longest prompt + completion
    (chosen or rejected, EOS included) of the trainer's tokenized data set, minus that prompt."""
    ds = trainer.train_dataset
    prompt = max(len(p) for p in ds["prompt_ids"])
    seq = max(len(p) + max(len(c), len(r)) for p, c, r in zip(ds["prompt_ids"], ds["chosen_ids"], ds["rejected_ids"]))
    return prompt, seq - prompt


def workload(case: DpoCase, prompt_len: int, completion_len: int):
    """The cost model's workload of ``case`` (module docstring)."""
    rows = 2 * case.pairs
    return Workload(prompts=case.pairs, group_size=2, prompt_len=prompt_len,
                    response=ResponseLengths("fixed", length=completion_len), epochs=1, micro_batch=rows,
                    gen_batch=rows, precision="fp32", padding="batch", engine="static", logits="all",
                    weight_sync="none")


def predict(case: DpoCase, prompt_len: int, completion_len: int, profile) -> dict:
    """The prediction as the record keeps it: seconds per stage, their sum (the chapter's ``step``), TRL's
    bookkeeping (``bookkeeping_s``, in no stage), the profile's name and when it was made."""
    pred = cost_predict(case.model, "dpo", workload(case, prompt_len, completion_len), profile)
    stages = {r.stage.value: r.seconds for r in pred.rows}
    return {"made": utc_now(), "profile": pred.profile.name, "stages": stages,
            "step_s": sum(stages.values()), "bookkeeping_s": pred.bookkeeping_s,
            "flops": sum(r.flops for r in pred.rows),
            "prompt_len": prompt_len, "completion_len": completion_len}


def run_dpo_case(case: DpoCase, size: str, run_dir, profile=None, seed: int = 0) -> RunRecord:
    """Build the pairs and the trainer, write the prediction into the record, then train ``case`` under the stage
    tracer; the record keeps the prediction, the tracer's summary, the step walls and the load around the run."""
    import torch
    from transformers.utils import logging as hf_logging

    profile = profile or profile_for(size)
    task = parse_task(TASK)
    record = RunRecord(Path(run_dir), {"case": asdict(case), "task": TASK, "size": size},
                       command=f"rlm_lab.chapters.ch02_anatomy.dpo.run_dpo_case({case.name!r}, size={size!r})",
                       seed=seed)
    hf_logging.disable_progress_bar()
    with record:
        rows = ensure_data(task)["train"][:case.pairs * case.steps]
        model, tok = build_model(case.model, seed=seed)
        pairs = preference_pairs(task, rows, seed=seed)
        probe = Probe()
        trainer = dpo_trainer(model, tok, pairs, record.scratch("dpo"), steps=case.steps, batch_pairs=case.pairs,
                              beta=case.beta, learning_rate=case.learning_rate, seed=seed)
        trainer.add_callback(probe)
        _quiet(trainer)
        record.update(prediction=predict(case, *shapes(trainer), profile), pairs=len(pairs))  # before any step
        trace(trainer, record=record, warmup=case.warmup)
        load_before = load_average()
        record.update(train_started=utc_now())
        t0 = time.perf_counter()
        trainer.train()
        losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
        record.update(train_seconds=round(time.perf_counter() - t0, 3), step_walls=probe.walls, losses=losses,
                      torch_threads=torch.get_num_threads(), loadavg_before=load_before,
                      loadavg_after=load_average())
    return record


def dpo_table(record: RunRecord) -> list[dict]:
    """Per stage: the recorded prediction and the measured median (seconds per step) with the relative error;
    ``other`` (measured only) and ``step`` (the predicted stages' sum against the measured step) last."""
    pred, summary = record.results.get("prediction"), record.results.get("trace")
    if not pred or not summary or not summary.get("stages"):
        raise RlmLabError(f"{record.dir}: a DPO record needs results.prediction and results.trace")
    made, train = pred.get("made"), record.results.get("train_started")
    if made is None or train is None or made > train:
        raise RlmLabError(f"{record.dir}: results.prediction.made must be a time before results.train_started "
                          "(a prediction written before the measurement)")
    rows = []
    for stage in STAGES:
        p = pred["stages"].get(stage.value, 0.0)
        m = summary["stages"].get(stage.value, {}).get("median_s", 0.0)
        rows.append({"stage": stage.value, "predicted": p, "measured": m, "rel_error": relative_error(p, m)})
    rows.append({"stage": OTHER, "predicted": 0.0, "measured": summary["stages"].get(OTHER, {}).get("median_s", 0.0),
                 "rel_error": float("nan")})
    step_m = summary["step_wall_s"]["median"]
    rows.append({"stage": STEP, "predicted": pred["step_s"], "measured": step_m,
                 "rel_error": relative_error(pred["step_s"], step_m)})
    return rows


def headline(record: RunRecord) -> dict:
    """The numbers chapter 2's DPO prose quotes (ms, errors, the load and the profile), as plain values."""
    rows = {r["stage"]: r for r in dpo_table(record)}
    walls = record.results.get("step_walls", [])
    load = record.results.get("loadavg_before") or [float("nan")]
    return {"pred_step_ms": rows[STEP]["predicted"] * 1e3, "meas_step_ms": rows[STEP]["measured"] * 1e3,
            "step_error": rows[STEP]["rel_error"],
            "stage_error": statistics.median(abs(rows[s.value]["rel_error"]) for s in STAGES
                                             if rows[s.value]["measured"] > 0),
            "ref_share": record.results["trace"]["stages"].get(Stage.REF_LOGPROB.value, {}).get("share", 0.0),
            "profile": record.results["prediction"]["profile"], "steps": len(walls),
            "load_before": load[0], "first_loss": (record.results.get("losses") or [float("nan")])[0]}


def ensure_dpo(size: str) -> RunRecord:
    """The DPO record of ``size``: the committed one (``data/runs/<size>/ch02_dpo``), else this build's finished
    one under ``runs_root(size)``, else run now."""
    for folder in (reference_dir(size) / "ch02_dpo", runs_root(size) / "ch02_dpo"):
        if (folder / "record.json").exists():
            try:
                return load_record(folder, require=("prediction", "trace", "train_started"))
            except RlmLabError:
                if folder.parent == reference_dir(size):
                    raise  # a damaged committed record is an error, never silently re-run
    return run_dpo_case(dpo_case(size), size, runs_root(size) / "ch02_dpo")


def glue_values(record: RunRecord) -> dict[str, str]:
    """The DPO prose's glued values (formatted): predicted and measured step, the error of this one run (no
    interval: one run decides nothing), the reference pass's share, and whose profile priced it."""
    h = headline(record)
    hw = record.data["provenance"].get("hardware", {})
    prof = load_profile(h["profile"])
    own = prof.device == f"{hw.get('cpu_model')} ({hw.get('cpu_count')} cores)"
    return {"ch02_dpo_pred_ms": f"{h['pred_step_ms']:.1f} ms", "ch02_dpo_meas_ms": f"{h['meas_step_ms']:.1f} ms",
            "ch02_dpo_step_error": f"{h['step_error']:+.0%}", "ch02_dpo_stage_error": f"{h['stage_error']:.0%}",
            "ch02_dpo_ref_share": f"{h['ref_share']:.0%}", "ch02_dpo_pairs": str(record.config["case"]["pairs"]),
            "ch02_dpo_load": f"{h['load_before'] / max(1, hw.get('cpu_count') or 1):.1f}",
            "ch02_dpo_profile": f"{h['profile']} ({'this machine' if own else 'calibrated on ' + prof.device})"}
