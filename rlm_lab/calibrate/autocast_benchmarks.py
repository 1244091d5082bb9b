"""Calibration benchmarks of what TRL does by default and users keep (issue 12, item 3): bf16 autocast on CPU
and gradient checkpointing (recompute).

**bf16 on CPU.** ``GRPOConfig`` defaults ``bf16=True``. With ``use_cpu=True`` the Trainer's accelerate
(1.15) sets ``mixed_precision="bf16"`` and ``native_amp=True`` on a CPU device
(``Accelerator.__init__``), and ``prepare_model`` wraps the model's ``forward`` in
``torch.autocast(device_type="cpu", dtype=torch.bfloat16)`` (``utils.modeling.get_mixed_precision_context_manager``;
https://huggingface.co/docs/accelerate/usage_guides/low_precision_training) with its outputs converted back to
fp32. The weights, gradients and AdamW state stay fp32; inside the forward the products (``linear``,
``matmul``) and ``scaled_dot_product_attention`` run in bf16 on operands cast on the fly (torch's CPU autocast
op list: https://pytorch.org/docs/stable/amp.html#cpu-ops-that-can-autocast-to-bfloat16), and their backward
in bf16 too. On a CPU without native bf16 instructions (AVX2 only, no AVX512-BF16/AMX) these kernels run
far below the fp32 rate, so they are measured, not scaled from fp32:

* :func:`bench_matmul_autocast`: ``F.linear`` of fp32 tensors inside a fresh autocast context per call (the
  weight cast included, as once per forward call in a run), forward rate and backward rate (dX and dW: twice
  the forward FLOPs over the backward's own seconds) -> ``matmul_curve["bf16"]`` (CPU) and
  ``matmul_curve["bf16_backward"]``;
* the attention kernel under autocast (``kernel_benchmarks.bench_attention(autocast=True)``) ->
  ``kernels["attention_bf16"]``;
* the per-call work autocast adds (weights cast once per forward call, dtype dispatch of every op):
  :func:`bench_autocast_overhead` -> ``overhead`` ``autocast_{forward,backward,decode}_{base,layer}_s``,
  charged by the time model per call whenever a CPU workload runs under autocast (timing.py).

**Gradient checkpointing.** ``GRPOConfig`` defaults ``gradient_checkpointing=True``; transformers then
checkpoints every decoder layer (``activation_checkpointing_enable``, ``torch.utils.checkpoint`` non-reentrant):
the backward runs each layer's forward again (``flops.train_flops(recompute=True)``: one extra forward of the
layers, not of the head) with its per-call work. :func:`bench_checkpoint` measures that per-layer work on tiny
hidden-16 models of 1 and 8 layers, whose compute is negligible: forward + backward with checkpointing minus
without, fitted as ``checkpoint_base_s + L * checkpoint_layer_s`` (NNLS) -> ``overhead``. The recomputed
layers' compute itself is charged by ``timing.backward_time(recompute=True)`` at the forward's measured rates.
"""

from __future__ import annotations

import os
import statistics

from ..cost.fitting import fit_line
from ..cost.hardware import load_profile
from ..errors import RlmLabError
from ..host import load_average
from ..record import RunRecord
from . import benchmarks
from .benchmarks import LAYERS_HI, _tiny_lm
from .benchmarks import timeit as _timeit
from .kernel_benchmarks import bench_attention


def bench_matmul_autocast(device, quick, op_s, budget) -> dict:
    """``{"forward": [[gemm_flops, FLOP/s], ...], "backward": [...]}`` of ``F.linear`` under bf16 autocast."""
    import torch
    import torch.nn.functional as Fn

    ms = (1, 32, 512) if quick else (1, 8, 64, 512)
    ks = (64, 512) if quick else (16, 64, 256, 1024)
    shapes = [(m, k, 4 * k if k <= 256 else k) for m in ms for k in ks]
    fwd, bwd = {}, {}
    for m, k, n in shapes:
        x = torch.randn(m, k, device=device, requires_grad=True)
        w = torch.randn(n, k, device=device, requires_grad=True)
        g = torch.ones(m, n, device=device, dtype=torch.bfloat16)

        def forward():
            with torch.autocast(device_type=device, dtype=torch.bfloat16):
                return Fn.linear(x, w)

        def forward_backward():
            forward().backward(g)

        flops = 2.0 * m * k * n
        with torch.no_grad():
            t_f = _timeit(forward, budget)
        t_g = _timeit(forward, budget)                 # with autograd recording
        t_b = max(_timeit(forward_backward, budget) - t_g, 0.1 * t_g)
        fwd.setdefault(flops, []).append(flops / max(t_f - op_s, 0.1 * t_f))
        bwd.setdefault(flops, []).append(2 * flops / t_b)
    return {"forward": [[f, statistics.median(r)] for f, r in sorted(fwd.items())],
            "backward": [[f, statistics.median(r)] for f, r in sorted(bwd.items())]}


def bench_checkpoint(device, budget) -> dict:
    """``{"checkpoint_base_s", "checkpoint_layer_s"}``: forward + backward with every layer checkpointed minus
    without, on hidden-16 models of 1 and :data:`~rlm_lab.calibrate.benchmarks.LAYERS_HI` layers."""
    import torch

    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    x = torch.randint(2, 50, (1, 4), device=device)
    extra = {}
    for L in (1, LAYERS_HI):
        model = _tiny_lm(L, device).train()

        def fwd_bwd():
            model(x, labels=x).loss.backward()

        plain = _timeit(fwd_bwd, budget, sync)
        enable = getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable
        enable()
        ckpt = _timeit(fwd_bwd, budget, sync)
        extra[L] = ckpt - plain
    base, layer = fit_line((1, LAYERS_HI), (extra[1], extra[LAYERS_HI]), relative=False)
    return {"checkpoint_base_s": base, "checkpoint_layer_s": layer}


