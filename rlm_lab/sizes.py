"""The three run sizes every notebook and command accepts, in ONE registry: one parameter, same code.

Each size is a frozen :class:`Size`: who it is for, what it shows (one paragraph the book prints), and
the knobs each chapter reads — chapter 1's training preset, chapter 2's traced cases, chapter 3's
work/depth sweep, chapter 4's layouts and PP/CP/EP measurements, chapter 5's placement runs, and the
book build's cell timeout. Modules read their knobs from here (``get(size).anatomy`` ...) instead of
keeping their own ``{"smoke": ..., "cpu": ..., "gpu": ...}`` tables, so "what does ``cpu`` mean" has
one answer. :func:`table` is the registry as rows for the book.

Standard library only (imports nothing else of ``rlm_lab`` but its errors): every module may read it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from types import MappingProxyType

from .errors import RlmLabError, unknown

SIZES = ("smoke", "cpu", "gpu")
ENV_VAR = "RLM_SIZE"


def _frozen(**kw) -> MappingProxyType:
    return MappingProxyType(dict(kw))


@dataclass(frozen=True)
class Size:
    """What one size means, for every chapter."""

    name: str
    for_: str                   # who runs it, on what
    time: str                   # how long a chapter takes
    shows: str                  # what its numbers show, and what they do not (printed by the book)
    cell_timeout_s: int         # book build: seconds one notebook cell may run
    train: MappingProxyType     # ch. 1: RunConfig fields of the preset (rlm_lab.train.presets)
    anatomy: MappingProxyType   # ch. 2: the base traced case (rlm_lab.chapters.ch02_anatomy.cases)
    anatomy_sweep: tuple        # ch. 2: (completion lengths at the base batch, batches at the base length)
    work_depth: MappingProxyType  # ch. 3: the work/depth sweep (rlm_lab.chapters.ch03_work_depth.cases)
    parallel: MappingProxyType  # ch. 4: run arguments of every layout (rlm_lab.chapters.ch04_parallelism.run)
    parallel_layouts: tuple     # ch. 4: ((world, ((degrees, run kwargs), ...)), ...); gpu: from the GPUs seen
    parallel_sweeps: tuple      # ch. 4: PP/CP/EP measurements ((kind, kwargs), ...) (rlm_lab.chapters.ch04_parallelism.sweeps)
    placement_steps: int        # ch. 5: RL steps of each placement run (rlm_lab.chapters.ch05_placement.run)
    reshard_model: str          # ch. 5: the model the hybrid engine's reshard is measured on
    long_tail: MappingProxyType  # ch. 7: the long-tail measurements (rlm_lab.chapters.ch07_long_tail.run)
    # rlm-lab validate: the out-of-sample suite, (name, algo, beta, model, batch, group, length, steps, warmup) each
    validation: tuple = ()
    # rlm-lab insitu: the in-situ calibration's traced runs (same fields as ``validation``), never one of them
    calibration: tuple = ()
    # ch. 7: the learning runs of the techniques that change what is trained on (rlm_lab.chapters.ch07_long_tail.learning)
    long_tail_learning: MappingProxyType = field(default_factory=_frozen)
    # ch. 6: the campaign's GRPO steps per run and its held-out curve interval (rlm_lab.chapters.ch06_async.campaign)
    async_campaign: MappingProxyType = field(default_factory=_frozen)
    # ch. 9: the decision map's grid, priced by the placement advisor at build time (models of
    # rlm_lab.chapters.ch09_guidelines.cases.MAP_MODELS, GPU counts, response-length distributions of MAP_LENGTHS)
    guidelines_map: MappingProxyType = field(default_factory=_frozen)
    # ch. 10: parallel reasoning (seq against fork-join) and multi-domain RLVR (mixed against merged)
    # (rlm_lab.chapters.ch10_open_directions.cases)
    open_directions: MappingProxyType = field(default_factory=_frozen)
    # the measurement protocol (rlm_lab.protocol): paired repeats per comparison, fixed before measuring; even,
    # so that the ABBA order runs each arm first equally often
    protocol_repeats: int = 6
    # ch. 6: GRPO steps of each arm of the runtime-overhead comparison (rlm_lab.chapters.ch06_async.overhead);
    # 0: not run at this size
    async_overhead_steps: int = 0
    # rlm-lab reference (rlm_lab.reference): pairs per re-measured reference, fixed before measuring; fewer than
    # protocol_repeats so that a chapter fits 20 min and the book 90 min on 2 cores (with 4 ratios the interval of
    # their median still excludes 1 when all four lie on one side); reference_all: every reference of a chapter
    # (else its first only: smoke proves the command runs)
    reference_repeats: int = 4
    reference_all: bool = True


_PP_SWEEP_CPU = tuple(("pp", _frozen(model="micro", world=2, microbatches=m, schedule=s, steps=5, batch=16, seq=64))
                      for s in ("gpipe", "1f1b") for m in (2, 4, 8, 16))

REGISTRY: dict[str, Size] = {
    "smoke": Size(
        name="smoke", for_="CI and `make test`: 2 CPU cores", time="under a minute per notebook",
        shows=("Proves that every chapter's code runs end to end, on the smallest zoo model for a few steps. "
               "Its numbers are not evidence: a model this small learns nothing in a few steps, and its times "
               "are dominated by fixed per-call costs on a shared machine. Where a chapter compares a "
               "prediction with a measurement, the smoke book shows the committed cpu-size records."),
        cell_timeout_s=180,
        train=_frozen(model="nano", sft_steps=20, sft_lr=1e-3, sft_batch_size=32,
                      rl_steps=6, rl_lr=1e-4, num_generations=4, batch_size=16, max_completion_length=6,
                      eval_problems=64, eval_every=0, eval_batch_size=64, eval_max_new_tokens=6),
        anatomy=_frozen(model="nano", batch=16, group=4, length=8, steps=3, warmup=1),
        anatomy_sweep=((), ()),  # the three algorithms only (CI time); the sweep is read from the cpu records
        work_depth=_frozen(models=("nano",), batches=(1, 4, 16), k0=2, k1=10, reps=2,
                           tail_model="nano", n=16, mean=8, replicas=(1, 2, 4), real=(2,)),
        parallel=_frozen(model="nano", steps=3, batch=8, seq=16),
        parallel_layouts=((2, ((_frozen(dp=2), _frozen()), (_frozen(dp=2, zero=3), _frozen()),
                               (_frozen(tp=2, sp=True), _frozen()))),),
        parallel_sweeps=(("pp", _frozen(model="nano", world=2, microbatches=4, schedule="1f1b", steps=1, batch=8, seq=16)),
                         ("cp", _frozen(model="nano", world=2, steps=1, batch=2, seq=32)),
                         ("ep", _frozen(model="nano-moe", world=2, steps=1, batch=2, seq=16))),
        placement_steps=3,
        reshard_model="nano",
        long_tail=_frozen(model="nano", task="chain:steps=4", pool=64, n=4, n_prime=6, op_steps=2, batch=4,
                          rounds_n=16, tail_fraction=0.25, workers=2, dispatch_n=6, pack_n=8, micro=4, groups=6,
                          group_size=4, fusion_n=6, reps=1),
        long_tail_learning=_frozen(model="nano", rl_steps=4, max_completion_length=40, eval_problems=32, ratio=1.5),
        async_campaign=_frozen(steps=4, every=10),
        # the guidelines' own points (7B, fixed lengths): the map reuses their advice, so it costs nothing more
        guidelines_map=_frozen(models=("qwen2.5-7b",), devices=(8, 64, 512), lengths=("fixed 1024",)),
        open_directions=_frozen(
            parallel=_frozen(model="nano", task="psum:terms=4,max_number=3", sft_steps=8, sft_lr=1e-3, sft_batch_size=16,
                             rl_steps=2, rl_lr=1e-4, batch_size=8, num_generations=4, seeds=(0,), eval_problems=16,
                             max_new_tokens=40, limits=(8, 8, 14), latency_problems=3, latency_reps=2),
            multidomain=_frozen(model="nano", sft_steps=8, sft_lr=1e-3, sft_batch_size=16, rl_steps=4, rl_lr=1e-3,
                                batch_size=8, num_generations=4, seeds=(0,), eval_problems=16, eval_per_task=8,
                                max_new_tokens=24, methods=("linear", "ties", "dare", "cat"), systems_reps=1,
                                systems_batches=1)),
        protocol_repeats=2,  # proves the protocol runs; two pairs have no interval and decide nothing
        async_overhead_steps=4,
        reference_repeats=2, reference_all=False,
        validation=(("nano-moe_grpo_B16_G2_R6", "grpo", 0.04, "nano-moe", 16, 2, 6, 3, 1),
                    ("nano_dapo_B16_G2_R4", "grpo", 0.0, "nano", 16, 2, 4, 3, 1)),
        calibration=(("nano_grpo_B8_G2_R6", "grpo", 0.04, "nano", 8, 2, 6, 3, 1),
                     ("nano-moe_dapo_B8_G4_R4", "grpo", 0.0, "nano-moe", 8, 4, 4, 3, 1)),
    ),
    "cpu": Size(
        name="cpu", for_="a laptop or CI machine with 2+ CPU cores (the committed reference runs)",
        time="minutes per chapter",
        shows=("The size the book's claims rest on: the micro model trained long enough to learn the task, "
               "traced stage by stage, and every parallel layout run on 2 (and, oversubscribed, 4) processes. "
               "The committed records under data/runs/cpu were made at this size on the 2-core machine their "
               "provenance names, so their absolute times are that machine's; ratios and bytes carry over, "
               "seconds do not."),
        cell_timeout_s=1800,
        train=_frozen(lr_scheduler="linear",  # sweep: same final accuracy as constant, a monotone curve
                      model="micro", sft_steps=400, sft_lr=1e-3, sft_batch_size=64,
                      rl_steps=300, rl_lr=1e-4, num_generations=8, batch_size=64, max_completion_length=8,
                      eval_problems=500, eval_every=50, eval_batch_size=500, eval_max_new_tokens=6),
        anatomy=_frozen(model="micro", batch=64, group=8, length=16, steps=12, warmup=2),
        anatomy_sweep=((4, 64), (16, 256)),
        work_depth=_frozen(models=("micro", "mini", "small"), batches=(1, 2, 4, 8, 16, 32, 64, 128, 256), k0=2,
                           k1=18, reps=3, tail_model="mini", n=64, mean=32, replicas=(1, 2, 4, 8), real=(1, 2)),
        parallel=_frozen(model="micro", steps=8, batch=8, seq=64),
        parallel_layouts=(
            (2, ((_frozen(dp=2), _frozen()), (_frozen(dp=2, zero=1), _frozen()), (_frozen(dp=2, zero=2), _frozen()),
                 (_frozen(dp=2, zero=3), _frozen()), (_frozen(tp=2), _frozen()), (_frozen(tp=2, sp=True), _frozen()),
                 (_frozen(pp=2, schedule="gpipe", microbatches=4), _frozen()),
                 (_frozen(pp=2, schedule="1f1b", microbatches=4), _frozen()),
                 (_frozen(cp=2), _frozen()), (_frozen(ep=2), _frozen(model="micro-moe")))),
            (4, ((_frozen(dp=4), _frozen()), (_frozen(dp=4, zero=3), _frozen()), (_frozen(tp=4), _frozen()),
                 (_frozen(dp=2, tp=2, zero=2), _frozen()))),
        ),
        parallel_sweeps=(*_PP_SWEEP_CPU,
                         ("pp", _frozen(model="micro", world=4, layers=4, microbatches=8, schedule="1f1b", steps=3,
                                        batch=16, seq=64)),
                         ("cp", _frozen(model="micro", world=2, steps=5, batch=2, seq=256)),
                         ("cp", _frozen(model="micro", world=4, steps=3, batch=2, seq=256)),
                         ("ep", _frozen(model="micro-moe", world=2, steps=5, batch=4, seq=64)),
                         ("ep", _frozen(model="micro-moe", world=4, steps=3, batch=4, seq=64))),
        placement_steps=40,
        reshard_model="micro",
        long_tail=_frozen(model="micro", task="chain:steps=8", pool=1024, n=16, n_prime=24, op_steps=10, batch=16,
                          rounds_n=128, tail_fraction=0.25, workers=4, dispatch_n=64, pack_n=64, micro=8, groups=32,
                          group_size=8, fusion_n=32, reps=5),
        long_tail_learning=_frozen(model="micro", rl_steps=100, max_completion_length=72, eval_problems=500, ratio=1.5),
        async_campaign=_frozen(steps=60, every=20),  # one run <= ~35 s of training on 2 cores (measured)
        # the guidelines' 7B points and a small model, both length distributions: 9 more advisor runs (~1 min)
        guidelines_map=_frozen(models=("qwen2.5-0.5b", "qwen2.5-7b"), devices=(8, 64, 512),
                               lengths=("fixed 1024", "long tail (median 256, cap 4096)")),
        open_directions=_frozen(
            parallel=_frozen(model="micro", task="psum:terms=4,max_number=3", sft_steps=300, sft_lr=1e-3,
                             sft_batch_size=64, rl_steps=60, rl_lr=1e-4, batch_size=64, num_generations=8,
                             seeds=(0, 1, 2), eval_problems=300, max_new_tokens=40, limits=(8, 8, 14),
                             latency_problems=40, latency_reps=3),
            multidomain=_frozen(model="micro", sft_steps=600, sft_lr=1e-3, sft_batch_size=64, rl_steps=120, rl_lr=1e-3,
                                batch_size=64, num_generations=8, seeds=(0, 1, 2), eval_problems=100, eval_per_task=100,
                                max_new_tokens=40, methods=("linear", "ties", "dare", "cat"), systems_reps=3,
                                systems_batches=4)),
        protocol_repeats=6,  # 12 fresh processes per comparison; with 6 ratios the median's interval can exclude 1
        async_overhead_steps=30,
        validation=(("nano_grpo_B32_G4_R24", "grpo", 0.04, "nano", 32, 4, 24, 8, 3),
                    ("mini_grpo_B32_G4_R12", "grpo", 0.04, "mini", 32, 4, 12, 8, 3),
                    ("micro-moe_grpo_B64_G8_R12", "grpo", 0.04, "micro-moe", 64, 8, 12, 8, 3),
                    ("nano-moe_dapo_B128_G16_R8", "grpo", 0.0, "nano-moe", 128, 16, 8, 8, 3),
                    ("micro_ppo_B32_G4_R24", "ppo", 0.04, "micro", 32, 4, 24, 8, 3),
                    ("mini_dapo_B64_G8_R8", "grpo", 0.0, "mini", 64, 8, 8, 8, 3),
                    ("micro_grpo_B128_G16_R6", "grpo", 0.04, "micro", 128, 16, 6, 8, 3),
                    # TRL's defaults kept (issue 12 item 3): bf16 autocast on CPU; + gradient checkpointing
                    ("nano_grpo_B64_G8_R10_bf16", "grpo", 0.04, "nano", 64, 8, 10, 8, 3, True, False),
                    ("micro_grpo_B32_G4_R10_bf16_ckpt", "grpo", 0.04, "micro", 32, 4, 10, 8, 3, True, True)),
        # the in-situ calibration (rlm_lab.insitu): other shapes than the suite's, L = 2, 4 and 8 layers (small),
        # dense and MoE, GRPO / DAPO-style / PPO, fp32 and TRL's defaults; chapter 2's base case is the first
        calibration=(("micro_grpo_B64_G8_R16", "grpo", 0.04, "micro", 64, 8, 16, 8, 3),
                     ("micro_dapo_B16_G4_R32", "grpo", 0.0, "micro", 16, 4, 32, 8, 3),
                     ("nano_grpo_B128_G8_R12", "grpo", 0.04, "nano", 128, 8, 12, 8, 3),
                     ("nano_ppo_B64_G8_R12", "ppo", 0.04, "nano", 64, 8, 12, 8, 3),
                     ("mini_ppo_B16_G4_R16", "ppo", 0.04, "mini", 16, 4, 16, 8, 3),
                     ("small_grpo_B16_G4_R8", "grpo", 0.04, "small", 16, 4, 8, 8, 3),
                     ("nano-moe_grpo_B32_G8_R16", "grpo", 0.04, "nano-moe", 32, 8, 16, 8, 3),
                     ("micro-moe_dapo_B16_G4_R16", "grpo", 0.0, "micro-moe", 16, 4, 16, 8, 3),
                     ("micro_grpo_B64_G8_R8_bf16", "grpo", 0.04, "micro", 64, 8, 8, 8, 3, True, False),
                     ("nano_grpo_B32_G4_R16_bf16_ckpt", "grpo", 0.04, "nano", 32, 4, 16, 8, 3, True, True),
                     # issue 35: bf16 on a 4-layer model without checkpointing and a bf16 PPO with it (backward-heavy,
                     # the critic under autocast), so that model size and checkpointing are not aliased in bf16
                     ("mini_grpo_B16_G4_R12_bf16", "grpo", 0.04, "mini", 16, 4, 12, 8, 3, True, False),
                     ("micro_ppo_B16_G4_R16_bf16_ckpt", "ppo", 0.04, "micro", 16, 4, 16, 8, 3, True, True)),
    ),
    "gpu": Size(
        name="gpu", for_="Colab, or one H100/H200-class GPU and up", time="minutes to hours",
        shows=("The same code on models large enough for matrix products to dominate a step, so that the "
               "cost model's compute terms, not per-call overheads, decide the comparisons; bf16 on CUDA. "
               "Chapter 4's layouts adapt to the GPUs present. The book shows gpu-size numbers only from "
               "records made on a GPU, and says which GPU."),
        cell_timeout_s=7200,
        train=_frozen(lr_scheduler="linear",
                      model="small", sft_steps=2000, sft_lr=5e-4, sft_batch_size=128,
                      rl_steps=500, rl_lr=5e-5, num_generations=16, batch_size=512, max_completion_length=16,
                      eval_problems=1000, eval_every=100, eval_batch_size=1000, eval_max_new_tokens=8, bf16=True),
        anatomy=_frozen(model="small", batch=512, group=16, length=64, steps=20, warmup=3),
        anatomy_sweep=((16, 256), (128, 2048)),
        work_depth=_frozen(models=("small", "base", "large"), batches=(1, 4, 16, 64, 256, 1024, 2048), k0=2, k1=66,
                           reps=3, tail_model="base", n=512, mean=256, replicas=(1, 2, 4, 8), real=(1, 2)),
        parallel=_frozen(model="base", steps=10, batch=16, seq=256),
        parallel_layouts=(),  # from torch.cuda.device_count() at run time (rlm_lab.chapters.ch04_parallelism.run.suite)
        parallel_sweeps=(),
        placement_steps=40,
        reshard_model="small",
        long_tail=_frozen(model="small", task="chain:steps=12", pool=8192, n=64, n_prime=96, op_steps=16,
                          batch=64, rounds_n=1024, tail_fraction=0.25, workers=8, dispatch_n=512, pack_n=256,
                          micro=16, groups=128, group_size=8, fusion_n=128, reps=3),
        # the guidelines' 7B points and a small model, both length distributions: 9 more advisor runs (~1 min)
        guidelines_map=_frozen(models=("qwen2.5-0.5b", "qwen2.5-7b"), devices=(8, 64, 512),
                               lengths=("fixed 1024", "long tail (median 256, cap 4096)")),
        open_directions=_frozen(
            parallel=_frozen(model="small", task="psum:terms=6,max_number=9", sft_steps=2000, sft_lr=5e-4,
                             sft_batch_size=128, rl_steps=300, rl_lr=5e-5, batch_size=256, num_generations=8,
                             seeds=(0, 1, 2), eval_problems=1000, max_new_tokens=64, limits=(10, 9, 24),
                             latency_problems=100, latency_reps=5),
            multidomain=_frozen(model="small", sft_steps=3000, sft_lr=5e-4, sft_batch_size=128, rl_steps=400,
                                rl_lr=5e-4, batch_size=256, num_generations=8, seeds=(0, 1, 2), eval_problems=500,
                                eval_per_task=500, max_new_tokens=48, methods=("linear", "ties", "dare", "cat"),
                                systems_reps=5, systems_batches=8)),
    ),
}


def check_size(size: str) -> str:
    if size not in SIZES:
        raise unknown("size", size, SIZES)
    return size


def get(size: str) -> Size:
    """The registry entry of ``size`` (an unknown size is one clear error)."""
    return REGISTRY[check_size(size)]


def long_tail_learning(size: str):
    """Chapter 7's learning runs' knobs at ``size`` (the cpu preset's model and SFT, a short GRPO run;
    answers up to 8 steps), which chapter 6's campaign reuses; a size without them is one clear error."""
    s = get(size).long_tail_learning
    if not s:
        raise RlmLabError(f"no long-tail learning runs are defined at size {size!r} (smoke and cpu are)")
    return s


def size_from_env(default: str = "smoke") -> str:
    """The size a notebook runs at: ``$RLM_SIZE`` if set, else ``default``."""
    return check_size(os.environ.get(ENV_VAR, default))


def table() -> list[dict]:
    """The registry as rows for the book: size, for whom, time, what it shows, and the headline knobs."""
    return [{"size": s.name, "for": s.for_, "time": s.time, "model (ch. 1)": s.train["model"],
             "RL steps (ch. 1)": s.train["rl_steps"], "traced case (ch. 2)": f"{s.anatomy['model']} "
             f"B={s.anatomy['batch']} R={s.anatomy['length']}", "layouts (ch. 4)": s.parallel["model"],
             "what it shows": s.shows} for s in REGISTRY.values()]
