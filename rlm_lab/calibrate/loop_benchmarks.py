"""The per-decode-step cost of the Hugging Face generation loop as TRL drives it (issue 12, item 3).

The calibration's decode-step overhead (``benchmarks.bench_overheads``) times ``generate`` on tiny
models with one unpadded prompt. TRL's GRPOTrainer (transformers path) calls ``generate`` on a
*left-padded* batch with an attention mask and a ``GenerationConfig`` of do_sample, temperature,
top_p, top_k, min_p, repetition_penalty (trl/trainer/grpo_trainer.py), and chapter 2 forces the
length with ``min_new_tokens``. Each decode step then also rebuilds the 4-D attention mask from the
padded 2-D mask, runs the logits processors and warpers over (b x V) scores, samples, updates the
stopping criteria and concatenates the new token and mask column
(transformers ``GenerationMixin._sample``): costs that grow with the batch b.

:func:`bench_generate_loop` measures exactly that on tiny Llama models whose compute is negligible,
at several batches, and subtracts what the time model already charges for the same step
(:func:`~rlm_lab.cost.timing.decode_step_time` with the profile under test). The residual is fitted
by non-negative least squares as ``generate_loop_base_s + b * generate_loop_row_s`` (two new
``overhead`` keys, charged per decode step by ``decode_step_time``). It is fitted on these synthetic
models only and judged on the validation suite (``rlm-lab validate``), which it never saw.
"""

from __future__ import annotations

import statistics

from ..cost.fitting import fit_nonneg
from ..cost.hardware import load_profile
from ..cost.spec import spec_from_config
from ..cost.timing import decode_step_time
from ..errors import RlmLabError
from ..host import load_average
from ..record import RunRecord
from .benchmarks import _tiny_lm
from .benchmarks import timeit as _timeit

BATCHES = (1, 16, 64, 256)
LAYERS = (1, 4)
PROMPT = 6


def trl_generation_config(new_tokens: int, pad: int = 0, eos: int = 1):
    """The GenerationConfig GRPOTrainer builds with its defaults (temperature 1, top_p 1, top_k 0,
    min_p None, repetition_penalty 1), plus chapter 2's forced length."""
    from transformers import GenerationConfig

    return GenerationConfig(max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=True, pad_token_id=pad,
                            eos_token_id=eos, temperature=1.0, top_p=1.0, top_k=0, min_p=None,
                            repetition_penalty=1.0, disable_compile=True)


def _padded_batch(b: int, device):
    """b prompts of PROMPT tokens, every other one left-padded by one (as TRL's batches of 5- and 6-token prompts)."""
    import torch

    ids = torch.randint(2, 50, (b, PROMPT), device=device)
    mask = torch.ones_like(ids)
    ids[1::2, 0], mask[1::2, 0] = 0, 0
    return ids, mask


def bench_generate_loop(profile, device: str = "cpu", budget: float = 0.3, new: int = 16) -> dict:
    """Per-step seconds of TRL-style ``generate`` on tiny models at :data:`BATCHES` x :data:`LAYERS`, the
    time model's prediction of the same step under ``profile``, and the NNLS fit of the residual."""
    import torch

    prof = load_profile(profile)
    torch.manual_seed(0)
    points = []
    for L in LAYERS:
        model = _tiny_lm(L, device)
        spec = spec_from_config(model.config)
        for b in BATCHES:
            ids, mask = _padded_batch(b, device)
            with torch.no_grad():
                t1 = _timeit(lambda: model.generate(ids, attention_mask=mask, generation_config=trl_generation_config(1)),
                             budget)
                tn = _timeit(lambda: model.generate(ids, attention_mask=mask,
                                                    generation_config=trl_generation_config(new + 1)), budget)
            step = (tn - t1) / new
            pred = statistics.fmean(decode_step_time(spec, b, PROMPT + k, prof, "fp32", 4) for k in range(1, new + 1))
            points.append({"layers": L, "batch": b, "measured_s": step, "modelled_s": pred, "residual_s": step - pred})
    base, row = fit_nonneg([[1.0, p["batch"]] for p in points], [p["residual_s"] for p in points], relative=False)
    return {"points": points, "generate_loop_base_s": base, "generate_loop_row_s": row,
            "torch_threads": torch.get_num_threads(), "loadavg": load_average()}


def with_loop_terms(profile, fit: dict) -> dict:
    """``profile`` (name, path or object) as a dict with the fitted loop terms added to its overheads."""
    d = load_profile(profile).to_dict() if not isinstance(profile, dict) else dict(profile)
    d["overhead"] = {**d["overhead"], "generate_loop_base_s": fit["generate_loop_base_s"],
                     "generate_loop_row_s": fit["generate_loop_row_s"]}
    return d


def record(run_dir, profile: str = "cpu-2core-epyc", budget: float = 0.3):
    """Run :func:`bench_generate_loop` into a RunRecord at ``run_dir`` (load before and after recorded)."""
    rec = RunRecord(run_dir, {"profile": str(profile), "batches": BATCHES, "layers": LAYERS, "prompt": PROMPT,
                              "budget_s": budget},
                    command=f"rlm-lab chapter 2 loop-benchmarks {run_dir}", seed=0)
    with rec:
        before = load_average()
        rec.complete(**bench_generate_loop(profile, budget=budget), loadavg_before=before)
    return rec


def main(argv: list[str]) -> int:
    """``rlm-lab chapter 2 loop-benchmarks RUN_DIR``: :func:`record` into ``RUN_DIR``; prints its results."""
    if len(argv) != 1:
        raise RlmLabError("give one argument, the run folder: rlm-lab chapter 2 loop-benchmarks RUN_DIR")
    print(record(argv[0]).results)
    return 0