def _autocast_forward(model, device):
    """Wrap ``model.forward`` in bf16 autocast as accelerate's ``prepare_model`` does (a fresh autocast context
    per call, so the weights are cast once per forward call, decode steps included)."""
    import torch

    model.forward = torch.autocast(device_type=device, dtype=torch.bfloat16)(model.forward)
    return model


def bench_autocast_overhead(device, budget) -> dict:
    """Per-call work that autocast adds (weight casts, dtype dispatch) on hidden-16 models of 1 and
    :data:`~rlm_lab.calibrate.benchmarks.LAYERS_HI` layers, whose compute is negligible: forward (no grad),
    backward (forward + backward minus forward with grad) and one decode step of ``generate``, each with
    the forward wrapped as accelerate wraps it minus plain, fitted as base + L x layer (NNLS) ->
    ``autocast_{forward,backward,decode}_{base,layer}_s``."""
    import torch

    x = torch.randint(2, 50, (1, 4), device=device)
    gen = dict(do_sample=True, top_k=0, top_p=1.0, temperature=1.0)
    new = 16
    res = {}
    for mode in ("plain", "autocast"):
        for L in (1, LAYERS_HI):
            model = _tiny_lm(L, device)
            model.generation_config.pad_token_id = 0
            if mode == "autocast":
                _autocast_forward(model, device)

            def fwd_bwd():
                model(x, labels=x).loss.backward()

            with torch.no_grad():
                fwd = _timeit(lambda: model(x), budget)
                t1 = _timeit(lambda: model.generate(x, max_new_tokens=1, min_new_tokens=1, **gen), budget)
                tn = _timeit(lambda: model.generate(x, max_new_tokens=new + 1, min_new_tokens=new + 1, **gen), budget)
            grad = _timeit(lambda: model(x, labels=x), budget)
            res[(mode, L)] = {"forward": fwd, "backward": _timeit(fwd_bwd, budget) - grad, "decode": (tn - t1) / new}
    out = {}
    for kind in ("forward", "backward", "decode"):
        extra = [res[("autocast", L)][kind] - res[("plain", L)][kind] for L in (1, LAYERS_HI)]
        base, layer = fit_line((1, LAYERS_HI), extra, relative=False)
        out[f"autocast_{kind}_base_s"], out[f"autocast_{kind}_layer_s"] = base, layer
    return out


def bench_autocast_and_checkpoint(device, quick, op_s, budget) -> dict:
    """The measurements above, as calibrate's ``measure_once`` stores them."""
    out = {"overhead": bench_checkpoint(device, budget)}
    if device == "cpu":  # on CUDA calibrate measures bf16 products directly (benchmarks.bench_matmul)
        out["matmul"] = bench_matmul_autocast(device, quick, op_s, budget)
        out["attention"] = bench_attention(device, quick, op_s, 0.4 * budget, autocast=True)
        out["overhead"].update(bench_autocast_overhead(device, budget))  # per-call overheads, with checkpoint's
    return out


def with_autocast_terms(profile, measured: dict) -> dict:
    """``profile`` (name, path, object or dict) as a dict with :func:`bench_autocast_and_checkpoint`'s results
    in their places (matmul_curve/matmul_flops bf16 and bf16_backward, kernels.attention_bf16, overhead)."""
    d = load_profile(profile).to_dict() if not isinstance(profile, dict) else dict(profile)
    d["overhead"] = {**d["overhead"], **measured["overhead"]}
    if "matmul" in measured:
        mm = measured["matmul"]
        d["matmul_curve"] = {**d.get("matmul_curve", {}), "bf16": mm["forward"], "bf16_backward": mm["backward"]}
        d["matmul_flops"] = {**d["matmul_flops"], "bf16": max(r for _, r in mm["forward"]),
                             "bf16_backward": max(r for _, r in mm["backward"])}
    if "attention" in measured:
        d["kernels"] = {**d.get("kernels", {}), "attention_bf16": measured["attention"]}
    return d


def record(run_dir, budget: float = 0.3):
    """:func:`bench_autocast_and_checkpoint` (CPU) into a RunRecord at ``run_dir`` (load before and after)."""
    rec = RunRecord(run_dir, {"device": "cpu", "budget_s": budget},
                    command=f"rlm-lab chapter 2 autocast-benchmarks {run_dir}", seed=0)
    with rec:
        before = load_average()
        import torch

        res = bench_autocast_and_checkpoint("cpu", False, benchmarks.bench_op("cpu", budget), budget)
        rec.complete(**res, torch_threads=torch.get_num_threads(), loadavg_before=before,
                     loadavg_after=load_average(), cpu_count=os.cpu_count())
    return rec


def main(argv: list[str]) -> int:
    """``rlm-lab chapter 2 autocast-benchmarks RUN_DIR``: :func:`record` into ``RUN_DIR``; prints its results."""
    if len(argv) != 1:
        raise RlmLabError("give one argument, the run folder: rlm-lab chapter 2 autocast-benchmarks RUN_DIR")
    print(record(argv[0]).results)
    return 0
