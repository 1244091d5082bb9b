"""TRL's own per-step bookkeeping, measured on a real trainer whose model does (almost) nothing (issue 12, item 3).

A traced TRL step holds the stages the time model predicts (generate, log-prob passes, reward, advantage,
training forward and backward, optimizer) and, between them, what no stage covers: the tracer's ``other``
(``rlm_lab.train.tracer``: the step wall minus every counted stage span). That is TRL's bookkeeping around
the stages (``GRPOTrainer._generate_and_score_completions``: tokenizing and padding prompts, decoding the
completions to text, gathering rewards and metrics, the loss's masks and reductions, logging) and the
Trainer's own (dataloader, gradient clipping, learning-rate schedule, ``zero_grad``, callbacks).

:func:`bench_trl_step` measures it exactly as the validation runs measure it: a real ``trl.GRPOTrainer``
(the project's :func:`rlm_lab.train.rl.make_trainer`, GRPO with a reference model, the arithmetic task, forced
completion length) traced by the stage tracer, on hidden-16 Llama models whose stages are ~0, at
:data:`BATCHES` completions per step and :data:`LAYERS` layers (so, parameter tensors). Per step,
``other`` is fitted by non-negative least squares (``fitting.fit_nonneg``) as

    t_other = trl_step_base_s + rows * trl_step_row_s + tensors * trl_step_tensor_s

(rows: completions of the optimizer step; tensors: the policy's parameter tensors, which clipping and
``zero_grad`` visit). The three keys go into the profile's ``overhead``; ``predict`` charges them once per
optimizer step (``Prediction.bookkeeping_s``). A profile without them (datasheet GPU profiles) uses the
**assumed** figures of :data:`rlm_lab.cost.assumed.ASSUMED_TRL_STEP`. Fitted on these synthetic runs only,
judged on the validation suite (``rlm-lab validate``), which it never saw.
"""

from __future__ import annotations

import os
import statistics
import tempfile
from pathlib import Path

from ..cost.fitting import fit_nonneg
from ..cost.hardware import load_profile
from ..errors import RlmLabError
from ..host import load_average
from ..models.tokenizer import char_tokenizer
from ..models.zoo import ZooSpec, make_config, save
from ..record import RunRecord
from ..tasks import ensure_data, parse_task
from ..train.config import RunConfig
from ..train.rl import make_trainer
from ..train.tracer import trace

BATCHES = (16, 64)   # completions per optimizer step (G = 4)
LAYERS = (1, 4)      # parameter tensors: 1 + 9 L + 2 (embedding, norms, head)
GROUP = 4
LENGTH = 4           # forced completion length (chapter 2's generation_kwargs min_new_tokens)
STEPS, WARMUP = 6, 2
KEYS = ("trl_step_base_s", "trl_step_row_s", "trl_step_tensor_s")
TASK = "arithmetic:digits=2"  # the task of the chapters' and the validation suite's runs (rlm_lab.tasks)


def _tiny_model_dir(layers: int, folder: Path) -> Path:
    """A hidden-16 Llama with the zoo's character tokenizer, saved where TRL can load it (and its reference)."""
    import torch
    from transformers import AutoModelForCausalLM

    tok = char_tokenizer()
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(make_config(ZooSpec(16, layers, 2, 2, 32), len(tok)), dtype=torch.float32)
    model.generation_config.pad_token_id, model.generation_config.eos_token_id = tok.pad_token_id, tok.eos_token_id
    return save(model, tok, folder)


def trl_step_other(layers: int, batch: int, folder: Path, steps: int = STEPS, warmup: int = WARMUP) -> dict:
    """One traced GRPO run of ``steps`` steps on a hidden-16 model: the median per-step ``other`` (step wall
    minus the traced stages), the median step wall and the policy's parameter tensors."""
    import torch
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    task = parse_task(TASK)
    cfg = RunConfig(algo="grpo", task=TASK, model="nano", size="smoke", seed=0, rl_steps=steps, batch_size=batch,
                    num_generations=GROUP, max_completion_length=LENGTH, beta=0.04, sft_steps=0, eval_every=0,
                    trace=True, disable_tqdm=True, extra={"generation_kwargs": {"min_new_tokens": LENGTH}})
    model_dir = _tiny_model_dir(layers, folder / "model")
    trainer = make_trainer(cfg, model_dir, ensure_data(task)["train"], task, folder / "out")
    trainer.remove_callback(PrinterCallback)  # no per-step log lines or bars
    trainer.remove_callback(ProgressCallback)
    tracer = trace(trainer, warmup=warmup, gantt=False)
    trainer.train()
    s = tracer.summary()
    tensors = sum(1 for p in trainer.model.parameters() if p.requires_grad)
    del trainer
    return {"layers": layers, "batch": batch, "tensors": tensors, "other_s": s["stages"]["other"]["median_s"],
            "step_s": s["step_wall_s"]["median"], "torch_threads": torch.get_num_threads()}


def fit_trl_step(points: list[dict]) -> dict:
    """NNLS fit of ``other_s`` = base + rows * row + tensors * tensor over measured points (module docstring)."""
    coef = fit_nonneg([[1.0, p["batch"], p["tensors"]] for p in points], [p["other_s"] for p in points])
    return dict(zip(KEYS, coef))


def bench_trl_step(device: str = "cpu") -> dict:
    """The points at :data:`BATCHES` x :data:`LAYERS` and their fit: ``{points, trl_step_base_s, ...}``.
    CPU only (the GRPO trainer runs where torch puts it; a GPU calibration keeps the assumed figures)."""
    points = []
    with tempfile.TemporaryDirectory(prefix="rlm-trl-step-") as tmp:
        for layers in LAYERS:
            for batch in BATCHES:
                points.append(trl_step_other(layers, batch, Path(tmp) / f"L{layers}_B{batch}"))
    return {"points": points, **fit_trl_step(points)}


def with_trl_step_terms(profile, fit: dict) -> dict:
    """``profile`` (name, path, object or dict) as a dict with the fitted bookkeeping terms in its overheads."""
    d = load_profile(profile).to_dict() if not isinstance(profile, dict) else dict(profile)
    d["overhead"] = {**d["overhead"], **{k: float(fit[k]) for k in KEYS}}
    return d


def record(run_dir, repeats: int = 3):
    """:func:`bench_trl_step` ``repeats`` times into a RunRecord at ``run_dir`` (median of each point's
    ``other`` over the repeats, then the fit; load before and after recorded). Run it under
    ``flock -x /tmp/rlm-lab-measure.lock`` when the record is to be committed."""
    rec = RunRecord(run_dir, {"batches": BATCHES, "layers": LAYERS, "group": GROUP, "length": LENGTH,
                              "steps": STEPS, "warmup": WARMUP, "repeats": repeats},
                    command=f"rlm-lab chapter 2 step-benchmarks {run_dir}", seed=0)
    with rec:
        before = load_average()
        runs = [bench_trl_step()["points"] for _ in range(repeats)]
        points = [dict(p, other_s=statistics.median(r[i]["other_s"] for r in runs),
                       step_s=statistics.median(r[i]["step_s"] for r in runs),
                       other_repeats_s=[r[i]["other_s"] for r in runs]) for i, p in enumerate(runs[0])]
        rec.complete(points=points, **fit_trl_step(points), loadavg_before=before, loadavg_after=load_average(),
                     cpu_count=os.cpu_count())
    return rec


def main(argv: list[str]) -> int:
    """``rlm-lab chapter 2 step-benchmarks RUN_DIR``: :func:`record` into ``RUN_DIR``; prints its results."""
    if len(argv) != 1:
        raise RlmLabError("give one argument, the run folder: rlm-lab chapter 2 step-benchmarks RUN_DIR")
    print(record(argv[0]).results)
    return 0
